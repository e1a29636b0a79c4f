"""The PyTorch messages the feedback may quote (graders/judge/torch_errors.json) hold on this
torch: every snippet of graders/judge/torch_errors.py raises a message one of its templates
matches, each slot a typed value. Here, beside the claims, because tests/student/torch_check.py
runs this folder with each torch it tries (`make torch-check TORCH=...`): a torch whose wording
the file lacks fails here, and `python -m graders.judge.torch_errors build` with that torch adds
it (until then the judge says such an error in its own words, tests/judge/test_torch_errors.py).
"""

from __future__ import annotations

import json
import shutil

import torch

from graders.judge import torch_errors


def test_the_feedbacks_known_messages_hold_on_this_torch(tmp_path):
    """check() on this torch; then, where the file was made on this torch, build on a copy of it
    changes nothing, and on a file of another torch adds this torch's templates and keeps the
    other's. One test, so that the snippets' first run (3 s of torch.func and torch.jit
    warming up) is paid once: build after check takes a tenth of a second."""
    problems = torch_errors.check()
    assert problems == [], (
        f"torch {torch.__version__}: graders/judge/torch_errors.json lacks these messages; run "
        "`python -m graders.judge.torch_errors build` with this torch and commit:\n"
        + "\n".join(problems)
    )
    if torch_errors.this_torch() not in torch_errors.load()["torch"]:
        return  # a torch the file was not made on: that its messages match is what counts
    made = tmp_path / "t.json"
    shutil.copy(torch_errors.DATA, made)
    assert torch_errors.build(made) == []
    committed = json.loads(torch_errors.DATA.read_text())
    assert json.loads(made.read_text()) == committed, (
        "run `python -m graders.judge.torch_errors build` and commit the file"
    )
    # a file of another torch only: this torch's templates are added, the other's kept
    other = dict(committed, torch=["2.0.0"])
    other["templates"] = [dict(e, torch=["2.0.0"]) for e in committed["templates"]]
    made.write_text(json.dumps(other))
    assert torch_errors.build(made) == []
    both = json.loads(made.read_text())
    assert both["torch"] == ["2.0.0", torch_errors.this_torch()]
    assert [e for e in both["templates"] if "2.0.0" in e["torch"]] != []
    torch_errors.load.cache_clear()
