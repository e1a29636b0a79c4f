"""Grade a class: submitted/<student>/<lab>/<lab>.ipynb -> gradebook, feedback/, grades.csv.

nbgrader does the grading; this module is the path a hand-in takes around it:

1. **intake** (graders/intake.py): every folder under submitted/ is looked at, and from each
   hand-in only the notebook's bytes (a regular file, never a link) and nbgrader's
   timestamp.txt are taken; what cannot be graded is reported by path, and the rest of the
   class is graded;
2. **task** (graders/task.py): each hand-in is graded by nbgrader's own autograde and
   generate_feedback in a scratch course of its own, under a neutral student id, its kernel
   in the sandbox (graders/sandbox.py) and its test cells judged outside the kernel
   (graders/judge.py); tasks run on N workers, each a long-lived nbgrader process
   (graders/worker.py);
3. **merge** (graders/merge.py): each result goes into the one gradebook, under the real
   name, one at a time; the graded notebook and feedback page are written from its bytes;
4. **summary**: nbgrader exports grades.csv; the table and what needs a human look.

Whatever one hand-in does, it costs at most its own grade and its own budget: every step of
it catches its own failure, records the hand-in as 0 with the reason, and the class run
goes on and exits 0.

    python -m graders.grade [--workers N] [--lab LAB ...]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from graders import intake, judge, merge, sandbox
from graders.course import LABS, REPO, prepare_data, unknown_labs
from graders.intake import HandIn, Problem
from graders.nbgrader_cli import nbgrader
from graders.task import NOTEBOOK_BUDGET_S, assignments_only
from graders.worker import Worker


@dataclass
class Report:
    scores: dict[tuple[str, str], float] = field(default_factory=dict)
    max_scores: dict[str, float] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    timings: dict[tuple[str, str], dict] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], dict] = field(default_factory=dict)


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


def _job(hand_in: HandIn, common: dict, releases: dict[str, str]) -> dict:
    folder = Path(common["course"]) / "labs" / hand_in.lab
    return dict(
        common,
        files=sorted(str(p) for p in folder.iterdir() if p.is_file() and p.suffix != ".ipynb"),
        lab=hand_in.lab,
        notebook=hand_in.notebook.decode("utf-8"),
        timestamp=hand_in.timestamp,
        release=releases[hand_in.lab],
    )


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
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    if not (root / "gradebook.db").is_file():
        raise SystemExit(f"{root / 'gradebook.db'} is missing: run `make build` first.")
    why_not = sandbox.available()
    if why_not:
        raise SystemExit(f"cannot grade safely: {why_not}")
    for missing in sandbox.protections_missing():
        say(f"note: {missing}")
    data = prepare_data(labs)
    os.environ.update(data)
    hand_ins, report.problems = intake.discover(root, labs)
    for problem in report.problems:  # a known student's lab that cannot be read: 0, flagged
        if problem.student is not None:
            merge.record_failure(root, problem.student, problem.lab)
            problem.reason += "; recorded as 0"
            failed = HandIn(problem.student, problem.lab, b"", where=problem.where)
            log_hand_in(root, failed, {"ok": False}, report)
    for hand_in in hand_ins:
        if hand_in.ignored:
            shown = ", ".join(hand_in.ignored[:5]) + (" ..." if len(hand_in.ignored) > 5 else "")
            report.notes.append(
                Problem(hand_in.where, f"{len(hand_in.ignored)} other file(s) ignored: {shown}")
            )
    labs_graded = sorted({h.lab for h in hand_ins})
    judge.prepare_references(root, labs_graded, workers)
    releases = {
        lab: (root / "labs" / lab / f"{lab}.ipynb").read_text(encoding="utf-8")
        for lab in labs_graded
    }
    say(f"grading {len(hand_ins)} hand-in(s) on {workers} worker(s)")
    start = time.monotonic()
    todo: queue.Queue = queue.Queue()
    for index, hand_in in enumerate(hand_ins):
        todo.put((index, hand_in))
    results: queue.Queue = queue.Queue()

    with tempfile.TemporaryDirectory(prefix="grading-") as tmp:
        tmp_path = Path(tmp)
        common = {
            "gradebook": str(assignments_only(root / "gradebook.db", tmp_path / "labs.db")),
            "reference_dir": str(root / "build" / "reference"),
            "data_root": data.get("COURSE_DATA_ROOT"),
            "cell_timeout": cell_timeout,
            "budget_s": budget_s,
            "feedback": feedback,
            "scratch_root": tmp,
            "course": str(root),
        }

        def work(number: int) -> None:
            """A worker thread and its grading process: one task after another."""
            worker = Worker(tmp_path / f"worker-{number}.log")
            try:
                while True:
                    try:
                        index, hand_in = todo.get_nowait()
                    except queue.Empty:
                        return
                    queued = time.monotonic() - start
                    try:
                        result = worker.run(
                            _job(hand_in, common, releases),
                            timeout=budget_s + sandbox.KILL_GRACE_S + 120,
                        )
                    except subprocess.TimeoutExpired:
                        result = {"ok": False, "reason": f"over the budget of {budget_s:g} s"}
                    except Exception as error:  # the worker's pipe broke: this hand-in only
                        result = {"ok": False, "reason": f"grading failed: {error}"}
                    result.setdefault("timings", {})["queue"] = queued
                    results.put((hand_in, result))
            finally:
                worker.close()

        threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(workers)]
        for thread in threads:
            thread.start()
        for done in range(1, len(hand_ins) + 1):
            hand_in, result = results.get()
            _merge_one(root, hand_in, result, report)
            elapsed = time.monotonic() - start
            eta = elapsed / done * (len(hand_ins) - done)
            say(f"  [{done}/{len(hand_ins)}] {hand_in.student}/{hand_in.lab}  "
                f"{elapsed:.0f}s, ETA {eta:.0f}s")  # fmt: skip
        for thread in threads:
            thread.join()
    if feedback:
        result = nbgrader("export", f"--to={root / 'grades.csv'}", root=root)
        if result.returncode != 0:
            report.problems.append(Problem("grades.csv", "nbgrader export failed"))
    report.scores, report.max_scores = read_scores(root, labs)
    return report


def _merge_one(root: Path, hand_in: HandIn, result: dict, report: Report) -> None:
    """Merge one task's result; any failure costs this hand-in only (0, and a reason)."""
    key = (hand_in.student, hand_in.lab)
    report.timings[key] = result.get("timings", {})
    mark = time.monotonic()
    try:
        if result.get("ok"):
            merge.merge(root, hand_in.student, hand_in.lab, result)
            report.verdicts[key] = result.get("verdicts", {})
            limit = limit_hit(report.verdicts[key])
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
    report.timings[key]["merge"] = time.monotonic() - mark
    log_hand_in(root, hand_in, result, report)


GRADING_LOG = "grading-log.jsonl"  # what grading recorded, one line per hand-in graded


def log_hand_in(root: Path, hand_in: HandIn, result: dict, report: Report) -> None:
    """Append what grading this hand-in recorded (the gradebook holds the scores): when, how
    long each phase took, each test cell's verdict, and why it needs a human look."""
    key = (hand_in.student, hand_in.lab)
    entry = {
        "student": hand_in.student,
        "lab": hand_in.lab,
        "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "ok": bool(result.get("ok")),
        "timings": {k: round(v, 3) for k, v in report.timings.get(key, {}).items()},
        "verdicts": report.verdicts.get(key, {}),
        "problems": [p.reason for p in report.problems if p.where == hand_in.where],
        "ignored": hand_in.ignored[:20],
    }
    with open(root / GRADING_LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


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
    if report.notes:
        print(f"\nnotes ({len(report.notes)}):")
        for p in report.notes:
            print(f"  {p.where}: {p.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
