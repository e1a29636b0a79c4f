"""The judge (graders/judge/judge.py): a cell's verdict is worded from the release only, never
from what the kernel printed; hidden regions and the failing line are found."""

import nbformat
from helpers import display_output, error_output, graded_cell, record

from graders.judge.judge import hidden_lines, verdict

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
    kind, words = verdict(graded_cell(SOURCE, [error_output("CheckFailed", 5)]), 0, ref, {})
    assert kind == "visible" and words == "A visible check failed: f(2) should be 2, got …"
    # a hidden check where the student's code raised: the check's name, not its code
    kind, words = verdict(graded_cell(SOURCE, [error_output("TypeError", 8)]), 0, ref, {})
    assert kind == "hidden" and "'f on hidden x'" in words and "TypeError" in words
    assert "secret" not in words and "observe" not in words
    # records that differ
    got = [display_output(record("f on hidden x", 15))]
    kind, words = verdict(graded_cell(SOURCE, got), 0, ref, {})
    assert kind == "hidden" and "f on hidden x: the result is wrong" in words and "14" not in words
    # records that match: passed, whatever the kernel printed to stderr
    stderr = nbformat.v4.new_output("stream", name="stderr", text="progress 10%")
    good = [stderr, display_output(record("f on hidden x", 14))]
    assert verdict(graded_cell(SOURCE, good), 0, ref, {}) == ("passed", "Passed.")
    # a malformed record fails the cell, not the run
    bad = [display_output({"name": "f on hidden x", "value": 14})]
    assert verdict(graded_cell(SOURCE, bad), 0, ref, {})[0] == "records"
    # a limit the grader measured is named by the grader
    kind, words = verdict(graded_cell(SOURCE, []), 4, ref, {4: "the time limit of 20 s"})
    assert kind == "limit" and "20 s" in words
    # an exception name that is not a name is not repeated
    kind, words = verdict(graded_cell(SOURCE, [error_output("<b>x</b>", 4)]), 0, ref, {})
    assert "<b>" not in words


def test_a_check_raised_while_handling_another_error_is_found_on_its_own_line():
    traceback = [
        "Cell In[7], line 4",
        "ValueError: from the student's code",
        "During handling of the above exception, another exception occurred:",
        "Cell In[7], line 5",
        "Cell In[2], line 40, in check",
    ]
    from graders.judge.judge import failing_line

    assert failing_line(traceback) == 5
    assert failing_line(traceback[:2]) == 4


def _raised(ename: str, evalue: str, line: int):
    return nbformat.v4.new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"Cell In[3], line {line}"]
    )


TYPED = "\n".join(
    [
        "_v = f(2)",
        "check(_v == 2, f'f(2) should be 2 (it gave {_v})')",
        "f(3).sum().backward()",
        "### BEGIN HIDDEN TESTS",
        "from grader_observe import observe",
        "observe('f on hidden x', f(7))",
        "### END HIDDEN TESTS",
    ]
)


def test_a_failed_checks_typed_values_are_shown_and_nothing_else():
    ref = [record("f on hidden x", 14)]
    for evalue, shown in [
        ("f(2) should be 2 (it gave 3)", "(it gave 3)"),
        ("f(2) should be 2 (it gave (3, 4))", "(it gave (3, 4))"),
        ("f(2) should be 2 (it gave secret)", "(it gave …)"),
        ("f(2) should be 2 (it gave 3) and secret", "(it gave …)"),
        ("secret", "(it gave …)"),
    ]:
        cell = graded_cell(TYPED, [_raised("CheckFailed", evalue, 2)])
        kind, words = verdict(cell, 0, ref, {})
        assert kind == "visible" and words == f"A visible check failed: f(2) should be 2 {shown}"


