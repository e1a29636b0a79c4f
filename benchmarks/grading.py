"""Wall time of grading the demo class: plain sequential `nbgrader autograde` versus the
course's parallel grader (`make autograde`), in one run, on the same submissions.

    .venv/bin/python benchmarks/grading.py [--workers 2] [--lab LAB ...]

Prints both times, their ratio, and whether the two gave identical grades. The course's
grader also compares every test cell with what the solution notebook records; `make build`
runs those reference notebooks once per release (build/reference/). Their time is printed
on its own, and a second ratio counts it in as if grading had had to run them too.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graders.build import build  # noqa: E402
from graders.course import LABS, prepare_data  # noqa: E402
from graders.demo import write_class  # noqa: E402
from graders.grade import grade_class, read_scores, worker_count  # noqa: E402
from graders.judge import prepare_references  # noqa: E402
from graders.nbgrader_cli import nbgrader  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=worker_count, default=2)
    parser.add_argument("--lab", action="append", dest="labs")
    args = parser.parse_args()
    labs = args.labs or LABS
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        plain, ours = Path(tmp) / "plain", Path(tmp) / "ours"
        build(root=plain, labs=labs, release=plain / "labs")
        students = write_class(plain, labs, plain / "labs")
        shutil.copytree(plain, ours)
        prepare_data(labs)
        print(f"{len(students)} submissions, {len(labs)} labs", flush=True)

        start = time.monotonic()
        for lab in labs:
            nbgrader("autograde", lab, "--force", root=plain)
        t_plain = time.monotonic() - start
        print(f"plain nbgrader autograde, sequential: {t_plain:7.1f} s", flush=True)

        start = time.monotonic()
        prepare_references(ours, labs, workers=args.workers)
        t_refs = time.monotonic() - start
        print(f"reference runs, once per release (make build): {t_refs:7.1f} s")

        start = time.monotonic()
        grade_class(ours, labs=labs, workers=args.workers, feedback=False, quiet=True)
        t_ours = time.monotonic() - start
        print(f"graders.grade, {args.workers} workers:        {t_ours:7.1f} s")
        print(f"ratio: {t_plain / t_ours:.2f}x")
        print(f"ratio counting the reference runs too: {t_plain / (t_ours + t_refs):.2f}x")

        a, b = read_scores(plain, labs)[0], read_scores(ours, labs)[0]
        same = a == b
        print("grades identical:", same)
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                print(f"  {key[0]}/{key[1]}: plain {a.get(key)}, ours {b.get(key)}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
