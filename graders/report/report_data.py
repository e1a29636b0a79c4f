"""The class report's reading: nbgrader's gradebook (labs, cells, submissions, grades, late
and flagged) and the grading log (graders/formats/gradelog.py), matched into one `ClassData`.
Nothing here computes or draws; graders/report/report_numbers.py computes from it."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from graders.formats import gradebook, gradelog
from graders.formats.gradelog import GRADING_LOG, LogEntry


@dataclass
class Submission:
    student: str
    lab: str
    raw: float = 0.0  # the sum of its grades (nbgrader's SubmittedAssignment.score)
    penalty: float = 0.0  # late penalty (nbgrader's late_submission_penalty)
    seconds_late: float = 0.0  # nbgrader's total_seconds_late
    flagged: bool = False  # a notebook of it is flagged (a failure, or by a human)
    grades: dict[str, float] = field(default_factory=dict)  # by cell key

    @property
    def score(self) -> float:
        """The score nbgrader exports (grades.csv): raw score less the penalty, at least 0."""
        return max(0.0, self.raw - self.penalty)


@dataclass
class Lab:
    name: str
    max_score: float = 0.0
    cells: list[tuple[str, float]] = field(default_factory=list)  # (key, points), in order
    order_from: str = "the release notebook"
    submissions: dict[str, Submission] = field(default_factory=dict)  # by student


@dataclass
class ClassData:
    root: Path
    labs: dict[str, Lab]
    students: list[str]
    log: dict[tuple[str, str], LogEntry]  # the latest line of each (student, lab)
    log_lines: list[LogEntry]  # every line, in the order written
    log_problems: list[str]  # lines of the log that could not be read


def _release_order(root: Path, lab: str, notebook: str) -> list[str] | None:
    """grade_ids of the release notebook labs/<lab>/<notebook>.ipynb, in order, or None."""
    path = root / "labs" / lab / f"{notebook}.ipynb"
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        return [
            c["metadata"]["nbgrader"]["grade_id"]
            for c in nb["cells"]
            if isinstance(c.get("metadata", {}).get("nbgrader"), dict)
            and c["metadata"]["nbgrader"].get("grade_id")
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_gradebook(root: Path) -> tuple[dict[str, Lab], list[str]]:
    """Labs (with their grade cells in notebook order and every submission) and students."""
    path = gradebook.of(root)
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `make build` first.")
    with gradebook.opened(path) as gb:
        students = sorted(s.id for s in gb.students)
        labs, notebooks_of = _read_labs(root, gb)
        _read_submissions(gb.db, labs, notebooks_of)
    return labs, students


def _read_labs(root: Path, gb) -> tuple[dict[str, Lab], dict[str, list[str]]]:
    """Each lab with its grade cells in the release notebook's order; its notebooks' names."""
    from nbgrader.api import GradeCell, TaskCell

    labs: dict[str, Lab] = {}
    notebooks_of: dict[str, list] = defaultdict(list)
    for assignment in sorted(gb.assignments, key=lambda a: a.name):
        lab = labs[assignment.name] = Lab(assignment.name)
        for nb in sorted(assignment.notebooks, key=lambda n: n.name):
            notebooks_of[assignment.name].append(nb.name)
            graded = [c for c in nb._base_cells if isinstance(c, GradeCell | TaskCell)]
            order = _release_order(root, assignment.name, nb.name)
            if order is None:
                lab.order_from = "the gradebook (no release notebook found)"
                order = []
            place = {name: i for i, name in enumerate(order)}
            graded.sort(key=lambda c: place.get(c.name, len(place)))
            for cell in graded:
                lab.cells.append(((nb.name, cell.name), cell.max_score))
                lab.max_score += cell.max_score
    for lab in labs.values():  # one notebook a lab (this course): the grade_id alone
        single = len(notebooks_of[lab.name]) == 1
        lab.cells = [(_key(k, single), points) for k, points in lab.cells]
    return labs, notebooks_of


def _read_submissions(db, labs: dict[str, Lab], notebooks_of: dict[str, list]) -> None:
    """Every submission into its lab: how late, flagged, its penalty and its grades."""
    from nbgrader.api import (
        Assignment,
        BaseCell,
        Grade,
        Notebook,
        SubmittedAssignment,
        SubmittedNotebook,
    )

    by_id: dict[str, Submission] = {}
    rows = (
        db.query(
            SubmittedAssignment.id,
            Assignment.name,
            SubmittedAssignment.student_id,
            SubmittedAssignment.timestamp,
            SubmittedAssignment.extension,
            Assignment.duedate,
        )
        .select_from(SubmittedAssignment)
        .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
        .all()
    )
    for sub_id, lab_name, student, stamp, extension, duedate in rows:
        sub = Submission(student, lab_name)
        if stamp is not None and duedate is not None:
            due = duedate + (extension or timedelta(0))
            sub.seconds_late = max(0.0, (stamp - due).total_seconds())
        by_id[sub_id] = labs[lab_name].submissions[student] = sub
    for sub_id, flagged, penalty in db.query(
        SubmittedNotebook.assignment_id,
        SubmittedNotebook.flagged,
        SubmittedNotebook.late_submission_penalty,
    ):
        if sub_id in by_id:
            by_id[sub_id].flagged |= bool(flagged)
            by_id[sub_id].penalty += penalty or 0.0
    grades = (
        db.query(SubmittedNotebook.assignment_id, Notebook.name, BaseCell.name, Grade.score)
        .select_from(Grade)
        .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
        .join(BaseCell, Grade.cell_id == BaseCell.id)
        .join(Notebook, BaseCell.notebook_id == Notebook.id)
        .all()
    )
    for sub_id, nb_name, cell_name, score in grades:
        sub = by_id.get(sub_id)
        if sub is None:
            continue
        single = len(notebooks_of[sub.lab]) == 1
        sub.grades[_key((nb_name, cell_name), single)] = score or 0.0
        sub.raw += score or 0.0


def _key(key: tuple[str, str], single: bool) -> str:
    return key[1] if single else f"{key[0]}/{key[1]}"


def read_course(root: Path) -> ClassData:
    """The gradebook and the grading log of the course at `root`, matched up."""
    labs, students = read_gradebook(root)
    lines, problems = gradelog.read(root)
    latest = gradelog.latest(lines)
    stray = [k for k in latest if k[1] not in labs or k[0] not in labs[k[1]].submissions]
    if stray:
        problems.append(
            f"{len(stray)} hand-in(s) in {GRADING_LOG} are not in the gradebook: left out"
        )
    for key in stray:
        del latest[key]
    return ClassData(root, labs, students, latest, lines, problems)
