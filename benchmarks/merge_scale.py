"""What the instructor's side costs per hand-in as the gradebook grows: the merge of one
task's result into nbgrader's gradebook (graders/grade/merge.py), and the scheduler's own cost per
task, measured with no-op tasks on a local Dask cluster.

    .venv/bin/python benchmarks/merge_scale.py [--students 2000] [--lab lab02_backprop]

One real hand-in (the lab's complete demo student) is graded once; its result is then merged
under N different student names, and the time of each merge is printed by bands of the
gradebook's size. These figures feed the README's throughput model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graders.build.build import build  # noqa: E402
from graders.build.demo import declared_class, student_notebook  # noqa: E402
from graders.grade.inputs import course_inputs  # noqa: E402
from graders.grade.merge import merge  # noqa: E402
from graders.grade.task import assignments_only, run  # noqa: E402
from graders.sandbox.build_reference import prepare_references  # noqa: E402


def noop(x):
    return x


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=2000)
    parser.add_argument("--lab", default="lab02_backprop")
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks for the scheduler")
    args = parser.parse_args()
    lab = args.lab
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        root = Path(tmp)
        build(root=root, labs=[lab], release=root / "labs")
        prepare_references(root, [lab])
        import nbformat

        release = nbformat.read(root / "labs" / lab / f"{lab}.ipynb", as_version=4)
        from graders.build.build import source_notebook

        (complete,) = [s for s in declared_class(lab) if s.name == "complete"]
        nb = student_notebook(complete, release, source_notebook(lab))
        course = course_inputs(root, [lab], assignments_only(root / "gradebook.db", root / "l.db"))
        notebooks = {lab: nbformat.writes(nb)}
        job = {"lab": lab, "notebooks": notebooks, "timestamp": None, "feedback": True}
        start = time.monotonic()
        result = run(course, job)
        print(f"one task ({lab}, complete): {time.monotonic() - start:.1f} s, ok={result['ok']}")
        times = []
        for i in range(args.students):
            mark = time.monotonic()
            merge(root, f"student-{i:05d}", lab, result)
            times.append(time.monotonic() - mark)
        band = max(1, args.students // 5)
        for first in range(0, args.students, band):
            chunk = times[first : first + band]
            print(f"merges {first:>5}-{first + len(chunk) - 1:>5}: "
                  f"median {statistics.median(chunk) * 1000:6.1f} ms, "
                  f"max {max(chunk) * 1000:6.1f} ms")  # fmt: skip
        print(f"all {args.students} merges: {sum(times):.1f} s")

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
        start = time.monotonic()
        futures = client.map(noop, range(args.tasks), pure=False)
        client.gather(futures)
        spent = time.monotonic() - start
    print(f"scheduler: {args.tasks} no-op tasks in {spent:.1f} s "
          f"({spent / args.tasks * 1000:.2f} ms per task)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
