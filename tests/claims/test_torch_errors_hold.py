"""The PyTorch messages the feedback may quote (graders/judge/torch_errors.json) hold on this
torch: every snippet of graders/judge/torch_errors.py raises a message one of its templates
matches, each slot a typed value. Here, beside the claims, because tests/student/torch_check.py
runs this folder with each torch it tries (`make torch-check TORCH=...`): a torch whose wording
the file lacks fails here, and `python -m graders.judge.torch_errors build` with that torch adds
it (until then the judge says such an error in its own words, tests/judge/test_torch_errors.py).
"""

from __future__ import annotations

import torch

from graders.judge import torch_errors


def test_the_feedbacks_known_messages_hold_on_this_torch():
    problems = torch_errors.check()
    assert problems == [], (
        f"torch {torch.__version__}: graders/judge/torch_errors.json lacks these messages; run "
        "`python -m graders.judge.torch_errors build` with this torch and commit:\n"
        + "\n".join(problems)
    )
