"""Claims of lab 6 (optimizer updates when the graph or the model changes), each checked on the
installed torch. One test per sentence; the sentence is quoted from the lab's source."""

from __future__ import annotations

import inspect
import math
from collections import OrderedDict
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from claims import claim, lab_class
from torch import nn

LAB = "lab06_dynamic_training"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tensors here are tiny: one thread is faster than several fighting over them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


DynamicNet = lab_class(LAB, "DynamicNet")


class TwoBranch(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.a = nn.Linear(3, 2, bias=bias)
        self.b = nn.Linear(3, 2, bias=bias)

    def forward(self, x, coin):
        out = 0
        if coin in (0, 2):
            out = out + self.a(x)
        if coin in (1, 2):
            out = out + self.b(x)
        return out


class MLP(nn.Module):
    def __init__(self, d_in=4, h1=8, h2=6, d_out=3):
        super().__init__()
        self.fc1 = nn.Linear(d_in, h1)
        self.fc2 = nn.Linear(h1, h2)
        self.fc3 = nn.Linear(h2, d_out)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def small_net(seed=0):
    torch.manual_seed(seed)
    net = DynamicNet(5, 8, 3, seed=seed).double()
    x = torch.randn(16, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (16,))
    return net, x, y


def optimizer_classes():
    """Every optimizer class that torch.optim exports, found at run time."""
    found = {c for c in vars(torch.optim).values() if isinstance(c, type)}
    found = {c for c in found if issubclass(c, torch.optim.Optimizer)}
    return sorted(found - {torch.optim.Optimizer}, key=lambda c: c.__name__)


def unused_drift(cls, set_to_none, **options):
    """Step 1 uses both branches, step 2 only branch a; how far b moves in step 2 (the loss
    in a closure, which every optimizer accepts and LBFGS needs). Two bias-free weights, so
    that Muon (2-D parameters only) runs; for SparseAdam, two sparse embeddings."""
    torch.manual_seed(1)
    if cls is torch.optim.SparseAdam:
        a, b = nn.Embedding(4, 3, sparse=True), nn.Embedding(4, 3, sparse=True)
        index = torch.tensor([0, 2, 1])
        branch = {"a": lambda: a(index), "b": lambda: b(index)}
        weights = [a.weight, b.weight]
    else:
        two = TwoBranch(bias=False)
        x = torch.randn(8, 3)
        branch = {"a": lambda: two.a(x), "b": lambda: two.b(x)}
        weights = [two.a.weight, two.b.weight]
    optimizer = cls(weights, **{"lr": 0.1, **options})
    for both in (True, False):
        before = weights[1].detach().clone()

        def closure(both=both):
            optimizer.zero_grad(set_to_none=set_to_none)
            out = branch["a"]() + (branch["b"]() if both else 0)
            loss = out.pow(2).mean()
            loss.backward()
            return loss

        optimizer.step(closure)
    return (weights[1].detach() - before).norm().item()


# ---------------------------------------------------------------- 1. dynamic graph, gradients


@claim(
    LAB,
    "With `depth = 0` the middle layer is not in the graph, so `backward()` never reaches it "
    "and its `.grad` stays `None`.",
)
def test_depth_zero_leaves_the_middle_grad_none():
    net, x, y = small_net()
    for depth in range(4):
        net.zero_grad(set_to_none=True)
        F.nll_loss(net(x, depth), y).backward()
        assert (net.middle_linear.weight.grad is None) == (depth == 0)
        assert net.input_linear.weight.grad is not None


@claim(
    LAB,
    "With depth 2 or 3 the same weight appears several times in the graph, and its gradient is "
    "the **sum** of the contributions of every use.",
)
def test_a_shared_weight_gets_the_sum_of_its_uses():
    net, x, y = small_net()
    F.nll_loss(net(x, 2), y).backward()
    shared = net.middle_linear.weight.grad.clone()
    # the same network with the middle weight as two separate leaves, one per use
    w1 = net.middle_linear.weight.detach().clone().requires_grad_()
    w2 = net.middle_linear.weight.detach().clone().requires_grad_()
    bias = net.middle_linear.bias.detach()
    h = F.relu(net.input_linear(x))
    h = F.relu(F.linear(h, w1, bias))
    h = F.relu(F.linear(h, w2, bias))
    F.nll_loss(F.log_softmax(net.output_linear(h), dim=1), y).backward()
    assert w1.grad.abs().sum() > 0 and w2.grad.abs().sum() > 0
    torch.testing.assert_close(shared, w1.grad + w2.grad, rtol=1e-12, atol=1e-14)


@claim(
    LAB,
    "`middle_linear.weight` appears once (a blue box and its `AccumulateGrad` node), with two "
    "arrows leaving that node, one per use",
)
def test_the_depth2_graph_has_one_accumulate_grad_with_two_uses():
    net, x, y = small_net()
    loss = F.nll_loss(net(x, 2), y)
    seen, stack, into_accumulate = set(), [loss.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if getattr(child, "variable", None) is net.middle_linear.weight:
                into_accumulate.append(child)
            stack.append(child)
    assert len(into_accumulate) == 2, "two edges reach the weight's AccumulateGrad node"
    assert into_accumulate[0] is into_accumulate[1], "and it is one node"


@claim(LAB, "A linear layer computes `x @ W.T + b`.")
def test_a_linear_layer_computes_x_wt_plus_b():
    layer = nn.Linear(5, 3).double()
    x = torch.randn(4, 5, dtype=torch.float64)
    torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias, rtol=1e-14, atol=1e-14)


@claim(
    LAB,
    "The differences printed above are zero or a few units in the last digit of a `float64`: "
    "the two graphs hold the same operations.",
)
def test_the_unrolled_graph_gives_the_same_gradients_to_rounding():
    net, x, y = small_net()
    p = dict(net.named_parameters())
    h = F.relu(x @ p["input_linear.weight"].T + p["input_linear.bias"])
    h = F.relu(h @ p["middle_linear.weight"].T + p["middle_linear.bias"])
    h = F.relu(h @ p["middle_linear.weight"].T + p["middle_linear.bias"])
    out = F.log_softmax(h @ p["output_linear.weight"].T + p["output_linear.bias"], dim=1)
    params = list(net.parameters())
    dynamic = torch.autograd.grad(F.nll_loss(net(x, 2), y), params)
    static = torch.autograd.grad(F.nll_loss(out, y), params)
    for a, b in zip(dynamic, static, strict=True):
        scale = a.abs().max().item()
        assert (a - b).abs().max().item() <= 8 * torch.finfo(torch.float64).eps * max(scale, 1.0)


@claim(
    LAB,
    "Nothing about the chain rule changes: the dynamic graph of `net(x, 2)` *is* that expression, "
    "recorded while it ran.",
)
def test_the_recorded_graph_is_the_written_out_expression():
    def nodes(root):
        seen, stack, names = set(), [root], []
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            names.append(type(node).__name__)
            stack.extend(child for child, _ in node.next_functions)
        return sorted(names)

    net, x, y = small_net()
    p = dict(net.named_parameters())
    h = F.relu(F.linear(x, p["input_linear.weight"], p["input_linear.bias"]))
    h = F.relu(F.linear(h, p["middle_linear.weight"], p["middle_linear.bias"]))
    h = F.relu(F.linear(h, p["middle_linear.weight"], p["middle_linear.bias"]))
    out = F.log_softmax(F.linear(h, p["output_linear.weight"], p["output_linear.bias"]), dim=1)
    assert nodes(F.nll_loss(net(x, 2), y).grad_fn) == nodes(F.nll_loss(out, y).grad_fn)
    assert nodes(F.nll_loss(net(x, 1), y).grad_fn) != nodes(F.nll_loss(out, y).grad_fn)


# ------------------------------------------------------------------- 2. an optimizer step


@claim(LAB, "After `backward()` every used parameter holds its gradient in `.grad`.")
def test_backward_fills_grad_of_every_used_parameter():
    net, x, y = small_net()
    loss = F.nll_loss(net(x, 1), y)
    expected = torch.autograd.grad(loss, list(net.parameters()), retain_graph=True)
    loss.backward()
    for p, g in zip(net.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, g)


@claim(
    LAB,
    "An optimizer only reads `.grad` and changes the parameter in place; it never looks at the "
    "graph.",
)
def test_an_optimizer_reads_grad_and_updates_in_place():
    p = nn.Parameter(torch.randn(6))
    p.grad = torch.randn(6)  # set by hand: no graph anywhere
    pointer, start = p.data_ptr(), p.detach().clone()
    optimizer = torch.optim.SGD([p], lr=0.5)
    optimizer.step()
    assert p.data_ptr() == pointer and p is optimizer.param_groups[0]["params"][0]
    torch.testing.assert_close(p.detach(), start - 0.5 * p.grad)


@claim(
    LAB,
    "`torch.optim.SGD` with momentum $\\mu$ and learning rate $\\eta$ (and its defaults "
    "otherwise) keeps one *momentum buffer* $b$ per parameter:",
)
def test_sgd_momentum_follows_the_formula():
    p0 = torch.randn(10, dtype=torch.float64)
    g1, g2 = torch.randn(2, 10, dtype=torch.float64)
    p = nn.Parameter(p0.clone())
    optimizer = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = g1.clone()
    optimizer.step()
    torch.testing.assert_close(optimizer.state[p]["momentum_buffer"], g1)
    p.grad = g2.clone()
    optimizer.step()
    buffer = 0.9 * g1 + g2
    torch.testing.assert_close(optimizer.state[p]["momentum_buffer"], buffer)
    torch.testing.assert_close(p.detach(), p0 - 0.1 * g1 - 0.1 * buffer)
    assert len(optimizer.state) == 1 and set(optimizer.state[p]) == {"momentum_buffer"}


@claim(
    LAB,
    "On a CPU, `p.add(b, alpha=-lr)` is what `torch.optim.SGD` itself calls, so it agrees bit "
    "for bit.",
)
def test_sgd_agrees_bit_for_bit_with_add_alpha_on_cpu():
    p0, g0 = torch.randn(2, 1000, dtype=torch.float64)
    p = nn.Parameter(p0.clone())
    p.grad = g0.clone()
    torch.optim.SGD([p], lr=0.1, momentum=0.9).step()
    assert torch.equal(p.detach(), p0.add(g0, alpha=-0.1))


@claim(
    LAB,
    "`p - lr * b` rounds `lr * b` first and subtracts afterwards, while the fused form may round "
    "once",
)
def test_the_alpha_form_is_never_further_from_the_exact_result():
    torch.manual_seed(0)
    p0, g0 = torch.randn(2, 300, dtype=torch.float64)
    two_step, fused = p0 - 0.1 * g0, p0.add(g0, alpha=-0.1)
    lr = Fraction(-0.1)  # the float64 value of -0.1, exactly
    for p, g, a, b in zip(p0.tolist(), g0.tolist(), two_step.tolist(), fused.tolist(), strict=True):
        exact = Fraction(p) + lr * Fraction(g)
        assert abs(Fraction(b) - exact) <= abs(Fraction(a) - exact)
    # and the two-step form is the product rounded, then the difference rounded
    assert torch.equal(two_step, p0 - (0.1 * g0))


# ----------------------------------------------------------- 3. parameters the graph did not use


@claim(
    LAB,
    "`optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0) sets `.grad` to "
    "`None`; a parameter the graph did not reach keeps `None`;",
)
def test_zero_grad_sets_none_by_default():
    for function in (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad):
        assert inspect.signature(function).parameters["set_to_none"].default is True
    two = TwoBranch()
    optimizer = torch.optim.SGD(two.parameters(), lr=0.1)
    two(torch.randn(4, 3), 2).sum().backward()
    optimizer.zero_grad()
    assert all(p.grad is None for p in two.parameters())
    two(torch.randn(4, 3), 0).sum().backward()
    assert two.b.weight.grad is None and two.a.weight.grad is not None


@claim(
    LAB,
    "code written before PyTorch 2.0 defaulted to `set_to_none=False`",
)
def test_the_default_changed_to_true():
    """Only the installed side of the change can be checked here: the default is True now,
    and False still exists as a choice that fills .grad with zeros."""
    assert inspect.signature(torch.optim.Optimizer.zero_grad).parameters["set_to_none"].default
    assert torch.__version__ >= "2"


@claim(
    LAB,
    "`optimizer.zero_grad(set_to_none=False)` fills `.grad` with zeros; an unused parameter then "
    "holds a gradient of zero",
)
def test_zero_grad_false_fills_zeros():
    two = TwoBranch()
    optimizer = torch.optim.SGD(two.parameters(), lr=0.1)
    two(torch.randn(4, 3), 2).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    two(torch.randn(4, 3), 0).sum().backward()
    assert torch.equal(two.b.weight.grad, torch.zeros(2, 3))


@claim(
    LAB,
    "with `set_to_none=True` every optimizer that runs here but one leaves the unused branch "
    "where it was: they skip a parameter whose `.grad` is `None`.",
)
def test_every_optimizer_but_lbfgs_skips_a_none_grad():
    classes = optimizer_classes()
    assert {"SGD", "Adam", "AdamW", "LBFGS"} <= {c.__name__ for c in classes}
    moved = {c.__name__: unused_drift(c, set_to_none=True) for c in classes}
    assert {name for name, d in moved.items() if d != 0.0} == {"LBFGS"}, moved


@claim(
    LAB,
    "With `set_to_none=False` plain SGD still does not move it (a zero gradient is a zero step; "
    "the table's SGD has the default momentum, 0)",
)
def test_plain_sgd_does_not_move_on_a_zero_gradient():
    assert inspect.signature(torch.optim.SGD).parameters["momentum"].default == 0
    assert unused_drift(torch.optim.SGD, set_to_none=False) == 0.0


@claim(
    LAB,
    "but several optimizers **do**, Adam and AdamW among them, and so does SGD with momentum",
)
def test_momentum_adam_and_adamw_move_on_a_zero_gradient():
    assert unused_drift(torch.optim.Adam, set_to_none=False) > 0
    assert unused_drift(torch.optim.AdamW, set_to_none=False) > 0
    assert unused_drift(torch.optim.AdamW, set_to_none=False, weight_decay=0.0) > 0
    assert unused_drift(torch.optim.SGD, set_to_none=False, momentum=0.9) > 0
    moving = [c for c in optimizer_classes() if unused_drift(c, set_to_none=False) > 0]
    assert len(moving) >= 4


@claim(
    LAB,
    "momentum keeps pushing in the old direction, and so does Adam, whose step is its first "
    "moment divided by the square root of its second moment, neither of which is zero yet.",
)
def test_momentum_and_adams_moments_outlive_the_gradient():
    grad = torch.tensor([0.5, -2.0])
    for make in (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), torch.optim.Adam):
        w = nn.Parameter(torch.zeros(2))
        optimizer = make([w])
        w.grad = grad.clone()
        optimizer.step()
        first = w.detach().clone()
        w.grad = torch.zeros(2)
        optimizer.step()
        assert torch.equal((w.detach() - first).sign(), first.sign())  # the old direction
    state = optimizer.state[w]  # Adam's, after the zero-gradient step
    assert bool((state["exp_avg"] != 0).all()) and bool((state["exp_avg_sq"] != 0).all())


