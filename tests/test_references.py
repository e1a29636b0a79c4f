"""Reference files (graders/references.py): written whole, read back as written, and a missing
or damaged file costs a lab its place in the grading order, nothing more."""

from __future__ import annotations

import pytest

from graders import references
from graders.references import ReferenceFile


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
