"""Grade a class: submitted/<student>/<lab>/<lab>.ipynb -> gradebook, feedback/, grades.csv.

nbgrader does the grading. Around it, this module:

1. checks every submission folder first and reports, by path, what cannot be graded (a lab
   that does not exist, a missing or unreadable notebook) instead of stopping the class;
2. grades each submission in its own scratch copy of the course (a copy of the gradebook and
   of that one submission, its nbgrader metadata restored from the release), on N workers,
   each a long-lived nbgrader process (graders/worker.py); the submitted files are never
   touched and workers never share a database. Every notebook's kernel runs in a sandbox
   of its own (graders/sandbox.py), with a whole-notebook budget;
3. merges each scratch result into the one gradebook, one at a time, keeping a test cell's
   points only where the independent check of graders/judge.py agrees;
4. writes feedback HTML and exports grades.csv with nbgrader.

    python -m graders.grade [--workers N] [--lab LAB ...]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from graders import judge, sandbox
from graders.build import nbgrader
from graders.course import LABS, REPO, unknown_labs
from graders.worker import Worker

NOTEBOOK_BUDGET_S = 600  # a whole notebook, on top of nbgrader's per-cell timeout


@dataclass
class Submission:
    student: str
    lab: str
    folder: Path


@dataclass
class Problem:
    where: str
    reason: str


@dataclass
class Report:
    scores: dict[tuple[str, str], float] = field(default_factory=dict)
    max_scores: dict[str, float] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


MAX_NOTEBOOK_BYTES = 50 * 2**20


def notebook_problem(path: Path) -> str | None:
    """Why `path` cannot be graded as a notebook, or None if it can."""
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return (
            f"the notebook is {size / 2**20:.0f} MB, over the {MAX_NOTEBOOK_BYTES // 2**20} MB "
            "limit (usually a huge output saved in it: clear the outputs and grade it by hand)"
        )
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises several kinds for broken JSON
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return f"not a valid notebook file ({first[:120]})"
    if not nb.cells:
        return "the notebook has no cells"
    return None


def discover(root: Path, labs: list[str]) -> tuple[list[Submission], list[Problem]]:
    """Every gradable submission under root/submitted, and a problem for everything else."""
    submitted = root / "submitted"
    found, problems = [], []
    if not submitted.is_dir():
        return found, [Problem(str(submitted), "no submitted/ folder: nothing to grade")]
    for student_dir in sorted(submitted.iterdir()):
        if not student_dir.is_dir():
            problems.append(
                Problem(_rel(student_dir, root), "a file where a student folder belongs")
            )
            continue
        for lab_dir in sorted(student_dir.iterdir()):
            where = _rel(lab_dir, root)
            if lab_dir.name not in labs:
                problems.append(Problem(where, f"there is no lab named {lab_dir.name!r}"))
                continue
            notebook = lab_dir / f"{lab_dir.name}.ipynb"
            if not notebook.is_file():
                names = ", ".join(p.name for p in lab_dir.glob("*.ipynb")) or "no notebook"
                problems.append(Problem(where, f"expected {notebook.name}, found {names}"))
                continue
            reason = notebook_problem(notebook)
            if reason:
                problems.append(Problem(_rel(notebook, root), reason))
                continue
            found.append(Submission(student_dir.name, lab_dir.name, lab_dir))
    return found, problems


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


@dataclass
class Outcome:
    submission: Submission
    scratch: Path
    error: str | None = None


def restore_metadata(nb, release):
    """Give every nbgrader cell its metadata as released (points, type of cell, lock), and
    take it from cells that were not released as such (a forged or duplicated test cell).
    nbgrader then restores the cells' sources from the gradebook as usual."""
    released = {
        c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]
        for c in release.cells
        if "nbgrader" in c.get("metadata", {})
    }
    seen = set()
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None:
            continue
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if grade_id in released and grade_id not in seen:
            cell.metadata["nbgrader"] = copy.deepcopy(released[grade_id])
            seen.add(grade_id)
        else:
            del cell.metadata["nbgrader"]
    return nb


def events_file(scratch: Path) -> Path:
    """Where the sandbox writes that it killed the kernel of the submission in `scratch`."""
    return scratch / "runtime" / "events.jsonl"


