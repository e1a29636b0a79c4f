"""Wall time of grading the demo class: plain sequential `nbgrader autograde` versus the
course's parallel grader (`make autograde`), in one run, on the same submissions.

    .venv/bin/python benchmarks/grading.py [--workers 2] [--lab LAB ...]

Prints both times, their ratio, and whether the two gave identical grades. The course's
grader also compares every test cell with what the solution notebook records; `make build`
runs those reference notebooks once per release (build/reference/). Their time is printed
on its own, and a second ratio counts it in as if grading had had to run them too.

The same class is then graded once more through a `dask scheduler` and N `dask worker`
processes started on this machine (cluster mode), for the ratio of their throughputs.

Then, per lab, the grader's overhead on one hand-in (the complete one): its grading task,
run alone, plus its merge in the class run, minus the time the same notebook takes to run
in a bare kernel (nbclient, no sandbox, no nbgrader). Two bare runs: the notebook as
autograde runs it (each test cell replaced by the source's, hidden checks included), and
the notebook as handed in (its visible checks only). The first overhead is the grader's own
machinery (sandbox, records, judge, merge), what plain nbgrader would not spend on the same
notebook; the second adds what the lab's hidden checks cost to run. The three are timed in
interleaved rounds (--rounds, best of each), so that a slower minute of the machine weighs
on all three alike; on a busy or slow machine they still move by a second or more from
run to run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graders.build import build  # noqa: E402
from graders.build_reference import prepare_references  # noqa: E402
from graders.course import LABS, prepare_data  # noqa: E402
from graders.demo import write_class  # noqa: E402
from graders.grade import course_inputs, grade_class, read_scores, worker_count  # noqa: E402
from graders.nbgrader_cli import nbgrader  # noqa: E402
from graders.task import assignments_only, run  # noqa: E402


@contextmanager
def dask_cluster(folder: Path, workers: int):
    """`dask scheduler` and `workers` single-threaded `dask worker` processes, on this
    machine, as an instructor would start them on a cluster; yields the address."""
    import json
    import subprocess

    from distributed import Client

    dask = str(Path(sys.executable).parent / "dask")
    folder.mkdir()
    address_file = folder / "scheduler.json"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": folder}
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED="False")  # README
    processes = [
        subprocess.Popen(
            [
                dask,
                "scheduler",
                "--port",
                "0",
                "--dashboard-address",
                ":0",
                "--scheduler-file",
                str(address_file),
            ],
            **quiet,
        )  # fmt: skip
    ]
    try:
        while not address_file.is_file() or not address_file.read_text().strip():
            time.sleep(0.2)
        address = json.loads(address_file.read_text())["address"]
        for _ in range(workers):
            processes.append(
                subprocess.Popen([dask, "worker", address, "--nthreads", "1"], env=env, **quiet)
            )
        with Client(address) as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for process in processes:
            process.kill()
            process.wait()


def with_hidden_checks(notebook: Path, source: Path, folder: Path) -> Path:
    """`notebook` with each test cell's source replaced by the source notebook's (what
    nbgrader's autograde runs), written in `folder`."""
    import nbformat

    from graders.judge import test_cells

    nb = nbformat.read(notebook, as_version=4)
    source_nb = nbformat.read(source, as_version=4)
    tests = {cell.metadata.nbgrader["grade_id"]: cell.source for _, cell in test_cells(source_nb)}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in tests:
            cell.source = tests[grade_id]
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / notebook.name
    nbformat.write(nb, out)
    return out


def bare_run(notebook: Path) -> float:
    """Seconds to run `notebook` top to bottom in a plain kernel (one torch thread), started
    and killed by nbclient, with no sandbox and no nbgrader."""

    import nbformat
    from nbclient import NotebookClient

    from graders.sandbox_argv import KERNEL_SIDE, KERNEL_THREADS

    nb = nbformat.read(notebook, as_version=4)
    env = dict(os.environ, NBGRADER_EXECUTION="autograde", PYTHONPATH=str(KERNEL_SIDE))
    env["OMP_NUM_THREADS"] = str(KERNEL_THREADS)
    with tempfile.TemporaryDirectory() as tmp:
        client = NotebookClient(
            nb,
            timeout=600,
            allow_errors=True,
            shutdown_kernel="immediate",  # as the sandbox's kernels end
            resources={"metadata": {"path": tmp}},
        )
        start = time.monotonic()
        client.execute(env=env)
        return time.monotonic() - start


def timed(function, *args) -> float:
    start = time.monotonic()
    function(*args)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=worker_count, default=2)
    parser.add_argument("--lab", action="append", dest="labs")
    parser.add_argument("--rounds", type=int, default=2, help="timing rounds per lab (best of)")
    args = parser.parse_args()
    labs = args.labs or LABS
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        plain, ours = Path(tmp) / "plain", Path(tmp) / "ours"
        build(root=plain, labs=labs, release=plain / "labs")
        students = write_class(plain, labs, plain / "labs")
        prepare_data(labs)
        start = time.monotonic()
        prepare_references(plain, labs, workers=args.workers)
        t_refs = time.monotonic() - start
        shutil.copytree(plain, ours)
        shutil.copytree(plain, Path(tmp) / "cluster")
        print(f"{len(students)} submissions, {len(labs)} labs", flush=True)
        print(f"reference runs, once per release (make build): {t_refs:7.1f} s")

        start = time.monotonic()
        for lab in labs:
            nbgrader("autograde", lab, "--force", root=plain)
        t_plain = time.monotonic() - start
        print(f"plain nbgrader autograde, sequential: {t_plain:7.1f} s", flush=True)

        start = time.monotonic()
        report = grade_class(ours, labs=labs, workers=args.workers, feedback=False, quiet=True)
        t_ours = time.monotonic() - start
        print(f"graders.grade, {args.workers} workers:        {t_ours:7.1f} s")
        print(f"ratio: {t_plain / t_ours:.2f}x")
        print(f"ratio counting the reference runs too: {t_plain / (t_ours + t_refs):.2f}x")

        with dask_cluster(Path(tmp) / "dask", workers=args.workers) as address:
            start = time.monotonic()
            grade_class(Path(tmp) / "cluster", labs=labs, feedback=False, quiet=True,
                        scheduler=address)  # fmt: skip
            t_cluster = time.monotonic() - start
        print(
            f"graders.grade on a dask scheduler + {args.workers} dask workers: {t_cluster:7.1f} s"
        )
        print(f"cluster throughput / local throughput: {t_ours / t_cluster:.2f}x")

        print(
            f"per-hand-in overhead (the complete answer, alone on a quiet machine, best of "
            f"{args.rounds}:"
        )
        print("  its grading task + its merge in the class run - a bare kernel run of it,")
        print("  as autograde runs it (the grader's own part; goal <= 1.5 s) / as handed in,")
        print("  so the difference is what the lab's hidden checks cost):")
        course = course_inputs(
            ours, labs, assignments_only(ours / "gradebook.db", Path(tmp) / "labs.db")
        )
        for lab in labs:
            notebook = plain / "submitted" / "complete" / lab / f"{lab}.ipynb"
            source = plain / "build" / "source" / lab / f"{lab}.ipynb"
            graded = with_hidden_checks(notebook, source, Path(tmp) / "as-graded")
            job = {"lab": lab, "notebook": notebook.read_text(encoding="utf-8"), "feedback": False}
            rounds = [
                (timed(run, course, job), bare_run(graded), bare_run(notebook))
                for _ in range(args.rounds)
            ]
            task, bare_graded, bare = (min(times) for times in zip(*rounds, strict=True))
            merge = report.timings[("complete", lab)].get("merge", 0)
            own, with_hidden = task + merge - bare_graded, task + merge - bare
            print(f"  {lab:<24} task {task:5.1f} s + merge {merge:4.2f} s, bare "
                  f"{bare_graded:5.1f} s / {bare:5.1f} s: overhead {own:4.1f} s / "
                  f"{with_hidden:4.1f} s")  # fmt: skip

        a, b = read_scores(plain, labs)[0], read_scores(ours, labs)[0]
        c = read_scores(Path(tmp) / "cluster", labs)[0]
        same = a == b == c
        print("grades identical:", same)
        for key in sorted(set(a) | set(b) | set(c)):
            if not a.get(key) == b.get(key) == c.get(key):
                print(f"  {key[0]}/{key[1]}: plain {a.get(key)}, local {b.get(key)}, "
                      f"cluster {c.get(key)}")  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
