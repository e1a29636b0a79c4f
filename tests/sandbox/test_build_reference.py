"""Reference-making (graders/sandbox/build_reference.py): the solution's records and each code
cell's time are kept, and made again when what records them changes or the file's format is
older."""

import json
import os

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from graders.formats import references

TIMED = {"id": "a", "grade_id": None, "source": "d", "seconds": 0.5}


def test_the_reference_is_made_again_when_the_recorder_changes(tmp_path, monkeypatch):
    """The cached reference is stale when graders/kernel/ changes (how values are recorded)."""
    from graders.sandbox import build_reference

    kernel = tmp_path / "kernel"
    kernel.mkdir()
    (kernel / "grader_observe.py").write_text("# version 1\n")
    monkeypatch.setattr(build_reference, "KERNEL_SIDE", kernel)
    runs = []
    monkeypatch.setattr(
        build_reference,
        "reference_run",
        lambda solution, threads, strict=True, **_: runs.append(1) or ({"t": []}, [TIMED]),
    )
    solution, cache = tmp_path / "lab.ipynb", tmp_path / "reference" / "lab.json"
    solution.write_text("{}")
    for _ in range(2):
        assert build_reference.cached_reference(solution, cache) == {"t": []}
    assert len(runs) == 1
    (kernel / "grader_observe.py").write_text("# version 2\n")
    build_reference.cached_reference(solution, cache)
    assert len(runs) == 2


def test_a_reference_of_the_older_format_is_made_again(tmp_path, monkeypatch):
    """A file without per-cell times (version 1) is made again, with them; so is every file
    when the format's version changes."""
    from graders.sandbox import build_reference

    runs = []
    cells = [{"id": "a", "grade_id": None, "source": "d", "seconds": 0.5}]
    monkeypatch.setattr(
        build_reference,
        "reference_run",
        lambda solution, threads, strict=True, **_: runs.append(1) or ({"t": []}, cells),
    )
    solution, cache = tmp_path / "lab.ipynb", tmp_path / "reference" / "lab.json"
    solution.write_text("{}")
    build_reference.cached_reference(solution, cache)
    key = references.read(cache)["key"]
    cache.write_text(json.dumps({"key": key, "observations": {"t": []}, "seconds": 1}))  # v1
    build_reference.cached_reference(solution, cache)
    assert len(runs) == 2
    assert references.read(cache)["version"] == references.VERSION
    assert references.timing(cache)[0] == cells
    build_reference.cached_reference(solution, cache)
    assert len(runs) == 2  # up to date: kept
    monkeypatch.setattr(references, "VERSION", references.VERSION + 1)
    build_reference.cached_reference(solution, cache)
    assert len(runs) == 3


def test_each_code_cell_of_the_solution_is_timed_under_grading_conditions(tmp_path):
    """The reference run times every code cell (the budgets follow from it) with
    NBGRADER_EXECUTION set, as when a hand-in is graded (labs 5 and 7 train shorter then)."""
    from graders.sandbox.build_reference import reference_run

    nb = new_notebook(
        cells=[
            new_code_cell("import os, time\ntime.sleep(0.5)"),
            new_code_cell("print(os.environ.get('NBGRADER_EXECUTION'))"),
        ]
    )
    solution = tmp_path / "lab.ipynb"
    nbformat.write(nb, solution)
    _, cells = reference_run(solution, timeout=60)
    assert [c["id"] for c in cells] == [c.id for c in nb.cells]
    assert 0.5 <= cells[0]["seconds"] < 10 and 0 <= cells[1]["seconds"] < cells[0]["seconds"]
    executed = nbformat.read(solution, as_version=4)  # unchanged on disk; the run's own copy
    assert executed.cells[1].outputs == []


