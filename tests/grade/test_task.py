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

from graders.formats import gradebook, timings, wire
from graders.formats.timings import PHASES, TOTAL, Phase
from graders.formats.wire import LocalJob
from graders.grade import merge, task
from graders.sandbox.sandbox_kernel import SandboxKernelManager


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
        manager = SandboxKernelManager(kernel_name="python3")  # as SandboxedExecute makes it
        manager.sandbox = settings
        self.seen_kernelspec = manager.kernel_spec.resource_dir  # the one the kernel starts from
        timings.add(Path(settings["timings"]), Phase.KERNEL_START, 0.25)
        timings.add(Path(self.changes["JudgeRecords"]["timings"]), Phase.CHECKS, 0.5)
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
        notebooks={"lab1": nbformat.writes(notebook(("check(True)", "t1")))},
        timestamp=None,
        cell_timeout=7,
        budget_s=30,
        feedback=True,
        gradebook=str(gradebook.of(tmp_path)),
        reference_dir=str(tmp_path / "reference"),
        files=[],
        data_root=None,
        releases={"lab1": nbformat.writes(release)},
        scratch_root=str(tmp_path),
    )
    before = dict(os.environ)
    result = task.grade(api_for, job)
    assert dict(os.environ) == before, "a task writes nothing of the process's environment"
    (api,) = made
    settings = api.changes["SandboxedExecute"]["settings"]
    # its kernelspec reaches the kernel manager through the settings (not JUPYTER_PATH)
    assert settings["kernelspecs"] == str(Path(api.root) / "jupyter" / "kernels")
    assert api.seen_kernelspec == str(Path(settings["kernelspecs"]) / "python3")
    assert settings["budget_s"] == 30 and settings["threads"] == 1
    assert settings["flat"] is True  # limits given: no per-lab budgets (graders/formats/budgets.py)
    assert api.changes["SandboxedExecute"]["reference_dir"] == job["reference_dir"]
    assert api.changes["Execute"] == {"timeout": 7}
    assert api.changes["JudgeRecords"]["reference_dir"] == job["reference_dir"]
    assert "COURSE_SANDBOX" not in os.environ
    assert api.seen_notebook.cells[0].metadata["nbgrader"]["grade_id"] == "t1"
    assert result["ok"] is False and result["reason"] == "the notebook is broken"
    assert result["timings"]["kernel_start"] == 0.25 and result["timings"]["checks"] == 0.5
    # durations by phase only; when its kernel was up is a clock time, kept apart
    assert set(result["timings"]) <= {*PHASES, TOTAL}
    assert result["clock"].kernel_up_at is not None
    assert not list(tmp_path.glob("task-*"))  # its scratch course is gone


def test_a_task_never_raises_for_a_hand_ins_sake(tmp_path):
    def api_for(root, changes):
        raise AssertionError("never reached: the notebook is not JSON")

    job = LocalJob(
        lab="lab1", notebooks={"lab1": "{not json"}, releases={"lab1": "{}"},
        scratch_root=str(tmp_path),
    )  # fmt: skip
    result = task.grade(api_for, job)
    assert result["ok"] is False and result["reason"].startswith("the grader failed")
    assert "total" in result["timings"]


def _sync_and_journal(db: Path) -> tuple[int, str]:
    """(PRAGMA synchronous, PRAGMA journal_mode) as nbgrader's Gradebook connects to `db`."""
    from sqlalchemy import text

    with gradebook.opened(db) as gb:
        sync = gb.db.execute(text("PRAGMA synchronous")).scalar()
        journal = gb.db.execute(text("PRAGMA journal_mode")).scalar()
    return sync, journal


