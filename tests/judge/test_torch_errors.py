"""PyTorch's error templates (graders/judge/torch_errors.py, graders/judge/torch_errors.json): each
still matches the message the installed torch raises (a torch upgrade that changes one fails here:
run `python -m graders.judge.torch_errors build`, review, commit), and a message is shown only as
trusted template words and typed values, whatever the kernel put in it."""

from __future__ import annotations

import json
import time

import torch

from graders.judge import torch_errors
from graders.judge.torch_errors import Budget, message

BAD = "[" + "x" * 30 + "]"


def test_every_snippet_still_raises_a_message_its_template_matches():
    assert torch_errors.check() == []
    data = torch_errors.load()
    assert data["torch"] == torch.__version__.split("+")[0]
    assert 25 <= len(data["templates"]) <= 60
    assert {e["type"] for e in data["templates"]} <= set(data["exceptions"])
    snippets = [name for e in data["templates"] for name in e["snippets"]]
    assert sorted(snippets) == sorted(torch_errors.SNIPPETS)


def test_the_committed_file_is_what_build_makes_on_this_torch(tmp_path):
    assert torch_errors.build(tmp_path / "t.json") == []
    made = json.loads((tmp_path / "t.json").read_text())
    committed = json.loads(torch_errors.DATA.read_text())
    assert made == committed, "run `python -m graders.judge.torch_errors build` and commit the file"
    torch_errors.load.cache_clear()


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
