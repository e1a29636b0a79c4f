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
import torch.nn.functional as F
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


@claim(LAB, "your own run takes the full budget (90 s and 60 s)")
def test_training_budget_is_90_and_60_seconds():
    source = (SOLUTIONS / LAB / f"{LAB}.py").read_text(encoding="utf-8")
    assert re.search(r"TREE_SECONDS, LSTM_SECONDS = \(.*\) if GRADING else \(90, 60\)", source)


# ------------------------------------------------------------ the lab's own model, run here
LAB_NAMES = {
    "OPS", "VOCAB", "TOKEN", "make_tree", "to_string", "height", "n_nodes", "parse",
    "evaluate", "ChildSumTreeLSTMCell", "TreeLSTM", "CallCounter", "encode_recursive",
    "flatten", "encode_batched",
}  # fmt: skip


@pytest.fixture(scope="module")
def lab():
    """The lab's own definitions (solutions included), taken from its text source."""
    import ast

    from torch import nn
    from torch.nn import functional as F

    tree = ast.parse((SOLUTIONS / LAB / f"{LAB}.py").read_text(encoding="utf-8"))
    body = [
        node
        for node in tree.body
        if (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in LAB_NAMES)
        or (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) in LAB_NAMES for t in node.targets)
        )
    ]
    namespace = {"torch": torch, "nn": nn, "F": F, "random": random}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(SOLUTIONS / LAB), "exec"), namespace)
    return namespace


@claim(LAB, "A leaf has no children: its sums are zero.")
def test_a_leaf_sums_to_zero_and_its_cell_is_that_of_no_children(lab):
    empty = torch.zeros(0, 3)
    assert torch.equal(
        torch.zeros(2, 3).index_add(0, torch.zeros(0, dtype=torch.long), empty), torch.zeros(2, 3)
    )
    torch.manual_seed(0)
    cell = lab["ChildSumTreeLSTMCell"](2, 3)
    h, c = cell(torch.randn(1, 2), empty, empty, torch.zeros(0, dtype=torch.long))
    assert h.shape == c.shape == (1, 3) and torch.isfinite(h).all()


@claim(
    LAB,
    "`torch.autograd.gradcheck` compares the gradients autograd computes through your cell "
    "with finite differences",
)
def test_gradcheck_catches_a_wrong_backward():
    class WrongSquare(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**2

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x  # should be 2 x

    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: t**2, (x,))
    assert not torch.autograd.gradcheck(WrongSquare.apply, (x,), raise_exception=False)


@claim(
    LAB,
    "The cell's operations appear five times, once per node; the parameters at the top feed "
    "all five copies, so their gradients add up over the nodes.",
)
def test_one_weight_feeds_every_node_of_the_tree(lab):
    torch.manual_seed(0)
    model = lab["TreeLSTM"](hidden_size=2, embed_size=2)
    h, _ = lab["encode_recursive"](model, lab["parse"]("[MAX 2 [MIN 4 7 ] ]"))
    users, seen, todo = 0, set(), [h.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for parent, _ in node.next_functions:
            users += getattr(parent, "variable", None) is model.cell.W.weight
            todo.append(parent)
    assert users == 5


@claim(
    LAB,
    "So a batch needs as many calls of the cell as the **tallest tree's height**, whatever "
    "the number of nodes.",
)
def test_level_batching_calls_the_cell_once_per_height(lab):
    rng = random.Random(0)
    trees = [lab["make_tree"](rng) for _ in range(64)]
    torch.manual_seed(0)
    model = lab["TreeLSTM"](hidden_size=8, embed_size=4)
    with lab["CallCounter"](model.cell) as counter:
        lab["encode_batched"](model, trees)
    assert counter.calls == max(lab["height"](t) for t in trees) < sum(map(lab["n_nodes"], trees))


@claim(
    LAB,
    "Grouping the nodes by height runs a batch of different trees in as many calls as the "
    "tallest tree is high, with the same loss and gradients, to rounding",
)
def test_level_batching_gives_the_recursive_loss_and_gradients(lab):
    rng = random.Random(1)
    trees = [lab["make_tree"](rng) for _ in range(16)]
    labels = torch.tensor([lab["evaluate"](t) for t in trees])
    torch.manual_seed(0)
    model = lab["TreeLSTM"](hidden_size=8, embed_size=4)
    results = []
    for encode in (
        lambda m, ts: torch.cat([lab["encode_recursive"](m, t)[0] for t in ts]),
        lab["encode_batched"],
    ):
        model.zero_grad()
        loss = F.cross_entropy(model.out(encode(model, trees)), labels)
        loss.backward()
        results.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    (loss_r, grads_r), (loss_b, grads_b) = results
    assert loss_r == pytest.approx(loss_b, abs=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads_r, grads_b, strict=True))


@claim(
    LAB,
    "The LSTM reads a padded batch through `pack_padded_sequence`, so its final `h` is each "
    "expression's state at its own last token, not after the padding.",
)
def test_packed_lstm_final_state_is_at_each_sequence_end():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    short, long = torch.randn(1, 2, 3), torch.randn(1, 5, 3)
    padded = torch.cat([torch.cat([short, torch.zeros(1, 3, 3)], dim=1), long])
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        padded, torch.tensor([2, 5]), batch_first=True, enforce_sorted=False
    )
    _, (h, _) = lstm(packed)
    assert torch.allclose(h[-1, 0], lstm(short)[1][0][-1, 0], atol=1e-6)
    assert torch.allclose(h[-1, 1], lstm(long)[1][0][-1, 0], atol=1e-6)
    _, (h_padded, _) = lstm(padded)  # without packing: the state after the padding
    assert not torch.allclose(h_padded[-1, 0], h[-1, 0], atol=1e-4)


@claim(
    LAB,
    "Finite differences need float64: they divide the difference of two outputs a tiny step "
    "apart (`eps=1e-6` in `gradcheck`) by that step. In float32 the rounding error of each "
    "number is smaller than that step, but divided by it, it becomes a few hundredths of the "
    "derivative, far above gradcheck's tolerance",
)
def test_finite_differences_fail_in_float32_because_the_step_magnifies_the_rounding():
    import inspect

    defaults = inspect.signature(torch.autograd.gradcheck).parameters
    eps, atol, rtol = (defaults[name].default for name in ("eps", "atol", "rtol"))
    assert eps == 1e-6
    assert torch.finfo(torch.float32).eps / 2 < eps  # rounding: smaller than the step
    x = torch.linspace(-2, 2, 9, dtype=torch.float64)
    exact = 1 - torch.tanh(x) ** 2
    errors = {}
    for dtype in (torch.float32, torch.float64):
        t = x.to(dtype)
        central = (torch.tanh(t + eps) - torch.tanh(t - eps)) / (2 * eps)
        errors[dtype] = (central.double() - exact).abs().max().item()
    assert 0.01 < errors[torch.float32] < 0.1  # a few hundredths
    assert errors[torch.float32] > atol + rtol  # far above the tolerance
    assert errors[torch.float64] < atol / 100
    with pytest.warns(UserWarning, match="not a double precision"):
        passed = torch.autograd.gradcheck(
            torch.tanh, (x.float().requires_grad_(),), raise_exception=False
        )
    assert not passed
    assert torch.autograd.gradcheck(torch.tanh, (x.clone().requires_grad_(),))
