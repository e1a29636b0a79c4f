"""The course's sanitizing steps (graders/judge/overwrite.py) on nbgrader's own test-suite
hand-ins, without a kernel: each comes out with the released cells' metadata, where nbgrader's
own steps raise (an older format stops `nbgrader autograde` for the class; the others drop
the student's whole assignment). The grades they then get: tests/test_any_assignment.py."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import nbformat
import nbgrader
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from nbgrader.api import Gradebook
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearOutput,
    ComputeChecksums,
    DeduplicateIds,
    SaveCells,
)

from graders.judge.overwrite import MALFORMED, MALFORMED_ID, OverwriteCells, RestoreMetadata

FILES = Path(nbgrader.__file__).parent / "tests" / "apps" / "files"
STEPS = Path(nbgrader.__file__).parent / "tests" / "preprocessors" / "files"
HAND_INS = {  # nbgrader's file -> the source notebook it is a hand-in of
    FILES / "test-v0.ipynb": "test",
    FILES / "test-v0-invalid.ipynb": "test",
    FILES / "test-v1.ipynb": "test",
    FILES / "test-v2.ipynb": "test",
    FILES / "too-new.ipynb": "test",
    STEPS / "test_taskcell.ipynb": "test",
    STEPS / "submitted-answer-cell-type-changed.ipynb": "submitted-unchanged",
    STEPS / "submitted-grade-cell-type-changed.ipynb": "submitted-unchanged",
}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A gradebook holding test.ipynb and submitted-unchanged.ipynb as assignment `a`."""
    url = f"sqlite:///{tmp_path_factory.mktemp('gb') / 'gradebook.db'}"
    # a new gradebook records its schema's version, which nbgrader asks an `alembic`
    # process for (seconds); nothing here reads it
    with mock.patch("nbgrader.api.get_alembic_version", return_value="0"), Gradebook(url) as gb:
        gb.add_assignment("a")
    for name in ("test", "submitted-unchanged"):
        resources = {"nbgrader": {"db_url": url, "assignment": "a", "notebook": name}}
        nb, _ = ComputeChecksums().preprocess(nbformat.read(FILES / f"{name}.ipynb", 4), {})
        SaveCells().preprocess(nb, resources)
    return url


def sanitize(nb, url: str, notebook: str):
    resources = {"nbgrader": {"db_url": url, "assignment": "a", "notebook": notebook}}
    for step in (ClearOutput(), RestoreMetadata(), DeduplicateIds(),
                 OverwriteCells(add_missing_cells=True), CheckCellMetadata()):  # fmt: skip
        nb, resources = step.preprocess(nb, resources)
    return nb


@pytest.mark.parametrize("file", sorted(HAND_INS), ids=lambda f: f.stem)
def test_every_cell_gets_its_released_metadata_and_type(db, file):
    source = nbformat.read(FILES / f"{HAND_INS[file]}.ipynb", 4)
    released = {
        c.metadata.nbgrader["grade_id"]: c.cell_type
        for c in source.cells
        if "nbgrader" in c.metadata
    }
    nb = sanitize(nbformat.read(file, 4), db, HAND_INS[file])
    found = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if meta and meta.get("grade_id") in released:
            assert meta["schema_version"] == 3, file.name
            found[meta["grade_id"]] = cell.cell_type
    if file.stem == "too-new":  # none of its cells is the release's: malformed, said so
        assert nb.cells[0].id == "course-grader-malformed-notebook"
    else:  # every released cell is there, of its released type (restored where missing)
        assert found == released, file.name


# ---- a notebook without grading information (nbgrader's test-no-metadata) ----


def test_a_notebook_without_grading_information_is_said_so_at_its_top():
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("assert x")])
    nb, _ = OverwriteCells().preprocess(nb, {"nbgrader": {"notebook": "quiz"}})
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"]
    assert nb.cells[0].source == MALFORMED and nb.cells[0]["id"] == MALFORMED_ID


def test_validate_fails_a_notebook_without_grading_information_with_the_same_sentence():
    """nbgrader's Validator (its results read from the notebook after its steps) lists the
    cell `Unmarked` adds as failed: plain nbgrader's finds no test cell and says it passes."""
    from nbgrader.validator import Validator

    from graders.judge.overwrite import Unmarked

    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("assert x")])
    nb, _ = Unmarked().preprocess(nb, {})
    assert nb.cells[0].source == MALFORMED and len(nb.cells) == 3
    failed = Validator()._get_failed_cells(nb)
    assert [c.source for c in failed] == [MALFORMED]
    graded = new_code_cell("assert x")
    graded.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1}
    kept = new_notebook(cells=[graded])
    assert Unmarked().preprocess(kept, {})[0].cells == [graded]


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
