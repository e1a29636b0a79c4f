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
   existing one;
4. **merge** (graders/merge.py): each result goes into the one gradebook, under the real
   name, as it arrives, one at a time; the graded notebook and feedback page are written
   from its bytes; a line per hand-in goes to grading-log.jsonl;
5. **summary**: nbgrader exports grades.csv; timings.csv has each hand-in's phases; the
   table, the phases summed, and what needs a human look are printed.

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
import csv
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from graders import engine, intake, judge, merge, sandbox
from graders.course import LABS, REPO, prepare_data, unknown_labs
from graders.intake import HandIn, Problem
from graders.nbgrader_cli import nbgrader
from graders.task import NOTEBOOK_BUDGET_S, assignments_only

GRADING_LOG = "grading-log.jsonl"  # what grading recorded, one line per hand-in graded
TIMINGS = "timings.csv"
PHASES = ["queue", "intake", "kernel_start", "execution", "checks", "feedback", "merge"]


@dataclass
class Report:
    scores: dict[tuple[str, str], float] = field(default_factory=dict)
    max_scores: dict[str, float] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    timings: dict[tuple[str, str], dict] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], dict] = field(default_factory=dict)
    graded: int = 0
    skipped: int = 0
    interrupted: str | None = None
    dashboard: str | None = None
    wall_s: float = 0.0


def limit_hit(verdicts: dict[str, dict]) -> str | None:
    """The first limit the graded notebook ran into, and where, or None."""
    for grade_id, verdict in sorted(verdicts.items(), key=lambda kv: kv[1].get("cell", 0)):
        if verdict.get("kind") == "limit":
            sentence = verdict.get("sentence", "").removeprefix("Not graded to the end: ")
            return f"{sentence.rstrip('.')} (in {grade_id}); graded up to there, see its feedback"
    return None


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


def read_log(root: Path) -> dict[tuple[str, str], dict]:
    """The latest line of grading-log.jsonl for each (student, lab); bad lines are skipped."""
    latest = {}
    try:
        with open(root / GRADING_LOG, encoding="utf-8") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                    latest[(entry["student"], entry["lab"])] = entry
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return latest


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def course_inputs(root: Path, labs: list[str], gradebook: Path) -> dict:
    """What every task of the class shares, as data (no shared file system is assumed)."""
    references = {}
    for lab in labs:
        cache = json.loads((root / "build" / "reference" / f"{lab}.json").read_text())
        references[lab] = cache["observations"]
    releases, files = {}, {}
    for lab in labs:
        folder = root / "labs" / lab
        releases[lab] = (folder / f"{lab}.ipynb").read_text(encoding="utf-8")
        files[lab] = {
            p.name: p.read_bytes()
            for p in sorted(folder.iterdir())
            if p.is_file() and not p.is_symlink() and p.suffix != ".ipynb"
        }
    return {
        "config": (REPO / "nbgrader_config.py").read_text(),
        "gradebook": gradebook.read_bytes(),
        "references": references,
        "releases": releases,
        "files": files,
    }


