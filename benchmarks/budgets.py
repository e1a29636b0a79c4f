"""Per-lab time budgets (graders/formats/budgets.py) against the flat ones: the acceptance figures.

    python benchmarks/budgets.py [--lab LAB ...] [--honest 20] [--loopers 5] [--workers 2]
    python benchmarks/budgets.py budgets            # the budgets of build/reference/, per lab
    python benchmarks/budgets.py slowed -- CMD ...  # CMD with its processes on half a core

The default run builds `--lab` (default: every lab) into a scratch course, times the
solutions (`make build`'s reference run), and writes a class of `--honest` complete hand-ins
(the labs in turn) plus `--loopers` hand-ins that each loop forever in a different answer
cell (``while True: pass`` put before the cell's code). It grades the class four times, with
`--workers` local workers: with and without the looping hand-ins, under the flat limits
(120 s a cell, 600 s a notebook: ``cell_timeout`` and ``budget_s`` given) and under the
per-lab budgets, and prints each wall time. Then it grades the honest hand-ins once more
with the per-lab budgets and every grading process (the Dask workers and their kernels)
limited to half a core, and prints how many were stopped by a budget (the goal: none) and
how many lost points.

`slowed` runs any command with the same limit, e.g. the demo classes and the catalogues:
``python benchmarks/budgets.py slowed -- python -m graders.build.demo check lab05_dynamicnet``.
The limit is a CPU quota on a cgroup made for it (v2 in the caller's part of the tree, else
v1's cpu controller, as a root grader in most containers has); it says so if there is none.
Timings mean something on a quiet machine only.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat  # noqa: E402

from graders.build.build import build, source_notebook  # noqa: E402
from graders.build.demo import Student, answer_ids, student_notebook  # noqa: E402
from graders.config.course import LABS, REPO, prepare_data  # noqa: E402
from graders.formats import budgets, references  # noqa: E402
from graders.formats.verdict import Kind  # noqa: E402
from graders.grade.grade import grade_class, worker_count  # noqa: E402
from graders.sandbox.build_reference import prepare_references  # noqa: E402

LOOP = "while True:\n    pass\n"
FLAT = {"cell_timeout": budgets.FLAT_CELL_S, "budget_s": budgets.FLAT_NOTEBOOK_S}


# ---------------------------------------------------------------- half a core


class HalfCore:
    """A cgroup whose processes share half a CPU (a quota of 50 ms each 100 ms)."""

    def __init__(self, fraction: float = 0.5) -> None:
        self.group, self.v2 = None, False
        name = f"budgets-slowed-{secrets.token_hex(4)}"
        period = 100_000
        quota = int(period * fraction)
        own = Path("/proc/self/cgroup").read_text().splitlines()
        line = next((row for row in own if row.startswith("0::")), None)
        base = Path("/sys/fs/cgroup") / line[3:].lstrip("/") if line else None
        try:
            if base and "cpu" in (base / "cgroup.controllers").read_text().split():
                group = base / name
                group.mkdir()
                (group / "cpu.max").write_text(f"{quota} {period}")
                self.group, self.v2 = group, True
                return
        except OSError:
            pass
        try:
            group = Path("/sys/fs/cgroup/cpu") / name
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
            self.group = group
        except OSError as error:
            raise SystemExit(f"no cgroup with a CPU quota can be made here ({error})") from None

    def join(self) -> None:
        """Put the calling process (and so all it starts) in the group: a preexec_fn."""
        (self.group / "cgroup.procs").write_text(str(os.getpid()))

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(argv, preexec_fn=self.join, **kw)  # noqa: PLW1509

    def remove(self) -> None:
        for _ in range(100):
            try:
                self.group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


def slowed(argv: list[str]) -> int:
    group = HalfCore()
    try:
        print(f"on half a core ({group.group}): {' '.join(argv)}", flush=True)
        return group.run(argv).returncode
    finally:
        group.remove()


# ---------------------------------------------------------------- the class


def write_hand_in(root: Path, name: str, lab: str, nb) -> None:
    out = root / "submitted" / name / lab / f"{lab}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)


def write_class(root: Path, labs: list[str], honest: int, loopers: int) -> dict:
    """`honest` complete hand-ins and `loopers` looping ones; {name: (lab, where it loops)}."""
    release = {lab: nbformat.read(root / "labs" / lab / f"{lab}.ipynb", 4) for lab in labs}
    solution = {lab: source_notebook(lab) for lab in labs}
    written = {}
    for i in range(honest):
        lab = labs[i % len(labs)]
        name = f"honest-{i:02d}"
        complete = Student(name=name, lab=lab, score=0, why="complete")
        write_hand_in(root, name, lab, student_notebook(complete, release[lab], solution[lab]))
        written[name] = (lab, None)
    for i in range(loopers):
        lab = labs[i % len(labs)]
        ids = answer_ids(release[lab])
        where = ids[(i // len(labs) * 2 + i) % len(ids)]  # a different cell each time
        name = f"looper-{i:02d}"
        student = Student(name=name, lab=lab, score=0, why="loops")
        nb = student_notebook(student, release[lab], solution[lab])
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == where:
                cell.source = LOOP + cell.source
        write_hand_in(root, name, lab, nb)
        written[name] = (lab, where)
    return written


def only_honest(root: Path) -> Path:
    copy = root.with_name(root.name + "-honest")
    shutil.copytree(root, copy)
    for folder in (copy / "submitted").glob("looper-*"):
        shutil.rmtree(folder)
    return copy


def graded(root: Path, labs: list[str], workers: int, limits: dict) -> tuple[float, object]:
    start = time.monotonic()
    run = grade_class(root, labs=labs, workers=workers, feedback=False, quiet=True, force=True,
                      **limits)  # fmt: skip
    return time.monotonic() - start, run


def stopped(run) -> list[str]:
    """The hand-ins a limit stopped (a test cell's verdict of kind 'limit')."""
    return sorted(
        f"{student}/{lab}"
        for (student, lab), verdicts in run.verdicts.items()
        if any(v.kind is Kind.LIMIT for v in verdicts.values())
    )


def print_budgets(root: Path, labs: list[str], policy: budgets.Policy) -> None:
    print(
        f"budgets ({policy.multiple:g} x the solution's time; floors {policy.floor_s:g} s a "
        f"cell, {policy.first_floor_s:g} s the first, {policy.notebook_floor_s:g} s a notebook):"
    )
    print(f"  {'lab':<28}{'solution':>9}{'longest cell':>14}{'cells':>16}{'notebook':>10}")
    for lab in labs:
        timed = references.timing(references.path(references.folder(root), lab))
        if timed is None:
            print(f"  {lab:<28} no timed reference: flat limits")
            continue
        cells, total = timed
        own, notebook = budgets.lab_budgets(cells, total, policy)
        longest = max(c["seconds"] for c in cells)
        span = f"{min(own)}-{max(own)} s"
        print(f"  {lab:<28}{total:>8.1f}s{longest:>13.2f}s{span:>16}{notebook:>9} s")


def inner(root: Path, labs: list[str], workers: int) -> int:
    """The graded half of the slowed check, run inside the group: prints JSON."""
    took, run = graded(root, labs, workers, {})
    full = {
        key: score
        for key, score in run.scores.items()
        if score is not None and abs(score - run.max_scores.get(key[1], -1)) > 1e-9
    }
    print(json.dumps({"wall_s": took, "stopped": stopped(run), "short": sorted(map(str, full))}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["slowed"]:
        rest = argv[1:]
        return slowed(rest[1:] if rest[:1] == ["--"] else rest)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=["run", "budgets", "inner"], default="run")
    parser.add_argument("--lab", action="append", dest="labs")
    parser.add_argument("--honest", type=int, default=20)
    parser.add_argument("--loopers", type=int, default=5)
    parser.add_argument("--workers", type=worker_count, default=2)
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--no-slowed", action="store_true", help="skip the half-core check")
    parser.add_argument("--label", default="", help="printed with every figure (e.g. 'under load')")
    args = parser.parse_args(argv)
    labs = args.labs or LABS
    policy = budgets.Policy()
    if args.what == "budgets":
        print_budgets(args.root, labs, policy)
        return 0
    if args.what == "inner":
        return inner(args.root, labs, args.workers)
    label = f" [{args.label}]" if args.label else ""
    with tempfile.TemporaryDirectory(prefix="bench-budgets-") as tmp:
        root = Path(tmp) / "course"
        build(root=root, labs=labs, release=root / "labs")
        os.environ.update(prepare_data(labs))
        start = time.monotonic()
        prepare_references(root, labs, workers=1)  # one at a time: each lab's own times
        print(f"reference runs (make build), one lab at a time: {time.monotonic() - start:.1f} s")
        print_budgets(root, labs, policy)
        written = write_class(root, labs, args.honest, args.loopers)
        for name, (lab, where) in written.items():
            if where:
                print(f"  {name}: {lab}, loops forever in {where}")
        honest = only_honest(root)
        figures = {}
        for mode, limits in (("flat", FLAT), ("per-lab", {})):
            for who, course in (("honest", honest), ("honest+loopers", root)):
                took, run = graded(course, labs, args.workers, limits)
                figures[mode, who] = took
                print(
                    f"{mode:>8} budgets, {who:<15} {took:7.1f} s wall, "
                    f"with a limit verdict: {len(stopped(run))} {stopped(run)}{label}",
                    flush=True,
                )
        for mode in ("flat", "per-lab"):
            extra = figures[mode, "honest+loopers"] - figures[mode, "honest"]
            print(f"{mode:>8}: the {args.loopers} looping hand-ins cost {extra:.1f} s{label}")
        if args.no_slowed:
            return 0
        group = HalfCore()
        try:
            command = [sys.executable, __file__, "inner", "--root", str(honest),
                       "--workers", "1", *sum((["--lab", lab] for lab in labs), [])]  # fmt: skip
            done = group.run(command, capture_output=True, text=True)
        finally:
            group.remove()
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            print(f"the slowed run failed: {done.stderr[-2000:]}")
            return 1
        print(
            f"honest hand-ins on half a core (1 worker): {args.honest} graded in "
            f"{result['wall_s']:.1f} s, stopped by a budget: {len(result['stopped'])} "
            f"{result['stopped']}, short of full marks: {len(result['short'])}{label}"
        )
        return 1 if result["stopped"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