def test_pytorchs_own_message_is_shown_when_it_is_a_known_one():
    ref = [record("f on hidden x", 14)]
    known = "element 0 of tensors does not require grad and does not have a grad_fn"
    kind, words = verdict(graded_cell(TYPED, [_raised("RuntimeError", known, 3)]), 0, ref, {})
    assert kind == "visible" and words == (
        "A visible check stopped at line 3 (`f(3).sum().backward()`) with RuntimeError "
        f"(its message: {known})."
    )
    for unknown in ["element 0 of my secret", known + " secret", "secret: " + known]:
        cell = graded_cell(TYPED, [_raised("RuntimeError", unknown, 3)])
        assert verdict(cell, 0, ref, {})[1].endswith("with RuntimeError.")
    # a slot's text that is not a value of its type is elided
    cell = graded_cell(TYPED, [_raised("RuntimeError", known.replace("0", "secret"), 3)])
    assert "(its message: element … of tensors" in verdict(cell, 0, ref, {})[1]
    # only the first line is PyTorch's message (torch adds lines of its own)
    cell = graded_cell(TYPED, [_raised("RuntimeError", known + "\nsecret", 3)])
    assert known in verdict(cell, 0, ref, {})[1] and "secret" not in verdict(cell, 0, ref, {})[1]
    # in a hidden region, its values are elided: they could describe the hidden inputs
    shapes = "mat1 and mat2 shapes cannot be multiplied (7x4 and 5x6)"
    kind, words = verdict(graded_cell(TYPED, [_raised("RuntimeError", shapes, 6)]), 0, ref, {})
    assert kind == "hidden" and "(…x… and …x…)" in words and "7" not in words
    # torch's own NotImplementedError is an error, an exercise's stub is "not answered"
    jvp = "You must implement the jvp function for custom autograd.Function to use it with "
    jvp += "forward mode AD."
    kind, words = verdict(graded_cell(TYPED, [_raised("NotImplementedError", jvp, 3)]), 0, ref, {})
    assert kind == "visible" and jvp in words
    stub = _raised("NotImplementedError", "write f", 3)
    assert verdict(graded_cell(TYPED, [stub]), 0, ref, {})[0] == "not_answered"


def test_a_loops_literal_names_are_shown_when_the_kernel_says_one_of_them():
    source = "\n".join(
        [
            'for _name, _t in (("x", _x), ("y", _y)):',
            "    check(_t.grad is not None, f'{_name}.grad should be filled, it is None')",
        ]
    )
    for evalue, shown in [
        ("y.grad should", "y.grad should"),
        ("secret.grad should", "….grad should"),
    ]:
        cell = graded_cell(source, [_raised("CheckFailed", f"{evalue} be filled, it is None", 2)])
        assert (
            verdict(cell, 0, [], {})[1] == f"A visible check failed: {shown} be filled, it is None"
        )


def test_a_name_not_defined_sends_the_student_to_the_cell_that_defines_it():
    """The cell that should define a name failed or did not run: the sentence says so, names
    the name only when the released check uses it, and never quotes the kernel's text."""

    def said(evalue):
        output = error_output("NameError", 4)
        output["evalue"] = evalue
        return verdict(graded_cell(SOURCE, [output]), 0, [], {})

    kind, words = said("name 'f' is not defined")
    assert kind == "visible" and "it uses `f`, which is not defined" in words
    assert "stopped at line" not in words and "Run the exercise cell" in words
    for hostile in ("name 'leak_me' is not defined", "name 'f' is not defined <b>x</b>", "x"):
        kind, words = said(hostile)
        assert "leak_me" not in words and "<b>" not in words
        assert "a name it uses is not defined" in words


def test_an_instructors_assert_message_reaches_the_student_from_the_release():
    """nbgrader's own style of visible test: `assert ..., "message"`. The message the
    instructor wrote is quoted from the release (not from the kernel's text); values the
    student's code computed keep the elision rule (only typed values are shown), and an
    assert in a hidden region still says nothing of it."""
    source = "\n".join(
        [
            'assert double(2) == 4, "double(2) should be 4 but it is " + repr(double(2))',
            'assert double(3) == 6, f"double(3) should be 6 (it gave {double(3)})"',
            "### BEGIN HIDDEN TESTS",
            'assert double(7) == 14, "double(7) should be 14"',
            "### END HIDDEN TESTS",
        ]
    )

    def failed(line, evalue):
        output = error_output("AssertionError", line)
        output.evalue = evalue
        return verdict(graded_cell(source, [output]), 0, [], {})

    assert failed(1, "double(2) should be 4 but it is 'my secret text'") == (
        "visible",
        "A visible check failed: double(2) should be 4 but it is …",
    )
    assert failed(1, "double(2) should be 4 but it is 5") == (
        "visible",
        "A visible check failed: double(2) should be 4 but it is 5",
    )
    assert failed(2, "double(3) should be 6 (it gave 7)")[1] == (
        "A visible check failed: double(3) should be 6 (it gave 7)"
    )
    kind, words = failed(4, "double(7) should be 14")
    assert kind == "hidden" and "double(7) should be 14" not in words
