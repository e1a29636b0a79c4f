"""The judge: records compare by name, order and value, with the reference's tolerances;
anything the student adds, drops, changes or malforms is caught, the sentence names the
part and never a reference value, and a cell's verdict is worded from the release only."""

import json

import nbformat
import numpy as np
import pytest
import torch

from graders.comparison import first_difference as compare
from graders.judge import hidden_lines, verdict
from graders.kernel.grader_observe import encode
from graders.records import MIME, Malformed, cell_records, parse_record


def record(name, value, rtol=1e-5, atol=1e-8, hint=None):
    return {"name": name, "value": encode(value), "rtol": rtol, "atol": atol, "hint": hint}


def test_encode_handles_tensors_numpy_and_containers():
    got = encode({"t": torch.tensor([[1.0, 2.0]]), "a": np.arange(3), "s": np.float64(0.5)})
    assert got == {
        "t": {"tensor": [[1.0, 2.0]], "shape": [1, 2], "dtype": "torch.float32"},
        "a": [0, 1, 2],
        "s": 0.5,
    }
    assert encode(float("nan")) == "nan"


def test_equal_records_pass_and_tolerances_come_from_the_reference():
    ref = [record("g", torch.tensor([1.0, 2.0]), atol=1e-6)]
    assert compare(ref, [record("g", torch.tensor([1.0, 2.0 + 1e-7]))]) is None
    # the student's record asks for a huge tolerance: ignored
    assert compare(ref, [record("g", torch.tensor([1.0, 2.1]), rtol=1e9, atol=1e9)])


def test_differences_name_the_part_and_never_a_reference_value():
    ref = [record("a", 1), record("f(x) on random x", {"out": torch.tensor([7.25, 8.5])})]
    assert "did not get as far as 'f(x) on random x'" in compare(ref, [record("a", 1)])
    extra = [record("a", 1), ref[1], record("c", 0)]
    assert "more results" in compare(ref, extra)
    wrong = compare(ref, [record("a", 1), record("f(x) on random x", {"out": torch.zeros(2)})])
    assert wrong == "f(x) on random x: out has the wrong values"
    shape = compare(ref, [record("a", 1), record("f(x) on random x", {"out": torch.zeros(3)})])
    assert "out has shape (3,)" in shape and "7.25" not in shape and "2" not in shape
    none = compare(ref, [record("a", 1), record("f(x) on random x", {"out": None})])
    assert "out is None where the solution gives a tensor" in none
    assert "expected next" in compare(ref, [ref[1], ref[0]])
    assert compare([record("n", 1)], [record("n", True)])  # a bool is not a number
    hinted = [record("n", 1.0, hint="reset the gradient first")]
    assert compare(hinted, [record("n", 2.0)]).endswith("(reset the gradient first)")
    # the hint is the reference's: a student's own hint is not shown
    assert "mine" not in compare([record("n", 1.0)], [record("n", 2.0, hint="mine")])


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


def test_cell(source, outputs):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1, "solution": False}
    cell.outputs = outputs
    return cell


test_cell.__test__ = False  # a helper, not a test


def error(ename, line):
    return nbformat.v4.new_output(
        "error", ename=ename, evalue="secret " * 10, traceback=[f"Cell In[3], line {line}"]
    )


def display(rec):
    return nbformat.v4.new_output("display_data", data={MIME: rec})


SOURCE = "\n".join(
    [
        "### BEGIN HIDDEN TESTS",
        "def _helper(): pass",
        "### END HIDDEN TESTS",
        "_v = f(2)",
        "check(_v == 2, f'f(2) should be 2, got {_v}')",
        "### BEGIN HIDDEN TESTS",
        "from grader_observe import observe",
        "observe('f on hidden x', f(7))",
        "### END HIDDEN TESTS",
    ]
)


def test_hidden_lines_cover_every_region():
    assert hidden_lines(SOURCE) == {1, 2, 3, 6, 7, 8, 9}


def test_verdicts_are_worded_from_the_release_never_from_the_kernel():
    ref = [record("f on hidden x", 14)]
    # a visible check: its message as written, placeholders elided, kernel text dropped
    kind, words = verdict(test_cell(SOURCE, [error("CheckFailed", 5)]), 0, ref, {})
    assert kind == "visible" and words == "A visible check failed: f(2) should be 2, got …"
    # a hidden check where the student's code raised: the check's name, not its code
    kind, words = verdict(test_cell(SOURCE, [error("TypeError", 8)]), 0, ref, {})
    assert kind == "hidden" and "'f on hidden x'" in words and "TypeError" in words
    assert "secret" not in words and "observe" not in words
    # records that differ
    got = [display(record("f on hidden x", 15))]
    kind, words = verdict(test_cell(SOURCE, got), 0, ref, {})
    assert kind == "hidden" and "f on hidden x: the result is wrong" in words and "14" not in words
    # records that match: passed, whatever the kernel printed to stderr
    stderr = nbformat.v4.new_output("stream", name="stderr", text="progress 10%")
    good = [stderr, display(record("f on hidden x", 14))]
    assert verdict(test_cell(SOURCE, good), 0, ref, {}) == ("passed", "Passed.")
    # a malformed record fails the cell, not the run
    bad = [display({"name": "f on hidden x", "value": 14})]
    assert verdict(test_cell(SOURCE, bad), 0, ref, {})[0] == "records"
    # a limit the grader measured is named by the grader
    kind, words = verdict(test_cell(SOURCE, []), 4, ref, {4: "the time limit of 20 s"})
    assert kind == "limit" and "20 s" in words
    # an exception name that is not a name is not repeated
    kind, words = verdict(test_cell(SOURCE, [error("<b>x</b>", 4)]), 0, ref, {})
    assert "<b>" not in words


def test_records_of_a_cell_are_read_in_order():
    cell = test_cell("", [display(record("a", 1)), display(json.dumps(record("b", 2)))])
    assert [r["name"] for r in cell_records(cell)] == ["a", "b"]


def test_the_reference_is_made_again_when_the_recorder_changes(tmp_path, monkeypatch):
    """The cached reference is stale when graders/kernel/ changes (how values are recorded)."""
    from graders import build_reference

    kernel = tmp_path / "kernel"
    kernel.mkdir()
    (kernel / "grader_observe.py").write_text("# version 1\n")
    monkeypatch.setattr(build_reference, "KERNEL_SIDE", kernel)
    runs = []
    monkeypatch.setattr(
        build_reference,
        "reference_observations",
        lambda solution, threads: runs.append(1) or {"t": []},
    )
    solution, cache = tmp_path / "lab.ipynb", tmp_path / "reference" / "lab.json"
    solution.write_text("{}")
    for _ in range(2):
        assert build_reference.cached_reference(solution, cache) == {"t": []}
    assert len(runs) == 1
    (kernel / "grader_observe.py").write_text("# version 2\n")
    build_reference.cached_reference(solution, cache)
    assert len(runs) == 2


def test_a_check_raised_while_handling_another_error_is_found_on_its_own_line():
    traceback = [
        "Cell In[7], line 4",
        "ValueError: from the student's code",
        "During handling of the above exception, another exception occurred:",
        "Cell In[7], line 5",
        "Cell In[2], line 40, in check",
    ]
    from graders.judge import failing_line

    assert failing_line(traceback) == 5
    assert failing_line(traceback[:2]) == 4
