"""nbgrader's OverwriteCells (a step of autograde's sanitizing), for notebooks it stumbles on.

The course restores a test cell a hand-in deleted (``add_missing_cells``, nbgrader_config.py).
nbgrader puts such a cell after the cell that precedes it in the source, and assumes that cell
is in the hand-in: where it is not (a notebook whose cells lost their nbgrader metadata, as
nbgrader's own test notebook ``test-no-metadata``), it raises KeyError, and nbgrader then drops
the student's whole assignment, their other notebooks included. Here:

* a hand-in notebook in which no cell carries nbgrader's metadata is not the released
  notebook any more: no cell is restored into it (as plain nbgrader grades it: 0), and a
  sentence at its top says why, which its feedback page shows; the student's other notebooks
  are graded as usual;
* otherwise a missing test cell goes after the nearest cell before it in the source that the
  hand-in still has (the top of the notebook where there is none), never a KeyError.

Before them, `RestoreMetadata` (the first step after ClearOutput) gives every cell of the
hand-in that names a released cell the metadata the gradebook has for it, in nbgrader's
current format, and takes it from every other cell (a forged, duplicated or unknown one), as
a class run does from the release (graders/grade/task.py). nbgrader's own steps otherwise stop
at a hand-in's metadata: a notebook of an older format (nbgrader's ``test-v0``, ``test-v1``,
``test-v2``) raises SchemaTooOldError, which stops `nbgrader autograde` for the whole class
until someone runs ``nbgrader update`` on the hand-ins; one of a newer format (``too-new``)
SchemaTooNewError, likewise; a cell without a grade_id (``test-v0-invalid``) a KeyError in
DeduplicateIds, which drops the student's whole assignment. Here each is graded as
``nbgrader update`` would have it graded, and a notebook with no cell left is malformed.
"""

from __future__ import annotations

import copy

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.preprocessors import OverwriteCells as NbgraderOverwriteCells

MALFORMED = (
    "**This notebook could not be graded.** None of its cells carries the grading information "
    "the released notebook has (nbgrader's cell metadata: the notebook was probably made anew, "
    "or its cells were copied into another notebook), so none of its checks could be found, "
    "and it is graded 0. Your other notebooks of this assignment are graded as usual. Hand in "
    "the notebook you were given, with your answers in its own cells, or ask your instructor "
    "to grade this one by hand."
)
MALFORMED_ID = "course-grader-malformed-notebook"


def _graded_ids(nb) -> dict[str, int]:
    return {
        cell.metadata.nbgrader["grade_id"]: index
        for index, cell in enumerate(nb.cells)
        if utils.is_grade(cell) or utils.is_solution(cell)
    }


class OverwriteCells(NbgraderOverwriteCells):
    def preprocess(self, nb, resources):
        if not any("nbgrader" in cell.get("metadata", {}) for cell in nb.cells):
            note = nbformat.v4.new_markdown_cell(MALFORMED)
            note["id"] = MALFORMED_ID
            nb.cells.insert(0, note)
            self.log.warning(
                "%s: no cell has nbgrader metadata; graded 0, its feedback says why",
                resources.get("nbgrader", {}).get("notebook"),
            )
            return nb, resources
        return super().preprocess(nb, resources)

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]
        solutions = {cell.name for cell in source_nb.solution_cells}
        for grade_cell in source_nb.grade_cells:
            present = _graded_ids(nb)
            if grade_cell.name in present or grade_cell.name not in order:
                continue
            self.log.warning("Missing grade cell %s: added to the notebook", grade_cell.name)
            at = order.index(grade_cell.name)
            source = next(c for c in source_nb.source_cells if c.name == grade_cell.name)
            cell = nbformat.from_dict(  # nbgrader's transform leaves its metadata a dict
                self.missing_cell_transform(
                    source, grade_cell.max_score, is_solution=grade_cell.name in solutions
                )
            )
            before = [present[name] for name in order[:at] if name in present]
            nb.cells.insert(max(before) + 1 if before else 0, cell)
        return nb, resources


