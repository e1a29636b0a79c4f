"""graders/formats/verdict.py: the lines `--sentences` prints under a graded hand-in."""

from graders.formats.verdict import failures


def test_failures_lists_the_checks_that_did_not_pass_in_notebook_order():
    verdicts = {
        "test_b": {"kind": "visible", "sentence": "A visible check failed: b.", "cell": 9},
        "test_a": {"kind": "passed", "sentence": "Passed.", "cell": 3},
        "test_c": {"kind": "not_answered", "sentence": "Not answered yet.", "cell": 5},
        "test_d": {"kind": "limit", "sentence": "Stopped: over its time budget.", "cell": 9},
    }
    assert failures(verdicts) == [
        "test_c: Not answered yet.",
        "test_b: A visible check failed: b.",
        "test_d: Stopped: over its time budget.",
    ]
    assert failures({}) == []
