"""One grading task (graders/grade/task.py): a hand-in's bytes in, data out. Its notebook gets the
release's nbgrader metadata back (a forged or duplicated test cell loses its own), the
scratch course gets an assignments-only gradebook, the sandbox's settings and the judge's
go to nbgrader as configuration (not through the environment), the seconds they measure come
back in the result, and a failure is a reason, never an exception."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import nbformat
from helpers import small_gradebook

from graders.formats import gradebook, wire
from graders.formats.wire import LocalJob
from graders.grade import merge, task


def notebook(*cells: tuple[str, str | None]) -> nbformat.NotebookNode:
    """A notebook of code cells (source, grade_id or None)."""
    nb = nbformat.v4.new_notebook()
    for source, grade_id in cells:
        cell = nbformat.v4.new_code_cell(source)
        if grade_id:
            cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 2,
                                         "solution": False, "locked": True}  # fmt: skip
        nb.cells.append(cell)
    return nb


def test_forged_and_duplicated_test_cells_lose_their_metadata():
    release = notebook(("x = 1", None), ("check(x == 1)", "t1"))
    handed_in = notebook(("check(x == 1)", "t1"), ("pass", "t1"), ("pass", "forged"))
    handed_in.cells[0].metadata["nbgrader"]["points"] = 100  # the student's own points
    restored = task.restore_metadata(handed_in, release)
    metas = [c.metadata.get("nbgrader") for c in restored.cells]
    assert metas[0] == release.cells[1].metadata["nbgrader"]
    assert metas[1:] == [None, None]


def test_why_nbgrader_failed_is_read_from_its_log():
    assert "kernel died" in task.failure_reason("... DeadKernelError: Kernel died ...")
    log = "[AutogradeApp | INFO] ok\n[AutogradeApp | ERROR] first thing\n[X | ERROR] second"
    assert task.failure_reason(log) == "first thing"
    assert task.failure_reason("nothing said") == "nbgrader autograde failed"


def test_the_scratch_gradebook_has_the_labs_and_no_student(tmp_path):
    small_gradebook(tmp_path)
    merge.record_failure(tmp_path, "ann", "lab1")
    out = task.assignments_only(gradebook.of(tmp_path), tmp_path / "labs.db")
    with sqlite3.connect(out) as db:
        assert db.execute("SELECT count(*) FROM student").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM submitted_assignment").fetchone() == (0,)
        assert db.execute("SELECT name FROM assignment").fetchall() == [("lab1",)]
        assert db.execute("SELECT count(*) FROM grade_cells").fetchone() == (2,)


class FakeApi:
    """nbgrader's API as the task calls it: autograde fails, after the sandbox and the judge
    (inside nbgrader) have appended their seconds to the timings file they were given."""

    def __init__(self, root: str, changes: dict):
        self.root, self.changes = root, changes

    def autograde(self, lab, student, force, create):
        self.seen_notebook = nbformat.read(
            Path(self.root) / "submitted" / student / lab / f"{lab}.ipynb", as_version=4
        )
        settings = self.changes["SandboxedExecute"]["settings"]
        wire.add_timing(Path(settings["timings"]), "kernel_start", 0.25)
        wire.add_timing(Path(self.changes["JudgeRecords"]["timings"]), "checks", 0.5)
        return {"success": False, "log": "[AutogradeApp | ERROR] the notebook is broken"}


def test_settings_go_to_nbgrader_as_configuration_and_timings_come_back(tmp_path, monkeypatch):
    monkeypatch.delenv("COURSE_SANDBOX", raising=False)
    small_gradebook(tmp_path)
    release = notebook(("check(True)", "t1"))
    made = []

    def api_for(root, changes):
        made.append(FakeApi(root, changes))
        return made[-1]

    job = LocalJob(
        lab="lab1",
        notebook=nbformat.writes(notebook(("check(True)", "t1"))),
        timestamp=None,
        cell_timeout=7,
        budget_s=30,
        feedback=True,
        gradebook=str(gradebook.of(tmp_path)),
        reference_dir=str(tmp_path / "reference"),
        files=[],
        data_root=None,
        release=nbformat.writes(release),
        scratch_root=str(tmp_path),
    )
    result = task.grade(api_for, job)
    (api,) = made
    settings = api.changes["SandboxedExecute"]["settings"]
    assert settings["budget_s"] == 30 and settings["threads"] == 1
    assert settings["flat"] is True  # limits given: no per-lab budgets (graders/formats/budgets.py)
    assert api.changes["SandboxedExecute"]["reference_dir"] == job["reference_dir"]
    assert api.changes["Execute"] == {"timeout": 7}
    assert api.changes["JudgeRecords"]["reference_dir"] == job["reference_dir"]
    assert "COURSE_SANDBOX" not in os.environ
    assert api.seen_notebook.cells[0].metadata["nbgrader"]["grade_id"] == "t1"
    assert result["ok"] is False and result["reason"] == "the notebook is broken"
    assert result["timings"]["kernel_start"] == 0.25 and result["timings"]["checks"] == 0.5
    assert not list(tmp_path.glob("task-*"))  # its scratch course is gone


def test_a_task_never_raises_for_a_hand_ins_sake(tmp_path):
    def api_for(root, changes):
        raise AssertionError("never reached: the notebook is not JSON")

    job = LocalJob(lab="lab1", notebook="{not json", release="{}", scratch_root=str(tmp_path))
    result = task.grade(api_for, job)
    assert result["ok"] is False and result["reason"].startswith("the grader failed")
    assert "total" in result["timings"]
