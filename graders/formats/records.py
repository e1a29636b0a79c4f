"""Records: what a hidden test observes in the kernel (graders/kernel/grader_observe.py), as
the judge reads it back outside, and the limits it must keep to.

A record is a display output of MIME type `MIME` holding a `Record`: {name, value, rtol, atol
[, hint]}; `value` is JSON (a tensor as {tensor, shape, dtype}). The kernel is hostile, so
every record is parsed against this schema, within `MAX_*`, before anything compares it:
`Malformed` says how it failed, in words. The MIME string itself is the kernel side's (that
file is all the kernel can import).
"""

from __future__ import annotations

import json
import math
from typing import TypedDict

from nbgrader.utils import is_grade, is_solution

from graders.kernel.grader_observe import MIME

__all__ = ["MIME", "Malformed", "Record", "Observations", "parse_record", "cell_records"]

MAX_RECORDS = 500  # per test cell
MAX_ITEMS = 2_000_000  # numbers, strings and containers in one cell's records
MAX_DEPTH = 32
MAX_TEXT = 500  # characters of a name or a hint
MAX_STRING = 10_000  # characters of a string inside a value


class Record(TypedDict):
    name: str
    value: object  # JSON: None, bool, int, float, str, list, dict; a tensor as a dict
    rtol: float
    atol: float
    hint: str | None


Observations = dict[str, list[Record]]  # a notebook's records, by test cell's grade_id


class Malformed(ValueError):
    """A record that does not follow the schema; the message says how, in words."""


def _check_value(value, budget: list[int], depth: int = 0) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise Malformed("the records are too large")
    if depth > MAX_DEPTH:
        raise Malformed("a record is nested too deeply")
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and len(value) > MAX_STRING:
            raise Malformed("a record holds an over-long string")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Malformed("a record holds a number that is not finite")
        return
    if isinstance(value, list):
        for item in value:
            _check_value(item, budget, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise Malformed("a record has a key that is not text")
            _check_value(item, budget, depth + 1)
        return
    raise Malformed(f"a record holds a value of type {type(value).__name__}")


def parse_record(raw, budget: list[int]) -> Record:
    """One record, checked against the schema: {name, value, rtol, atol[, hint]}."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise Malformed("a record is not valid JSON") from None
    if not isinstance(raw, dict):
        raise Malformed("a record is not a JSON object")
    if (
        not {"name", "value", "rtol", "atol"}
        <= set(raw)
        <= {"name", "value", "rtol", "atol", "hint"}
    ):
        raise Malformed("a record does not have the fields name, value, rtol, atol")
    name, hint = raw["name"], raw.get("hint")
    if not isinstance(name, str) or len(name) > MAX_TEXT:
        raise Malformed("a record's name is not a short text")
    if hint is not None and (not isinstance(hint, str) or len(hint) > MAX_TEXT):
        raise Malformed("a record's hint is not a short text")
    for key in ("rtol", "atol"):
        tol = raw[key]
        if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 <= tol < math.inf:
            raise Malformed(f"a record's {key} is not a number >= 0")
    _check_value(raw["value"], budget)
    return Record(name=name, value=raw["value"], rtol=float(raw["rtol"]),
                  atol=float(raw["atol"]), hint=hint)  # fmt: skip


def cell_records(cell) -> list[Record]:
    """The records of one test cell, in output order; raises Malformed."""
    rows, budget = [], [MAX_ITEMS]
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
        if isinstance(data, dict) and MIME in data:
            if len(rows) >= MAX_RECORDS:
                raise Malformed(f"more than {MAX_RECORDS} records")
            rows.append(parse_record(data[MIME], budget))
    return rows


def test_cells(nb):
    """(index, cell) of each test cell of a notebook: graded code that is not a solution."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and is_grade(cell) and not is_solution(cell):
            yield index, cell


test_cells.__test__ = False  # not a pytest test, whoever imports it


def records(nb) -> Observations:
    """The records of each test cell (by grade_id) of a notebook the grader trusts."""
    return {cell.metadata.nbgrader["grade_id"]: cell_records(cell) for _, cell in test_cells(nb)}
