"""Claims of lab 3 (gradients accumulate, shared weights sum), checked on the installed torch."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from claims import claim
from torch import nn

LAB = "lab03_accumulation"


@claim(LAB, "each `backward()` walks it and **adds** 6 to `w.grad`")
def test_each_pass_adds_six():
    w = torch.tensor(3.0, requires_grad=True)
    seen = []
    for _ in range(3):
        (w**2).backward()
        seen.append(w.grad.item())
    assert seen == [6.0, 12.0, 18.0]


@claim(LAB, "sets every `.grad` to **`None`**: this is the default, `set_to_none=True`")
def test_zero_grad_defaults_to_none():
    for zero_grad in (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad):
        assert inspect.signature(zero_grad).parameters["set_to_none"].default is True
    net = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for clear in (optimizer.zero_grad, net.zero_grad):
        net(torch.ones(1, 2)).sum().backward()
        clear()
        assert all(p.grad is None for p in net.parameters())


@claim(LAB, "the next `backward()` simply *writes* a new gradient")
def test_backward_after_none_writes():
    p = nn.Parameter(torch.ones(2))
    (p * 3).sum().backward()
    p.grad = None
    (p * 5).sum().backward()
    assert torch.equal(p.grad, torch.full((2,), 5.0))


@claim(LAB, "`zero_grad(set_to_none=False)` keeps the tensors and fills them with **zeros**.")
def test_zero_grad_false_keeps_the_tensor():
    p = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([p], lr=0.1)
    (p * 3).sum().backward()
    kept = p.grad
    optimizer.zero_grad(set_to_none=False)
    assert p.grad is kept and torch.equal(kept, torch.zeros(2))


@claim(LAB, "its gradient stays `None` in the first case, and stays a tensor of zeros in the")
def test_unreached_parameter_none_or_zeros():
    for set_to_none in (True, False):
        a, b = nn.Parameter(torch.ones(())), nn.Parameter(torch.ones(()))
        optimizer = torch.optim.SGD([a, b], lr=0.1)
        (a * b).backward()
        optimizer.zero_grad(set_to_none=set_to_none)
        (a * 2).backward()
        assert (b.grad is None) if set_to_none else torch.equal(b.grad, torch.zeros(()))


def optimizers():
    """Every optimizer class of torch.optim but LBFGS (its own test) and SparseAdam (sparse)."""
    return [
        cls
        for cls in vars(torch.optim).values()
        if inspect.isclass(cls)
        and issubclass(cls, torch.optim.Optimizer)
        and cls not in (torch.optim.Optimizer, torch.optim.LBFGS, torch.optim.SparseAdam)
    ]


@claim(LAB, "SGD, Adam and the other usual optimizers in `torch.optim` **skip a parameter whose")
def test_optimizers_skip_a_none_gradient_and_leave_its_state():
    assert {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad"} <= {c.__name__ for c in optimizers()}
    for cls in optimizers():
        kwargs = {"momentum": 0.9} if cls is torch.optim.SGD else {}
        p, q = nn.Parameter(torch.ones(3, 3)), nn.Parameter(torch.ones(3, 3))
        optimizer = cls([p, q], lr=0.1, **kwargs)
        (p * q).sum().backward()
        optimizer.step()
        before = p.detach().clone()
        state = {k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state[p].items()}
        optimizer.zero_grad()
        (q**2).sum().backward()
        optimizer.step()
        assert torch.equal(p.detach(), before), cls.__name__
        for key, value in optimizer.state[p].items():
            same = torch.equal(value, state[key]) if torch.is_tensor(value) else value == state[key]
            assert same, f"{cls.__name__} changed {key}"


@claim(LAB, "(LBFGS is the exception: it treats all parameters as one flat vector and reads a")
def test_lbfgs_reads_none_as_zeros():
    p, q = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(3))
    optimizer = torch.optim.LBFGS([p, q])
    (q**2).sum().backward()
    flat = optimizer._gather_flat_grad()
    assert p.grad is None and flat.shape == (5,)
    assert torch.equal(flat, torch.tensor([0.0, 0.0, 2.0, 2.0, 2.0]))


def momentum_example(set_to_none, dtype=torch.float32, a0=1.0, b0=2.0):
    a = torch.tensor(a0, dtype=dtype, requires_grad=True)
    b = torch.tensor(b0, dtype=dtype, requires_grad=True)
    optimizer = torch.optim.SGD([a, b], lr=0.1, momentum=0.9)
    (a * b).backward()
    optimizer.step()
    after_one = b.item()
    optimizer.zero_grad(set_to_none=set_to_none)
    (a**2).backward()
    optimizer.step()
    return after_one, a.item(), b.item(), b.grad


@claim(LAB, "Two parameters, SGD with momentum 0.9, and a second step in which only `a` is used")
def test_momentum_example_setup():
    for set_to_none in (True, False):
        _after_one, _a, _b, b_grad = momentum_example(set_to_none)
        assert (b_grad is None) == set_to_none  # step 2 does not reach b


@claim(
    LAB,
    "With `set_to_none=True`, `b` stays at 1.9, where step 1 left it. With zeros, momentum "
    "carries it on to 1.81 even though the loss of step 2 does not depend on `b` at all.",
)
def test_momentum_carries_b_on_zeros():
    after_one, _a, b, _ = momentum_example(True)
    assert f"{after_one:.4f}" == f"{b:.4f}" == "1.9000"
    after_one, _a, b, _ = momentum_example(False)
    assert f"{after_one:.4f}" == "1.9000" and f"{b:.4f}" == "1.8100"


@claim(LAB, "For the defaults, the answer is `(0.46, 1.9)` with `set_to_none=True` and")
def test_two_steps_answers():
    for set_to_none, b_expected in ((True, 1.9), (False, 1.81)):
        _, a, b, _ = momentum_example(set_to_none, torch.float64)
        assert a == pytest.approx(0.46, abs=1e-12) and b == pytest.approx(b_expected, abs=1e-12)


@claim(LAB, "the contributions meet at the weight's one `AccumulateGrad` node, which runs once")
def test_shared_weight_gets_the_summed_gradient_once():
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(3, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    h0 = torch.randn(3, 1, dtype=torch.float64, generator=gen)
    runs = []
    W.register_post_accumulate_grad_hook(lambda p: runs.append(p.grad.clone()))
    h = h0
    for _ in range(3):
        h = torch.tanh(W @ h)
    h.sum().backward()
    copies = [W.detach().clone().requires_grad_() for _ in range(3)]
    h = h0
    for Wi in copies:
        h = torch.tanh(Wi @ h)
    h.sum().backward()
    assert len(runs) == 1 and torch.allclose(runs[0], sum(c.grad for c in copies))


@claim(LAB, "(Nothing is updated by `backward()` itself: the optimizer later moves the")
def test_backward_does_not_move_the_weight():
    W = torch.randn(3, 3, requires_grad=True)
    before = W.detach().clone()
    torch.tanh(W @ torch.tanh(W @ torch.randn(3, 1))).sum().backward()
    assert torch.equal(W.detach(), before) and W.grad is not None


def edges_into(loss, W):
    seen, todo, count = set(), [loss.grad_fn], 0
    while todo:
        node = todo.pop()
        if node in seen:  # the nodes themselves: an id() may be reused (lab 3)
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if child is None:
                continue
            if getattr(child, "variable", None) is W:
                count += 1
            todo.append(child)
    return count


@claim(LAB, "the weight has one `AccumulateGrad` node, with one edge into it per use")
def test_one_accumulate_grad_node_k_edges():
    W = torch.randn(3, 3, requires_grad=True)
    h = torch.randn(3, 1)
    nodes = set()
    for _ in range(3):
        h = torch.tanh(W @ h)
        nodes.add(id(h.grad_fn.next_functions[0][0].next_functions[0][0]))
    assert len(nodes) == 1 and edges_into(h.sum(), W) == 3


@claim(LAB, "Careful: an intermediate result used twice is not two uses of `W`.")
def test_intermediate_used_twice_is_one_use():
    W, x = torch.randn(3, 3, requires_grad=True), torch.randn(3, 1)
    u = W @ x
    assert edges_into(u.sin().sum() + u.cos().sum(), W) == 1


class TwoBranch(nn.Module):  # the lab's model
    def __init__(self):
        super().__init__()
        self.fc_1 = nn.Linear(4, 1)
        self.fc_2 = nn.Linear(4, 1)

    def forward(self, x, branch):
        return self.fc_1(x) if branch == 1 else self.fc_2(x)


@claim(LAB, "its gradients are `None` (not zero: *nothing* was computed)")
def test_unused_branch_has_none_then_stale_gradients():
    net, data = TwoBranch(), torch.rand(32, 4)
    net(data, branch=1).pow(2).mean().backward()
    assert net.fc_2.weight.grad is None and net.fc_2.bias.grad is None
    first = net.fc_1.weight.grad.clone()
    net(data, branch=2).pow(2).mean().backward()
    assert net.fc_2.weight.grad is not None and torch.equal(net.fc_1.weight.grad, first)


@claim(LAB, "An optimizer step now would move `fc_1` again")
def test_stale_gradient_moves_and_none_does_not():
    for set_to_none, moves in ((False, True), (True, False)):
        net, data = TwoBranch(), torch.rand(32, 4)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        net(data, branch=1).pow(2).mean().backward()
        if set_to_none:
            optimizer.zero_grad()
        net(data, branch=2).pow(2).mean().backward()
        before = net.fc_1.weight.detach().clone()
        optimizer.step()
        assert (not torch.equal(net.fc_1.weight.detach(), before)) == moves


@claim(LAB, "(you may use `torch.optim.SGD(net.parameters(), lr=lr)` instead of updating by hand)")
def test_plain_sgd_is_the_update_by_hand():
    torch.manual_seed(0)
    net, data = TwoBranch(), torch.rand(8, 4)
    by_hand = TwoBranch()
    by_hand.load_state_dict(net.state_dict())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.3)
    for branch in (1, 2, 2):
        optimizer.zero_grad()
        net(data, branch).pow(2).mean().backward()
        optimizer.step()
        by_hand.zero_grad()
        by_hand(data, branch).pow(2).mean().backward()
        with torch.no_grad():
            for p in by_hand.parameters():
                if p.grad is not None:
                    p -= 0.3 * p.grad
    for mine, theirs in zip(by_hand.parameters(), net.parameters(), strict=True):
        assert torch.allclose(mine, theirs, rtol=0, atol=1e-6)


def micro_batch_difference():
    torch.manual_seed(3)
    model = nn.Linear(5, 1).double()
    X = torch.randn(12, 5, dtype=torch.float64)
    y = torch.randn(12, 1, dtype=torch.float64)
    F.mse_loss(model(X), y).backward()
    big = model.weight.grad.clone()
    model.zero_grad()
    for chunk in range(0, 12, 3):
        Xc, yc = X[chunk : chunk + 3], y[chunk : chunk + 3]
        (F.mse_loss(model(Xc), yc) * len(Xc) / len(X)).backward()
    return (model.weight.grad - big).abs().max().item()


@claim(LAB, "In float64 the rounding is far below $10^{-10}$")
def test_micro_batches_match_in_float64():
    assert micro_batch_difference() < 1e-13


@claim(LAB, "accumulate to the big batch's gradient: exactly in arithmetic, up to rounding")
def test_uneven_micro_batches_match_up_to_rounding():
    torch.manual_seed(1)
    model = nn.Linear(4, 2)
    X, y = torch.randn(10, 4), torch.randn(10, 2)
    F.mse_loss(model(X), y).backward()
    big = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for start in range(0, 10, 4):  # 4, 4 and 2 rows
        Xc, yc = X[start : start + 4], y[start : start + 4]
        (F.mse_loss(model(Xc), yc) * len(Xc) / len(X)).backward()
    for mine, whole in zip((p.grad for p in model.parameters()), big, strict=True):
        assert torch.allclose(mine, whole, rtol=1e-5, atol=1e-6)
    model.zero_grad()
    for start in range(0, 10, 4):  # unscaled means: not the big batch's gradient
        F.mse_loss(model(X[start : start + 4]), y[start : start + 4]).backward()
    assert not torch.allclose(model.weight.grad, big[0], rtol=1e-3)


@claim(
    LAB,
    "Keep the nodes themselves in your set of visited nodes, not their `id()`: a node's Python "
    "object may be freed once nothing holds it and its `id` given to the next one (on torch "
    "2.10, for one, it is: a walk that keeps only ids finds fewer than the 4 uses of W in the "
    "loss of 4 steps).",
)
def test_a_walk_by_id_alone_can_lose_nodes():
    W, h = torch.randn(3, 3, requires_grad=True), torch.randn(3, 1)
    for _ in range(4):
        h = torch.tanh(W @ h)
    loss = h.sum()

    def by_id(loss, W):
        seen, todo, count = set(), [loss.grad_fn], 0
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))  # the node itself may be freed now, and its id reused
            for child, _ in node.next_functions:
                if child is not None:
                    count += getattr(child, "variable", None) is W
                    todo.append(child)
        return count

    assert edges_into(loss, W) == 4  # keeping the nodes: right on every torch
    if torch.__version__.startswith("2.10."):
        assert by_id(loss, W) < 4