@claim(
    LAB,
    "`LBFGS` is the exception: it moves such a parameter, whichever way the gradients were "
    "cleared.",
)
def test_lbfgs_moves_a_parameter_whose_grad_is_none():
    for set_to_none in (True, False):
        assert unused_drift(torch.optim.LBFGS, set_to_none) > 1e-3


@claim(
    LAB,
    "It flattens all its parameters into one vector, where a `None` gradient is read as zeros,",
)
def test_lbfgs_reads_a_none_gradient_as_zeros():
    # the same moves, bit for bit, whether the unused gradient is None or zeros
    assert unused_drift(torch.optim.LBFGS, True) == unused_drift(torch.optim.LBFGS, False)
    a, b = nn.Parameter(torch.ones(2, 3)), nn.Parameter(torch.ones(4))
    lbfgs = torch.optim.LBFGS([a, b])
    a.grad = torch.full((2, 3), 2.0)
    flat = lbfgs._gather_flat_grad()  # the one vector (a private method, checked as it is)
    assert torch.equal(flat, torch.cat([torch.full((6,), 2.0), torch.zeros(4)]))


@claim(
    LAB,
    "its step direction mixes the coordinates of that vector through the curvature pairs it "
    "keeps from earlier steps, so a coordinate whose gradient is zero still moves.",
)
def test_lbfgs_moves_a_zero_coordinate_only_through_its_curvature_pairs():
    torch.manual_seed(1)
    two = TwoBranch(bias=False)
    x = torch.randn(8, 3)
    lbfgs = torch.optim.LBFGS([two.a.weight, two.b.weight], lr=0.1, max_iter=1)
    before = two.b.weight.detach().clone()

    def only_a():
        lbfgs.zero_grad()
        loss = two.a(x).pow(2).mean()
        loss.backward()
        return loss

    lbfgs.step(only_a)  # no curvature pair yet: the direction is -gradient, zero for b
    assert torch.equal(two.b.weight.detach(), before)

    def both():
        lbfgs.zero_grad()
        loss = (two.a(x) + two.b(x)).pow(2).mean()
        loss.backward()
        return loss

    lbfgs.step(both)
    lbfgs.step(both)  # now it keeps pairs that couple a's and b's coordinates
    assert len(lbfgs.state[two.a.weight]["old_dirs"]) > 0
    before = two.b.weight.detach().clone()
    lbfgs.step(only_a)
    assert not torch.equal(two.b.weight.detach(), before)


