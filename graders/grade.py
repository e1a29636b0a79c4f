"""Grade a class: submitted/<student>/<lab>/<lab>.ipynb -> gradebook, feedback/, grades.csv.

nbgrader does the grading; this module is the path a hand-in takes around it:

1. **intake** (graders/intake.py): every folder under submitted/ is looked at, and from each
   hand-in only the notebook's bytes (a regular file, never a link) and nbgrader's
   timestamp.txt are taken; what cannot be graded is reported by path (a known student's
   lab is recorded as 0), and the rest of the class is graded;
2. **task** (graders/task.py): each hand-in is graded by nbgrader's own autograde and
   generate_feedback in a scratch course of its own, under a neutral student id, its kernel
   in the sandbox (graders/sandbox.py) and its test cells judged outside the kernel
   (graders/judge.py); a task gets everything as bytes and gives back data;
3. **engine** (graders/engine.py): the tasks run on Dask, a local cluster by default or an
   existing one. The local cluster starts in the background right after intake, while the
   references, the data and the labs-only gradebook are made, and this process grades the
   shortest hand-ins itself until the cluster is up (so the first kernel starts at once);
   one hand-in alone (a regrade) is graded here, with no cluster;
4. **merge** (graders/merge.py): each result goes into the one gradebook, under the real
   name, as it arrives, one at a time; the graded notebook and feedback page are written
   from its bytes; a line per hand-in goes to grading-log.jsonl (graders/gradelog.py);
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
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from graders import engine, gradebook, gradelog, intake, merge, references, sandbox_host
from graders.build_reference import prepare_references
from graders.class_run import (
    TIMINGS,
    ClassRun,
    limit_hit,
    read_scores,
    summary,
    table,
    write_timings,
)
from graders.course import LABS, REPO, prepare_data, unknown_labs
from graders.export import export_grades
from graders.gradelog import LogEntry
from graders.intake import HandIn, Problem
from graders.sandbox_argv import available
from graders.task import assignments_only
from graders.wire import Course, Job, Result


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def course_inputs(root: Path, labs: list[str], labs_only: Path) -> Course:
    """What every task of the class shares, as data (no shared file system is assumed)."""
    where = references.folder(root)
    observed = {lab: references.observations(references.path(where, lab)) for lab in labs}
    timings = {lab: _timing(references.path(where, lab)) for lab in labs}
    releases, files = {}, {}
    for lab in labs:
        folder = root / "labs" / lab
        releases[lab] = (folder / f"{lab}.ipynb").read_text(encoding="utf-8")
        files[lab] = {
            p.name: p.read_bytes()
            for p in sorted(folder.iterdir())
            if p.is_file() and not p.is_symlink() and p.suffix != ".ipynb"
        }
    return Course(
        config=(REPO / "nbgrader_config.py").read_text(),
        gradebook=labs_only.read_bytes(),
        references=observed,
        releases=releases,
        files=files,
        timings=timings,
    )


def _timing(file: Path) -> dict:
    """The solution's times in a reference file, as its task's copy keeps them (the per-lab
    time budgets, graders/budgets.py); {} where it has none (flat limits)."""
    timed = references.timing(file)
    if timed is None:
        return {}
    return {"version": references.VERSION, "cells": timed[0], "seconds": timed[1]}


def longest_first(hand_ins: list[HandIn], root: Path) -> list[HandIn]:
    """The hand-ins in the order to grade them: the labs whose solution took longest to run
    (`make build` timed it, build/reference/<lab>.json) first, so that a class run does not
    end on one long notebook while the other workers wait; otherwise as found."""
    where = references.folder(root)  # a lab timed by no build yet: 0, in the order found
    seconds = {
        lab: references.seconds(references.path(where, lab)) for lab in {h.lab for h in hand_ins}
    }
    return sorted(hand_ins, key=lambda h: -seconds[h.lab])


def hand_in_key(hand_in: HandIn, course: Course) -> str:
    """What a grade depends on: the notebook, the release and the reference records."""
    lab = hand_in.lab
    made_of = [hand_in.notebook, hand_in.timestamp or "", course["releases"][lab]]
    made_of.append(json.dumps(course["references"][lab], sort_keys=True))
    return _sha("\n".join(_sha(part) for part in made_of))


def already_graded(root: Path, labs: list[str]) -> set[tuple[str, str]]:
    with gradebook.opened(gradebook.of(root)) as gb:
        return {
            (sub.student.id, assignment.name)
            for assignment in gb.assignments
            if assignment.name in labs
            for sub in assignment.submissions
        }


def _intake(root: Path, labs: list[str], students: list[str] | None, run: ClassRun) -> list[HandIn]:
    """The hand-ins to grade (graders/intake.py); what cannot be graded goes to `run.problems`
    (a known student's lab recorded as 0), files beside a notebook to `run.notes`."""
    hand_ins, problems = intake.discover(root, labs)
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
        if hand_in.ignored:
            shown = ", ".join(hand_in.ignored[:5]) + (" ..." if len(hand_in.ignored) > 5 else "")
            run.notes.append(
                Problem(hand_in.where, f"{len(hand_in.ignored)} other file(s) ignored: {shown}")
            )
    return hand_ins


def _not_graded_yet(
    root: Path, hand_ins: list[HandIn], keys: dict, labs: list[str]
) -> list[HandIn]:
    """The hand-ins not graded yet from the same inputs (their key in the log, their
    submission in the gradebook): what a resumed run grades."""
    log = gradelog.latest(gradelog.read(root)[0])
    in_book = already_graded(root, labs)
    done = {k for k, key in keys.items() if k in in_book and log.get(k, {}).get("key") == key}
    return [h for h in hand_ins if (h.student, h.lab) not in done]


def _jobs(hand_ins: list[HandIn], cell_timeout, budget_s: float | None, feedback: bool):
    """(hand-in, Job) for each hand-in, made as the engine asks for the next one."""
    for h in hand_ins:
        job = Job(
            lab=h.lab,
            notebook=h.notebook.decode("utf-8"),
            timestamp=h.timestamp,
            cell_timeout=cell_timeout,
            budget_s=budget_s,
            feedback=feedback,
        )
        yield h, job


SPAWN_WAIT_S = 30  # past this, the local cluster's workers are awaited without grading here
JUPYTER_VARIABLES = ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR")  # graders.task sets them per task


def grade_here(course: Course, job: Job) -> Result:
    """One grading task in this process, as a worker runs it (graders.task.run: its kernel in
    the sandbox, everything as data), leaving this process's environment as it was."""
    from graders import task

    saved = {name: os.environ.get(name) for name in JUPYTER_VARIABLES}
    try:
        return task.run(course, job)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Queue:
    """The hand-ins left to grade, taken from either end by two lanes at once: the engine
    takes the longest first, this process (while the local cluster starts) the shortest."""

    def __init__(self, jobs) -> None:
        self._jobs = deque(jobs)
        self._lock = threading.Lock()

    def first(self):
        while True:
            with self._lock:
                if not self._jobs:
                    return
                item = self._jobs.popleft()
            yield item

    def last(self):
        with self._lock:
            return self._jobs.pop() if self._jobs else None


def _run_tasks(root, scheduler, workers, course, jobs, keys, run, total, say, local=None):
    """Grade `jobs` on the engine, merging each result as it arrives; an interrupted or lost
    engine ends the run with what was merged so far (`run.interrupted` says why).

    Without a scheduler, the local cluster (`local`, started by the caller as early as it
    could, else here) comes up while this process grades the shortest hand-ins itself, one at
    a time, until the cluster is ready: the first kernel starts at once, and one hand-in
    alone is graded here with no cluster at all. Returns the thread that ends the local
    cluster (join it), or None."""
    start = time.monotonic()
    merging = threading.Lock()  # one result merged at a time, whichever lane it came from
    closed = threading.Event()  # the run is over: a late result is not merged

    def arrived(hand_in: HandIn, result: Result, submitted: float) -> None:
        timings = result.setdefault("timings", {})
        if "started_at" in timings:
            timings["queue"] = max(0.0, timings.pop("started_at") - submitted)
        kernel_up = timings.pop("kernel_up_at", None)
        timings["intake"] = timings.get("intake", 0.0) + hand_in.intake_s
        with merging:
            if closed.is_set():
                return
            if kernel_up is not None:
                after = max(0.0, kernel_up - run.started_at)
                run.first_kernel_s = min(run.first_kernel_s or after, after)
            _merge_one(root, hand_in, result, run, keys[(hand_in.student, hand_in.lab)])
            run.graded += 1
            elapsed = time.monotonic() - start
            eta = elapsed / run.graded * (total - run.graded)
            say(f"  [{run.graded}/{total}] {hand_in.student}/{hand_in.lab}  "
                f"{elapsed:.0f}s, ETA {eta:.0f}s")  # fmt: skip

    def here(item) -> None:
        hand_in, job = item
        arrived(hand_in, grade_here(course, job), time.time())

    queue = _Queue(jobs)
    lane = None
    try:
        if scheduler and total:
            with engine.client(scheduler, workers) as connected:
                _engine_lane(connected, course, queue, arrived, run, say)
        elif total:
            if local is None and total > 1:
                local = engine.LocalCluster(cluster_size(workers, total))

            def shortest_while_starting() -> None:
                if not local.wait_spawned(timeout=SPAWN_WAIT_S):
                    return
                while not closed.is_set() and not local.ready():
                    item = queue.last()
                    if item is None:
                        return
                    here(item)

            if local is not None:
                lane = threading.Thread(target=shortest_while_starting, daemon=True)
                lane.start()
                try:
                    connected = local.client()
                except OSError as error:  # grade the rest here, one at a time
                    say(f"note: {error}; grading here, one hand-in at a time")
                    connected = None
                if connected is not None:
                    _engine_lane(connected, course, queue, arrived, run, say)
                lane.join()
            for item in iter(queue.last, None):  # alone, or the cluster did not start
                here(item)
    except KeyboardInterrupt:
        run.interrupted = "interrupted"
    except OSError as error:  # the scheduler could not be reached, or was lost
        run.interrupted = f"lost the grading engine ({error})"
    with merging:
        closed.set()
    if run.interrupted:
        say(f"{run.interrupted} after {run.graded} of {total} hand-in(s): what was graded "
            "is in the gradebook; run the same command again to grade the rest")  # fmt: skip
    return local.close() if local is not None else None


def _engine_lane(connected, course, queue, arrived, run, say) -> None:
    run.dashboard = connected.dashboard_link
    say(f"Dask dashboard: {run.dashboard}")
    window = 2 * max(1, len(connected.scheduler_info().get("workers", {}))) + 2
    engine.run_all(connected, course, queue.first(), arrived, window)


def cluster_size(workers: int, hand_ins: int) -> int:
    """Workers of the local cluster for `hand_ins`: at most `workers`, and no more than the
    hand-ins left once this process has graded the first one while the cluster starts."""
    return max(1, min(workers, hand_ins - 1))


def _expected(root: Path, hand_ins: list[HandIn], labs: list[str], force: bool) -> int:
    """How many hand-ins this run will likely grade, known before the references are checked
    (from the reference files as they are): the size of the local cluster to start at once.
    A guess only; the run grades what the checked references say."""
    if force:
        return len(hand_ins)
    try:
        where = references.folder(root)
        course = {
            "releases": {
                lab: (root / "labs" / lab / f"{lab}.ipynb").read_text(encoding="utf-8")
                for lab in labs
            },
            "references": {
                lab: references.observations(references.path(where, lab)) for lab in labs
            },
        }
        keys = {(h.student, h.lab): hand_in_key(h, course) for h in hand_ins}
        return len(_not_graded_yet(root, hand_ins, keys, labs))
    except Exception:  # noqa: BLE001 - missing or damaged: the references step remakes them
        return len(hand_ins)


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
    labs = labs or LABS
    root = Path(root).resolve()  # a task graded here changes the working folder meanwhile
    workers = workers or os.cpu_count() or 1
    run = ClassRun(started_at=time.time())
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    start = time.monotonic()
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
    hand_ins = _intake(root, labs, students, run)
    labs_graded = sorted({h.lab for h in hand_ins})
    local = None
    expected = 0 if scheduler else _expected(root, hand_ins, labs_graded, force)
    if expected > 1:  # it starts while the data, the references and the gradebook are made
        local = engine.LocalCluster(cluster_size(workers, expected))
    ending = None
    try:
        os.environ.update(prepare_data(labs_graded))
        prepare_references(root, labs_graded, workers)
        with tempfile.TemporaryDirectory(prefix="grading-") as tmp:  # nothing in the course
            labs_only = assignments_only(book, Path(tmp) / "labs.db")
            course = course_inputs(root, labs_graded, labs_only)
        keys = {(h.student, h.lab): hand_in_key(h, course) for h in hand_ins}
        if not force:  # resume: what was graded from the same inputs stays as it is
            left = _not_graded_yet(root, hand_ins, keys, labs_graded)
            run.skipped = len(hand_ins) - len(left)
            hand_ins = left
        hand_ins = longest_first(hand_ins, root)
        total = len(hand_ins)
        skipped = f" ({run.skipped} already graded from the same notebook)" if run.skipped else ""
        where = scheduler or (
            f"a local Dask cluster of {cluster_size(workers, total)} worker(s) and here"
            if total > 1
            else "here"
        )
        say(f"grading {total} hand-in(s) on {where}{skipped}")
        jobs = _jobs(hand_ins, cell_timeout, budget_s, feedback)
        if total < 2 and local is not None:  # a guess too high: nothing for a cluster to do
            ending, local = local.close(), None
        ending = (
            _run_tasks(root, scheduler, workers, course, jobs, keys, run, total, say, local)
            or ending
        )
        local = None
    finally:
        if local is not None:  # stopped before the tasks ran (Ctrl-C, a missing solution)
            ending = local.close()
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


def _merge_one(root: Path, hand_in: HandIn, result: Result, run: ClassRun, key: str) -> None:
    """Merge one task's result; any failure costs this hand-in only (0, and a reason)."""
    item = (hand_in.student, hand_in.lab)
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
    run.timings[item]["merge"] = time.monotonic() - mark
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
        help=f"a Dask scheduler's address (default: ${engine.ENV}, nbgrader_config.py, else local)",
    )
    args = parser.parse_args(argv)
    labs = args.labs or LABS
    if complaint := unknown_labs(labs):
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
