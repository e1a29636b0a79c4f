"""graders/formats/verdict.py: a test cell's verdict as a typed record, read back from the
graded notebook's metadata and the grading log (None where a value is not a verdict), and the
lines `--sentences` prints under a graded hand-in."""

from graders.formats.verdict import Kind, Verdict, failures, first_limit


def test_only_failures_are_listed_in_the_notebooks_order():
    verdicts = {
        "test_b": Verdict(Kind.VISIBLE, "A visible check failed: b.", cell=9),
        "test_a": Verdict(Kind.PASSED, "Passed.", cell=3),
        "test_c": Verdict(Kind.NOT_ANSWERED, "Not answered yet.", cell=5),
        "test_d": Verdict(Kind.LIMIT, "Stopped: over its time budget.", cell=9),
    }
    assert failures(verdicts) == [
        "test_c: Not answered yet.",
        "test_b: A visible check failed: b.",
        "test_d: Stopped: over its time budget.",
    ]
    assert first_limit(verdicts) == ("test_d", verdicts["test_d"])
    assert first_limit({"test_a": verdicts["test_a"]}) is None


def test_a_verdict_is_read_back_as_written_and_anything_else_is_none():
    verdict = Verdict(Kind.HIDDEN, "A hidden check failed.", cell=4)
    assert verdict.metadata() == {"kind": "hidden", "sentence": "A hidden check failed."}
    assert Verdict.from_metadata(verdict.metadata(), 4) == verdict
    assert Verdict.from_json(verdict.as_json()) == verdict
    for raw in (None, [], "passed", {"kind": "passed"}, {"kind": "won", "sentence": "Passed."},
                {"sentence": "Passed."}, {"kind": "passed", "sentence": 3}):  # fmt: skip
        assert Verdict.from_json(raw) is None, raw
    assert Verdict.from_json({"kind": "passed", "sentence": "", "cell": "x"}).cell == 0
