"""Grade a class: submitted/<student>/<lab>/<lab>.ipynb -> gradebook, feedback/, grades.csv.

An instructor's own assignment (assignments/<name>/, released by `make build` into
labs/<name>/ with any number of notebooks and the files and folders beside them) takes the
same path as the labs, each of its notebooks where a lab has its one.

nbgrader does the grading; this module is the path a hand-in takes around it:

1. **intake** (graders/grade/intake.py): every folder under submitted/ is looked at, and from each
   hand-in only the released notebooks' bytes (regular files, never a link) and nbgrader's
   timestamp.txt are taken; what cannot be graded is reported by path (a known student's
   lab is recorded as 0), and the rest of the class is graded;
2. **task** (graders/grade/task.py): each hand-in is graded by nbgrader's own autograde and
   generate_feedback in a scratch course of its own, under a neutral student id, its kernel
   in the sandbox (graders/sandbox/sandbox.py) and its test cells judged outside the kernel
   (graders/judge/judge.py); a task gets everything as bytes and gives back data;
3. **dispatch** (graders/grade/dispatch.py, graders/grade/engine.py): the tasks run on Dask, a local
   cluster by default or an existing one. The local cluster starts in the background right
   after intake, while the references, the data and the labs-only gradebook are made (the
   inputs every task shares, graders/grade/inputs.py, which also says what a resumed run skips),
   and this process grades the shortest hand-ins itself until the cluster is up (so the
   first kernel starts at once); one hand-in alone (a regrade) is graded here, with no
   cluster;
4. **merge** (graders/grade/merge.py): each result goes into the one gradebook, under the real
   name, as it arrives, one at a time; the graded notebook and feedback page are written
   from its bytes; a line per hand-in goes to grading-log.jsonl (graders/formats/gradelog.py);
5. **summary**: nbgrader's exporter writes grades.csv (in this process, while the local
   cluster ends); timings.csv has each hand-in's phases; the table, the phases summed, when
   the first kernel was up, and what needs a human look are printed.

Whatever one hand-in does, it costs at most its own grade and its own budget: every step of
it catches its own failure, records the hand-in as 0 with the reason, and the class run
goes on and exits 0. A hand-in already graded from the same notebook, release and
reference is not graded again (``--force`` does), so an interrupted run is resumed by
running it again.

    python -m graders.grade [--workers N] [--lab LAB ...] [--student NAME ...] [--force]
                            [--scheduler tcp://host:8786]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

from graders.config.course import LABS, REPO, notebooks, unknown_labs
from graders.formats import gradebook, gradelog
from graders.formats.export import export_grades
from graders.formats.gradelog import LogEntry
from graders.formats.timings import Phase
from graders.formats.wire import Job, Result
from graders.grade import dispatch, engine, inputs, intake, merge
from graders.grade.class_run import (
    TIMINGS,
    ClassRun,
    limit_hit,
    read_scores,
    summary,
    table,
    write_timings,
)
from graders.grade.intake import HandIn, Problem
from graders.grade.task import assignments_only
from graders.sandbox import sandbox_host
from graders.sandbox.build_reference import prepare_references
from graders.sandbox.sandbox_argv import available


def _intake(root: Path, labs: list[str], students: list[str] | None, run: ClassRun) -> list[HandIn]:
    """The hand-ins to grade (graders/grade/intake.py); what cannot be graded goes to `run.problems`
    (a known student's lab recorded as 0; a notebook of several that cannot be read: that
    notebook 0), files beside a notebook to `run.notes`."""
    names = {lab: inputs.released_notebooks(root, lab) for lab in labs}
    hand_ins, problems = intake.discover(root, labs, names)
    if students:
        hand_ins = [h for h in hand_ins if h.student in students]
        problems = [p for p in problems if p.student in students]
    run.problems = problems
    for problem in problems:  # a known student's lab that cannot be read: 0, flagged
        if problem.student is not None:
            try:
                merge.record_failure(root, problem.student, problem.lab)
                problem.reason += "; recorded as 0"
                failed = HandIn(problem.student, problem.lab, b"", where=problem.where)
                log_hand_in(root, failed, Result(ok=False), run, key=None)
            except Exception as error:  # noqa: BLE001 - one hand-in never stops the class
                problem.reason += f"; could not be recorded ({type(error).__name__})"
    for hand_in in hand_ins:
        for why in hand_in.left_out:  # graded 0, as nbgrader grades a notebook not handed in
            problems.append(Problem(hand_in.where, f"{why}; that notebook graded 0"))
        if hand_in.ignored:
            shown = ", ".join(hand_in.ignored[:5]) + (" ..." if len(hand_in.ignored) > 5 else "")
            run.notes.append(
                Problem(hand_in.where, f"{len(hand_in.ignored)} other file(s) ignored: {shown}")
            )
    return hand_ins


def _jobs(hand_ins: list[HandIn], cell_timeout, budget_s: float | None, feedback: bool):
    """(hand-in, Job) for each hand-in, made as the engine asks for the next one."""
    for h in hand_ins:
        job = Job(
            lab=h.lab,
            notebooks={name: data.decode("utf-8") for name, data in h.notebooks.items()},
            timestamp=h.timestamp,
            cell_timeout=cell_timeout,
            budget_s=budget_s,
            feedback=feedback,
        )
        yield h, job


def grade_class(
    root: Path = REPO,
    labs: list[str] | None = None,
    workers: int | None = None,
    feedback: bool = True,
    quiet: bool = False,
    cell_timeout: int | None = None,
    budget_s: float | None = None,
    students: list[str] | None = None,
    force: bool = False,
    scheduler: str | None = None,
) -> ClassRun:
    root = Path(root).resolve()  # a task graded here changes the working folder meanwhile
    labs = labs or LABS + own_assignments_built(root)  # an instructor's own: graded alike
    workers = workers or os.cpu_count() or 1
    run = ClassRun(started_at=time.time())
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    start = time.monotonic()
    book, scheduler = _where_to_grade(root, scheduler, say)
    hand_ins = _intake(root, labs, students, run)
    labs_graded = sorted({h.lab for h in hand_ins})
    local = None
    expected = 0 if scheduler else inputs.expected_count(root, hand_ins, labs_graded, force)
    if expected > 1:  # it starts while the data, the references and the gradebook are made
        local = engine.LocalCluster(dispatch.cluster_size(workers, expected))
    ending = None
    try:
        prepare_references(root, labs_graded, workers)
        with tempfile.TemporaryDirectory(prefix="grading-") as tmp:  # nothing in the course
            labs_only = assignments_only(book, Path(tmp) / "labs.db")
            course = inputs.course_inputs(root, labs_graded, labs_only)
        keys = {(h.student, h.lab): inputs.hand_in_key(h, course) for h in hand_ins}
        if not force:  # resume: what was graded from the same inputs stays as it is
            left = inputs.not_graded_yet(root, hand_ins, keys, labs_graded)
            run.skipped = len(hand_ins) - len(left)
            hand_ins = left
        hand_ins = inputs.longest_first(hand_ins, root)
        total = len(hand_ins)
        skipped = f" ({run.skipped} already graded from the same notebook)" if run.skipped else ""
        where = scheduler or (
            f"a local Dask cluster of {dispatch.cluster_size(workers, total)} worker(s) and here"
            if total > 1
            else "here"
        )
        say(f"grading {total} hand-in(s) on {where}{skipped}")
        jobs = _jobs(hand_ins, cell_timeout, budget_s, feedback)
        merge_one = functools.partial(_merge_one, root, run, keys)
        if total < 2 and local is not None:  # a guess too high: nothing for a cluster to do
            ending, local = local.close(), None
        ending = (
            dispatch.run_tasks(scheduler, workers, course, jobs, merge_one, run, total, say, local)
            or ending
        )
        local = None
    finally:
        if local is not None:  # stopped before the tasks ran (Ctrl-C, a missing solution)
            ending = local.close()
    return _finish(root, run, feedback, labs, ending, start)


def _finish(root: Path, run: ClassRun, feedback: bool, labs: list[str], ending, start) -> ClassRun:
    if feedback:  # while the local cluster ends
        try:
            export_grades(root, root / "grades.csv", REPO / "nbgrader_config.py")
        except Exception as error:  # noqa: BLE001 - the grades are in the gradebook
            run.problems.append(Problem("grades.csv", f"nbgrader export failed: {error}"))
    write_timings(root, run)
    run.scores, run.max_scores = read_scores(root, labs)
    if ending is not None:
        ending.join()
    run.wall_s = time.monotonic() - start
    return run


def own_assignments_built(root: Path) -> list[str]:
    """The instructor's own assignments `make build` put in the course's source folder."""
    source = root / "build" / "source"
    if not source.is_dir():
        return []
    return sorted(p.name for p in source.iterdir() if p.name not in LABS and notebooks(p))


def _where_to_grade(root: Path, scheduler: str | None, say) -> tuple[Path, str | None]:
    """The course's gradebook and the scheduler to grade on (None: a local cluster), once it
    is known the class can be graded there safely; else SystemExit with the reason."""
    book = gradebook.of(root)
    if not book.is_file():
        raise SystemExit(f"{book} is missing: run `make build` first.")
    scheduler = (
        engine.configured_scheduler(REPO / "nbgrader_config.py") if scheduler is None else scheduler
    )
    why_not = available()
    if why_not and not scheduler:
        raise SystemExit(f"cannot grade safely: {why_not}")
    for missing in sandbox_host.protections_missing() if not scheduler else []:
        say(f"note: {missing}")
    return book, scheduler


def _merge_one(root: Path, run: ClassRun, keys: dict, hand_in: HandIn, result: Result) -> None:
    """Merge one task's result; any failure costs this hand-in only (0, and a reason)."""
    item = (hand_in.student, hand_in.lab)
    key = keys[item]
    run.timings[item] = result.get("timings", {})
    mark = time.monotonic()
    try:
        if result.get("ok"):
            merge.merge(root, hand_in.student, hand_in.lab, result)
            run.verdicts[item] = result.get("verdicts", {})
            limit = limit_hit(run.verdicts[item])
            if limit:
                run.problems.append(Problem(hand_in.where, limit))
            if result.get("feedback_problem"):
                run.problems.append(Problem(hand_in.where, result["feedback_problem"]))
        else:
            merge.record_failure(root, hand_in.student, hand_in.lab)
            reason = result.get("reason") or "grading failed"
            run.problems.append(Problem(hand_in.where, f"{reason}; recorded as 0"))
    except Exception as error:  # noqa: BLE001 - the class run goes on
        run.problems.append(Problem(hand_in.where, f"could not be merged: {error}"))
        try:
            merge.record_failure(root, hand_in.student, hand_in.lab)
        except Exception as again:  # noqa: BLE001
            run.problems.append(Problem(hand_in.where, f"could not be recorded: {again}"))
    run.timings[item][Phase.MERGE] = time.monotonic() - mark
    log_hand_in(root, hand_in, result, run, key)