def adam_steps(grad, zero_steps=5):
    """How far each entry moves on Adam's first step with `grad`, then on each zero step."""
    w = nn.Parameter(torch.zeros_like(grad))
    adam = torch.optim.Adam([w], lr=0.1)
    moves = []
    for g in [grad] + [torch.zeros_like(grad)] * zero_steps:
        before = w.detach().clone()
        w.grad = g.clone()
        adam.step()
        moves.append((w.detach() - before).abs())
    return moves, w, adam


@claim(LAB, "Adam's first step is about `lr` in size, whatever the size of the gradient.")
def test_adams_first_step_is_about_lr():
    moves, _, _ = adam_steps(torch.tensor([1.0, -2.0, 0.01, 300.0], dtype=torch.float64))
    torch.testing.assert_close(
        moves[0], torch.full((4,), 0.1, dtype=torch.float64), rtol=1e-5, atol=0
    )


@claim(
    LAB,
    "On the steps with a **zero** gradient every entry keeps moving, in the direction of the "
    "last real step, by the same amount for a gradient of 0.01 as for one of 300.",
)
def test_adam_keeps_moving_on_zero_gradients_whatever_the_size():
    grad = torch.tensor([1.0, -2.0, 0.01, 300.0], dtype=torch.float64)
    w = nn.Parameter(torch.zeros(4, dtype=torch.float64))
    adam = torch.optim.Adam([w], lr=0.1)
    w.grad = grad.clone()
    adam.step()
    for _ in range(5):
        before = w.detach().clone()
        w.grad = torch.zeros(4, dtype=torch.float64)
        adam.step()
        step = w.detach() - before
        assert torch.equal(step.sign(), -grad.sign())
        torch.testing.assert_close(step.abs(), step.abs()[:1].expand(4), rtol=1e-5, atol=0)


