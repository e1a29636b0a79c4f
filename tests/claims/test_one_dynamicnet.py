"""The course has one DynamicNet, written once in solutions/common/dynamicnet.py: every lab that
builds on it (labs 5, 6, 8, 9 and 10) includes that fragment (``# %course-include
dynamicnet.py``, graders/build/includes.py) instead of defining a class of its own, and lab 5's
exercise includes it with its solution marks. The class is run here from that one file."""

from __future__ import annotations

import ast
import inspect
import random

import pytest
import torch
import torch.nn.functional as F
from claims import SOLUTIONS, lab_class
from torch import nn

from graders.build import includes
from graders.config.course import LABS

SIGNATURE = "(d_in=784, hidden=100, d_out=10, max_depth=3, seed=None)"


def own_text(lab: str) -> str:
    return (SOLUTIONS / lab / f"{lab}.py").read_text(encoding="utf-8")


LABS_WITH_IT = [lab for lab in LABS if ("dynamicnet.py", False) in includes.included(own_text(lab))]
EXERCISE = [lab for lab in LABS if ("dynamicnet.py", True) in includes.included(own_text(lab))]


def test_the_labs_that_build_on_dynamicnet_include_the_one_class():
    assert EXERCISE == ["lab05_dynamicnet"], "lab 5 asks for DynamicNet's forward"
    assert len(LABS_WITH_IT) >= 4, f"DynamicNet is included only in {LABS_WITH_IT}"
    for lab in LABS:
        tree = ast.parse(own_text(lab))
        mine = [
            n.lineno for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DynamicNet"
        ]
        assert not mine, f"{lab}, line {mine[0]}: a DynamicNet of its own; include dynamicnet.py"


@pytest.mark.parametrize("lab", EXERCISE + LABS_WITH_IT[:1])
def test_the_labs_class_is_the_fragments(lab):
    net = lab_class(lab, "DynamicNet")
    assert net.forward.__code__.co_filename == str(includes.COMMON / "dynamicnet.py")


def test_one_meaning():
    DynamicNet = includes.load(
        "dynamicnet.py", {"torch": torch, "nn": nn, "F": F, "random": random}
    )["DynamicNet"]
    assert str(inspect.signature(DynamicNet.__init__)).replace("self, ", "") == SIGNATURE
    assert list(inspect.signature(DynamicNet.forward).parameters) == ["self", "x", "depth"]
    torch.manual_seed(0)
    net = DynamicNet(5, 8, 3, seed=1)
    x = torch.randn(4, 5)
    out = net(x, depth=2)
    assert net.last_depth == 2 and out.shape == (4, 3)
    assert torch.allclose(out.exp().sum(dim=1), torch.ones(4)), "log-probabilities, for nll_loss"
    # the depth is drawn from the net's own generator, 0 to max_depth, on every call
    twin = DynamicNet(5, 8, 3, seed=1)
    depths = [(net(x), net.last_depth)[1] for _ in range(40)]
    assert depths == [(twin(x), twin.last_depth)[1] for _ in range(40)]
    assert set(depths) == {0, 1, 2, 3}
    # depth 0 skips the middle layer: its weight gets no gradient
    F.nll_loss(net(x, depth=0), torch.tensor([0, 1, 2, 0])).backward()
    assert net.middle_linear.weight.grad is None and net.input_linear.weight.grad is not None
    # images flatten: a (B, 1, 28, 28) batch goes in as (B, 784)
    assert DynamicNet(seed=0)(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
