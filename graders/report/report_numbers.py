"""The class report's numbers, computed from a `ClassData` (graders/report/report_data.py): pass
rates, score histograms, failure sentences, runs and grading times, who needs a human look,
and the LMS's wide table. Typed rows of data (`PassRate`, `ScoreBin`, `FailureGroup`,
`GradingRun`, `HumanLook`): graders/report/report_page.py and report_labs.py show them."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from graders.formats.timings import TOTAL, Phase
from graders.formats.verdict import Kind
from graders.report.report_data import ClassData, Lab

EXAMPLES = 2  # example students shown for each failure sentence
RUN_GAP_S = 1.0  # a hand-in that started after the previous line was written: a new run


@dataclass(frozen=True)
class PassRate:
    """One grade cell of a lab: how many hand-ins got its full points."""

    grade_id: str
    points: float
    passed: int
    hand_ins: int
    pass_rate: float | None  # None: no hand-in


@dataclass(frozen=True)
class ScoreBin:
    """Hand-ins whose score is from `score_from` to `score_to` (equal: one whole score)."""

    score_from: float
    score_to: float
    hand_ins: int


@dataclass(frozen=True)
class FailureGroup:
    """One failure sentence of a grade cell, with how many hand-ins got it and examples."""

    kind: str  # graders.formats.verdict.Kind's value
    sentence: str
    count: int
    examples: list[str]


@dataclass
class GradingRun:
    """A grading run told apart in the log: when it began and ended, its hand-ins, the wall
    time and the sum of their grading times."""

    began: datetime
    ended: datetime
    hand_ins: int = 0
    sum_s: float = 0.0
    wall_s: float = 0.0


@dataclass(frozen=True)
class HumanLook:
    """A hand-in that needs a human look, and why (one word) and in detail."""

    student: str
    lab: str
    why: str
    details: str


def number(value: float | None) -> str:
    """A number for people and for LMS imports: a dot decimal, no exponent, no trailing 0."""
    if value is None:
        return ""
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def passed(score: float, points: float) -> bool:
    return score >= points - 1e-9


def pass_rates(lab: Lab) -> list[PassRate]:
    """For each grade cell, in notebook order: how many hand-ins got its full points."""
    subs = list(lab.submissions.values())
    rows = []
    for key, points in lab.cells:
        ok = sum(passed(s.grades.get(key, 0.0), points) for s in subs)
        rows.append(PassRate(key, points, ok, len(subs), ok / len(subs) if subs else None))
    return rows


def histogram(lab: Lab) -> list[ScoreBin]:
    """Hand-ins by score: one bin a point when points are whole (up to 50), else ten bins."""
    scores = [s.score for s in lab.submissions.values()]
    top = lab.max_score
    whole = all(float(p).is_integer() for _, p in lab.cells) and 0 < top <= 50
    if whole:
        counts = Counter(round(s) for s in scores)
        return [ScoreBin(k, k, counts.get(k, 0)) for k in range(int(top) + 1)]
    width = (top or 1) / 10
    rows = []
    for i in range(10):
        low, high = i * width, (i + 1) * width
        last = i == 9
        count = sum(low <= s < high or (last and s >= high) for s in scores)
        rows.append(ScoreBin(low, high, count))
    return rows


def failures(course: ClassData, lab: Lab) -> dict[str, list[FailureGroup]]:
    """For each grade cell: its failure sentences (from the log), counted, with examples."""
    found: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for student in sorted(lab.submissions):
        entry = course.log.get((student, lab.name))
        if not entry:
            continue
        for grade_id, verdict in (entry.get("verdicts") or {}).items():
            if verdict.passed:
                continue
            sentence = verdict.sentence.strip() or "(no sentence)"
            found[grade_id][(verdict.kind.value, sentence)].append(student)
    result = {}
    for key, _ in lab.cells:
        groups = found.get(key, {})
        result[key] = sorted(
            (
                FailureGroup(kind, sentence, len(who), who[:EXAMPLES])
                for (kind, sentence), who in groups.items()
            ),
            key=lambda g: (-g.count, g.sentence),
        )
    return result


def grading_time(entry: dict) -> float | None:
    """Seconds one hand-in took: its task (intake, autograde, feedback) and its merge."""
    timings = entry.get("timings") or {}
    if not isinstance(timings.get(TOTAL), int | float):
        return None
    return float(timings[TOTAL]) + float(timings.get(Phase.MERGE) or 0.0)


AUTOGRADE = "autograde"  # a column of the timing table that no phase of the log fills


def _graded_at(entry: dict) -> datetime | None:
    try:
        return datetime.strptime(str(entry.get("graded_at")), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def runs(lines: list[dict]) -> list[GradingRun]:
    """Grading runs told apart in the log. A run began when its first hand-in started: that
    hand-in's graded_at less its queue wait and grading time (all of a run's hand-ins give
    about the same); a hand-in whose run began after the line before it was written starts
    a new run. Lines of hand-ins intake refused (no timings) are written at a run's start;
    a task that failed without its timings joins the run it is in. Wall time: from the
    beginning to the last graded_at."""
    found: list[GradingRun] = []
    timed: list[bool] = []  # whether each run has a timed hand-in yet
    tasks: list[int] = []  # how many of its hand-ins reached a task
    previous: datetime | None = None
    for entry in lines:
        at = _graded_at(entry)
        if at is None:
            continue
        timings = entry.get("timings") or {}
        took = grading_time(entry)
        queue = timings.get(Phase.QUEUE)
        if not isinstance(queue, int | float):
            kind, began = "intake", at
        elif took is None:
            kind, began = "partial", None
        else:
            kind, began = "timed", at - timedelta(seconds=queue + took)
        current = found[-1] if found else None
        if current is None:
            fresh = True
        elif kind == "intake":
            fresh = tasks[-1] > 0 or (at - current.began).total_seconds() > 3600
        elif kind == "partial":
            fresh = False
        elif timed[-1]:
            fresh = began > previous + timedelta(seconds=RUN_GAP_S)
        else:  # after intake's lines, or a failed task's, of the same run
            fresh = (began - current.began).total_seconds() > 3600
        if fresh:
            current = GradingRun(began=began or at, ended=at)
            found.append(current)
            timed.append(False)
            tasks.append(0)
        if began is not None:
            current.began = min(current.began, began)
        current.ended = max(current.ended, at)
        current.hand_ins += 1
        current.sum_s += took or 0.0
        timed[-1] |= kind == "timed"
        tasks[-1] += kind != "intake"
        previous = at
    for run in found:
        run.wall_s = (run.ended - run.began).total_seconds()
    return found


def human_look(course: ClassData) -> list[HumanLook]:
    """Hand-ins that need a human look: problems in their latest log line, or a notebook
    flagged in the gradebook. `why` is one word of: killed, budget, limit, malformed hand-in,
    grading failed, feedback, flagged."""
    rows = []
    for lab in course.labs.values():
        for student in sorted(lab.submissions):
            sub = lab.submissions[student]
            entry = course.log.get((student, lab.name)) or {}
            reasons = [str(r) for r in entry.get("problems") or []]
            if not reasons and not sub.flagged:
                continue
            why = _why(reasons, entry, sub.flagged)
            details = "; ".join(reasons) or "flagged in the gradebook"
            rows.append(HumanLook(student, lab.name, why, details))
    return rows


def _why(reasons: list[str], entry: dict, flagged: bool) -> str:
    text = " ".join(reasons).lower()
    timings = entry.get("timings") or {}
    if not reasons:
        return "flagged" if flagged else ""
    if "died" in text or "killed" in text:
        return "killed"
    if entry and not entry.get("ok") and Phase.QUEUE not in timings:
        return "malformed hand-in"  # intake refused it: it never reached a kernel
    if "budget" in text:
        return "budget"
    kinds = [v.kind for v in (entry.get("verdicts") or {}).values()]
    if "graded up to there" in text or Kind.LIMIT in kinds:
        return "limit"
    if "feedback" in text and entry.get("ok"):
        return "feedback"
    return "grading failed"


def wide_rows(course: ClassData) -> tuple[list[str], list[list[str]]]:
    """grades-wide.csv: one row a student, one column a lab (its max in the header, as
    `lab01_graph (max 8)`), then the total; empty where a lab was not handed in."""
    labs = list(course.labs.values())
    header = ["student_id"] + [f"{lab.name} (max {number(lab.max_score)})" for lab in labs]
    header.append(f"total (max {number(sum(lab.max_score for lab in labs))})")
    rows = []
    for student in course.students:
        subs = [lab.submissions.get(student) for lab in labs]
        cells = [number(s.score) if s else "" for s in subs]
        handed_in = [s.score for s in subs if s]
        rows.append([student, *cells, number(sum(handed_in)) if handed_in else ""])
    return header, rows


def lab_times(course: ClassData) -> tuple[dict[str, list[float]], list[list]]:
    """Seconds each logged hand-in took, by lab, and a grading-times.csv row for each."""
    times: dict[str, list[float]] = {}
    time_rows: list[list] = []
    for lab in course.labs.values():
        for student in sorted(lab.submissions):
            entry = course.log.get((student, lab.name))
            took = grading_time(entry) if entry else None
            if took is None:
                continue
            times.setdefault(lab.name, []).append(took)
            t = entry.get("timings") or {}
            time_rows.append(
                [student, lab.name, entry.get("graded_at", "")]
                + [
                    number(t.get(k))
                    # "autograde" is no phase the log keeps (its column stays empty)
                    for k in (
                        Phase.QUEUE,
                        Phase.INTAKE,
                        "autograde",
                        Phase.FEEDBACK,
                        TOTAL,
                        Phase.MERGE,
                    )
                ]
                + [number(took)]
            )
    return times, time_rows