@claim(
    LAB,
    'The step with `.grad = None` moves nothing, and `state["step"]` does not advance.',
)
def test_adam_skips_a_none_gradient():
    _, w, adam = adam_steps(torch.tensor([1.0, -2.0]), zero_steps=2)
    before, count = w.detach().clone(), int(adam.state[w]["step"])
    w.grad = None
    adam.step()
    assert torch.equal(w.detach(), before) and int(adam.state[w]["step"]) == count == 3


@claim(
    LAB,
    "Why: after one step with gradient $g$ and $t-1$ steps with 0, Adam's bias-corrected moments "
    "are $\\hat m = (1-\\beta_1)\\beta_1^{t-1} g / (1-\\beta_1^t)$ and "
    "$\\hat v = (1-\\beta_2)\\beta_2^{t-1} g^2 / (1-\\beta_2^t)$, and its step "
    "$\\mathrm{lr}\\,\\hat m / (\\sqrt{\\hat v} + \\epsilon)$ does not depend on the size of $g$ "
    "(unless $g$ is as small as $\\epsilon$).",
)
def test_adams_step_follows_the_formula():
    grad = torch.tensor([1.0, -2.0, 0.01, 300.0], dtype=torch.float64)
    moves, _, adam = adam_steps(grad, zero_steps=8)
    group = adam.param_groups[0]
    (b1, b2), eps, lr = group["betas"], group["eps"], group["lr"]
    assert (b1, b2, eps) == (0.9, 0.999, 1e-8)  # Adam's defaults
    for t, move in enumerate(moves, 1):
        m_hat = (1 - b1) * b1 ** (t - 1) * grad / (1 - b1**t)
        v_hat = (1 - b2) * b2 ** (t - 1) * grad**2 / (1 - b2**t)
        torch.testing.assert_close(
            move, (lr * m_hat / (v_hat.sqrt() + eps)).abs(), rtol=1e-9, atol=0
        )
        without_g = lr * (1 - b1) * b1 ** (t - 1) / (1 - b1**t)
        without_g /= math.sqrt((1 - b2) * b2 ** (t - 1) / (1 - b2**t))
        torch.testing.assert_close(
            move, torch.full((4,), without_g, dtype=torch.float64), rtol=1e-5, atol=0
        )


