"""Output to stderr never costs points (graders/judge/stderr.py): `NeverCosts` drops what a
graded cell wrote to stderr and nothing else, and `teach_validate` puts it after nbgrader
validate's own steps, once, whatever number of times it is called."""

from __future__ import annotations

from nbformat.v4 import new_code_cell, new_output

from graders.judge.stderr import NeverCosts, teach_validate


def cell(graded: bool):
    made = new_code_cell("print(1)")
    made.outputs = [
        new_output("stream", name="stderr", text="a warning\n"),
        new_output("stream", name="stdout", text="1\n"),
        new_output("error", ename="CheckFailed", evalue="no", traceback=[]),
    ]
    if graded:
        made.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1}
    return made


def test_only_a_graded_cells_stderr_is_dropped():
    graded, _ = NeverCosts().preprocess_cell(cell(graded=True), {}, 0)
    assert [o.get("name", o.output_type) for o in graded.outputs] == ["stdout", "error"]
    plain, _ = NeverCosts().preprocess_cell(cell(graded=False), {}, 0)
    assert len(plain.outputs) == 3


def test_validate_runs_it_after_its_own_steps_and_once():
    """NeverCosts, then Unmarked (graders/judge/overwrite.py: a notebook without nbgrader's
    metadata fails validation, as autograde grades it 0), each once."""
    from nbgrader.validator import Validator

    from graders.judge.overwrite import Unmarked

    teach_validate()
    teach_validate()
    steps = Validator().preprocessors
    assert steps[-2:] == [NeverCosts, Unmarked]
    assert steps.count(NeverCosts) == 1 and steps.count(Unmarked) == 1