def test_only_a_tasks_scratch_gradebook_is_written_without_waiting_for_the_disk(tmp_path):
    """nbgrader commits about fifty times per hand-in; in the scratch course (thrown away
    after) SQLite neither syncs nor keeps a journal file, while the course's own gradebook,
    open in the same process, keeps SQLite's defaults (FULL sync, a journal file)."""
    course = small_gradebook(tmp_path)
    seen = {}

    def api_for(root, changes):
        class Api(FakeApi):
            def autograde(self, lab, student, force, create):
                seen["scratch"] = _sync_and_journal(gradebook.of(Path(self.root)))
                seen["course"] = _sync_and_journal(course)
                return super().autograde(lab, student, force, create)

        return Api(root, changes)

    job = LocalJob(
        lab="lab1",
        notebooks={"lab1": nbformat.writes(notebook(("check(True)", "t1")))},
        gradebook=str(course),
        reference_dir=str(tmp_path / "reference"),
        releases={"lab1": nbformat.writes(notebook(("check(True)", "t1")))},
        scratch_root=str(tmp_path),
    )
    task.grade(api_for, job)
    assert seen["scratch"] == (0, "memory")  # OFF
    assert seen["course"] == (2, "delete")  # FULL, SQLite's default journal


def test_a_task_lays_out_every_notebook_and_the_released_folders_as_the_course_has_them(
    tmp_path, monkeypatch
):
    """A task of an instructor's assignment (several notebooks, files in nested folders, as a
    class run ships them): each notebook handed in, restored to its release's metadata; each
    notebook's reference file where the judge and the budgets look; the released tree under
    its own names, its top-level entries (a folder as a folder) given to the sandbox; and a
    released path that would leave the task's folder refused."""
    small_gradebook(tmp_path, "quiz")
    seen = {}

    class Api(FakeApi):
        def autograde(self, lab, student, force, create):
            folder = Path(self.root) / "submitted" / student / lab
            seen["notebooks"] = sorted(p.name for p in folder.iterdir())
            seen["one"] = nbformat.read(folder / "one.ipynb", as_version=4)
            settings = self.changes["SandboxedExecute"]["settings"]
            seen["files"] = sorted(Path(p).name for p in settings["files"])
            top = Path(settings["files"][0]).parent
            seen["tree"] = {
                str(p.relative_to(top)): p.read_text() for p in top.rglob("*") if p.is_file()
            }
            where = Path(self.changes["JudgeRecords"]["reference_dir"])
            seen["references"] = sorted(str(p.relative_to(where)) for p in where.rglob("*.json"))
            return {"success": False, "log": ""}

    monkeypatch.setattr(task, "api_factory", lambda *_: Api)
    from graders.config import course as settings

    asked = []  # the data root the class run resolved once (c.CourseData.root), as given
    monkeypatch.setattr(settings, "prepare_data", lambda labs, root: asked.append(root) or {})
    release = notebook(("check(True)", "t1"))
    course = wire.Course(
        data_root="/srv/course-data",
        config="c = get_config()\n",
        gradebook=gradebook.of(tmp_path).read_bytes(),
        references={"quiz": {"one": {}, "two": {}}},
        releases={"quiz": {"one": nbformat.writes(release), "two": nbformat.writes(release)}},
        files={"quiz": {"data.txt": b"top", "data/deep/values.txt": b"1 2 3"}},
    )
    handed_in = notebook(("check(True)", "t1"))
    handed_in.cells[0].metadata["nbgrader"]["points"] = 100  # the student's own points
    job = wire.Job(
        lab="quiz", notebooks={"one": nbformat.writes(handed_in)}, timestamp=None,
        cell_timeout=None, budget_s=None, feedback=False,
    )  # fmt: skip
    result = task.run(course, job)
    assert result["ok"] is False and asked == ["/srv/course-data"]
    assert seen["notebooks"] == ["one.ipynb"]  # "two" was not handed in: nbgrader gives it 0
    assert seen["one"].cells[0].metadata["nbgrader"]["points"] == 2
    assert seen["files"] == ["data", "data.txt"]
    assert seen["tree"] == {"data.txt": "top", "data/deep/values.txt": "1 2 3"}
    assert seen["references"] == ["quiz/one.json", "quiz/two.json"]
    for forged in ("../../escape", "/etc/passwd", "data/../../escape", "data//x", ""):
        course["files"]["quiz"] = {forged: b"x"}
        result = task.run(course, job)
        assert "is not a path inside an assignment's release" in result["reason"], forged
