"""The judge (graders/judge.py): a cell's verdict is worded from the release only, never
from what the kernel printed; hidden regions and the failing line are found."""

import nbformat
from helpers import display_output, error_output, graded_cell, record

from graders.judge import hidden_lines, verdict

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
    from graders.judge import failing_line

    assert failing_line(traceback) == 5
    assert failing_line(traceback[:2]) == 4
