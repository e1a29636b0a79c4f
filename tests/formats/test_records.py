"""The record schema (graders/formats/records.py): anything the kernel malforms is refused with a
reason, within the limits, and a cell's records are read in order."""

import json

import pytest
from helpers import display_output, graded_cell, record

from graders.formats.records import Malformed, cell_records, parse_record


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        [1, 2],
        {"name": "x", "value": 1},  # fields missing
        {"name": "x", "value": 1, "rtol": 0, "atol": 0, "extra": 1},
        {"name": 3, "value": 1, "rtol": 0, "atol": 0},
        {"name": "x" * 600, "value": 1, "rtol": 0, "atol": 0},
        {"name": "x", "value": 1, "rtol": -1, "atol": 0},
        {"name": "x", "value": 1, "rtol": True, "atol": 0},
        {"name": "x", "value": float("inf"), "rtol": 0, "atol": 0},
        {
            "name": "x",
            "value": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
            "rtol": 0,
            "atol": 0,
        },  # fmt: skip
    ],
)
def test_malformed_records_are_refused_with_a_reason(raw):
    with pytest.raises(Malformed):
        parse_record(raw, [10_000])


def test_too_many_items_are_refused():
    with pytest.raises(Malformed):
        parse_record({"name": "x", "value": list(range(100)), "rtol": 0, "atol": 0}, [50])


def test_records_of_a_cell_are_read_in_order():
    cell = graded_cell(
        "", [display_output(record("a", 1)), display_output(json.dumps(record("b", 2)))]
    )
    assert [r["name"] for r in cell_records(cell)] == ["a", "b"]
