"""The values of a failed check's message the judge shows (graders/judge/shown_values.py): typed
values only, re-formatted by the judge, at most 3 values and 4 numbers per check; the bound
on what they carry is the one README.md's threat model states."""

from __future__ import annotations

import math
import re
import time

from graders.config.course import REPO
from graders.judge import torch_errors
from graders.judge.shown_values import capacity_bits, fill

GROW = ["grow(model, Adam, 3) raised an error before it returned a model (the error: ", None,
        "); call it in the cell above to see it."]  # fmt: skip
SHAPE = ["Wh.grad has the wrong shape (it has ", None, ")"]


def message(parts, *values):
    it = iter(values)
    return "".join(next(it) if p is None else p for p in parts)


def test_typed_values_are_shown_and_formatted_by_the_judge():
    for value, shown in [
        ("(3, 4)", "(3, 4)"),
        ("(3,)", "(3,)"),
        ("()", "()"),
        ("torch.Size([3, 4])", "torch.Size([3, 4])"),
        ("torch.Size([])", "torch.Size([])"),
        ("3.14159265", "3.142"),
        ("1e-07", "1e-07"),
        ("-12", "-12"),
        ("True", "True"),
        ("None", "None"),
        ("torch.float64", "torch.float64"),
    ]:
        assert fill(SHAPE, message(SHAPE, value)) == message(SHAPE, shown), value
    error = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)"
    assert fill(GROW, message(GROW, error)) == message(GROW, error)
    assert fill(GROW, message(GROW, "IndexError")) == message(GROW, "IndexError")
    nested = "RuntimeError: " + error  # a known message inside a known message
    for unknown in ["RuntimeError: my own words", error + "\nsecret", error + " secret", nested]:
        assert fill(GROW, message(GROW, unknown)) == message(GROW, "RuntimeError: …")


def test_anything_else_stays_elided():
    for value in [
        "secret",
        "'secret'",
        "(3, 4, 5, 6, 7)",  # too many dims
        "(123456, 4)",  # too many digits
        "123456",
        "１２",  # fullwidth digits
        "torch.float64 secret",
        "torch.notadtype",
        "1" * 30 + ".0",
        "[3, 4]",
        "SecretError: mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)",
    ]:
        assert fill(SHAPE, message(SHAPE, value)) == message(SHAPE, "…"), value
    # the kernel's text is not the released message: nothing is recovered
    assert fill(SHAPE, "Wh.grad is wrong (3, 4)") == message(SHAPE, "…")
    assert fill(SHAPE, message(SHAPE, "(3, 4)") + "x") == message(SHAPE, "…")


def test_at_most_three_values_and_four_numbers_per_check():
    parts = ["a ", None, " b ", None, " c ", None, " d ", None, "."]
    assert fill(parts, "a 1 b True c None d False.") == "a 1 b True c None d …."
    assert fill(parts, "a (1, 2, 3) b 4 c 5 d 6.") == "a (1, 2, 3) b 4 c … d …."
    error = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)"
    said = fill(parts, f"a 1 b {error} c 2 d 3.")
    assert said == "a 1 b RuntimeError: mat1 and mat2 shapes cannot be multiplied " \
        "(3x4 and 5x…) c … d …."  # fmt: skip


def test_hostile_texts_are_cut_fast():
    parts = [p for i in range(30) for p in (f"v{i % 2} ", None)] + ["."]
    started = time.monotonic()
    for text in ["v0 " * 600, "v0 v1 " * 300 + ".", "(" * 1999, "v0 " + "(1, " * 490]:
        fill(parts, text)
    assert time.monotonic() - started < 1.0


def test_the_threat_model_states_the_bound_the_code_gives():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stated = re.search(r"at most (\d+) bits per failed check", readme)
    assert stated, "README.md's threat model must say how many bits a check's values carry"
    assert int(stated.group(1)) == math.ceil(capacity_bits())
    templates = len(torch_errors.load()["templates"])
    hidden = re.search(r"which of the (\d+)\s+messages: under (\d+) bits", readme)
    assert hidden and int(hidden.group(1)) == templates
    assert math.log2(templates + 1) < int(hidden.group(2))