def sandbox_env(root: Path, scratch: Path, budget_s: float = NOTEBOOK_BUDGET_S) -> dict[str, str]:
    """Environment for nbgrader so that each notebook's kernel starts in its own sandbox
    (graders.sandbox.SandboxKernelManager reads COURSE_SANDBOX)."""
    runtime = scratch / "runtime"
    runtime.mkdir(exist_ok=True)
    sandbox.write_kernelspec(scratch / "jupyter")
    readonly = [sys.prefix]
    if os.environ.get("COURSE_DATA_ROOT"):
        readonly.append(os.environ["COURSE_DATA_ROOT"])
    settings = {
        "runtime": str(runtime),
        "hide": [tempfile.gettempdir(), str(REPO), str(root), str(scratch.parent)],
        "readonly": readonly,
        "threads": sandbox.KERNEL_THREADS,
        "budget_s": budget_s,
        "events": str(events_file(scratch)),
    }
    return {
        sandbox.SETTINGS_ENV: json.dumps(settings),
        "JUPYTER_PATH": str(scratch / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "TMPDIR": str(runtime),
    }


def grade_one(
    worker: Worker,
    sub: Submission,
    root: Path,
    scratch: Path,
    cell_timeout: int | None = None,
    budget_s: float = NOTEBOOK_BUDGET_S,
) -> Outcome:
    """Autograde one submission in a course of its own under `scratch`, on `worker`."""
    scratch.mkdir(parents=True)
    shutil.copy2(root / "gradebook.db", scratch / "gradebook.db")
    release = nbformat.read(root / "labs" / sub.lab / f"{sub.lab}.ipynb", as_version=4)
    handed_in = scratch / "submitted" / sub.student / sub.lab / f"{sub.lab}.ipynb"
    shutil.copytree(sub.folder, handed_in.parent)
    nbformat.write(restore_metadata(nbformat.read(handed_in, as_version=4), release), handed_in)
    env = sandbox_env(root, scratch, budget_s)
    job = {"root": str(scratch), "lab": sub.lab, "student": sub.student, "env": env}
    try:
        ok, log = worker.autograde(
            job | {"cell_timeout": cell_timeout},
            timeout=budget_s + sandbox.KILL_GRACE_S + 60,  # the sandbox's watchdog acts first
        )
    except subprocess.TimeoutExpired:
        ok, log = False, None
    graded = scratch / "autograded" / sub.student / sub.lab / f"{sub.lab}.ipynb"
    if ok and graded.is_file():
        return Outcome(sub, scratch)
    if log is None or events_file(scratch).is_file():
        reason = f"stopped after the whole-notebook budget of {budget_s:g} s; recorded as 0"
        return Outcome(sub, scratch, reason)
    return Outcome(sub, scratch, failure_reason(log))


def failure_reason(log: str) -> str:
    """Why nbgrader could not grade a notebook, from its log (one submission's)."""
    if "Kernel died" in log or "DeadKernelError" in log:
        reason = "the kernel died while running the notebook (os._exit, a crash or out of memory)"
    else:
        errors = [line.split("] ", 1)[-1] for line in log.splitlines() if "| ERROR]" in line]
        reason = errors[0][:300] if errors else "nbgrader autograde failed"
    return reason + "; recorded as 0"


LIMITS = {
    "CellTimeoutError": "hit the per-cell time limit",
    "NotebookBudgetExceeded": "ran out of the whole-notebook budget",
    "KernelUnresponsive": "had a cell that ignored the interrupt at its time limit",
    "MemoryError": "hit the memory cap",
}


def limit_hit(nb) -> str | None:
    """The first limit the graded notebook ran into, and where, or None."""
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "error" and output.get("ename") in LIMITS:
                grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                where = f"cell {index}" + (f" ({grade_id})" if grade_id else "")
                return f"{LIMITS[output.ename]} in {where}; graded up to there, see its feedback"
    return None


def merge(outcome: Outcome, root: Path, reference: dict[str, list[dict]]) -> str | None:
    """Copy one scratch result (grades, comments, autograded notebook) into the course, and
    say which limit the notebook hit, if any.

    A test cell keeps nbgrader's points only if its observations match the reference
    solution's (graders/judge.py); otherwise it gets 0 and the notebook says why.
    """
    from sqlalchemy.exc import SAWarning

    sub = outcome.submission
    graded = outcome.scratch / "autograded" / sub.student / sub.lab / f"{sub.lab}.ipynb"
    nb = nbformat.read(graded, as_version=4)
    overruled = judge.verdicts(reference, nb)
    if overruled:
        judge.mark_failures(nb, overruled)
        nbformat.write(nb, graded)
    with warnings.catch_warnings():
        # nbgrader's add_submission trips a harmless SQLAlchemy autoflush warning
        warnings.simplefilter("ignore", SAWarning)
        _merge_grades(sub, outcome.scratch / "gradebook.db", root / "gradebook.db", overruled)
    target = root / "autograded" / sub.student / sub.lab
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(outcome.scratch / "autograded" / sub.student / sub.lab, target)
    return limit_hit(nb)


def _merge_grades(sub: Submission, scratch_db: Path, course_db: Path, overruled: dict) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{scratch_db}") as src, Gradebook(f"sqlite:///{course_db}") as dst:
        graded = src.find_submission(sub.lab, sub.student)
        dst.update_or_create_student(sub.student)
        try:
            dst.remove_submission(sub.lab, sub.student)
        except MissingEntry:
            pass
        dst.add_submission(sub.lab, sub.student, timestamp=graded.timestamp)
        for nb in graded.notebooks:
            for g in nb.grades:
                d = dst.find_grade(g.name, nb.name, sub.lab, sub.student)
                d.auto_score = None if g.auto_score is None else min(g.auto_score, d.max_score)
                if g.name in overruled:
                    d.auto_score = 0.0
                d.manual_score = g.manual_score
                d.extra_credit = g.extra_credit
                d.needs_manual_grade = g.needs_manual_grade
            for c in nb.comments:
                d = dst.find_comment(c.name, nb.name, sub.lab, sub.student)
                d.auto_comment = c.auto_comment
                d.manual_comment = c.manual_comment
        dst.db.commit()


def reference(root: Path, lab: str, solution: Path) -> dict[str, list[dict]]:
    """The observations of the lab's solution notebook, from build/reference/ when they were
    made from this very notebook (`make build` makes them), else computed now and kept."""
    return judge.cached_reference(solution, root / "build" / "reference" / f"{lab}.json")


def prepare_references(root: Path, labs: list[str], workers: int | None = None) -> None:
    """Run each lab's solution notebook once and keep its observations in build/reference/
    (`make build` does this, so that grading a class only reads them)."""
    os.environ.update(prepare_data(labs))
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        list(pool.map(lambda lab: reference(root, lab, solution_notebook(root, lab)), labs))


def solution_notebook(root: Path, lab: str) -> Path:
    path = root / "build" / "source" / lab / f"{lab}.ipynb"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `make build` first.")
    return path


def record_failure(sub: Submission, root: Path) -> None:
    """A submission nbgrader could not finish is kept in the gradebook: zero, and flagged
    for a human look (the reason is in the grading summary), never silently dropped."""
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(sub.student)
        try:
            gb.remove_submission(sub.lab, sub.student)
        except MissingEntry:
            pass
        submission = gb.add_submission(sub.lab, sub.student)
        for nb in submission.notebooks:
            nb.flagged = True
            for grade in nb.grades:
                grade.auto_score = 0.0
                grade.needs_manual_grade = False
        gb.db.commit()


def read_scores(root: Path, labs: list[str]) -> tuple[dict, dict]:
    from nbgrader.api import Gradebook

    scores, max_scores = {}, {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            if assignment.name not in labs:
                continue
            max_scores[assignment.name] = assignment.max_score
            for sub in assignment.submissions:
                scores[(sub.student.id, assignment.name)] = sub.score
    return scores, max_scores


def prepare_data(labs: list[str]) -> dict[str, str]:
    """Environment for the kernels: where the course data lives (prepared once, here)."""
    env = {}
    if "lab05_dynamicnet" in labs:
        try:
            from data import mnist
        except ImportError:
            return env
        root = Path(os.environ.get("COURSE_DATA_ROOT", REPO / "data" / "cache"))
        mnist.prepare(root)
        env["COURSE_DATA_ROOT"] = str(root)
    return env


def grade_class(
    root: Path = REPO,
    labs: list[str] | None = None,
    workers: int | None = None,
    feedback: bool = True,
    quiet: bool = False,
    cell_timeout: int | None = None,
    budget_s: float = NOTEBOOK_BUDGET_S,
) -> Report:
    labs = labs or LABS
    workers = workers or os.cpu_count() or 1
    report = Report()
    if not (root / "gradebook.db").is_file():
        raise SystemExit(f"{root / 'gradebook.db'} is missing: run `make build` first.")
    why_not = sandbox.available()
    if why_not:
        raise SystemExit(f"cannot grade safely: {why_not}")
    os.environ.update(prepare_data(labs))
    submissions, report.problems = discover(root, labs)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    say(f"grading {len(submissions)} submission(s) on {workers} worker(s)")
    start = time.monotonic()
    labs_graded = sorted({sub.lab for sub in submissions})
    solutions = {lab: solution_notebook(root, lab) for lab in labs_graded}
    references = {lab: Future() for lab in labs_graded}
    todo: list = [*labs_graded, *submissions]  # the reference runs come first
    lock, results, numbers = threading.Lock(), queue.Queue(), itertools.count()

    def work(tmp: Path) -> None:
        """A worker thread and its grading process: take the next job until none is left."""
        worker = Worker(tmp / f"worker-{threading.get_ident()}.log")
        try:
            while True:
                with lock:
                    job = todo.pop(0) if todo else None
                    scratch = tmp / f"{next(numbers):05d}"
                if job is None:
                    return
                if isinstance(job, str):
                    references[job].set_result(reference(root, job, solutions[job]))
                else:
                    results.put(grade_one(worker, job, root, scratch, cell_timeout, budget_s))
        except BaseException as error:  # a bug of ours: stop the class run, and say it
            with lock:
                todo.clear()
            for future in references.values():
                if not future.done():
                    future.set_exception(error)
            results.put(error)
        finally:
            worker.close()

    with (
        tempfile.TemporaryDirectory(prefix="grading-") as tmp,
        ThreadPoolExecutor(max_workers=workers) as pool,
    ):
        for _ in range(workers):
            pool.submit(work, Path(tmp))
        done, graded = 0, []
        while done < len(submissions):
            outcome = results.get()
            if isinstance(outcome, BaseException):
                raise outcome
            sub = outcome.submission
            if outcome.error:
                report.problems.append(Problem(_rel(sub.folder, root), outcome.error))
                record_failure(sub, root)
            else:
                limit = merge(outcome, root, references[sub.lab].result())
                graded.append(sub)
                if limit:
                    report.problems.append(Problem(_rel(sub.folder, root), limit))
            shutil.rmtree(outcome.scratch, ignore_errors=True)
            done += 1
            elapsed = time.monotonic() - start
            eta = elapsed / done * (len(submissions) - done)
            where = f"{sub.student}/{sub.lab}"
            say(f"  [{done}/{len(submissions)}] {where}  {elapsed:.0f}s, ETA {eta:.0f}s")
    if feedback:
        for lab in sorted({sub.lab for sub in submissions}):
            nbgrader("generate_feedback", lab, "--force", root=root)
            for sub in graded:  # those recorded as 0 are in the problems already
                page = root / "feedback" / sub.student / lab / f"{lab}.html"
                if sub.lab == lab and not page.is_file():
                    report.problems.append(
                        Problem(_rel(page, root), "nbgrader generate_feedback did not write it")
                    )
        result = nbgrader("export", f"--to={root / 'grades.csv'}", root=root)
        if result.returncode != 0:
            report.problems.append(Problem("grades.csv", "nbgrader export failed"))
    report.scores, report.max_scores = read_scores(root, labs)
    return report


def table(report: Report, labs: list[str]) -> str:
    students = sorted({s for s, _ in report.scores})
    labs = [lab for lab in labs if lab in report.max_scores]
    short = [lab.split("_")[0] for lab in labs]
    width = max([len(s) for s in students] + [7])
    lines = [f"{'student':<{width}}  " + "  ".join(f"{s:>7}" for s in short)]
    lines.append(
        f"{'(max)':<{width}}  " + "  ".join(f"{report.max_scores[lab]:>7g}" for lab in labs)
    )
    for student in students:
        cells = []
        for lab in labs:
            score = report.scores.get((student, lab))
            cells.append(f"{'-' if score is None else format(score, 'g'):>7}")
        lines.append(f"{student:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def worker_count(text: str) -> int:
    """argparse type of --workers: a whole number >= 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (1, 2, ...)")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Autograde every submission under submitted/.")
    parser.add_argument(
        "--workers", type=worker_count, default=None, help="parallel workers (default: cores)"
    )
    parser.add_argument(
        "--lab", action="append", dest="labs", help="grade only this lab (repeatable)"
    )
    parser.add_argument("--root", type=Path, default=REPO, help="the course folder (default: repo)")
    args = parser.parse_args(argv)
    labs = args.labs or LABS
    if complaint := unknown_labs(labs):
        print(complaint, file=sys.stderr)
        return 2
    report = grade_class(args.root.resolve(), labs=labs, workers=args.workers)
    print()
    print(table(report, labs))
    print()
    print("grades:   grades.csv")
    print("feedback: feedback/<student>/<lab>/<lab>.html")
    if report.problems:
        print(f"\nneeds a human look ({len(report.problems)}):")
        for p in report.problems:
            print(f"  {p.where}: {p.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