@claim(
    LAB,
    "With `set_to_none=True` a skipped middle layer is frozen for that step, and Adam's "
    'per-parameter step counter (`state["step"]`) does not advance for it.',
)
def test_adam_does_not_count_a_step_for_a_skipped_layer():
    net, x, y = small_net()
    adam = torch.optim.Adam(net.parameters(), lr=0.01)
    for depth in (1, 0, 0, 2):
        adam.zero_grad(set_to_none=True)
        before = net.middle_linear.weight.detach().clone()
        F.nll_loss(net(x, depth), y).backward()
        adam.step()
        assert torch.equal(net.middle_linear.weight.detach(), before) == (depth == 0)
    assert int(adam.state[net.middle_linear.weight]["step"]) == 2
    assert int(adam.state[net.input_linear.weight]["step"]) == 4


# -------------------------------------------------------------- 4. growing and shrinking


@claim(
    LAB,
    "Adam's moments `exp_avg` and `exp_avg_sq` and its `step` count hold what it learned about "
    "each weight.",
)
def test_adams_state_is_exp_avg_exp_avg_sq_and_step():
    p = nn.Parameter(torch.randn(3, 2))
    adam = torch.optim.Adam([p])
    p.grad = torch.randn(3, 2)
    adam.step()
    state = adam.state[p]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
    assert state["exp_avg"].shape == state["exp_avg_sq"].shape == p.shape
    assert state["step"].shape == () and float(state["step"]) == 1


@claim(
    LAB,
    "the optimizer keys its state by the parameter tensor itself (`optimizer.state[p]`)",
)
def test_optimizer_state_is_keyed_by_the_tensor():
    mlp = MLP()
    adam = torch.optim.Adam(mlp.parameters())
    F.cross_entropy(mlp(torch.randn(5, 4)), torch.randint(0, 3, (5,))).backward()
    adam.step()
    assert all(any(key is p for p in mlp.parameters()) for key in adam.state)
    assert len(adam.state) == 6
    twin = nn.Parameter(mlp.fc1.weight.detach().clone())  # equal values, another tensor
    assert twin not in adam.state