def longest_first(hand_ins: list[HandIn], root: Path) -> list[HandIn]:
    """The hand-ins in the order to grade them: the labs whose solution took longest to run
    (`make build` timed it, build/reference/<lab>.json) first, so that a class run does not
    end on one long notebook while the other workers wait; otherwise as found."""
    seconds = {}
    for lab in {h.lab for h in hand_ins}:
        try:
            cache = json.loads((root / "build" / "reference" / f"{lab}.json").read_text())
            seconds[lab] = float(cache.get("seconds", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            seconds[lab] = 0.0  # timed by no build yet: graded in the order found
    return sorted(hand_ins, key=lambda h: -seconds[h.lab])


def hand_in_key(hand_in: HandIn, course: dict) -> str:
    """What a grade depends on: the notebook, the release and the reference records."""
    lab = hand_in.lab
    made_of = [hand_in.notebook, hand_in.timestamp or "", course["releases"][lab]]
    made_of.append(json.dumps(course["references"][lab], sort_keys=True))
    return _sha("\n".join(_sha(part) for part in made_of))


def already_graded(root: Path, labs: list[str]) -> set[tuple[str, str]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return {
            (sub.student.id, assignment.name)
            for assignment in gb.assignments
            if assignment.name in labs
            for sub in assignment.submissions
        }


def grade_class(
    root: Path = REPO,
    labs: list[str] | None = None,
    workers: int | None = None,
    feedback: bool = True,
    quiet: bool = False,
    cell_timeout: int | None = None,
    budget_s: float = NOTEBOOK_BUDGET_S,
    students: list[str] | None = None,
    force: bool = False,
    scheduler: str | None = None,
) -> Report:
    labs = labs or LABS
    workers = workers or os.cpu_count() or 1
    report = Report()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    start = time.monotonic()
    if not (root / "gradebook.db").is_file():
        raise SystemExit(f"{root / 'gradebook.db'} is missing: run `make build` first.")
    scheduler = (
        engine.configured_scheduler(REPO / "nbgrader_config.py") if scheduler is None else scheduler
    )
    why_not = sandbox.available()
    if why_not and not scheduler:
        raise SystemExit(f"cannot grade safely: {why_not}")
    for missing in sandbox.protections_missing() if not scheduler else []:
        say(f"note: {missing}")
    os.environ.update(prepare_data(labs))
    hand_ins, problems = intake.discover(root, labs)
    if students:
        hand_ins = [h for h in hand_ins if h.student in students]
        problems = [p for p in problems if p.student in students]
    report.problems = problems
    for problem in problems:  # a known student's lab that cannot be read: 0, flagged
        if problem.student is not None:
            try:
                merge.record_failure(root, problem.student, problem.lab)
                problem.reason += "; recorded as 0"
                failed = HandIn(problem.student, problem.lab, b"", where=problem.where)
                log_hand_in(root, failed, {"ok": False}, report, key=None)
            except Exception as error:  # noqa: BLE001 - one hand-in never stops the class
                problem.reason += f"; could not be recorded ({type(error).__name__})"
    for hand_in in hand_ins:
        if hand_in.ignored:
            shown = ", ".join(hand_in.ignored[:5]) + (" ..." if len(hand_in.ignored) > 5 else "")
            report.notes.append(
                Problem(hand_in.where, f"{len(hand_in.ignored)} other file(s) ignored: {shown}")
            )
    labs_graded = sorted({h.lab for h in hand_ins})
    judge.prepare_references(root, labs_graded, workers)
    with tempfile.TemporaryDirectory(prefix="grading-") as tmp:  # nothing left in the course
        labs_only = assignments_only(root / "gradebook.db", Path(tmp) / "labs.db")
        course = course_inputs(root, labs_graded, labs_only)
    keys = {(h.student, h.lab): hand_in_key(h, course) for h in hand_ins}
    if not force:  # resume: what was graded from the same inputs stays as it is
        log, in_book = read_log(root), already_graded(root, labs_graded)
        done = {
            k for k, key in keys.items()
            if k in in_book and log.get(k, {}).get("key") == key
        }  # fmt: skip
        report.skipped = len(done)
        hand_ins = [h for h in hand_ins if (h.student, h.lab) not in done]
    hand_ins = longest_first(hand_ins, root)
    total = len(hand_ins)
    skipped = f" ({report.skipped} already graded from the same notebook)" if report.skipped else ""
    where = scheduler or f"a local Dask cluster of {workers} worker(s)"
    say(f"grading {total} hand-in(s) on {where}{skipped}")
    jobs = (
        (
            h,
            {
                "lab": h.lab,
                "notebook": h.notebook.decode("utf-8"),
                "timestamp": h.timestamp,
                "cell_timeout": cell_timeout,
                "budget_s": budget_s,
                "feedback": feedback,
            },
        )
        for h in hand_ins
    )

    def arrived(hand_in: HandIn, result: dict, submitted: float) -> None:
        timings = result.setdefault("timings", {})
        if "started_at" in timings:
            timings["queue"] = max(0.0, timings.pop("started_at") - submitted)
        timings["intake"] = timings.get("intake", 0.0) + hand_in.intake_s
        _merge_one(root, hand_in, result, report, keys[(hand_in.student, hand_in.lab)])
        report.graded += 1
        elapsed = time.monotonic() - start
        eta = elapsed / report.graded * (total - report.graded)
        say(f"  [{report.graded}/{total}] {hand_in.student}/{hand_in.lab}  "
            f"{elapsed:.0f}s, ETA {eta:.0f}s")  # fmt: skip

    try:
        if total:
            with engine.client(scheduler, workers) as connected:
                report.dashboard = connected.dashboard_link
                say(f"Dask dashboard: {report.dashboard}")
                window = 2 * max(1, len(connected.scheduler_info().get("workers", {}))) + 2
                engine.run_all(connected, course, jobs, arrived, window)
    except KeyboardInterrupt:
        report.interrupted = "interrupted"
    except OSError as error:  # the scheduler could not be reached, or was lost
        report.interrupted = f"lost the grading engine ({error})"
    if report.interrupted:
        say(f"{report.interrupted} after {report.graded} of {total} hand-in(s): what was graded "
            "is in the gradebook; run the same command again to grade the rest")  # fmt: skip
    if feedback:
        result = nbgrader("export", f"--to={root / 'grades.csv'}", root=root)
        if result.returncode != 0:
            report.problems.append(Problem("grades.csv", "nbgrader export failed"))
    write_timings(root, report)
    report.scores, report.max_scores = read_scores(root, labs)
    report.wall_s = time.monotonic() - start
    return report


def write_timings(root: Path, report: Report) -> None:
    """timings.csv: the seconds of each phase of each hand-in graded in this run."""
    with open(root / TIMINGS, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["student", "lab", *PHASES, "total"])
        for (student, lab), timings in sorted(report.timings.items()):
            phases = [round(timings.get(p, 0.0), 3) for p in PHASES]
            out.writerow([student, lab, *phases, round(sum(phases) - phases[0], 3)])


def _merge_one(root: Path, hand_in: HandIn, result: dict, report: Report, key: str) -> None:
    """Merge one task's result; any failure costs this hand-in only (0, and a reason)."""
    item = (hand_in.student, hand_in.lab)
    report.timings[item] = result.get("timings", {})
    mark = time.monotonic()
    try:
        if result.get("ok"):
            merge.merge(root, hand_in.student, hand_in.lab, result)
            report.verdicts[item] = result.get("verdicts", {})
            limit = limit_hit(report.verdicts[item])
            if limit:
                report.problems.append(Problem(hand_in.where, limit))
            if result.get("feedback_problem"):
                report.problems.append(Problem(hand_in.where, result["feedback_problem"]))
        else:
            merge.record_failure(root, hand_in.student, hand_in.lab)
            reason = result.get("reason") or "grading failed"
            report.problems.append(Problem(hand_in.where, f"{reason}; recorded as 0"))
    except Exception as error:  # noqa: BLE001 - the class run goes on
        report.problems.append(Problem(hand_in.where, f"could not be merged: {error}"))
        try:
            merge.record_failure(root, hand_in.student, hand_in.lab)
        except Exception as again:  # noqa: BLE001
            report.problems.append(Problem(hand_in.where, f"could not be recorded: {again}"))
    report.timings[item]["merge"] = time.monotonic() - mark
    log_hand_in(root, hand_in, result, report, key)


def log_hand_in(root: Path, hand_in: HandIn, result: dict, report: Report, key: str | None) -> None:
    """Append what grading this hand-in recorded (the gradebook holds the scores): when, from
    what (key), how long each phase took, each test cell's verdict, and why it needs a
    human look."""
    item = (hand_in.student, hand_in.lab)
    entry = {
        "student": hand_in.student,
        "lab": hand_in.lab,
        "key": key,
        "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "ok": bool(result.get("ok")),
        "timings": {k: round(v, 3) for k, v in report.timings.get(item, {}).items()},
        "verdicts": report.verdicts.get(item, {}),
        "problems": [p.reason for p in report.problems if p.where == hand_in.where],
        "ignored": hand_in.ignored[:20],
    }
    with open(root / GRADING_LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def summary(report: Report) -> str:
    """How many were graded, and the time of each phase summed over them."""
    sums = {p: sum(t.get(p, 0.0) for t in report.timings.values()) for p in PHASES}
    phases = ", ".join(f"{p.replace('_', ' ')} {v:.0f}s" for p, v in sums.items())
    line = f"graded {report.graded} hand-in(s) in {report.wall_s:.0f}s"
    if report.skipped:
        line += f" ({report.skipped} already graded, kept)"
    return line + (f"; summed over hand-ins: {phases}" if report.timings else "")


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
    report = grade_class(
        args.root.resolve(),
        labs=labs,
        workers=args.workers,
        students=args.students,
        force=args.force,
        scheduler=args.scheduler,
    )
    print()
    print(table(report, labs))
    print()
    print(summary(report))
    print("grades:   grades.csv (nbgrader export)")
    print("feedback: feedback/<student>/<lab>/<lab>.html")
    print(f"timings:  {TIMINGS}")
    if report.problems:
        print(f"\nneeds a human look ({len(report.problems)}):")
        for p in report.problems:
            print(f"  {p.where}: {p.reason}")
    if report.notes:
        print(f"\nnotes ({len(report.notes)}):")
        for p in report.notes:
            print(f"  {p.where}: {p.reason}")
    return 130 if report.interrupted == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(main())
