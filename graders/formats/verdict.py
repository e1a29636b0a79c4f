"""The verdict of one test cell: the judge's own sentence, in place of everything the kernel
printed there, and its kind.

A `Verdict` is {kind, sentence}; kind is one of `KINDS`. The judge (graders/judge.py) words it
and puts it in the graded notebook's cell metadata under `VERDICT`; the task reads it back
from there (graders.task.verdicts, adding the cell's index as ``cell``), the grading log keeps
it (graders/gradelog.py), feedback shows its sentence (graders/feedback.py) and the class
report counts its sentences (graders/report_numbers.py). This module imports nothing, so
that each of them can read the format without the others.
"""

from __future__ import annotations

from typing import Literal, TypedDict

VERDICT = "verdict"  # cell metadata key of the judge's verdict in the graded notebook
Kind = Literal["passed", "not_answered", "visible", "hidden", "records", "limit"]
KINDS: tuple[Kind, ...] = ("passed", "not_answered", "visible", "hidden", "records", "limit")
PASSED: Kind = "passed"


class Verdict(TypedDict):
    kind: Kind
    sentence: str


def failures(verdicts: dict[str, dict]) -> list[str]:
    """`grade_id: sentence` of each check that did not pass, in the notebook's order (a
    hand-in's verdicts as the task reads them back: grade_id -> Verdict plus ``cell``)."""
    ordered = sorted(verdicts.items(), key=lambda kv: (kv[1].get("cell", 0), kv[0]))
    return [f"{gid}: {v.get('sentence', '')}" for gid, v in ordered if v.get("kind") != PASSED]
