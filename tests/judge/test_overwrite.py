"""nbgrader's OverwriteCells as the course runs it (graders/judge/overwrite.py): a hand-in
notebook in which no cell carries nbgrader's metadata gets no restored cell, and a sentence at
its top that its feedback shows; a notebook that has them goes on to nbgrader's own step."""

from __future__ import annotations

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from graders.judge.overwrite import MALFORMED, MALFORMED_ID, OverwriteCells


def test_a_notebook_without_grading_information_is_said_so_at_its_top():
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("assert x")])
    nb, _ = OverwriteCells().preprocess(nb, {"nbgrader": {"notebook": "quiz"}})
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"]
    assert nb.cells[0].source == MALFORMED and nb.cells[0]["id"] == MALFORMED_ID


def test_a_notebook_with_grading_information_goes_to_nbgraders_step(monkeypatch):
    from nbgrader.preprocessors import OverwriteCells as NbgraderOverwriteCells

    seen = []
    monkeypatch.setattr(NbgraderOverwriteCells, "preprocess", lambda self, nb, r: seen.append(nb))
    graded = new_code_cell("assert x")
    graded.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1}
    nb = new_notebook(cells=[new_code_cell("x = 1"), graded])
    OverwriteCells().preprocess(nb, {})
    assert seen == [nb] and len(nb.cells) == 2


@pytest.mark.parametrize("metadata", [{}, {"tags": ["x"]}])
def test_other_metadata_is_not_grading_information(metadata):
    cell = new_code_cell("x = 1")
    cell.metadata.update(metadata)
    nb, _ = OverwriteCells().preprocess(new_notebook(cells=[cell]), {})
    assert nb.cells[0]["id"] == MALFORMED_ID
