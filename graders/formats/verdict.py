"""The verdict of one test cell: the judge's own sentence, in place of everything the kernel
printed there, and its kind.

A `Verdict` is a typed record: its `Kind`, its sentence and the index of its cell in the
graded notebook. The judge (graders/judge/judge.py) words it and puts it in the graded
notebook's cell metadata under `VERDICT` (`Verdict.metadata`: {kind, sentence}); the task reads
it back from there (`Verdict.from_metadata`, adding the cell's index; graders.grade.task
.verdicts), the grading log keeps it (graders/formats/gradelog.py: `Verdict.as_json`, read back
by `Verdict.from_json`), feedback shows its sentence (graders/judge/feedback.py) and the class
report counts its sentences (graders/report/report_numbers.py). Every reader gets a `Verdict`
or None (a value that is not one, in a notebook or a log line someone edited), never a dict
to pick apart. This module imports nothing, so that each of them can read the format without
the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

VERDICT = "verdict"  # cell metadata key of the judge's verdict in the graded notebook


class Kind(StrEnum):
    """What a test cell's verdict says (its value is the text kept in the files)."""

    PASSED = "passed"
    NOT_ANSWERED = "not_answered"  # an exercise it uses still raises NotImplementedError
    VISIBLE = "visible"  # a visible check failed
    HIDDEN = "hidden"  # a hidden check failed
    RECORDS = "records"  # the hidden test's records differ from the solution's, or are unreadable
    LIMIT = "limit"  # the kernel hit a limit before the cell ended


KINDS: tuple[Kind, ...] = tuple(Kind)
PASSED = Kind.PASSED


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    sentence: str
    cell: int = 0  # the cell's index in the graded notebook (0 where it is not known)

    @property
    def passed(self) -> bool:
        return self.kind is Kind.PASSED

    def metadata(self) -> dict:
        """The verdict as the graded notebook's cell metadata keeps it (no index)."""
        return {"kind": self.kind.value, "sentence": self.sentence}

    def as_json(self) -> dict:
        """The verdict as the grading log keeps it."""
        return {"kind": self.kind.value, "sentence": self.sentence, "cell": self.cell}

    @classmethod
    def from_json(cls, raw: object, cell: int | None = None) -> Verdict | None:
        """The verdict in `raw` (metadata or a log's), with `cell` as its index when given;
        None where `raw` is not a verdict (not an object, an unknown kind, no sentence)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("sentence"), str):
            return None
        try:
            kind = Kind(raw.get("kind"))
        except ValueError:
            return None
        if cell is None:
            cell = raw.get("cell", 0)
            cell = cell if isinstance(cell, int) and not isinstance(cell, bool) else 0
        return cls(kind=kind, sentence=raw["sentence"], cell=cell)

    from_metadata = from_json


Verdicts = dict[str, "Verdict"]  # a hand-in's verdicts, by test cell's grade_id


def failures(verdicts: Verdicts) -> list[str]:
    """`grade_id: sentence` of each check that did not pass, in the notebook's order."""
    ordered = sorted(verdicts.items(), key=lambda kv: (kv[1].cell, kv[0]))
    return [f"{gid}: {v.sentence}" for gid, v in ordered if not v.passed]


def first_limit(verdicts: Verdicts) -> tuple[str, Verdict] | None:
    """(grade_id, verdict) of the first test cell, in the notebook's order, that a limit
    stopped; None where none did."""
    ordered = sorted(verdicts.items(), key=lambda kv: kv[1].cell)
    return next(((gid, v) for gid, v in ordered if v.kind is Kind.LIMIT), None)