@claim(
    LAB,
    "Adam makes a parameter's state on its first step, so a parameter that never took a step "
    "has no state: skip it.",
)
def test_adam_makes_state_on_the_first_step():
    two = TwoBranch()
    adam = torch.optim.Adam(two.parameters())
    assert len(adam.state) == 0
    two(torch.randn(4, 3), 0).sum().backward()
    adam.step()
    assert two.a.weight in adam.state and two.b.weight not in adam.state


@claim(LAB, "(reading optimizer.state[old] creates an empty entry)")
def test_reading_optimizer_state_creates_an_entry():
    p = nn.Parameter(torch.zeros(2))
    adam = torch.optim.Adam([p])
    assert len(adam.state) == 0
    assert adam.state[p] == {}
    assert len(adam.state) == 1


@claim(LAB, "(a reset step changes Adam's bias correction)")
def test_resetting_step_changes_adams_update():
    def one_more_step(reset):
        torch.manual_seed(0)
        p = nn.Parameter(torch.randn(5))
        adam = torch.optim.Adam([p], lr=0.1)
        for _ in range(4):
            p.grad = torch.randn(5)
            adam.step()
        if reset:
            adam.state[p]["step"].zero_()
        before = p.detach().clone()
        p.grad = torch.randn(5)
        adam.step()
        return p.detach() - before

    assert not torch.allclose(one_more_step(False), one_more_step(True))


def widen(first, second, extra):
    h = first.out_features
    new_first, new_second = nn.Linear(first.in_features, h + extra), nn.Linear(h + extra, 2)
    with torch.no_grad():
        new_first.weight[:h], new_first.bias[:h] = first.weight, first.bias
        new_first.weight[h:], new_first.bias[h:] = 0.1 * torch.randn(extra, first.in_features), 0
        new_second.weight[:, :h], new_second.weight[:, h:] = second.weight, 0
        new_second.bias[:] = second.bias
    return new_first, new_second


@claim(
    LAB,
    "Zero outgoing weights keep the output as it was, and the gradient of those weights is the "
    "new units' activation times the gradient arriving at the next layer, which is not zero,",
)
def test_zero_outgoing_weights_keep_the_output_and_get_a_gradient():
    torch.manual_seed(0)
    f, s = nn.Linear(4, 3), nn.Linear(3, 2)
    f2, s2 = widen(f, s, 2)
    x = torch.randn(20, 4)
    hidden = F.relu(f2(x))
    out = s2(hidden)
    torch.testing.assert_close(out, s(F.relu(f(x))), rtol=0, atol=1e-6)
    upstream = torch.randn(20, 2)
    out.backward(upstream)
    expected = upstream.T @ hidden.detach()
    torch.testing.assert_close(s2.weight.grad[:, 3:], expected[:, 3:])
    assert s2.weight.grad[:, 3:].abs().sum() > 0


@claim(
    LAB,
    "incoming AND zero outgoing weights they output relu(0) = 0 and pass back nothing",
)
def test_silent_units_get_no_gradient():
    first, second = nn.Linear(4, 5), nn.Linear(5, 2)
    with torch.no_grad():
        first.weight[3:], first.bias[3:], second.weight[:, 3:] = 0, 0, 0
    x = torch.randn(10, 4)
    hidden = F.relu(first(x))
    second(hidden).pow(2).sum().backward()
    assert torch.equal(hidden[:, 3:], torch.zeros(10, 2))
    assert torch.equal(first.weight.grad[3:], torch.zeros(2, 4))
    assert torch.equal(second.weight.grad[:, 3:], torch.zeros(2, 2))


@claim(
    LAB,
    "each new unit adds exactly zero to every sum in the output, so the output moves by a rounding "
    "error at most (the printed change below is zero, or about 1e-7 where the wider matrix product "
    "adds its terms in another order), the old gradients are unchanged up to that rounding",
)
def test_widening_with_zero_outgoing_weights_keeps_the_old_gradients():
    torch.manual_seed(0)
    f, s = nn.Linear(4, 3), nn.Linear(3, 2)
    f2, s2 = widen(f, s, 2)
    x = torch.randn(20, 4)
    s(F.relu(f(x))).pow(2).sum().backward()
    s2(F.relu(f2(x))).pow(2).sum().backward()
    hidden = F.relu(f2(x))
    assert torch.equal(hidden[:, 3:] @ s2.weight[:, 3:].T, torch.zeros(20, 2))  # exact zeros
    assert (s2(hidden) - s(F.relu(f(x)))).abs().max().item() <= 1e-6  # zero, or a rounding error
    torch.testing.assert_close(f2.weight.grad[:3], f.weight.grad)
    torch.testing.assert_close(s2.weight.grad[:, :3], s.weight.grad)