def released_metadata(source_nb) -> dict[str, dict]:
    """The nbgrader metadata of each released cell of a gradebook's notebook, by grade_id, as
    `nbgrader generate_assignment` writes it (schema 3, the checksum by which an unchanged
    answer is known)."""
    grades = {c.name: c.max_score for c in source_nb.grade_cells}
    tasks = {c.name: c.max_score for c in source_nb.task_cells}
    solutions = {c.name for c in source_nb.solution_cells}
    found = {}
    for cell in source_nb.source_cells:
        name = cell.name
        graded, solution, task = name in grades, name in solutions, name in tasks
        meta = {
            "cell_type": cell.cell_type,
            "checksum": cell.checksum,
            "grade": graded,
            "grade_id": name,
            "locked": bool(cell.locked) and not (graded or solution),
            "schema_version": 3,
            "solution": solution,
        }
        if graded or task:
            meta["points"] = grades[name] if graded else tasks[name]
        if task:
            meta["task"] = True
        found[name] = {k: v for k, v in meta.items() if v is not None}
    return found


def restore(nb, released: dict[str, dict]):
    """Each cell naming a released cell (its first one) gets that cell's metadata; every other
    cell loses nbgrader's (a copy of a test cell, a cell of another notebook or format)."""
    seen = set()
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None:
            continue
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if isinstance(grade_id, str) and grade_id in released and grade_id not in seen:
            cell.metadata["nbgrader"] = copy.deepcopy(released[grade_id])
            retype(cell, released[grade_id].get("cell_type", cell.cell_type))
            seen.add(grade_id)
        else:
            del cell.metadata["nbgrader"]
    return nb


def retype(cell, cell_type: str) -> None:
    """The released type back on a cell whose type the student changed (an answer or test
    cell made markdown, or code). nbgrader's OverwriteCells does it too, but validates the
    cell against nbformat 4.5's schema, which wants a cell id that a notebook of an older
    minor format (nbgrader's ``submitted-answer-cell-type-changed``) has not: it raises and
    the student's whole assignment is dropped."""
    if cell.cell_type == cell_type:
        return
    cell.cell_type = cell_type
    if cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


class Unmarked(Preprocessor):
    """A step of nbgrader's Validator (graders/judge/stderr.py, `teach_validate`): a notebook
    in which no cell carries nbgrader's metadata fails validation with the sentence its
    feedback page would show (`MALFORMED`), where nbgrader's validate finds no test cell and
    says it passes every test: autograde grades it 0 (`OverwriteCells`)."""

    def preprocess(self, nb, resources):
        if any("nbgrader" in cell.get("metadata", {}) for cell in nb.cells):
            return nb, resources
        meta = {"grade": True, "grade_id": MALFORMED_ID, "locked": True, "points": 0,
                "schema_version": 3, "solution": False}  # fmt: skip
        cell = nbformat.v4.new_code_cell(MALFORMED, metadata={"nbgrader": meta})
        cell["id"] = MALFORMED_ID
        why = "this notebook has none of the released notebook's nbgrader cell metadata"
        cell.outputs = [nbformat.v4.new_output("error", ename="NotGradable", evalue=why,
                                               traceback=[f"NotGradable: {why}"])]  # fmt: skip
        nb.cells.insert(0, cell)
        return nb, resources


class RestoreMetadata(NbGraderPreprocessor):
    """The released metadata on the hand-in's cells, from the gradebook (see the module)."""

    def preprocess(self, nb, resources):
        found = resources.get("nbgrader", {})
        try:
            with Gradebook(found["db_url"]) as gb:
                source_nb = gb.find_notebook(found["notebook"], found["assignment"])
                released = released_metadata(source_nb)
        except (KeyError, MissingEntry):  # not an assignment's notebook: nbgrader decides
            return nb, resources
        return restore(nb, released), resources
