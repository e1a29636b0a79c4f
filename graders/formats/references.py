"""Reference files: build/reference/<lab>.json, the records of a lab's solution notebook
(build/reference/<assignment>/<notebook>.json for every other notebook of an assignment).

`make build` makes them (graders.sandbox.build_reference runs the solution); the judge compares each
hand-in's records with them; the class run ships them to its tasks (graders.grade.task writes a
task's copy in its scratch course) and orders the hand-ins by `seconds`. A `ReferenceFile`:

* ``observations``: `graders.formats.records.Observations`, by test cell's grade_id;
* ``key``: what they were made from (solution, recorder, torch, threads), so a stale file is
  made again; absent in a task's copy;
* ``seconds``: how long the solution took to run, what a hand-in of this lab may cost;
* ``cells``: how long each of its code cells took (`graders.formats.budgets.CellTime`), from which
  every hand-in's per-cell and per-notebook time budgets follow (graders/formats/budgets.py);
* ``version``: the format, `VERSION`; a file without one is version 1 (no ``cells``): it is
  still read, and its lab is graded with the flat budgets until `make build` makes it again.

Its keys are spelt here only: each reader asks for what it needs (`observations`, `seconds`,
`timing`, `times`) and a task's copy is made by `task_copy`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TypedDict

from graders.formats.budgets import CellTime
from graders.formats.records import Observations

VERSION = 2  # 2: per-cell times (``cells``) for the time budgets


class ReferenceFile(TypedDict, total=False):
    version: int
    key: str
    observations: Observations
    seconds: float
    cells: list[CellTime]


def folder(root: Path) -> Path:
    """Where a course keeps its reference files."""
    return root / "build" / "reference"


def path(where: Path, lab: str, notebook: str | None = None) -> Path:
    """The reference file of `lab`'s notebook `notebook` in the folder `where`: <lab>.json for
    the notebook named after its assignment (every lab's), <lab>/<notebook>.json for the
    others of an assignment with several notebooks (an instructor's own)."""
    if notebook is None or notebook == lab:
        return where / f"{lab}.json"
    return where / lab / f"{notebook}.json"


def read(file: Path) -> ReferenceFile:
    """The file as written; raises OSError or ValueError when it is missing or damaged."""
    saved = json.loads(file.read_text())
    if not isinstance(saved, dict):
        raise ValueError(f"{file} is not a JSON object")
    return saved


def observations(file: Path) -> Observations:
    """The records in `file`; raises OSError, ValueError or KeyError."""
    return read(file)["observations"]


def seconds(file: Path) -> float:
    """How long the solution took (0 where the file is missing, damaged or untimed)."""
    try:
        return float(read(file).get("seconds", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0


def timing(file: Path) -> tuple[list[CellTime], float] | None:
    """The solution's time for each code cell and for its whole run, or None where the file
    is missing, damaged, of version 1 or untimed (its lab then gets the flat budgets)."""
    try:
        saved = read(file)
        cells, total = saved.get("cells"), float(saved.get("seconds", 0))
        if int(saved.get("version", 1)) < 2 or not isinstance(cells, list) or not cells:
            return None
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    try:
        checked = [
            CellTime(
                id=c.get("id") if isinstance(c.get("id"), str) else None,
                grade_id=c.get("grade_id") if isinstance(c.get("grade_id"), str) else None,
                source=str(c["source"]),
                seconds=max(0.0, float(c["seconds"])),
            )
            for c in cells
        ]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return checked, max(total, sum(c["seconds"] for c in checked))


def times(file: Path) -> ReferenceFile:
    """The solution's times in `file` (version, cells, seconds) as a task's copy keeps them, the
    per-notebook budgets' source; {} where it has none (its lab gets the flat limits)."""
    timed = timing(file)
    if timed is None:
        return {}
    return ReferenceFile(version=VERSION, cells=timed[0], seconds=timed[1])


def task_copy(observed: Observations, timed: ReferenceFile | None) -> ReferenceFile:
    """A task's copy of a reference file: the solution's records and, where the course has
    them, its times (`times`); no key (a task never makes one again)."""
    return ReferenceFile(observations=observed, **(timed or {}))


def write(file: Path, saved: ReferenceFile) -> None:
    """Write `saved` to `file` whole or not at all (a reader never sees half a file)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    partial = file.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(saved))
    partial.replace(file)