@claim(
    LAB,
    "Had you created a fresh `Adam`, every weight would restart with `step = 1`, whose update "
    "is about `lr` in size for every weight,",
)
def test_a_fresh_adams_first_update_is_lr_for_every_weight():
    torch.manual_seed(0)
    mlp = MLP()
    adam = torch.optim.Adam(mlp.parameters(), lr=0.05)
    before = [p.detach().clone() for p in mlp.parameters()]
    F.cross_entropy(mlp(torch.randn(32, 4)), torch.randint(0, 3, (32,))).backward()
    adam.step()
    for p, b in zip(mlp.parameters(), before, strict=True):
        moved = (p.detach() - b).abs()
        assert float(adam.state[p]["step"]) == 1
        big = p.grad.abs() > 1e-6  # where the gradient is not tiny against eps
        torch.testing.assert_close(moved[big], torch.full_like(moved[big], 0.05), rtol=1e-2, atol=0)


@claim(
    LAB,
    "`optimizer.state_dict()` looks up every state key in `param_groups` and raises a "
    "`KeyError` on one it cannot find.",
)
def test_an_orphaned_state_entry_breaks_state_dict():
    layer = nn.Linear(3, 2)
    adam = torch.optim.Adam(layer.parameters())
    layer(torch.randn(4, 3)).sum().backward()
    adam.step()
    assert set(adam.state_dict()["state"]) == {0, 1}
    adam.state[nn.Parameter(torch.zeros(2, 3))] = {"step": torch.tensor(1.0)}
    with pytest.raises(KeyError):
        adam.state_dict()


# --------------------------------------------------------------------------- 5. saving


@claim(
    LAB,
    "A `state_dict` is an ordered dict from parameter **names** to tensors. It does not store "
    "the code of `forward`, nor the random draws: only the modules' tensors (parameters and "
    "buffers).",
)
def test_a_state_dict_maps_names_to_tensors():
    net = DynamicNet(5, 8, 3, seed=0)
    state = net.state_dict()
    assert isinstance(state, OrderedDict)
    assert list(state) == [name for name, _ in net.named_parameters()]
    assert all(isinstance(t, torch.Tensor) for t in state.values())
    norm = nn.BatchNorm1d(3)
    assert set(norm.state_dict()) == {n for n, _ in norm.named_parameters()} | {
        n for n, _ in norm.named_buffers()
    }


@claim(
    LAB,
    "loading it into a model built with the original sizes fails with a message that says "
    "which tensors and which shapes:",
)
def test_loading_a_grown_state_dict_names_tensors_and_shapes():
    big = MLP(h2=10)
    with pytest.raises(RuntimeError) as error:
        MLP().load_state_dict(big.state_dict())
    message = str(error.value)
    assert "size mismatch for fc2.weight" in message and "size mismatch for fc3.weight" in message
    assert "torch.Size([10, 8])" in message and "torch.Size([6, 8])" in message


@claim(
    LAB,
    "`strict=False` does **not** help here: it forgives names that are missing or unexpected, "
    "not shapes that differ",
)
def test_strict_false_forgives_names_not_shapes():
    with pytest.raises(RuntimeError, match="size mismatch"):
        MLP().load_state_dict(MLP(h2=10).state_dict(), strict=False)
    state = MLP().state_dict()
    state["extra.weight"] = torch.zeros(1)
    del state["fc1.bias"]
    result = MLP().load_state_dict(state, strict=False)
    assert result.missing_keys == ["fc1.bias"] and result.unexpected_keys == ["extra.weight"]
    with pytest.raises(RuntimeError):
        MLP().load_state_dict(state)


class DynamicNetPlus(DynamicNet):
    def __init__(self, d_in=784, hidden=100, d_out=10, max_depth=3, seed=None):
        super().__init__(d_in, hidden, d_out, max_depth, seed)
        self.extra_linear = nn.Linear(hidden, hidden)


@claim(
    LAB,
    "saved before someone added a layer: `load_state_dict` then returns the `missing_keys` and "
    "`unexpected_keys` it forgave, and a missing layer keeps its random initial weights.",
)
def test_a_missing_layer_keeps_its_initial_weights():
    torch.manual_seed(0)
    plus = DynamicNetPlus(5, 8, 3)
    initial = plus.extra_linear.weight.detach().clone()
    result = plus.load_state_dict(DynamicNet(5, 8, 3).state_dict(), strict=False)
    assert result.missing_keys == ["extra_linear.weight", "extra_linear.bias"]
    assert result.unexpected_keys == [] and torch.equal(plus.extra_linear.weight, initial)
    back = DynamicNet(5, 8, 3).load_state_dict(plus.state_dict(), strict=False)
    assert back.missing_keys == []
    assert back.unexpected_keys == ["extra_linear.weight", "extra_linear.bias"]


@claim(LAB, "(load_state_dict copies them; assign=True would not)")
def test_load_state_dict_copies_unless_assign():
    source = MLP()
    state = source.state_dict()
    copied, assigned = MLP(), MLP()
    copied.load_state_dict(state)
    assigned.load_state_dict(MLP().state_dict() | state, assign=True)
    with torch.no_grad():
        source.fc1.weight.add_(1.0)  # state's tensors share memory with source's
    assert not torch.equal(copied.fc1.weight, source.fc1.weight)
    assert torch.equal(assigned.fc1.weight, source.fc1.weight)


