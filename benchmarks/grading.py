"""Wall time of grading the demo class: plain sequential `nbgrader autograde` versus the
course's parallel grader (`make autograde`), in one run, on the same submissions, against
what this machine's cores allow that same hour.

    .venv/bin/python benchmarks/grading.py [--workers 2] [--lab LAB ...] [--students K]

`--lab` takes a lab's name, its number (3), a range (2-4) or `all` (the default), and can be
repeated; `--students K` keeps K students of each lab's demo class (a quick check of the
script, not a measurement).

**The machine's limit.** N CPU-bound processes (N = workers) against one, before and after
the grading: N x (time of one alone) / (time of N together). On an idle machine with N free
cores it is N; a busy or throttled machine gives less, and no grader can beat it. Every ratio
below is printed as a figure and as a fraction of that limit (the mean of both
measurements).

**Class runs.** Plain sequential `nbgrader autograde` (the baseline), then the course's grader
on a local cluster (`graders.grade.grade.grade_class`, as `make autograde` runs it, feedback off as
plain autograde makes none): its wall time, its ratio, the time from its start to its first
kernel being up (the command's own imports are printed beside it), and its overhead per
hand-in over what the cores allow (its wall time minus plain's divided by the limit, per
hand-in). Then the same class through a `dask scheduler` and N `dask worker` processes
started beforehand (cluster mode). Grades of the three are compared.

**A regrade.** One hand-in (the complete answer of the first lab) and one student (the
complete answers of every lab) graded again with `--student complete --force`, feedback
on as the command makes it, against the same notebooks' bare kernel runs.

Then, per lab, the grader's overhead on one hand-in (the complete one): its grading task,
run alone, plus its merge in the class run, minus the time the same notebook takes to run
in a bare kernel (nbclient, no sandbox, no nbgrader). Two bare runs: the notebook as
autograde runs it (each test cell replaced by the source's, hidden checks included), and
the notebook as handed in (its visible checks only). The first overhead is the grader's own
machinery (sandbox, records, judge, merge), what plain nbgrader would not spend on the same
notebook; the second adds what the lab's hidden checks cost to run. The three are timed in
interleaved rounds (--rounds, best of each), so that a slower minute of the machine weighs
on all three alike; on a busy or slow machine they still move by a second or more from
run to run. The load average is printed at the start and the end: figures taken under load
say so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graders.build.build import build  # noqa: E402
from graders.build.demo import write_class  # noqa: E402
from graders.config.course import LABS, prepare_data  # noqa: E402
from graders.config.nbgrader_cli import nbgrader  # noqa: E402
from graders.grade.grade import grade_class, read_scores, worker_count  # noqa: E402
from graders.grade.inputs import course_inputs  # noqa: E402
from graders.grade.task import assignments_only, run  # noqa: E402
from graders.sandbox.build_reference import prepare_references  # noqa: E402


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

    from graders.judge.judge import test_cells

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

    from graders.sandbox.sandbox_argv import KERNEL_SIDE, KERNEL_THREADS

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


SPIN = "total = 0\nfor i in range(30_000_000):\n    total += i\n"  # about 1 s alone, here


def machine_limit(workers: int) -> float:
    """N x (one CPU-bound process alone) / (N of them at once), N = `workers`: the speed-up
    these cores give N processes now (N on an idle machine with N free cores). Each is a bare
    interpreter running a loop (`SPIN`); best of two for each."""
    import subprocess

    def together(count: int) -> float:
        start = time.monotonic()
        processes = [subprocess.Popen([sys.executable, "-S", "-c", SPIN]) for _ in range(count)]
        for process in processes:
            process.wait()
        return time.monotonic() - start

    together(1)  # the interpreter's files into the page cache, once
    one = min(together(1) for _ in range(2))
    many = min(together(workers) for _ in range(2))
    return workers * one / many


def import_time() -> float:
    """Seconds `python -m graders.grade` spends importing before it grades."""
    import subprocess

    code = "import graders.grade.grade"
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True)  # the page cache
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.monotonic() - start


def lab_names(given: list[str] | None) -> list[str]:
    """--lab values: a lab's name, its number (3), a range (2-4) or `all`."""
    if not given:
        return list(LABS)
    numbered = {int(lab[3:5]): lab for lab in LABS if lab[3:5].isdigit()}
    chosen: list[str] = []
    for value in given:
        if value == "all":
            names = list(LABS)
        elif value in LABS:
            names = [value]
        else:
            try:
                low, _, high = value.partition("-")
                numbers = range(int(low), int(high or low) + 1)
                names = [numbered[n] for n in numbers]
            except (ValueError, KeyError):
                known = ", ".join(LABS)
                raise SystemExit(f"no such lab: {value} (labs: {known}, 2, 2-4, all)") from None
        chosen += [lab for lab in names if lab not in chosen]
    return chosen


