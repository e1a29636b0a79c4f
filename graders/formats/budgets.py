"""Per-lab time budgets: how long each cell of a hand-in, and the whole notebook, may run.

`make build` runs each lab's solution under grading conditions (graders/sandbox/build_reference.py,
``NBGRADER_EXECUTION`` set, the students' thread count) and keeps, with its records, how long
each code cell took (`cell_times`, in build/reference/<lab>.json). When a hand-in is graded,
`plan` gives each of its code cells a budget of ``multiple`` times the solution's own time
for that cell, never under ``floor_s`` (``first_floor_s`` for the first cell, which pays the
torch import), and the notebook a budget of ``multiple`` times the whole solution run, never
under ``notebook_floor_s`` nor under its largest cell budget. The multiple and floors are
settings of `graders.sandbox.sandbox.SandboxedExecute` in nbgrader_config.py.

A hand-in's cell is matched to the solution's by its nbgrader grade_id, else its cell id
(kept from the release), else its exact source; a cell the solution does not have (one the
student added or split off) gets the lab's largest budget, so no honest cell gets 0 s, and
adding cells never adds time: the notebook budget bounds them all.

`words` says, in terms a student can act on, which cell ran out of time and how long the
solution takes there (graders/sandbox/sandbox.py puts it in ``sandbox_limits``, which the judge
turns into the verdict of the test cells it stopped).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

FLAT_CELL_S = 120  # without a timed reference: nbgrader_config.py's c.Execute.timeout
FLAT_NOTEBOOK_S = 600  # without a timed reference: the whole notebook


class CellTime(TypedDict):
    """One code cell of the solution notebook, as the reference run timed it."""

    id: str | None  # the notebook's cell id (the release keeps it)
    grade_id: str | None  # nbgrader's, for graded and solution cells
    source: str  # a digest of its source
    seconds: float  # execute request to reply, under grading conditions


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _stamp(text) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def cell_times(nb) -> list[CellTime]:
    """The seconds each code cell of an executed notebook took, from the timing metadata
    nbclient records (busy to the execute reply); 0 where it recorded none."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        execution = cell.get("metadata", {}).get("execution", {})
        began = _stamp(execution.get("iopub.status.busy", ""))
        ended = _stamp(execution.get("shell.execute_reply", ""))
        seconds = (ended - began).total_seconds() if began and ended else 0.0
        meta = cell.get("metadata", {}).get("nbgrader", {})
        found.append(
            CellTime(
                id=cell.get("id"),
                grade_id=meta.get("grade_id") if isinstance(meta, dict) else None,
                source=digest(cell.source),
                seconds=round(max(0.0, seconds), 3),
            )
        )
    return found


@dataclass(frozen=True)
class Policy:
    """How budgets follow from the solution's times (see nbgrader_config.py)."""

    multiple: float = 10.0
    floor_s: float = 10.0
    first_floor_s: float = 30.0
    notebook_floor_s: float = 60.0

    def cell(self, seconds: float, first: bool = False) -> int:
        floor = self.first_floor_s if first else self.floor_s
        return math.ceil(max(floor, self.multiple * seconds))

    def notebook(self, seconds: float, largest_cell: int) -> int:
        return math.ceil(max(self.notebook_floor_s, self.multiple * seconds, largest_cell))


@dataclass(frozen=True)
class Budget:
    """One code cell's budget, and where and what it is in words."""

    seconds: int
    solution_s: float | None  # the solution's time for the same cell; None: no such cell
    where: str  # e.g. "the code cell after 'Exercise 3' (cell 14)"
    longest_s: float  # the solution's longest cell


def lab_budgets(cells: list[CellTime], total_s: float, policy: Policy) -> tuple[list[int], int]:
    """The budget of each of the solution's own code cells, and the notebook's."""
    budgets = [policy.cell(c["seconds"], first=i == 0) for i, c in enumerate(cells)]
    return budgets, policy.notebook(total_s, max(budgets, default=0))


HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
SAFE = re.compile(r"[^\w .,:;()/+\-]")


def _heading(source: str) -> str | None:
    for line in source.splitlines():
        match = HEADING.match(line)
        if match:
            text = SAFE.sub("", match.group(1).replace("`", "")).strip()
            return text[:60] or None
    return None


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def where_words(nb) -> dict[int, str]:
    """Words that find each code cell in the student's own notebook: the nearest heading above
    it, and its number counting every cell from 1 (as a student counts them)."""
    found, heading, after = {}, None, 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            title = _heading(cell.source)
            if title:
                heading, after = title, 0
        elif cell.cell_type == "code":
            after += 1
            number = f"cell {index + 1}"
            if heading is None:
                found[index] = f"the {_ordinal(after)} code cell of the notebook ({number})"
            elif after == 1:
                found[index] = f"the code cell after '{heading}' ({number})"
            else:
                found[index] = f"the {_ordinal(after)} code cell after '{heading}' ({number})"
    return found


def plan(
    nb, cells: list[CellTime], total_s: float, policy: Policy
) -> tuple[dict[int, Budget], int]:
    """The budget of each code cell of the hand-in `nb` (by index in nb.cells) and of the
    whole notebook, from the solution's `cells` and whole run `total_s`."""
    own, notebook = lab_budgets(cells, total_s, policy)
    longest = max((c["seconds"] for c in cells), default=0.0)
    largest = max(own[1:] or own or [policy.cell(0.0)])  # the first cell's floor aside
    by_grade, by_id, by_source = {}, {}, {}
    for i, c in enumerate(cells):
        for table, key in ((by_grade, c.get("grade_id")), (by_id, c.get("id"))):
            if key:
                table.setdefault(key, i)
        by_source.setdefault(c["source"], i)
    taken: set[int] = set()
    places = where_words(nb)
    budgets, first = {}, True
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        match = None
        for table, key in ((by_grade, grade_id), (by_id, cell.get("id")), (by_source, None)):
            key = digest(cell.source) if table is by_source else key
            candidate = table.get(key) if isinstance(key, str) else None
            if candidate is not None and candidate not in taken:
                match = candidate
                break
        if match is None:
            seconds, solution_s = largest, None
        else:
            taken.add(match)
            seconds, solution_s = own[match], cells[match]["seconds"]
        if first:  # whichever cell comes first pays the kernel's first imports
            seconds = max(seconds, policy.cell(0.0, first=True))
            first = False
        budgets[index] = Budget(seconds, solution_s, places[index], longest)
    return budgets, notebook


def words(budget: Budget, itself: bool = False) -> str:
    """Why a cell was stopped, for the student: which cell, its budget, the solution's time,
    and what to look for. `itself`: said in that cell; otherwise in a cell after it."""
    if budget.solution_s is None:
        solution = (
            f"a cell the solution does not have, given the time of the lab's longest "
            f"cell; the solution's longest cell runs in {budget.longest_s:.1f} s"
        )
    else:
        solution = f"the solution runs it in {budget.solution_s:.1f} s"
    what = "this cell" if itself else budget.where
    said = (
        f"{what} ran out of its time budget of {budget.seconds} s ({solution}): look for a "
        f"loop that never ends, or work that grows with each pass"
    )
    return said if itself else f"not run, because {said}"
