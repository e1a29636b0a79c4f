"""How long a hand-in took, phase by phase: the one list of phases, the task's timings file,
and the two clock times a task reports apart from its durations.

* `Phase`: every phase a hand-in goes through, in the order of timings.csv's columns
  (graders.grade.class_run): waiting for a worker (``queue``), reading the hand-in in and
  laying out its scratch course (``intake``), starting kernels (``kernel_start``), running
  the notebook (``execution``), judging its test cells (``checks``), the feedback page
  (``feedback``) and merging the result into the gradebook (``merge``). `Durations` are
  seconds by phase, plus the task's own ``TOTAL`` (intake to feedback, as the task measured
  it).
* The task's timings file (``timings.jsonl`` in its scratch folder): the seconds the sandbox
  (``kernel_start``) and the judge (``checks``) measured inside nbgrader, appended by them
  (`add`) with when (epoch) each ended, and read back by the task (`read`, `first_end`), the
  file named in the settings nbgrader passes them.
* `Clock`: when (epoch) the task began and its first kernel was up, which the class run turns
  into the ``queue`` phase and the run's first-kernel time (graders.grade.dispatch). Clock
  times never enter `Durations`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class Phase(StrEnum):
    QUEUE = "queue"
    INTAKE = "intake"
    KERNEL_START = "kernel_start"
    EXECUTION = "execution"
    CHECKS = "checks"
    FEEDBACK = "feedback"
    MERGE = "merge"


PHASES: tuple[Phase, ...] = tuple(Phase)
TOTAL = "total"  # a task's own measure of its whole run, beside the phases
Durations = dict[str, float]  # seconds, by `Phase` (its value) and `TOTAL`


@dataclass
class Clock:
    """When (epoch) a grading task began, and when its first kernel was up (None: never)."""

    started_at: float | None = None
    kernel_up_at: float | None = None


def add(file: Path, phase: Phase, seconds: float) -> None:
    """Append `seconds` spent in `phase` to a task's timings file, with when (epoch) it was
    written: the end of that phase."""
    row = {"phase": phase.value, "seconds": seconds, "at": time.time()}
    with open(file, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def _rows(file: Path):
    """The rows of a task's timings file that parse (none where it is missing)."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            yield row


def read(file: Path) -> Durations:
    """The seconds of each phase in a task's timings file, summed (none where it is missing;
    a row naming no phase is skipped)."""
    sums: Durations = {}
    for row in _rows(file):
        try:
            phase = Phase(row["phase"])
            sums[phase] = sums.get(phase, 0.0) + float(row["seconds"])
        except (ValueError, KeyError, TypeError):
            continue
    return sums


def first_end(file: Path, phase: Phase) -> float | None:
    """When (epoch) `phase` first ended in a task's timings file (the first kernel up, for
    ``kernel_start``), or None where it never did."""
    ends = []
    for row in _rows(file):
        try:
            if row["phase"] == phase.value:
                ends.append(float(row["at"]))
        except (ValueError, KeyError, TypeError):
            continue
    return min(ends) if ends else None
