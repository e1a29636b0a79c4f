"""nbgrader's Execute step in the sandbox (graders/sandbox/sandbox.py): the grader's settings reach
every kernel through nbgrader's configuration; each cell has its per-lab budget and the
notebook its own, and a hand-in that loops or adds cells is stopped there and graded up to
it; a lab without timed references gets the flat limits, with a note. How a kernel ends is
tests/test_sandbox_kernel.py's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from helpers import stream_text
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

from graders.sandbox import sandbox

pytestmark = [
    pytest.mark.skipif(sandbox.available() is not None, reason="needs bubblewrap"),
    pytest.mark.timeout(300),
]


def test_the_graders_settings_reach_every_kernel_through_nbgraders_configuration(tmp_path):
    """graders.grade.task gives its settings as ``c.SandboxedExecute.settings``, no environment
    variable: the kernel manager nbclient makes gets them (the kernel's extra variables), and
    the seconds the kernel took to start come back in the timings file
    they name."""
    from graders.formats.timings import read as read_timings

    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: the kernel's sockets
    timings = tmp_path / "timings.jsonl"
    settings = {"runtime": str(runtime), "env": {"COURSE_PROBE": "given"}, "timings": str(timings)}
    step = sandbox.SandboxedExecute(config=Config({"SandboxedExecute": {"settings": settings}}))
    step.timeout = 60
    nb = new_notebook(cells=[new_code_cell("import os\nprint(os.environ.get('COURSE_PROBE'))")])
    try:
        step.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
        assert stream_text(nb.cells[0]).strip() == "given"
        assert 0 < read_timings(timings)["kernel_start"] < 120
        assert list(runtime.iterdir()) == []  # nothing of the kernel is left there
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.parametrize("fork", [True, False])
def test_whether_kernels_are_forked_is_an_nbgrader_setting(fork):
    """``c.SandboxedExecute.fork_kernels`` (documented with help=, no environment variable)
    reaches the kernel manager in the sandbox's settings, beside the grader's own."""
    config = Config({"SandboxedExecute": {"fork_kernels": fork, "settings": {"threads": 2}}})
    step = sandbox.SandboxedExecute(config=config)
    step.nb, step._data, step._notebook_s = new_notebook(), {}, None  # as preprocess sets them
    manager = step.create_kernel_manager()
    assert manager.sandbox["fork"] is fork and manager.sandbox["threads"] == 2
    assert "warm process" in sandbox.SandboxedExecute.class_traits()["fork_kernels"].help


# ------------------------------------------------------------ per-lab time budgets (hostile)


def timed_reference(folder: Path, lab: str, nb, seconds: float) -> None:
    """A reference file for `lab` in which every code cell of `nb` took `seconds`."""
    from graders.formats import budgets, references

    cells = [
        budgets.CellTime(
            id=c.get("id"),
            grade_id=c.metadata.get("nbgrader", {}).get("grade_id"),
            source=budgets.digest(c.source),
            seconds=seconds,
        )
        for c in nb.cells
        if c.cell_type == "code"
    ]
    total = seconds * len(cells)
    references.write(
        references.path(folder, lab),
        {"version": references.VERSION, "observations": {}, "seconds": total, "cells": cells},
    )


def budgeted_step(tmp_path, **policy):
    """SandboxedExecute as nbgrader_config.py makes it, reading references in tmp_path."""
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: the kernel's sockets
    options = {"settings": {"runtime": str(runtime)}, "reference_dir": str(tmp_path / "ref")}
    options.update(policy)
    step = sandbox.SandboxedExecute(config=Config({"SandboxedExecute": options}))
    step.timeout, step.interrupt_on_timeout, step.allow_errors = 120, True, True
    return step, runtime


def copy_nb(nb):
    return nbformat.from_dict(json.loads(json.dumps(nb)))


def lab_resources(tmp_path, lab="labx"):
    return {"metadata": {"path": str(tmp_path)}, "nbgrader": {"assignment": lab}}


def graded_cell(source, grade_id):
    return new_code_cell(source, id=grade_id, metadata={"nbgrader": {"grade_id": grade_id}})


def test_a_hand_in_that_loops_is_stopped_at_its_cells_budget_and_graded_up_to_there(tmp_path):
    """Exercise 2 loops forever: its cell is stopped at its own budget (a multiple of the
    solution's time, with the floor), long before the flat 120 s; the check before it keeps
    its result, the cells after it are not run, and the test cell after it says which cell
    ran out of time, its budget and the solution's time, where the judge words its verdict."""
    from nbformat.v4 import new_markdown_cell

    from graders.judge.judge import verdict

    solution = new_notebook(
        cells=[
            new_code_cell("x = 6 * 7", id="setup"),
            new_markdown_cell("## Exercise 1", id="m1"),
            graded_cell("def f():\n    return x", "ex1"),
            graded_cell("print('checked', f())", "test_ex1"),
            new_markdown_cell("## Exercise 2", id="m2"),
            graded_cell("def g():\n    return 1", "ex2"),
            graded_cell("print('after', g())", "test_ex2"),
        ]
    )
    timed_reference(tmp_path / "ref", "labx", solution, 0.2)
    hand_in = copy_nb(solution)
    hand_in.cells[5].source = "while True:\n    pass"  # the student's exercise 2
    step, runtime = budgeted_step(
        tmp_path, budget_floor_s=3, budget_first_cell_floor_s=60, budget_notebook_floor_s=200
    )
    resources = lab_resources(tmp_path)
    try:
        step.preprocess(hand_in, resources)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    limits = resources["sandbox_limits"]
    assert "checked 42" in stream_text(hand_in.cells[3])
    assert set(limits) == {5, 6}
    assert limits[5].startswith(
        "this cell ran out of its time budget of 3 s (the solution runs it in 0.2 s): look for "
        "a loop that never ends"
    )
    assert hand_in.cells[5].outputs[-1].ename == "CellTimeoutError"
    assert "after" not in stream_text(hand_in.cells[6])  # not run
    kind, sentence = verdict(hand_in.cells[6], 6, [], limits)
    assert (kind, sentence) == (
        "limit",
        "Not graded to the end: not run, because the code cell after 'Exercise 2' (cell 6) ran "
        "out of its time budget of 3 s (the solution runs it in 0.2 s): look for a loop that "
        "never ends, or work that grows with each pass.",
    )


def test_a_hand_in_that_adds_many_cells_cannot_multiply_its_budget(tmp_path):
    """Forty cells the solution does not have, each within the lab's largest cell budget
    (1 s of 2): together they still stop at the notebook's budget (10 s, not 40 s), which
    no added cell raises."""
    solution = new_notebook(cells=[new_code_cell("x = 1", id="setup")])
    timed_reference(tmp_path / "ref", "labx", solution, 0.1)
    hand_in = copy_nb(solution)
    hand_in.cells += [new_code_cell("import time\ntime.sleep(1)") for _ in range(40)]
    step, runtime = budgeted_step(
        tmp_path, budget_floor_s=2, budget_first_cell_floor_s=5, budget_notebook_floor_s=10
    )
    resources = lab_resources(tmp_path)
    started = time.monotonic()
    try:
        step.preprocess(hand_in, resources)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    assert time.monotonic() - started < 10 + 40  # the kernel's start and end, under load
    limits = resources["sandbox_limits"]
    not_run = [i for i, why in limits.items() if why.startswith("not run:")]
    assert len(not_run) > 25, limits
    assert limits[not_run[-1]] == "not run: the whole-notebook budget of 10 s was used up"
    assert not [why for why in limits.values() if "budget of 2 s" in why], limits  # no cell's own


def test_a_lab_without_timed_references_gets_the_flat_limits_with_a_note(tmp_path, caplog):
    """Plain `nbgrader autograde` before `make build`: nbgrader's per-cell timeout, a cell past
    it interrupted and the notebook going on, and a note in the log saying why."""
    nb = new_notebook(
        cells=[new_code_cell("while True:\n    pass"), new_code_cell("print('after', 6 * 7)")]
    )
    step, runtime = budgeted_step(tmp_path)
    step.timeout = 3
    resources = lab_resources(tmp_path, lab="lab_untimed")
    try:
        with caplog.at_level("WARNING", logger="graders.sandbox"):
            step.preprocess(nb, resources)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    assert "after 42" in stream_text(nb.cells[1])
    assert resources["sandbox_limits"] == {0: "stopped at the time limit of 3 s for one cell"}
    assert "no per-lab time budgets for lab_untimed" in caplog.text
    assert "run `make build`" in caplog.text


def test_each_notebook_of_an_assignment_has_its_own_budgets(tmp_path):
    """An assignment with several notebooks: each is budgeted from its own reference run
    (build/reference/<assignment>/<notebook>.json), not from the notebook named after the
    assignment. Here the instructor's own check in `project` takes 2 s and the quiz's cells
    0.1 s: the project's cell gets 2 x 2 s and finishes; under the quiz's budgets (or a floor)
    it would be stopped at 1 s and its check blamed on the student."""
    from graders.formats import budgets, references

    project = new_notebook(
        cells=[new_code_cell("x = 1", id="setup"), graded_cell("import time\ntime.sleep(2.5)", "t")]
    )
    timed_reference(tmp_path / "ref", "quiz", project, 0.1)  # quiz.json: the quiz's notebook
    cells = [
        budgets.CellTime(id=c.get("id"), grade_id=None, source=budgets.digest(c.source), seconds=s)
        for c, s in zip(project.cells, (0.1, 2.0), strict=True)
    ]
    references.write(
        references.path(tmp_path / "ref", "quiz", "project"),
        {"version": references.VERSION, "observations": {}, "seconds": 2.1, "cells": cells},
    )
    step, runtime = budgeted_step(
        tmp_path, budget_multiple=2, budget_floor_s=1, budget_first_cell_floor_s=1,
        budget_notebook_floor_s=30,
    )  # fmt: skip
    resources = lab_resources(tmp_path, lab="quiz")
    resources["nbgrader"]["notebook"] = "project"
    try:
        step.preprocess(project, resources)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    assert resources["sandbox_limits"] == {}
    assert not [o for o in project.cells[1].outputs if o.get("output_type") == "error"]


def test_the_released_files_and_folders_are_read_only_beside_the_notebook(tmp_path):
    """Plain `nbgrader autograde`: the kernel's working folder holds the files and folders
    released with the assignment (labs/<assignment>/: data.txt, data/), read-only, taken from
    the release and never from the hand-in: a hand-in folder whose data.txt was replaced, whose
    data/ holds a link to a file of the grader's, or which holds a huge (sparse, 2 GB) file,
    changes nothing the kernel sees, and nothing it writes there reaches the release."""
    course = tmp_path / "course"
    release = course / "labs" / "quiz"
    (release / "data").mkdir(parents=True)
    (release / "data.txt").write_text("line 1\nline 2\n")
    (release / "data" / "more.txt").write_text("more")
    (release / "quiz.ipynb").write_text("{}")
    hand_in = course / "autograded" / "student" / "quiz"  # where nbgrader copied the hand-in
    (hand_in / "data").mkdir(parents=True)
    (hand_in / "data.txt").write_text("forged\n")
    (hand_in / "data" / "more.txt").symlink_to("/etc/hostname")
    with open(hand_in / "huge.bin", "wb") as fh:
        fh.truncate(2 * 2**30)
    nb = new_notebook(
        cells=[
            new_code_cell("import os\nprint(sorted(os.listdir('.')))"),
            new_code_cell("print(open('data.txt').read(), open('data/more.txt').read())"),
            new_code_cell("open('data.txt', 'w').write('mine')"),
            new_code_cell("open('data/more.txt', 'a').write('mine')"),
        ]
    )
    step, runtime = budgeted_step(tmp_path)
    step.config.CourseDirectory.root = str(course)
    step.config.CourseDirectory.release_directory = "labs"
    step.allow_errors = True
    resources = {"metadata": {"path": str(hand_in)}, "nbgrader": {"assignment": "quiz"}}
    try:
        step.preprocess(nb, resources)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    listed = stream_text(nb.cells[0])
    assert "'data'" in listed and "'data.txt'" in listed and "huge.bin" not in listed
    assert "quiz.ipynb" not in listed
    assert stream_text(nb.cells[1]).split() == ["line", "1", "line", "2", "more"]
    for cell in nb.cells[2:]:
        errors = [o.ename for o in cell.outputs if o.output_type == "error"]
        assert errors in (["OSError"], ["PermissionError"]), cell  # read-only, or not theirs
    assert (release / "data.txt").read_text() == "line 1\nline 2\n"
    assert (release / "data" / "more.txt").read_text() == "more"