def test_a_notebook_that_never_ends_stops_the_build_with_a_sentence(tmp_path):
    """nbgrader's own infinite-loop.ipynb as an assignment's notebook: its reference run stops
    at the time limit with a sentence naming the notebook and the cell (plain nbgrader's
    generate_assignment never runs it; make build runs every notebook once)."""
    import pytest

    from graders.sandbox.build_reference import reference_run

    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("while True:\n    pass")])
    solution = tmp_path / "loop.ipynb"
    nbformat.write(nb, solution)
    with pytest.raises(RuntimeError) as raised:
        reference_run(solution, timeout=2)
    assert str(raised.value).startswith(f"{solution}: cell 1 of the notebook ran past 2 s")


def test_an_instructors_notebook_whose_solution_fails_a_check_is_kept_with_a_note(tmp_path, capsys):
    """nbgrader's own tests use sources whose solution is still a stub (submitted-unchanged):
    plain nbgrader releases and grades them, so an instructor's notebook like it is run for
    its cell times and said, not refused (a lab of the course still is: `strict`)."""
    import pytest

    from graders.sandbox.build_reference import reference_run

    check = new_code_cell("assert a == 1")
    check.metadata["nbgrader"] = dict(grade=True, grade_id="bar", points=1, solution=False,
                                      locked=True, schema_version=3)  # fmt: skip
    nb = new_notebook(cells=[new_code_cell("raise NotImplementedError()"), check])
    solution = tmp_path / "p1.ipynb"
    nbformat.write(nb, solution)
    observed, cells = reference_run(solution, timeout=60, strict=False)
    assert observed == {"bar": []} and len(cells) == 2
    assert "the solution fails its own test cell 'bar': NameError" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="fails its own test cell 'bar'"):
        reference_run(solution, timeout=60)


def test_the_sandbox_and_the_judge_find_a_notebooks_reference_in_one_place(tmp_path, monkeypatch):
    """`course_reference`: a task's copy where the grader named a folder (never made again);
    else the course's build/reference/, made again first where the course's source notebook
    is here and the caller asks (plain nbgrader in the repository)."""
    from traitlets.config import Config

    from graders.sandbox import build_reference
    from graders.sandbox.build_reference import course_reference

    made = []
    monkeypatch.setattr(
        build_reference,
        "cached_reference",
        lambda source, file, strict=True: made.append((source, file, strict)) or {"t": []},
    )
    config = Config({"CourseDirectory": {"root": str(tmp_path)}})
    source = tmp_path / "source" / "ps1" / "quiz.ipynb"
    source.parent.mkdir(parents=True)
    source.write_text("{}")
    given = tmp_path / "task-copy"
    found = course_reference(config, str(given), "ps1", "quiz", remake=False)
    assert found == (given, given / "ps1" / "quiz.json", None) and made == []
    found = course_reference(config, "", "ps1", "quiz", remake=True)
    where = tmp_path / "build" / "reference"
    assert found == (where, where / "ps1" / "quiz.json", {"t": []})
    assert made == [(source, where / "ps1" / "quiz.json", False)]  # not a lab: not strict
    assert course_reference(config, "", "ps1", "other", remake=True).observed is None


def test_the_course_data_reaches_the_solutions_kernels_and_not_the_grader(tmp_path, monkeypatch):
    """`prepare_references` gives the data root (graders.config.course.prepare_data) to the
    solutions' kernels through their own environment; the grader's process stays as it was."""
    from graders.config import course
    from graders.sandbox import build_reference

    monkeypatch.delenv("COURSE_DATA_ROOT", raising=False)
    monkeypatch.setattr(course, "prepare_data", lambda labs: {"COURSE_DATA_ROOT": "/data"})
    given = []
    monkeypatch.setattr(
        build_reference,
        "cached_reference",
        lambda source, file, strict=True, data_env=None: given.append(data_env),
    )
    source = tmp_path / "build" / "source" / "lab1"
    source.mkdir(parents=True)
    (source / "lab1.ipynb").write_text("{}")
    build_reference.prepare_references(tmp_path, ["lab1"], workers=1)
    assert given == [{"COURSE_DATA_ROOT": "/data"}]
    assert "COURSE_DATA_ROOT" not in os.environ