def log_hand_in(
    root: Path, hand_in: HandIn, result: Result, run: ClassRun, key: str | None
) -> None:
    """Append what grading this hand-in recorded (the gradebook holds the scores): when, from
    what (key), how long each phase took, each test cell's verdict, and why it needs a
    human look."""
    item = (hand_in.student, hand_in.lab)
    entry = LogEntry(
        student=hand_in.student,
        lab=hand_in.lab,
        key=key,
        graded_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        ok=bool(result.get("ok")),
        timings={k: round(v, 3) for k, v in run.timings.get(item, {}).items()},
        verdicts=run.verdicts.get(item, {}),
        problems=[p.reason for p in run.problems if p.where == hand_in.where],
        ignored=hand_in.ignored[:20],
    )
    gradelog.append(root, entry)


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
    parser.add_argument(
        "--student", action="append", dest="students", help="grade only this student (repeatable)"
    )
    parser.add_argument(
        "--force", action="store_true", help="grade again what was graded from the same notebook"
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        help="a Dask scheduler's address (default: c.GradingEngine.scheduler, else local)",
    )
    args = parser.parse_args(argv)
    own = own_assignments_built(args.root.resolve())
    labs = args.labs or LABS + own
    if complaint := unknown_labs([a for a in labs if a not in own]):
        print(complaint, file=sys.stderr)
        return 2
    run = grade_class(
        args.root.resolve(),
        labs=labs,
        workers=args.workers,
        students=args.students,
        force=args.force,
        scheduler=args.scheduler,
    )
    print()
    print(table(run, labs))
    print()
    print(summary(run))
    print("grades:   grades.csv (nbgrader export)")
    print("feedback: feedback/<student>/<lab>/<lab>.html")
    print(f"timings:  {TIMINGS}")
    if run.problems:
        print(f"\nneeds a human look ({len(run.problems)}):")
        for p in run.problems:
            print(f"  {p.where}: {p.reason}")
    if run.notes:
        print(f"\nnotes ({len(run.notes)}):")
        for p in run.notes:
            print(f"  {p.where}: {p.reason}")
    return 130 if run.interrupted == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(main())
