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
"""

from __future__ import annotations

import nbformat
from nbgrader import utils
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