def keep_students(root: Path, count: int) -> None:
    """Keep `count` demo students of each lab (the complete answer among them)."""
    submitted = root / "submitted"
    by_lab: dict[str, list[Path]] = {}
    for folder in sorted(submitted.glob("*/*")):
        by_lab.setdefault(folder.name, []).append(folder)
    for folders in by_lab.values():
        folders.sort(key=lambda f: (f.parent.name != "complete", f.parent.name))
        for folder in folders[count:]:
            shutil.rmtree(folder)
    for student in submitted.iterdir():
        if not any(student.iterdir()):
            student.rmdir()


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=worker_count, default=2)
    parser.add_argument("--lab", action="append", dest="labs", help="name, 3, 2-4 or all")
    parser.add_argument("--rounds", type=int, default=2, help="timing rounds per lab (best of)")
    parser.add_argument("--students", type=int, default=None, help="keep K students per lab")
    args = parser.parse_args()
    labs = lab_names(args.labs)
    n = args.workers
    print(f"at the start: {load()}", flush=True)
    if os.getloadavg()[0] > 0.5:
        print("UNDER LOAD: another program is busy here; these figures are not the machine's")
    limits = [machine_limit(n)]
    print(f"machine limit, {n} CPU-bound processes against one: {limits[0]:.2f}x", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        plain, ours = Path(tmp) / "plain", Path(tmp) / "ours"
        build(root=plain, labs=labs, release=plain / "labs")
        write_class(plain, labs, plain / "labs")
        if args.students:
            keep_students(plain, args.students)
        hand_ins = len(list((plain / "submitted").glob("*/*")))
        prepare_data(labs)
        start = time.monotonic()
        prepare_references(plain, labs, workers=n)
        t_refs = time.monotonic() - start
        shutil.copytree(plain, ours)
        shutil.copytree(plain, Path(tmp) / "cluster")
        print(f"{hand_ins} hand-ins, {len(labs)} labs: {', '.join(labs)}", flush=True)
        print(f"reference runs, once per release (make build): {t_refs:7.1f} s")

        start = time.monotonic()
        for lab in labs:
            nbgrader("autograde", lab, "--force", root=plain)
        t_plain = time.monotonic() - start
        print(f"plain nbgrader autograde, sequential: {t_plain:7.1f} s", flush=True)

        start = time.monotonic()
        report = grade_class(ours, labs=labs, workers=n, feedback=False, quiet=True)
        t_ours = time.monotonic() - start
        print(f"graders.grade (make autograde), {n} workers: {t_ours:7.1f} s", flush=True)

        with dask_cluster(Path(tmp) / "dask", workers=n) as address:
            start = time.monotonic()
            grade_class(Path(tmp) / "cluster", labs=labs, feedback=False, quiet=True,
                        scheduler=address)  # fmt: skip
            t_cluster = time.monotonic() - start
        print(f"graders.grade on a dask scheduler + {n} dask workers started beforehand: "
              f"{t_cluster:7.1f} s", flush=True)  # fmt: skip

        bare = {}  # lab: the complete answer's bare kernel run, as autograde runs it
        for lab in labs:
            notebook = plain / "submitted" / "complete" / lab / f"{lab}.ipynb"
            source = plain / "build" / "source" / lab / f"{lab}.ipynb"
            graded = with_hidden_checks(notebook, source, Path(tmp) / "as-graded")
            bare[lab] = (graded, notebook)
        first = labs[0]
        # the class runs' grades, before the regrades below grade `ours` again
        a, b = read_scores(plain, labs)[0], read_scores(ours, labs)[0]
        c = read_scores(Path(tmp) / "cluster", labs)[0]
        regrade = partial(grade_class, ours, workers=n, quiet=True, students=["complete"])
        t_one = timed(partial(regrade, labs=[first], force=True))
        bare_one = bare_run(bare[first][0])
        t_student = timed(partial(regrade, labs=labs, force=True))
        bare_student = sum(bare_run(graded) for graded, _ in bare.values())

        limits.append(machine_limit(n))
        limit = sum(limits) / len(limits)
        print()
        print(f"machine limit: {limits[0]:.2f}x before, {limits[1]:.2f}x after; {limit:.2f}x "
              f"used below (at the end: {load()})")  # fmt: skip
        for name, t in (("make autograde (local cluster)", t_ours),
                        ("a cluster started beforehand", t_cluster)):  # fmt: skip
            ratio = t_plain / t
            print(f"ratio, {name}: {ratio:.2f}x, {ratio / limit:.0%} of the machine's limit")
        print(f"ratio counting the reference runs too: {t_plain / (t_ours + t_refs):.2f}x")
        first_kernel = "-" if report.first_kernel_s is None else f"{report.first_kernel_s:.1f}"
        print(
            f"time to the first kernel: {first_kernel} s after "
            f"the class run began (plus {import_time():.1f} s of the command's imports)"
        )
        over = (t_ours - t_plain / limit) / max(1, hand_ins)
        print(
            f"overhead per hand-in over what the cores allow: {over:.2f} s "
            f"((make autograde - plain / limit) / {hand_ins} hand-ins)"
        )
        print(
            f"regrade of one hand-in (complete/{first}, --force, with feedback): {t_one:.1f} s;"
            f" its bare kernel run {bare_one:.1f} s"
        )
        print(f"regrade of one student (complete, {len(labs)} labs, --force, with feedback): "
              f"{t_student:.1f} s; their bare kernel runs {bare_student:.1f} s summed, "
              f"{bare_student / limit:.1f} s at the machine's limit")  # fmt: skip

        print(f"per-hand-in overhead (the complete answer, alone, best of {args.rounds}:")
        print("  its grading task + its merge in the class run - a bare kernel run of it,")
        print("  as autograde runs it (the grader's own part; goal <= 1.5 s) / as handed in,")
        print("  so the difference is what the lab's hidden checks cost):")
        course = course_inputs(
            ours, labs, assignments_only(ours / "gradebook.db", Path(tmp) / "labs.db")
        )
        for lab in labs:
            graded, notebook = bare[lab]
            job = {"lab": lab, "notebook": notebook.read_text(encoding="utf-8"), "feedback": False}
            rounds = [
                (timed(run, course, job), bare_run(graded), bare_run(notebook))
                for _ in range(args.rounds)
            ]
            task, bare_graded, bare_handed = (min(times) for times in zip(*rounds, strict=True))
            merge = report.timings[("complete", lab)].get("merge", 0)
            own, with_hidden = task + merge - bare_graded, task + merge - bare_handed
            print(f"  {lab:<24} task {task:5.1f} s + merge {merge:4.2f} s, bare "
                  f"{bare_graded:5.1f} s / {bare_handed:5.1f} s: overhead {own:4.1f} s / "
                  f"{with_hidden:4.1f} s")  # fmt: skip

        same = a == b == c
        print("grades identical:", same)
        for key in sorted(set(a) | set(b) | set(c)):
            if not a.get(key) == b.get(key) == c.get(key):
                print(f"  {key[0]}/{key[1]}: plain {a.get(key)}, local {b.get(key)}, "
                      f"cluster {c.get(key)}")  # fmt: skip
        print(f"at the end: {load()}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
