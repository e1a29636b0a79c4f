"""PyTorch's error templates (graders/judge/torch_errors.py, graders/judge/torch_errors.json): each
still matches the message the installed torch raises (a torch upgrade that changes one fails here:
run `python -m graders.judge.torch_errors build`, review, commit), and a message is shown only as
trusted template words and typed values, whatever the kernel put in it."""

from __future__ import annotations

import re
import time
import tomllib

import torch

from graders.config.course import REPO
from graders.judge import torch_errors
from graders.judge.judge import visible_failure
from graders.judge.torch_errors import Budget, message

BAD = "[" + "x" * 30 + "]"


def torch_range() -> tuple[tuple[int, int], tuple[int, int]]:
    """pyproject.toml's `torch>=A.B,<C.D` as ((A, B), (C, D))."""
    with open(REPO / "pyproject.toml", "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"torch\s*[<>=]", d)]
    found = re.fullmatch(r"torch\s*>=\s*(\d+)\.(\d+)\s*,\s*<\s*(\d+)\.(\d+)", spec.strip())
    assert found, spec
    a, b, c, d = map(int, found.groups())
    return (a, b), (c, d)


def test_the_file_has_every_snippet_for_each_of_its_torches():
    """(That each snippet's message on this torch matches one of its templates is
    tests/claims/test_torch_errors_hold.py's, run with every torch make torch-check tries.)"""
    data = torch_errors.load()
    assert torch.__version__.split("+")[0] in data["torch"]
    assert 25 <= len(data["templates"]) <= 90
    assert {e["type"] for e in data["templates"]} <= set(data["exceptions"])
    for version in data["torch"]:  # each torch: every snippet, once
        snippets = [n for e in data["templates"] if version in e["torch"] for n in e["snippets"]]
        assert sorted(snippets) == sorted(torch_errors.SNIPPETS), version
    assert {v for e in data["templates"] for v in e["torch"]} == set(data["torch"])


def test_the_file_holds_both_ends_of_the_torch_range():
    """Made with the range's oldest and newest torch (tests/claims/test_torch_errors_hold.py
    checks it there, in tests/student/torch_check.py's environments)."""
    (major, floor), (_, bound) = torch_range()
    minors = {tuple(map(int, v.split(".")[:2])) for v in torch_errors.load()["torch"]}
    assert (major, floor) in minors and (major, bound - 1) in minors, minors


def test_a_message_of_another_torch_is_known_and_an_unknown_one_is_said_in_the_judges_words(
    monkeypatch,
):
    """torch 2.10 and 2.15 word some errors differently from 2.14: the file knows each torch's
    wording; a wording it does not know is never shown, and the judge names the error alone."""
    data = torch_errors.load()
    of = {v: [e for e in data["templates"] if v in e["torch"]] for v in data["torch"]}
    only = {  # a wording of one torch of the range that another lacks
        (v, e["type"], e["template"])
        for v, entries in of.items()
        for e in entries
        if "{" not in e["template"] and any(e not in entries2 for entries2 in of.values())
    }
    assert only, "the torches of the file word every error alike: pick another example"
    _version, ename, text = sorted(only)[0]
    source = "check(x)\n"
    output = {"ename": ename, "evalue": text}
    assert message(ename, text) == text
    assert f"(its message: {text})" in visible_failure(source, 1, ename, output)
    without = dict(data, templates=[e for e in data["templates"] if e["template"] != text])
    monkeypatch.setattr(torch_errors, "load", lambda path=None: without)
    assert message(ename, text) is None
    said = visible_failure(source, 1, ename, output)
    assert said == f"A visible check stopped at line 1 (`check(x)`) with {ename}."


def test_a_known_message_is_shown_with_its_typed_values():
    said = message("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)")
    assert said == "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)"
    inplace = (
        "one of the variables needed for gradient computation has been modified by an inplace "
        "operation: [torch.FloatTensor [3, 4]], which is output 0 of MulBackward0, is at "
        "version 1; expected version 0 instead. Hint: enable anomaly detection to find the "
        "operation that failed to compute its gradient, with "
        "torch.autograd.set_detect_anomaly(True, check_nan=False)."
    )
    assert "output 0 of MulBackward0, is at version 1" in message("RuntimeError", inplace)
    # cut by `attempt` at 200 characters: shown up to there
    cut = message("RuntimeError", inplace[:200])
    assert cut.startswith("one of the variables") and cut.endswith("…") and len(cut) < 210
    # the type must be the template's, and a known one
    assert message("ValueError", "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)") is None
    assert message("MyError", "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)") is None


def test_free_text_in_a_slot_is_never_shown():
    for hostile in [
        "mat1 and mat2 shapes cannot be multiplied (3x4 and secretx6)",
        "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6) and my secret",
        "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6\nsecret)",
        "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)" + " " * 700,
        "mat1 and mat2 shapes cannot be multiplied (３x4 and 5x6)",  # a fullwidth digit
        "mat1 and mat2 shapes cannot be multiplied (123456x4 and 5x6)",  # too many digits
    ]:
        said = message("RuntimeError", hostile)
        assert said is None or ("secret" not in said and "３" not in said and "123456" not in said)
    # a name the student chose (a Function's class name) is never shown
    said = message(
        "RuntimeError",
        "function MySecretBackward returned an incorrect number of gradients (expected 1, got 2)",
    )
    assert (
        said == "function …Backward returned an incorrect number of gradients (expected 1, got 2)"
    )
    # a listed slot shows only listed values
    said = message(
        "RuntimeError",
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [torch.FloatTensor [3]], which is output 0 of {BAD}, is at version 1; "
        "expected version 0 instead. Hint: x",
    )
    assert said is None or BAD not in said
    # a template's own text nested in a slot is not a value
    nested = (
        "element element 0 of tensors of tensors does not require grad and does not have a grad_fn"
    )
    assert "element 0 of tensors of" not in (message("RuntimeError", nested) or "")


def test_numbers_beyond_the_budget_and_hidden_values_are_elided():
    text = "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)"
    assert message("RuntimeError", text, Budget(2)) == (
        "mat1 and mat2 shapes cannot be multiplied (3x4 and …x…)"
    )
    assert message("RuntimeError", text, elide=True) == (
        "mat1 and mat2 shapes cannot be multiplied (…x… and …x…)"
    )


def test_no_message_takes_long_to_match():
    """No regex bomb: the templates are matched by plain search, in linear time."""
    started = time.monotonic()
    for text in [
        "mat1 and mat2 shapes cannot be multiplied (" + "3x4 and " * 70,
        "The size of tensor a (" * 25,
        "a" * 599,
        "[" * 599,
        ", " * 299,
    ]:
        for ename in ("RuntimeError", "ValueError", "IndexError"):
            message(ename, text)
    assert time.monotonic() - started < 2.0


def test_pythons_own_messages_show_types_from_a_list_and_never_a_name():
    said = message("ValueError", "not enough values to unpack (expected 1, got 0)")
    assert said == "not enough values to unpack (expected 1, got 0)"
    said = message("AttributeError", "'NoneType' object has no attribute 'my_secret'")
    assert said == "'NoneType' object has no attribute '…'"
    said = message("TypeError", "'MySecretClass' object is not callable")
    assert said == "'…' object is not callable"
    said = message("TypeError", "my_secret() missing 1 required positional argument: 'x'")
    assert said == "…() missing 1 required positional argument: '…'"
