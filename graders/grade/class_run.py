"""One class run's outcome (`ClassRun`, what graders.grade.grade.grade_class returns) and what is
told of it: the scores read back from the gradebook, timings.csv, the summary line and the
table printed at the end."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from graders.formats import gradebook
from graders.formats.timings import PHASES, TOTAL, Durations
from graders.formats.verdict import Verdicts, first_limit
from graders.grade.intake import Problem

TIMINGS = "timings.csv"


@dataclass
class ClassRun:
    """What one class run did: scores read back from the gradebook, what needs a human
    look, each hand-in's timings and verdicts, and how the run went."""

    scores: dict[tuple[str, str], float] = field(default_factory=dict)
    max_scores: dict[str, float] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    timings: dict[tuple[str, str], Durations] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], Verdicts] = field(default_factory=dict)
    graded: int = 0
    skipped: int = 0
    interrupted: str | None = None
    dashboard: str | None = None
    wall_s: float = 0.0
    started_at: float = 0.0  # when (epoch) the run began
    first_kernel_s: float | None = None  # seconds from then until the first kernel was up


def limit_hit(verdicts: Verdicts) -> str | None:
    """The first limit the graded notebook ran into, and where, or None."""
    if (first := first_limit(verdicts)) is None:
        return None
    grade_id, verdict = first
    sentence = verdict.sentence.removeprefix("Not graded to the end: ")
    return f"{sentence.rstrip('.')} (in {grade_id}); graded up to there, see its feedback"


def read_scores(root: Path, labs: list[str]) -> tuple[dict, dict]:
    scores, max_scores = {}, {}
    with gradebook.opened(gradebook.of(root)) as gb:
        for assignment in gb.assignments:
            if assignment.name not in labs:
                continue
            max_scores[assignment.name] = assignment.max_score
            for sub in assignment.submissions:
                scores[(sub.student.id, assignment.name)] = sub.score
    return scores, max_scores


def write_timings(root: Path, run: ClassRun) -> None:
    """timings.csv: the seconds of each phase of each hand-in graded in this run."""
    with open(root / TIMINGS, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["student", "lab", *PHASES, TOTAL])
        for (student, lab), timings in sorted(run.timings.items()):
            phases = [round(timings.get(p, 0.0), 3) for p in PHASES]
            out.writerow([student, lab, *phases, round(sum(phases) - phases[0], 3)])


def summary(run: ClassRun) -> str:
    """How many were graded, and the time of each phase summed over them."""
    sums = {p: sum(t.get(p, 0.0) for t in run.timings.values()) for p in PHASES}
    phases = ", ".join(f"{p.replace('_', ' ')} {v:.0f}s" for p, v in sums.items())
    line = f"graded {run.graded} hand-in(s) in {run.wall_s:.0f}s"
    if run.first_kernel_s is not None:
        line += f" (the first kernel up after {run.first_kernel_s:.1f}s)"
    if run.skipped:
        line += f" ({run.skipped} already graded, kept)"
    return line + (f"; summed over hand-ins: {phases}" if run.timings else "")


def table(run: ClassRun, labs: list[str]) -> str:
    students = sorted({s for s, _ in run.scores})
    labs = [lab for lab in labs if lab in run.max_scores]
    short = [lab.split("_")[0] for lab in labs]
    width = max([len(s) for s in students] + [7])
    lines = [f"{'student':<{width}}  " + "  ".join(f"{s:>7}" for s in short)]
    lines.append(f"{'(max)':<{width}}  " + "  ".join(f"{run.max_scores[lab]:>7g}" for lab in labs))
    for student in students:
        cells = []
        for lab in labs:
            score = run.scores.get((student, lab))
            cells.append(f"{'-' if score is None else format(score, 'g'):>7}")
        lines.append(f"{student:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)
