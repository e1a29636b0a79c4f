"""The course has one DynamicNet: every lab that defines it gives it the same signature and
meaning (labs 5, 6, 8 and 9). The class is taken from each lab's text source, with the classes
it derives from, and run here."""

from __future__ import annotations

import ast
import inspect

import pytest
import torch
import torch.nn.functional as F
from claims import SOLUTIONS, lab_class

from graders.config.course import LABS

SIGNATURE = "(d_in=784, hidden=100, d_out=10, max_depth=3, seed=None)"


def defines_it(lab: str) -> bool:
    tree = ast.parse((SOLUTIONS / lab / f"{lab}.py").read_text(encoding="utf-8"))
    return any(isinstance(n, ast.ClassDef) and n.name == "DynamicNet" for n in tree.body)


LABS_WITH_IT = [lab for lab in LABS if defines_it(lab)]


def test_the_labs_that_build_on_dynamicnet_define_it():
    assert len(LABS_WITH_IT) >= 4, f"DynamicNet is defined only in {LABS_WITH_IT}"


@pytest.mark.parametrize("lab", LABS_WITH_IT)
def test_one_signature(lab):
    net = lab_class(lab, "DynamicNet")
    assert str(inspect.signature(net.__init__)).replace("self, ", "") == SIGNATURE
    assert list(inspect.signature(net.forward).parameters) == ["self", "x", "depth"]


@pytest.mark.parametrize("lab", LABS_WITH_IT)
def test_one_meaning(lab):
    DynamicNet = lab_class(lab, "DynamicNet")
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
