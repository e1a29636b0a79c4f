"""Claims of lab 7 (a Tree-LSTM, and batching it level by level).

Each test quotes one sentence of the lab and checks it on the installed torch, or on the
lab's own code (its tree generator, read from the lab's source) where the sentence is about
that code.
"""

from __future__ import annotations

import random
import re

import pytest
import torch
from claims import SOLUTIONS, claim

LAB = "lab07_tree_lstm"


def lab_code(first: str, last: str) -> dict:
    """Run the lab's source from the line starting with `first` up to the one before `last`."""
    source = (SOLUTIONS / LAB / f"{LAB}.py").read_text(encoding="utf-8")
    start = source.index("\n" + first) + 1
    namespace: dict = {}
    exec(source[start : source.index("\n" + last, start)], namespace)
    return namespace


@pytest.fixture(scope="module")
def trees():
    return lab_code("OPS = (", "rng = random.Random(7)")


@claim(LAB, "The model is an embedding for the 14 tokens")
def test_fourteen_tokens(trees):
    assert len(trees["VOCAB"]) == 14


@claim(
    LAB,
    "A tree's **height**: leaves have height 1, a node is one taller than its tallest child.",
)
def test_test_set_heights(trees):
    rng = random.Random(2)
    test_set = [trees["make_tree"](rng) for _ in range(2000)]
    heights = {trees["height"](t) for t in test_set}
    assert trees["height"](5) == 1 and trees["height"](("MIN", 1, ("MAX", 2, 3))) == 3
    assert min(heights) >= 2 and max(heights) <= 5


@claim(LAB, "the sum of the arguments, modulo 10")
def test_sum_is_modulo_10_in_the_labels():
    source = (SOLUTIONS / LAB / f"{LAB}.py").read_text(encoding="utf-8")
    assert "return sum(values) % 10" in source


@claim(
    LAB,
    "`torch.zeros(n, H).index_add(0, parent, child_h)` adds row `k` of `child_h` into row "
    "`parent[k]`",
)
def test_index_add_adds_each_row_into_its_parent():
    child_h = torch.arange(8.0).reshape(4, 2)
    parent = torch.tensor([0, 0, 2, 2])
    got = torch.zeros(3, 2).index_add(0, parent, child_h)
    assert torch.equal(got, torch.tensor([[2.0, 4.0], [0.0, 0.0], [10.0, 12.0]]))


@claim(LAB, "`wx[parent]` repeats a node's row once per child")
def test_indexing_repeats_rows():
    wx = torch.tensor([[1.0], [2.0], [3.0]])
    assert torch.equal(wx[torch.tensor([0, 0, 2])], torch.tensor([[1.0], [1.0], [3.0]]))


@claim(LAB, "Create new tensors with `x.new_zeros(...)` so that they follow `x`'s dtype")
def test_new_zeros_follows_dtype():
    x = torch.ones(2, dtype=torch.float64)
    assert x.new_zeros(3, 4).dtype == torch.float64
    assert torch.zeros(3, 4).dtype == torch.float32


@claim(
    LAB,
    "Finite differences need float64 (in float32 the rounding error is larger than the step)",
)
def test_gradcheck_needs_float64():
    def fn(t):
        return torch.tanh(t) * t

    x64 = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (x64,))
    x32 = x64.detach().float().requires_grad_()
    with pytest.warns(UserWarning, match="double precision"):
        ok = torch.autograd.gradcheck(fn, (x32,), raise_exception=False)
    assert not ok


@claim(LAB, "the checks count the calls with a hook")
def test_forward_hook_misses_calls_of_forward():
    module = torch.nn.Linear(2, 2)
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    module(torch.ones(1, 2))
    module.forward(torch.ones(1, 2))
    assert len(calls) == 1  # model.cell.forward(...) is not seen


@claim(LAB, "after each level **out of place**, `h_all = h_all.index_copy(0, level_ids, h)`")
def test_index_copy_is_out_of_place():
    h_all = torch.zeros(4, 2)
    new = h_all.index_copy(0, torch.tensor([1, 3]), torch.ones(2, 2))
    assert new.data_ptr() != h_all.data_ptr() and torch.equal(h_all, torch.zeros(4, 2))
    assert torch.equal(new[1], torch.ones(2)) and torch.equal(new[0], torch.zeros(2))


@claim(
    LAB,
    "Writing in place, `h_all[level_ids] = h`, happens to work here, because reading rows by "
    "index saves only the indices for backward",
)
def test_in_place_row_write_after_an_indexed_read_works():
    w = torch.randn(2, 2, requires_grad=True)
    h_all = torch.zeros(3, 2)
    h_all[torch.tensor([0])] = torch.tanh(w[:1])
    read = h_all[torch.tensor([0])]  # index: backward needs only the indices
    h_all[torch.tensor([1, 2])] = read * 2 + w
    h_all.sum().backward()
    assert w.grad is not None


@claim(
    LAB,
    "but writing in place into a tensor that autograd saved for its backward pass (the input "
    "of a multiplication, say) makes `backward()` fail",
)
def test_in_place_write_into_a_saved_tensor_fails():
    w = torch.randn(2, requires_grad=True)
    h = torch.ones(2) * 1.0
    y = h * w  # saves h for w's gradient
    h[0] = 5.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@claim(LAB, "autograd adds up its gradients from all of them")
def test_shared_module_gradients_add_up():
    cell = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        cell.weight.fill_(2.0)
    x = torch.tensor([[3.0]])
    cell(cell(x)).sum().backward()  # w * (w * x): d/dw = 2 w x
    assert cell.weight.grad.item() == pytest.approx(12.0)


@claim(LAB, "your own run takes the full budget (3 minutes and 2)")
def test_training_budget_is_three_and_two_minutes():
    source = (SOLUTIONS / LAB / f"{LAB}.py").read_text(encoding="utf-8")
    assert re.search(r"TREE_SECONDS, LSTM_SECONDS = \(.*\) if GRADING else \(180, 120\)", source)