@claim(
    LAB,
    "`optimizer.state_dict()` stores the state under the **position** of each parameter in "
    "`param_groups` (0, 1, 2, ...), not under its name, and loading it matches positions only.",
)
def test_an_optimizer_state_dict_is_by_position():
    torch.manual_seed(0)
    two = TwoBranch()
    adam = torch.optim.Adam(two.parameters(), lr=0.1)
    two(torch.randn(4, 3), 0).pow(2).mean().backward()  # only branch a
    adam.step()
    saved = adam.state_dict()
    assert set(saved["state"]) == {0, 1} and saved["param_groups"][0]["params"] == [0, 1, 2, 3]
    swapped = TwoBranch()
    again = torch.optim.Adam([swapped.b.weight, swapped.b.bias, swapped.a.weight, swapped.a.bias])
    again.load_state_dict(saved)  # no error, no warning
    assert swapped.b.weight in again.state and swapped.a.weight not in again.state
    torch.testing.assert_close(
        again.state[swapped.b.weight]["exp_avg"], adam.state[two.a.weight]["exp_avg"]
    )


@claim(
    LAB,
    "Had the shapes differed, loading would still have said nothing, and the next `step()` would "
    "have failed on the mismatched shapes.",
)
def test_an_optimizer_state_of_the_wrong_shape_fails_at_step():
    first = nn.Linear(3, 2, bias=False)
    adam = torch.optim.Adam(first.parameters())
    first(torch.randn(4, 3)).sum().backward()
    adam.step()
    other = nn.Parameter(torch.zeros(5))
    again = torch.optim.Adam([other])
    again.load_state_dict(adam.state_dict())  # a (2, 3) state on a (5,) parameter: no word
    other.grad = torch.ones(5)
    with pytest.raises(RuntimeError):
        again.step()


@claim(LAB, "the scalar `step` has shape `()`")
def test_adams_step_is_a_0d_tensor():
    p = nn.Parameter(torch.zeros(2, 3))
    adam = torch.optim.Adam([p])
    p.grad = torch.ones(2, 3)
    adam.step()
    assert torch.is_tensor(adam.state[p]["step"]) and adam.state[p]["step"].shape == ()


# ------------------------------------------------------------------------------ summary


@claim(
    LAB,
    "A dynamic graph and its unrolled static twin give the same gradients; a shared layer used "
    "twice gets the sum of both contributions, and a layer not used gets `None`.",
)
def test_summary_gradients():
    test_the_unrolled_graph_gives_the_same_gradients_to_rounding.__wrapped__()
    test_a_shared_weight_gets_the_sum_of_its_uses.__wrapped__()
    test_depth_zero_leaves_the_middle_grad_none.__wrapped__()


@claim(
    LAB,
    'A `None` gradient means "skip me" to the optimizers of `torch.optim`, LBFGS excepted; a '
    "zero gradient still lets momentum and Adam move a parameter, by a step that does not "
    "depend on the size of the last real gradient.",
)
def test_summary_none_and_zero_gradients():
    test_every_optimizer_but_lbfgs_skips_a_none_grad.__wrapped__()
    test_adam_keeps_moving_on_zero_gradients_whatever_the_size.__wrapped__()
    assert unused_drift(torch.optim.SGD, set_to_none=False, momentum=0.9) > 0


@claim(
    LAB,
    "loading checks names and shapes (`strict=False` forgives names only). An optimizer's "
    "`state_dict` matches by position",
)
def test_summary_loading():
    test_strict_false_forgives_names_not_shapes.__wrapped__()
    test_an_optimizer_state_dict_is_by_position.__wrapped__()


@claim(
    LAB,
    "This `TwoBranch` is not lab 3's, which runs exactly one of its two layers, chosen by "
    "`branch`: this one has two layers of the same shape, and `coin` picks one or both",
)
def test_two_branch_of_lab_6_is_not_lab_3s():
    from claims import lab_class

    lab3 = lab_class("lab03_accumulation", "TwoBranch")()
    lab6 = lab_class(LAB, "TwoBranch")()
    x3, x4 = torch.randn(5, 3), torch.randn(5, 4)
    assert torch.equal(lab3(x4, 1), lab3.fc_1(x4)) and torch.equal(lab3(x4, 2), lab3.fc_2(x4))
    assert lab6.a.weight.shape == lab6.b.weight.shape
    assert torch.equal(lab6(x3, 0), lab6.a(x3)) and torch.equal(lab6(x3, 1), lab6.b(x3))
    assert torch.allclose(lab6(x3, 2), lab6.a(x3) + lab6.b(x3))
