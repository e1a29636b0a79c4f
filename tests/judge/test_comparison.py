"""Records compare by name, order and value, with the reference's tolerances
(graders/judge/comparison.py); the sentence names the part and never a reference value."""

import torch
from helpers import record

from graders.judge.comparison import first_difference as compare


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


REF = torch.tensor([1.0, -2.0, 0.5, 0.0])


def test_values_off_by_one_constant_factor_are_told_so():
    ref = [record("H @ v on random v", REF)]
    for factor, words in [
        (2.0, " (twice the solution's)"),
        (0.5, " (half the solution's)"),
        (-1.0, " (the solution's with the opposite sign)"),
        (3.7, ""),
    ]:
        got = compare(ref, [record("H @ v on random v", factor * REF)])
        assert got == f"H @ v on random v: the result has the wrong values, off by one constant " \
            f"factor{words}", factor  # fmt: skip
    # not a constant factor: only wrong; one number is always a multiple: only wrong
    other = compare(ref, [record("H @ v on random v", torch.tensor([1.0, -2.0, 0.5, 1.0]))])
    assert other == "H @ v on random v: the result has the wrong values"
    single = [record("s", torch.tensor([0.0, 2.0]))]
    assert "factor" not in compare(single, [record("s", torch.tensor([0.0, 4.0]))])
    # within the reference's tolerance, a factor of 1 is a pass, not a factor
    assert compare(ref, [record("H @ v on random v", REF * (1 + 1e-7))]) is None
