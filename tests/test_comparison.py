"""Records compare by name, order and value, with the reference's tolerances
(graders/comparison.py); the sentence names the part and never a reference value."""

import torch
from helpers import record

from graders.comparison import first_difference as compare


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
