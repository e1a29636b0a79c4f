"""Reference files (graders/formats/references.py): written whole, read back as written, and a
missing or damaged file costs a lab its place in the grading order, nothing more."""

from __future__ import annotations

import pytest

from graders.formats import references
from graders.formats.references import ReferenceFile


def test_a_reference_file_is_read_back_as_written(tmp_path):
    where = references.folder(tmp_path)
    assert where == tmp_path / "build" / "reference"
    file = references.path(where, "lab1")
    observed = {"t1": [{"name": "f(x)", "value": 1.0, "rtol": 0.0, "atol": 0.0, "hint": None}]}
    references.write(file, ReferenceFile(key="k", observations=observed, seconds=2.5))
    assert references.observations(file) == observed
    assert references.seconds(file) == 2.5
    assert references.read(file)["key"] == "k"
    assert [p.name for p in where.iterdir()] == ["lab1.json"]  # no partial file left


def test_a_missing_or_damaged_file_has_no_seconds_and_no_observations(tmp_path):
    missing, damaged = tmp_path / "missing.json", tmp_path / "damaged.json"
    damaged.write_text("[1, 2")
    assert references.seconds(missing) == 0.0 and references.seconds(damaged) == 0.0
    with pytest.raises(OSError):
        references.observations(missing)
    with pytest.raises(ValueError):
        references.observations(damaged)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError):
        references.read(tmp_path / "list.json")


def test_the_solutions_times_are_read_back_and_an_old_file_has_none(tmp_path):
    """Version 2 keeps each code cell's time (the per-lab budgets); a version-1 file is still
    read for its records, and gives no times, so its lab gets the flat limits."""
    file = tmp_path / "lab.json"
    cells = [{"id": "a", "grade_id": None, "source": "d1", "seconds": 1.5}]
    references.write(file, ReferenceFile(version=2, observations={}, seconds=3.0, cells=cells))
    assert references.timing(file) == (cells, 3.0)
    references.write(file, ReferenceFile(key="k", observations={"t": []}, seconds=3.0))  # v1
    assert references.timing(file) is None and references.observations(file) == {"t": []}


def test_damaged_times_are_no_times(tmp_path):
    file = tmp_path / "lab.json"
    for cells in ([{"id": "a"}], "many", [], [{"source": "d", "seconds": "slow"}], None):
        references.write(file, {"version": 2, "observations": {}, "seconds": 1, "cells": cells})
        assert references.timing(file) is None, cells
    references.write(file, {"version": "two", "cells": [{"source": "d", "seconds": 1}]})
    assert references.timing(file) is None
    assert references.timing(tmp_path / "missing.json") is None


def test_the_whole_run_is_never_less_than_its_cells(tmp_path):
    file = tmp_path / "lab.json"
    cells = [{"id": None, "grade_id": None, "source": "d", "seconds": 4.0}] * 2
    references.write(file, {"version": 2, "observations": {}, "seconds": 1.0, "cells": cells})
    assert references.timing(file)[1] == 8.0


def test_a_tasks_copy_keeps_the_records_and_times_and_no_key(tmp_path):
    """What the class run ships to a task (`times`) and what the task writes (`task_copy`)
    give its sandbox the same per-cell times and its judge the same records as the course's
    own file; a file without times gives a copy without them (the flat limits)."""
    course, copy = tmp_path / "lab.json", tmp_path / "task" / "lab.json"
    observed = {"t1": [{"name": "f(x)", "value": 1.0, "rtol": 0.0, "atol": 0.0, "hint": None}]}
    cells = [{"id": "a", "grade_id": "t1", "source": "d1", "seconds": 1.5}]
    references.write(
        course, ReferenceFile(version=2, key="k", observations=observed, seconds=3.0, cells=cells)
    )
    references.write(copy, references.task_copy(observed, references.times(course)))
    assert references.timing(copy) == references.timing(course) == (cells, 3.0)
    assert references.observations(copy) == observed and "key" not in references.read(copy)
    references.write(course, ReferenceFile(key="k", observations=observed, seconds=3.0))  # v1
    assert references.times(course) == {}
    references.write(copy, references.task_copy(observed, references.times(course)))
    assert references.timing(copy) is None and references.observations(copy) == observed
