"""The course has one DynamicNet: every lab that defines it gives it the same signature and
meaning (labs 5, 6, 8 and 9). The class is taken from each lab's text source, with the classes
it derives from, and run here."""

from __future__ import annotations

import ast
import inspect
import random

import pytest
import torch
import torch.nn.functional as F
from claims import SOLUTIONS
from torch import nn

from graders.course import LABS

SIGNATURE = "(d_in=784, hidden=100, d_out=10, max_depth=3, seed=None)"


def classes(lab: str) -> dict[str, ast.ClassDef]:
    tree = ast.parse((SOLUTIONS / lab / f"{lab}.py").read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def dynamic_net(lab: str):
    """DynamicNet as `lab` defines it, with the classes of the lab it is built on."""
    found = classes(lab)
    wanted, order = ["DynamicNet"], []
    while wanted:
        name = wanted.pop()
        order.insert(0, found[name])
        wanted += [b.id for b in found[name].bases if isinstance(b, ast.Name) and b.id in found]
    namespace = {"torch": torch, "nn": nn, "F": F, "random": random}
    module = ast.Module(body=order, type_ignores=[])
    exec(compile(module, f"{lab}.py", "exec"), namespace)
    return namespace["DynamicNet"]


LABS_WITH_IT = [lab for lab in LABS if "DynamicNet" in classes(lab)]


def test_the_labs_that_build_on_dynamicnet_define_it():
    assert len(LABS_WITH_IT) >= 4, f"DynamicNet is defined only in {LABS_WITH_IT}"


@pytest.mark.parametrize("lab", LABS_WITH_IT)
def test_one_signature(lab):
    net = dynamic_net(lab)
    assert str(inspect.signature(net.__init__)).replace("self, ", "") == SIGNATURE
    assert list(inspect.signature(net.forward).parameters) == ["self", "x", "depth"]


@pytest.mark.parametrize("lab", LABS_WITH_IT)
def test_one_meaning(lab):
    DynamicNet = dynamic_net(lab)
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
