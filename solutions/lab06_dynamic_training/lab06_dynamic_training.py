# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 6: Training a graph that changes shape
#
# A dynamic graph is rebuilt on every forward pass, so a model may take a different path, or
# grow a layer, from one batch to the next. What does that mean for training: are the
# gradients those of the equivalent static graph, what do optimizers do to a parameter the
# graph did **not** use, how do you widen or narrow a layer without losing what the network
# and its optimizer learned, and how do you save a model that changed shape?
#
# **How this lab works.** In each *exercise* cell, replace `raise NotImplementedError(...)`
# with your code; the *check* cell after it tells you, in words, what is wrong. When you
# submit, the checks run again with extra hidden cases, so make the code right, not just the
# printed numbers. Run the notebook top to bottom (*Kernel > Restart and run all*) first.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import copy
import io
import random

import torch.nn.functional as F
from torch import nn

# The tensors of this lab are tiny: one thread is faster than several fighting over them.
torch.set_num_threads(1)
print("torch", torch.__version__, "| grading mode" if GRADING else "")

# %% [markdown]
# ## 1. A dynamic graph has the gradients of its unrolled twin
#
# Our running model is lab 5's `DynamicNet`: an input layer, one **shared** *middle* layer
# applied 0 to `max_depth` times (drawn by `self.rng` on every call, unless you pass `depth`),
# and an output layer followed by `log_softmax`. Here it is small (5 inputs, 8 hidden units,
# 3 classes) and in `float64`, so that "equal" can mean equal to $10^{-12}$.


# %%
# %course-include dynamicnet.py


net = DynamicNet(5, 8, 3, seed=0).double()
x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 3, (16,))
for depth in range(4):
    net.zero_grad(set_to_none=True)
    F.nll_loss(net(x, depth), y).backward()
    g = net.middle_linear.weight.grad
    print(
        f"depth {depth}: middle_linear.weight.grad is", g if g is None else f"norm {g.norm():.4f}"
    )

# %% [markdown]
# With `depth = 0` the middle layer is not in the graph, so `backward()` never reaches it
# and its `.grad` stays `None`. With depth 2 or 3 the same weight appears several times in
# the graph, and its gradient is the **sum** of the contributions of every use. In the
# picture of the depth-2 graph, `middle_linear.weight` appears once (a blue box and its
# `AccumulateGrad` node), with two arrows leaving that node, one per use:

# %%
draw(F.nll_loss(net(x, 2), y), params=dict(net.named_parameters()))

# %% [markdown]
# A static-graph framework would have you write the depth-2 network out as one fixed
# expression. Nothing about the chain rule changes: the dynamic graph of `net(x, 2)` *is*
# that expression, recorded while it ran.
#
# ### Exercise 1 (2 points): unroll the depth-2 graph by hand
#
# Write `unrolled_depth2(p, x)` that computes what `net(x, 2)` returns, the
# log-probabilities, as one straight-line expression: no loop, no `if`, no call to `net` or
# its layers. Use the tensors in the dict `p = dict(net.named_parameters())` (for example
# `p["middle_linear.weight"]`) with `@`, `.T`, `+`, `F.relu` and `F.log_softmax`. A linear
# layer computes `x @ W.T + b`.


# %% nbgrader={"solution": true, "grade_id": "unrolled_depth2"}
def unrolled_depth2(p, x):
    ### BEGIN SOLUTION
    h = F.relu(x @ p["input_linear.weight"].T + p["input_linear.bias"])
    h = F.relu(h @ p["middle_linear.weight"].T + p["middle_linear.bias"])
    h = F.relu(h @ p["middle_linear.weight"].T + p["middle_linear.bias"])
    return F.log_softmax(h @ p["output_linear.weight"].T + p["output_linear.bias"], dim=1)
    ### END SOLUTION


# %% [markdown]
# The gradients of the same loss, through `net(x, 2)` and through yours:


# %%
def gradients(loss, params):
    """d loss / d p for every p, as a list (None where p was not used)."""
    return torch.autograd.grad(loss, params, allow_unused=True)


dynamic = gradients(F.nll_loss(net(x, 2), y), list(net.parameters()))
static = gradients(
    F.nll_loss(unrolled_depth2(dict(net.named_parameters()), x), y), [*net.parameters()]
)
for (name, _), a, b in zip(net.named_parameters(), dynamic, static, strict=True):
    print(f"{name:22} largest difference {(a - b).abs().max().item():.1e}")


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_unrolled_depth2"}
### BEGIN HIDDEN TESTS
# (first, so that the later checks have it even when a check here fails)
def _seeded(_module, _seed, _scale=0.5):
    """`_module`, every parameter drawn from torch.Generator().manual_seed(_seed), scaled."""
    _gen = torch.Generator().manual_seed(_seed)
    with torch.no_grad():
        for _p in _module.parameters():
            _p.copy_(_scale * torch.randn(_p.shape, generator=_gen, dtype=_p.dtype))
    return _module


### END HIDDEN TESTS
_out, _error = attempt(unrolled_depth2, dict(net.named_parameters()), x)
check(
    _error is None and isinstance(_out, torch.Tensor) and _out.shape == (16, 3),
    f"unrolled_depth2(p, x) on the net above and x of shape (16, 5) should return the log-probabilities, a tensor of shape (16, 3) (error: {_error}). A linear layer computes x @ W.T + b.",
)
check(
    _out.grad_fn is not None,
    "unrolled_depth2 returned a tensor outside the autograd graph (no grad_fn), so no gradient reaches p: build it from p's tensors, with no .detach(), .data or torch.tensor(...).",
)
_static = gradients(F.nll_loss(_out, y), list(net.parameters()))
check(
    all(_g is not None for _g in _static),
    "Some parameter got no gradient through unrolled_depth2: every one of the six tensors in p should be used.",
)
_gap = max((_u - _v).abs().max().item() for _u, _v in zip(dynamic, _static, strict=True))
check(
    _gap < 1e-12,
    f"The gradients through unrolled_depth2 differ from those through net(x, 2) (by up to {_gap:.1e}): apply the middle layer twice, a ReLU after the input layer and after each middle layer, then log_softmax over dim 1 on the output layer, with no ReLU before it.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed in range(3):
    _net = _seeded(DynamicNet(4, 6, 5).double(), 100 + _seed)
    _gen = torch.Generator().manual_seed(600 + _seed)
    _x = torch.randn(9, 4, dtype=torch.float64, generator=_gen)
    _out = unrolled_depth2(dict(_net.named_parameters()), _x)
    _y9 = torch.randint(0, 5, (9,), generator=_gen)
    _ok = isinstance(_out, torch.Tensor) and _out.shape == (9, 5)
    _grads = "no graph: no grad_fn"  # recorded as it is when the output is not in the graph
    if _ok and _out.grad_fn is not None:
        _grads = list(gradients(F.nll_loss(_out, _y9), [*_net.parameters()]))
    observe(
        f"unrolled_depth2(p, x) on random DynamicNet(4, 6, 5) parameters (draw {_seed}) and 9 random inputs: the log-probabilities, and the gradients of nll_loss",
        {"log-probabilities": _out.detach() if _ok else "not a (9, 5) tensor", "gradients": _grads},
        rtol=1e-9,
        atol=1e-12,
        hint="A ReLU after the input layer and after each of the two middle layers, the same middle weights twice, and log_softmax(dim=1) of the output layer, no ReLU before it.",
    )
### END HIDDEN TESTS

# %% [markdown]
# The differences printed above are zero or a few units in the last digit of a `float64`:
# the two graphs hold the same operations. "Dynamic" is about *when* the graph is built.
#
# ## 2. An optimizer step is an update rule, nothing more
#
# After `backward()` every used parameter holds its gradient in `.grad`. An optimizer only
# reads `.grad` and changes the parameter in place; it never looks at the graph.
# `torch.optim.SGD` with momentum $\mu$ and learning rate $\eta$ (and its defaults otherwise)
# keeps one *momentum buffer* $b$ per parameter:
#
# $$b \leftarrow g \ \text{(first step)},\qquad b \leftarrow \mu\, b + g \ \text{(later steps)},
#   \qquad p \leftarrow p - \eta\, b .$$
#
# The same formula may still round differently. On a CPU, `p.add(b, alpha=-lr)` is what
# `torch.optim.SGD` itself calls, so it agrees bit for bit. `p - lr * b` rounds `lr * b`
# first and subtracts afterwards, while the fused form may round once, so some entries may
# differ in their last bit. So a hand-written update is graded to a tolerance ($10^{-12}$),
# and the check shows, without grading it, whether yours is also identical bit for bit.
#
# ### Exercise 2 (2 points): one SGD-with-momentum step by hand
#
# Write `sgd_momentum_step(params, buffers, lr, momentum)`. `params` is a list of tensors
# with `.grad` set (or `None`); `buffers` is a list of the same length holding each
# momentum buffer, `None` before the first step. Update every parameter **in place**
# (inside `torch.no_grad()`), and return the new list of buffers: the results of
# `torch.optim.SGD(params, lr=lr, momentum=momentum)`, up to rounding, including what it does
# with a parameter whose `.grad` is `None` (the check says it; section 3 explains it).


# %% nbgrader={"solution": true, "grade_id": "sgd_momentum_step"}
def sgd_momentum_step(params, buffers, lr, momentum):
    ### BEGIN SOLUTION
    new_buffers = []
    with torch.no_grad():
        for p, b in zip(params, buffers, strict=True):
            if p.grad is None:  # not used: torch.optim skips it, buffer and all
                new_buffers.append(b)
                continue
            b = p.grad.detach().clone() if b is None else b.mul(momentum).add(p.grad)
            p.add_(b, alpha=-lr)
            new_buffers.append(b)
    return new_buffers
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_sgd_momentum_step"}
with torch.random.fork_rng(devices=[]):  # leaves the random numbers of the next cells as they were
    _g1, _g2 = torch.randn(2, 40, 30, dtype=torch.float64)
    _ref = [nn.Parameter(torch.randn(40, 30, dtype=torch.float64)) for _ in range(2)]
_mine, _buffers, _error = [nn.Parameter(_r.detach().clone()) for _r in _ref], [None, None], None
_opt = torch.optim.SGD(_ref, lr=0.1, momentum=0.9)
for _grads in [[_g1, _g2], [_g2, None], [_g1, _g1]]:  # parameter 1 sits out step 2
    for _r, _m, _g in zip(_ref, _mine, _grads, strict=True):
        _r.grad, _m.grad = (None, None) if _g is None else (_g.clone(), _g.clone())
    _opt.step()
    _buffers, _error = attempt(sgd_momentum_step, _mine, _buffers, 0.1, 0.9)
    if _error is not None or not (isinstance(_buffers, list) and len(_buffers) == 2):
        break
check(
    _error is None and isinstance(_buffers, list) and len(_buffers) == 2,
    f"sgd_momentum_step on two (40, 30) parameters should return a list of two buffers (error: {_error}).",
)
check(
    torch.allclose(_ref[0], _mine[0], rtol=1e-12, atol=1e-12),
    "After three steps your first parameter is not where torch.optim.SGD puts it: on step 1 the buffer is the gradient itself, later it is momentum * buffer + gradient, and each step subtracts lr * buffer, in place, from every parameter of the list.",
)
print("Identical to torch.optim.SGD bit for bit (not graded):", torch.equal(_ref[0], _mine[0]))
check(
    torch.allclose(_ref[1], _mine[1], rtol=1e-12, atol=1e-12),
    "A parameter whose .grad was None on step 2 ended elsewhere than torch.optim.SGD puts it. SGD skips such a parameter entirely: no update, and its buffer kept as it was (not None, which would restart the momentum, and not a zero gradient).",
)
_p = nn.Parameter(torch.zeros(5, dtype=torch.float64))
_p.grad = torch.ones(5, dtype=torch.float64)
_buffers, _error = attempt(sgd_momentum_step, [_p], [None], 0.1, 0.9)
check(
    isinstance(_buffers, list) and len(_buffers) == 1 and isinstance(_buffers[0], torch.Tensor),
    f"sgd_momentum_step on one parameter and [None] should return a list holding one buffer, a tensor (error: {_error}); call it in a cell of your own to see what it returns.",
)
_kept = _buffers[0].clone()
_p.grad.mul_(-2.0)  # what the next backward does to .grad: it changes it in place
check(
    torch.equal(_buffers[0], _kept),
    "The buffer you returned after a first step changed when .grad was changed in place afterwards, as the next backward() does: it must be a copy of the gradient (p.grad.clone()), not the .grad tensor itself.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen, _coin = torch.Generator().manual_seed(7), random.Random(7)
_shapes = [(50,), (30, 20), (4, 4, 4)]
_steps = [
    [
        torch.randn(_s, dtype=torch.float64, generator=_gen) if _coin.random() < 0.7 else None
        for _s in _shapes
    ]
    for _ in range(6)
]
_start = [torch.randn(_s, dtype=torch.float64, generator=_gen) for _s in _shapes]
_runs = [(0.05, 0.5, _steps), (0.3, 0.99, _steps), (0.1, 0.9, [_steps[0], [None] * 3])]
for _lr, _mu, _grads in _runs:
    _params, _buffers = [nn.Parameter(_t.clone()) for _t in _start], [None] * 3
    for _step in _grads:
        for _p, _g in zip(_params, _step, strict=True):
            _p.grad = None if _g is None else _g.clone()
        _buffers = sgd_momentum_step(_params, _buffers, _lr, _mu)
        _buffers = _buffers if isinstance(_buffers, list) and len(_buffers) == 3 else ["?"] * 3
        for _p in _params:  # as the next backward would: a buffer that is the .grad changes too
            if _p.grad is not None:
                _p.grad.mul_(-2.0)
    _read = [
        torch.zeros(_s, dtype=torch.float64) if _b is None else _b
        for _s, _b in zip(_shapes, _buffers, strict=True)
    ]
    observe(  # to a tolerance: the same formula may round differently
        f"sgd_momentum_step(params, buffers, lr={_lr}, momentum={_mu}): {len(_grads)} steps on three random parameters of different shapes, some steps with .grad None",
        {"parameters": [_p.detach() for _p in _params], "buffers (None read as zeros)": _read},
        rtol=1e-10,
        atol=1e-12,
        hint="As torch.optim.SGD: the buffer is a clone of the gradient on the first step, momentum * buffer + gradient later, then p -= lr * buffer in place; a parameter whose .grad is None is skipped and keeps its buffer.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Parameters the graph did not use
#
# In `DynamicNet` the middle layer sits out whenever the draw is 0. What happens to it on
# that step depends on how you cleared the gradients before `backward()`:
#
# * `optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0) sets `.grad` to
#   `None`; a parameter the graph did not reach keeps `None`;
# * `optimizer.zero_grad(set_to_none=False)` fills `.grad` with zeros; an unused parameter
#   then holds a gradient of zero, which is a perfectly good number to an optimizer.
#
# This `TwoBranch` is not lab 3's, which runs exactly one of its two layers, chosen by
# `branch`: this one has two layers of the same shape, and `coin` picks one or both:


# %%
class TwoBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x, coin):  # coin 0: a only, 1: b only, 2: both
        return (self.a(x) if coin in (0, 2) else 0) + (self.b(x) if coin in (1, 2) else 0)


x3 = torch.randn(8, 3)

# %% [markdown]
# ### Exercise 3 (2 points): how far does an unused layer move?
#
# Write `unused_drift(net, optimizer, x, set_to_none)` that does two training steps on the
# `TwoBranch` `net` with the loss `net(x, coin).pow(2).mean()`, each starting with
# `optimizer.zero_grad(set_to_none=set_to_none)` and ending with `backward()` and
# `optimizer.step()`: step 1 uses **both** branches (`coin=2`), step 2 **only** branch `a`
# (`coin=0`). Return how far branch `b`'s weight moved during step 2 alone, as a float: the
# norm `(b_after - b_before).norm().item()` (take `b_before` as a `.clone()` just before step 2).


# %% nbgrader={"solution": true, "grade_id": "unused_drift"}
def unused_drift(net, optimizer, x, set_to_none):
    ### BEGIN SOLUTION
    optimizer.zero_grad(set_to_none=set_to_none)
    net(x, 2).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=set_to_none)
    before = net.b.weight.detach().clone()
    net(x, 0).pow(2).mean().backward()
    optimizer.step()
    return (net.b.weight.detach() - before).norm().item()
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_unused_drift"}
def _drift_sgd(_set_to_none):
    """unused_drift with SGD(momentum=0.9) on a TwoBranch drawn from seed 3, and what b's
    first gradient was (computed independently, on a copy)."""
    torch.manual_seed(3)
    _net = TwoBranch()
    _probe = copy.deepcopy(_net)
    _probe(x3, 2).pow(2).mean().backward()
    _opt = torch.optim.SGD(_net.parameters(), lr=0.1, momentum=0.9)
    return attempt(unused_drift, _net, _opt, x3, _set_to_none), _probe.b.weight.grad.norm().item()


(_drift, _error), _g_b = _drift_sgd(False)
check(
    _error is None,
    f"unused_drift raised an error on a TwoBranch with SGD(momentum=0.9) (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    isinstance(_drift, float),
    "unused_drift should return a Python float, the norm of b's change: use .item().",
)
check(
    abs(_drift - 0.1 * 0.9 * _g_b) < 1e-6,
    f"With set_to_none=False and momentum 0.9, branch b should move by lr * momentum * |g1| in step 2 (its gradient is zero, its momentum buffer is not; yours moved {_drift:.4f}). Moved 0? Pass set_to_none to zero_grad (its default is True), and take b_before as a .clone() (else it is the very tensor that step() changes). Moved more? Clear the gradients before step 2 as well, and measure step 2 alone.",
)
(_drift, _error), _g_b = _drift_sgd(True)
check(
    _drift == 0.0,
    f"With set_to_none=True branch b's .grad is None in step 2, so SGD skips it and b should not move (yours moved {_drift}): use coin=0 in step 2 and clear with set_to_none.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _label, _make in (
    ("Adam(lr=0.05)", lambda ps: torch.optim.Adam(ps, lr=0.05)),
    ("SGD(lr=0.2, momentum=0.5)", lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.5)),
):
    for _stn in (True, False):
        _net = _seeded(TwoBranch(), 11)
        _x = torch.randn(5, 3, generator=torch.Generator().manual_seed(12))
        _got, _b = unused_drift(_net, _make(_net.parameters()), _x, _stn), _net.b.weight
        observe(
            f"unused_drift(net, {_label}, x, set_to_none={_stn}) on a random TwoBranch and 5 random inputs",
            {"returned drift of b": _got, "weights after": [_net.a.weight.detach(), _b.detach()]},
            atol=1e-6,
            hint="Clear with optimizer.zero_grad(set_to_none=set_to_none) before each step, use coin=2 then coin=0, and return the norm of b's change in step 2 alone (from a .clone() taken just before it).",
        )
### END HIDDEN TESTS

# %% [markdown]
# Is that what every optimizer does? The next cell measures it for every optimizer class in
# your `torch.optim`, with the loss in a *closure* that `step` calls (`LBFGS` needs one).


# %%
def drift(cls, set_to_none):
    """How far b's weight moves in step 2 of unused_drift, with an optimizer of class cls."""
    torch.manual_seed(1)
    two = TwoBranch()
    optimizer = cls([two.a.weight, two.b.weight], lr=0.1)
    for coin in (2, 0):
        before = two.b.weight.detach().clone()

        def closure(coin=coin):  # LBFGS calls it several times a step, the others once
            optimizer.zero_grad(set_to_none=set_to_none)
            loss = two(x3, coin).pow(2).mean()
            loss.backward()
            return loss

        optimizer.step(closure)
    return (two.b.weight.detach() - before).norm().item()


found = {c for c in vars(torch.optim).values() if isinstance(c, type)}
found = {c for c in found if issubclass(c, torch.optim.Optimizer)} - {torch.optim.Optimizer}
print(f"{'optimizer':10} {'set_to_none=True':>17} {'set_to_none=False':>18}")
for cls in sorted(found, key=lambda c: c.__name__):
    (on, error), (off, _) = (attempt(drift, cls, s) for s in (True, False))
    print(
        f"{cls.__name__:10}",
        f"cannot run here: {error[:60]}" if error else f"{on:17.4f} {off:18.4f}",
    )

# %% [markdown]
# Read the table: with `set_to_none=True` every optimizer that runs here but one leaves the
# unused branch where it was: they skip a parameter whose `.grad` is `None`. With
# `set_to_none=False` plain SGD still does not move it (a zero gradient is a zero step; the
# table's SGD has the default momentum, 0), but several optimizers **do**, Adam and AdamW
# among them, and so does SGD with momentum (your exercise): momentum keeps pushing in the old
# direction, and so does Adam, whose step is its first moment divided by the square root of
# its second moment, neither of which is zero yet.
#
# `LBFGS` is the exception: it moves such a parameter, whichever way the gradients were
# cleared. It flattens all its parameters into one vector, where a `None` gradient is read as
# zeros, and its step direction mixes the coordinates of that vector through the curvature
# pairs it keeps from earlier steps, so a coordinate whose gradient is zero still moves.
#
# How far does Adam go on a zero gradient? Adam's first step is about `lr` in size, whatever
# the size of the gradient. On the steps with a **zero** gradient every entry keeps moving, in
# the direction of the last real step, by the same amount for a gradient of 0.01 as for one
# of 300. The step with `.grad = None` moves nothing, and `state["step"]` does not advance.
# Why: after one step with gradient $g$ and $t-1$ steps with 0, Adam's bias-corrected moments are
# $\hat m = (1-\beta_1)\beta_1^{t-1} g / (1-\beta_1^t)$ and
# $\hat v = (1-\beta_2)\beta_2^{t-1} g^2 / (1-\beta_2^t)$, and its step
# $\mathrm{lr}\,\hat m / (\sqrt{\hat v} + \epsilon)$ does not depend on the size of $g$
# (unless $g$ is as small as $\epsilon$).
#
# For `DynamicNet` this decides what "skipping a layer" means. With `set_to_none=True` a
# skipped middle layer is frozen for that step, and Adam's per-parameter step counter
# (`state["step"]`) does not advance for it. Neither behaviour is wrong, but they train
# different models, so choose on purpose (and know that code written before PyTorch 2.0
# defaulted to `set_to_none=False`).
#
# ## 4. Growing and shrinking a layer during training
#
# Changing the width of a hidden layer changes the **shapes** of the weights on both sides
# of it, so those parameters become new tensors (new `nn.Linear` layers). Two things should
# survive: the **function** (up to rounding), and the **optimizer state** of the old weights:
# Adam's moments `exp_avg` and `exp_avg_sq` and its `step` count hold what it learned about
# each weight. We resize the hidden layer between `fc2` and `fc3` of a three-layer `MLP`.


# %%
class MLP(nn.Module):
    def __init__(self, d_in=4, h1=8, h2=6, d_out=3):
        super().__init__()
        self.fc1 = nn.Linear(d_in, h1)
        self.fc2 = nn.Linear(h1, h2)
        self.fc3 = nn.Linear(h2, d_out)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def train(model, optimizer, x, y, steps):
    """`steps` steps of `optimizer` on the cross-entropy; returns the loss before the last."""
    loss = None
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss


xg, yg = torch.randn(32, 4), torch.randint(0, 3, (32,))

# %% [markdown]
# ### Exercise 4 (2 points): widen a pair of layers without changing the function
#
# Write `widen_pair(first, second, extra)` that takes `first = nn.Linear(a, h)` and
# `second = nn.Linear(h, b)` and returns **new** layers `nn.Linear(a, h + extra)` and
# `nn.Linear(h + extra, b)` such that `second(relu(first(x)))` is unchanged: keep every old
# weight in place, give each new hidden unit small random **incoming** weights (rows of
# `first.weight`) and **zero outgoing** weights (columns of `second.weight`). Copy values
# inside `torch.no_grad()`. (Were the incoming weights zero too, the function would still be
# kept: look at the gradient of the new weights.)


# %% nbgrader={"solution": true, "grade_id": "widen_pair"}
def widen_pair(first, second, extra):
    ### BEGIN SOLUTION
    h = first.out_features
    new_first = nn.Linear(first.in_features, h + extra)
    new_second = nn.Linear(h + extra, second.out_features)
    with torch.no_grad():
        new_first.weight[:h] = first.weight
        new_first.bias[:h] = first.bias
        new_first.weight[h:] = 0.1 * torch.randn(extra, first.in_features)
        new_first.bias[h:] = 0.0
        new_second.weight[:, :h] = second.weight
        new_second.weight[:, h:] = 0.0
        new_second.bias[:] = second.bias
    return new_first, new_second
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_widen_pair"}
torch.manual_seed(0)
_f, _s = nn.Linear(4, 3), nn.Linear(3, 2)
_old = [_t.detach().clone() for _t in (*_f.parameters(), *_s.parameters())]
_pair, _error = attempt(widen_pair, _f, _s, 2)
_two = isinstance(_pair, tuple) and len(_pair) == 2
check(
    _error is None and _two and all(isinstance(_l, nn.Linear) for _l in _pair),
    f"widen_pair(Linear(4, 3), Linear(3, 2), 2) should return a tuple of two nn.Linear layers (error: {_error}).",
)
_nf, _ns = _pair
check(
    _nf.weight.shape == (5, 4) and _ns.weight.shape == (2, 5),
    f"widen_pair(Linear(4, 3), Linear(3, 2), 2) should return layers whose weights have the shapes (5, 4) and (2, 5) (yours: {tuple(_nf.weight.shape)}, {tuple(_ns.weight.shape)}).",
)
_now = [*_f.parameters(), *_s.parameters()]
check(
    all(torch.equal(_a, _b) for _a, _b in zip(_now, _old, strict=True)),
    "widen_pair changed the old layers: build new ones and copy the old weights into them.",
)
_x = torch.randn(20, 4)
_y = _ns(F.relu(_nf(_x)))
check(
    (_y - _s(F.relu(_f(_x)))).abs().max().item() < 1e-6,
    "The widened pair computes a different function: keep the old weights in the first rows of the new first layer and the first columns of the new second layer, copy both old biases, and make the new units' outgoing weights zero.",
)
check(
    _y.grad_fn is not None and _nf.weight.requires_grad and _ns.weight.requires_grad,
    "The new layers' weights should require grad, as nn.Linear's do, so that training can update them: create them with nn.Linear and copy values in, without freezing them.",
)
_y.pow(2).sum().backward()
check(
    _ns.weight.grad is not None
    and _nf.weight.grad is not None
    and _ns.weight.grad[:, 3:].abs().sum().item() + _nf.weight.grad[3:].abs().sum().item() > 0,
    "The new units get no gradient at all, so training can never switch them on: with zero incoming AND zero outgoing weights they output relu(0) = 0 and pass back nothing. Give them small random incoming weights.",
)
with torch.no_grad():
    for _p in [*_f.parameters(), *_s.parameters()]:
        _p.add_(1.0)
check(
    torch.equal(_ns(F.relu(_nf(_x))), _y),
    "After widen_pair returned, changing the old layers' weights changed what the new pair computes: the new layers must hold copies of the old weights and biases, not the old tensors themselves.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _a, _h, _b, _extra, _seed in [(6, 5, 4, 3, 1), (2, 1, 3, 4, 2), (5, 4, 2, 1, 3)]:
    _f, _s = _seeded(nn.Linear(_a, _h), 50 + _seed), _seeded(nn.Linear(_h, _b), 60 + _seed)
    _pair = widen_pair(_f, _s, _extra)
    _name = f"widen_pair(Linear({_a}, {_h}), Linear({_h}, {_b}), extra={_extra}) on random layers"
    if not (isinstance(_pair, tuple) and [type(_l) for _l in _pair] == [nn.Linear] * 2):
        observe(_name, "not a pair of layers")
        continue
    _nf, _ns = _pair
    _x = torch.randn(200, _a, generator=torch.Generator().manual_seed(70 + _seed))
    _y = _ns(F.relu(_nf(_x)))
    if _y.grad_fn is not None:
        _y.pow(2).sum().backward()
    _gf, _gs = _nf.weight.grad, _ns.weight.grad
    _record = {  # the new units' incoming weights are random: only what every answer gives
        "new first weight shape": list(_nf.weight.shape),
        "new first weight and bias, old rows": [_nf.weight[:_h].detach(), _nf.bias[:_h].detach()],
        "new second weight and bias": [_ns.weight.detach(), _ns.bias.detach()],
        "old layers after the call": [_t.detach() for _t in (*_f.parameters(), *_s.parameters())],
        "output on 200 random inputs": _y.detach(),
        "new outgoing weights with a nonzero gradient": None
        if _gs is None
        else int((_gs[:, _h:] != 0).sum()),
        "gradient of the old rows of the new first weight": None if _gf is None else _gf[:_h],
    }
    with torch.no_grad():
        for _p in [*_f.parameters(), *_s.parameters()]:
            _p.add_(1.0)
    _record["output after the old layers' weights were changed"] = _ns(F.relu(_nf(_x))).detach()
    observe(
        _name,
        _record,
        atol=1e-6,
        hint="Old weights and biases go, as copies, in the first rows of the new first layer and the first columns of the new second layer (whose bias is the old one); the new units get small random incoming and zero outgoing weights.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Zero outgoing weights keep the output as it was, and the gradient of those weights is the
# new units' activation times the gradient arriving at the next layer, which is not zero,
# so the next step starts using them.
#
# ### Exercise 5 (3 points): grow the hidden layer, and the optimizer with it
#
# Write `grow(model, optimizer, extra)` for an `MLP` trained with Adam:
#
# 1. replace `model.fc2` and `model.fc3` with the layers from
#    `widen_pair(model.fc2, model.fc3, extra)`;
# 2. in the optimizer's `param_groups`, put each new parameter where its old one was;
# 3. move the state: the optimizer keys its state by the parameter tensor itself
#    (`optimizer.state[p]`). For each replaced parameter, delete the old entry and make a new
#    one whose `exp_avg` and `exp_avg_sq` have the new shape, hold the old values
#    **bit for bit** where the old weights are (`new[:rows, :cols] = old`), zeros elsewhere,
#    and whose `step` is a copy of the old one. Leave `fc1`'s state untouched.
#
# Return nothing. Adam makes a parameter's state on its first step, so a parameter that
# never took a step has no state: skip it. Call `widen_pair` by that name: the check swaps in
# a stand-in (new layers of the right shapes), so a mistake in exercise 4 costs points there.


# %% nbgrader={"solution": true, "grade_id": "grow"}
def grow(model, optimizer, extra):
    ### BEGIN SOLUTION
    new_fc2, new_fc3 = widen_pair(model.fc2, model.fc3, extra)
    olds = [*model.fc2.parameters(), *model.fc3.parameters()]  # weight and bias of each layer
    model.fc2, model.fc3 = new_fc2, new_fc3
    for old, new in zip(olds, [*new_fc2.parameters(), *new_fc3.parameters()], strict=True):
        for group in optimizer.param_groups:
            group["params"] = [new if q is old else q for q in group["params"]]
        if old in optimizer.state:
            state = optimizer.state.pop(old)
            moved = {}
            for key, value in state.items():
                if torch.is_tensor(value) and value.shape == old.shape:
                    moved[key] = torch.zeros_like(new)
                    moved[key][tuple(slice(0, n) for n in old.shape)] = value
                else:
                    moved[key] = value.clone() if torch.is_tensor(value) else value
            optimizer.state[new] = moved
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 3, "grade_id": "test_grow"}
### BEGIN HIDDEN TESTS
# (first, so that test_shrink has it even when a check here fails)
def _optimizer_record(_model, _opt):
    """What an optimizer holds for a model: param_groups order, orphans, shapes and state."""
    _names = {id(p): n for n, p in _model.named_parameters()}
    return {
        "param_groups order": [_names.get(id(p)) for g in _opt.param_groups for p in g["params"]],
        "orphaned state entries": sum(id(p) not in _names for p in _opt.state),
        "parameter shapes": {n: list(p.shape) for n, p in _model.named_parameters()},
        "state": {
            n: (dict(sorted(_opt.state[p].items())) if isinstance(_opt.state[p], dict) else "?")
            if p in _opt.state
            else None
            for n, p in _model.named_parameters()
        },
    }


### END HIDDEN TESTS
def _grow_with_stand_in(_model, _opt, _extra):
    """grow(_model, _opt, _extra) with a stand-in for widen_pair: new layers of the widened
    shapes, weights from a fixed seed (keeping the function is widen_pair's job, checked in
    exercise 4). Returns (the layers the stand-in made, the error or None)."""
    _made, _yours = [], globals().get("widen_pair")

    def _stand_in(first, second, extra):
        torch.manual_seed(1000 * first.out_features + extra)
        _h = first.out_features + extra
        _made.append((nn.Linear(first.in_features, _h), nn.Linear(_h, second.out_features)))
        return _made[-1]

    globals()["widen_pair"] = _stand_in
    try:
        return _made, attempt(grow, _model, _opt, _extra)[1]
    finally:
        globals()["widen_pair"] = _yours


torch.manual_seed(0)
_x, _y = torch.randn(16, 4), torch.randint(0, 3, (16,))
_model = MLP(h2=6)
_opt = torch.optim.Adam(_model.parameters(), lr=0.01)
train(_model, _opt, _x, _y, 3)
_old = {
    _n: (_p.shape, {_k: _v.clone() for _k, _v in _opt.state[_p].items()})
    for _n, _p in _model.named_parameters()
}
_made, _error = _grow_with_stand_in(_model, _opt, 3)
check(
    _error is None,
    f"grow(model, Adam, 3) on an MLP(h2=6) after 3 Adam steps raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
)
_names = {id(_p): _n for _n, _p in _model.named_parameters()}
check(
    _made == [(_model.fc2, _model.fc3)]
    and [_names.get(id(_p)) for _g in _opt.param_groups for _p in _g["params"]] == list(_old)
    and all(id(_p) in _names for _p in _opt.state),
    "model.fc2 and model.fc3 should be the two layers that widen_pair(model.fc2, model.fc3, extra) returns (call it once, by that name); param_groups should hold the model's parameters, each new tensor where its old one was; and optimizer.state no entry for an old tensor (pop it when you move it: nothing will ever use it).",
)
for _name, _p in _model.named_parameters():
    _shape, _state = _old[_name]
    _new, _idx = _opt.state.get(_p, {}), tuple(slice(0, _n) for _n in _shape)
    _new = _new if isinstance(_new, dict) else {}
    check(
        all(
            isinstance(_new.get(_k), torch.Tensor)
            and _new[_k].shape == _p.shape
            and torch.equal(_new[_k][_idx], _state[_k])
            and _new[_k].count_nonzero() == _state[_k].count_nonzero()
            for _k in ("exp_avg", "exp_avg_sq")
        )
        and isinstance(_new.get("step"), torch.Tensor)
        and float(_new["step"]) == float(_state["step"]),
        f"A parameter's state after grow should hold exp_avg and exp_avg_sq of its new shape, with the old values bit for bit where the old weights are and zeros at the new units, and the old step count (a reset step changes Adam's bias correction); fc1's state stays as it was (the first one that does not: {_name}).",
    )
_before = {_n: _p.detach().clone() for _n, _p in _model.named_parameters()}
_result, _error = attempt(train, _model, _opt, _x, _y, 1)
check(
    _error is None
    and all(not torch.equal(_p, _before[_n]) for _n, _p in _model.named_parameters()),
    f"After one more Adam step some parameter of the grown model did not move, or the step raised an error (the error: {_error}): the optimizer must update the new tensors.",
)
_model = MLP()
_opt = torch.optim.Adam(_model.parameters(), lr=0.01)  # no step taken: no state at all yet
_made, _error = _grow_with_stand_in(_model, _opt, 2)
check(
    _error is None
    and [id(_p) for _g in _opt.param_groups for _p in _g["params"]]
    == [id(_p) for _p in _model.parameters()]
    and len(_opt.state) == 0,
    f"For an optimizer that has not taken a step yet (no entry in optimizer.state), grow should put the new tensors in param_groups and leave optimizer.state empty: skip a parameter without state (reading optimizer.state[old] creates an empty entry) (error: {_error}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed, _extra, _h2 in [(5, 1, 2), (6, 5, 4), (7, 3, 4)]:
    _gen = torch.Generator().manual_seed(_seed)
    _x, _y = torch.randn(16, 4, generator=_gen), torch.randint(0, 3, (16,), generator=_gen)
    _model = _seeded(MLP(h2=_h2), 20 + _seed)
    _opt = torch.optim.Adam(_model.parameters(), lr=0.01)
    _steps = 0 if _seed == 7 else 3  # seed 7: Adam took no step yet, so there is no state
    train(_model, _opt, _x, _y, _steps)
    _grow_with_stand_in(_model, _opt, _extra)
    _record = _optimizer_record(_model, _opt)
    _error = attempt(train, _model, _opt, _x, _y, 1)[1]
    _after = [_p.detach() for _p in _model.parameters()]
    _record["parameters after one more Adam step"] = _after if _error is None else "raised"
    observe(
        f"grow(model, Adam, extra={_extra}) on a random MLP(h2={_h2}) after {_steps} Adam steps (the stand-in for widen_pair gives the new layers fixed weights): param_groups order, orphaned state entries, each parameter's shape and state, then one more step",
        _record,
        atol=1e-6,
        hint="Put each new tensor where its old one was in param_groups, pop the old entries (only those that exist), and give each new tensor the old exp_avg and exp_avg_sq bit for bit (zeros at the new units) and a copy of the old step.",
    )
### END HIDDEN TESTS

# %% [markdown]
# After growing, the old weights take the same Adam step they would have taken in the
# small model: each new unit adds exactly zero to every sum in the output, so the output moves
# by a rounding error at most (the printed change below is zero, or about 1e-7 where the
# wider matrix product adds its terms in another order), the old gradients are unchanged up
# to that rounding, and the moments and step count came along.
# Had you created a fresh `Adam`, every weight would restart with `step = 1`, whose update
# is about `lr` in size for every weight, a jolt to a network in the middle of training. See
# it: an `MLP` with 2 hidden units, grown to 8 by your `grow` halfway through training, then
# trained on, and a copy of it handed a fresh `Adam`.

# %%
gen = torch.Generator().manual_seed(0)
x_fit = torch.randn(512, 4, generator=gen)
teacher = torch.randn(4, 16, generator=gen), torch.randn(16, 3, generator=gen)
y_fit = (torch.tanh(x_fit @ teacher[0]) @ teacher[1]).argmax(1)  # labels a wider net can learn

torch.manual_seed(0)
moved = MLP(h2=2)
adam = torch.optim.Adam(moved.parameters(), lr=0.05)
print(f"cross-entropy at step 150, before growing: {train(moved, adam, x_fit, y_fit, 150):.4f}")
before = moved(x_fit)
with your_code("grow"):
    grow(moved, adam, 6)
print("largest change in the output:", (moved(x_fit) - before).abs().max().item())
fresh = copy.deepcopy(moved)  # the same grown weights, and a new Adam
for name, model, optimizer in [
    ("state moved", moved, adam),
    ("fresh Adam", fresh, torch.optim.Adam(fresh.parameters(), lr=0.05)),
]:
    one = train(model, optimizer, x_fit, y_fit, 2)  # the loss after one step
    end = train(model, optimizer, x_fit, y_fit, 149)
    print(f"grown, {name:12} after 1 step {one:.4f}, after 150 steps {end:.4f}")

# %% [markdown]
# The run whose state moved does not jump: the grown network computes the same function, and
# Adam carries on where it was. The fresh `Adam` has the same weights, but its first step
# moves every weight by about `lr`: compare the losses one step after growing, and at the end.
#
# ### Exercise 6 (2 points): shrink the hidden layer, leaving no orphans
#
# Write `shrink(model, optimizer, keep)` that keeps only the hidden units of `fc2` listed in
# `keep` (indices, in increasing order): new `fc2` keeps those rows of its weight and bias,
# new `fc3` those columns of its weight (and all of its bias). Move the optimizer as in
# exercise 5, slicing each state tensor like its weight, and delete every old entry. Return
# nothing. (An orphaned entry is not just wasted memory: `optimizer.state_dict()` looks up
# every state key in `param_groups` and raises a `KeyError` on one it cannot find.)


# %% nbgrader={"solution": true, "grade_id": "shrink"}
def shrink(model, optimizer, keep):
    ### BEGIN SOLUTION
    keep = torch.as_tensor(keep, dtype=torch.long)
    new_fc2 = nn.Linear(model.fc2.in_features, len(keep))
    new_fc3 = nn.Linear(len(keep), model.fc3.out_features)
    cut = [
        (model.fc2.weight, new_fc2.weight, lambda t: t[keep]),
        (model.fc2.bias, new_fc2.bias, lambda t: t[keep]),
        (model.fc3.weight, new_fc3.weight, lambda t: t[:, keep]),
        (model.fc3.bias, new_fc3.bias, lambda t: t),
    ]
    with torch.no_grad():
        for old, new, take in cut:
            new.copy_(take(old))
    model.fc2, model.fc3 = new_fc2, new_fc3
    for old, new, take in cut:
        for group in optimizer.param_groups:
            group["params"] = [new if q is old else q for q in group["params"]]
        if old in optimizer.state:
            state = optimizer.state.pop(old)
            optimizer.state[new] = {
                k: (take(v).clone() if torch.is_tensor(v) and v.shape == old.shape else v)
                for k, v in state.items()
            }
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_shrink"}
torch.manual_seed(0)
_x, _y = torch.randn(16, 4), torch.randint(0, 3, (16,))
_model = MLP(h2=6)
_opt = torch.optim.Adam(_model.parameters(), lr=0.01)
train(_model, _opt, _x, _y, 3)
_ref = copy.deepcopy(_model)
_old = {
    _n: {_k: _v.clone() for _k, _v in _opt.state[_p].items()}
    for _n, _p in _model.named_parameters()
}
_result, _error = attempt(shrink, _model, _opt, [0, 2, 3, 5])
check(
    _error is None,
    f"shrink(model, Adam, [0, 2, 3, 5]) on an MLP(h2=6) raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
)
with torch.no_grad():
    _ref.fc3.weight[:, [1, 4]] = 0.0  # the small model = the big one with those units silenced
check(
    _model.fc2.out_features == 4 and (_model(_x) - _ref(_x)).abs().max().item() < 1e-6,
    "The shrunk model should have 4 hidden units and compute the old one minus the dropped units: keep the rows of fc2's weight and bias listed in keep, those columns of fc3's weight, and all of fc3's bias.",
)
_ids = {id(_p) for _p in _model.parameters()}
check(
    [id(_p) for _g in _opt.param_groups for _p in _g["params"]]
    == [id(_p) for _p in _model.parameters()],
    "The optimizer's param_groups should hold exactly the model's current parameters.",
)
check(
    all(id(_p) in _ids for _p in _opt.state),
    "optimizer.state has orphaned entries (state of tensors the model no longer has): pop the old entries when you move them. Orphans waste memory, and optimizer.state_dict() fails on them with a KeyError, so you could not save.",
)
_k = torch.tensor([0, 2, 3, 5])
for _name, _take in [
    ("fc2.weight", lambda t: t[_k]),
    ("fc2.bias", lambda t: t[_k]),
    ("fc3.weight", lambda t: t[:, _k]),
    ("fc3.bias", lambda t: t),
]:
    _st = _opt.state.get(dict(_model.named_parameters())[_name], {})
    check(
        isinstance(_st, dict)
        and all(
            isinstance(_st.get(_s), torch.Tensor)
            and _st[_s].shape == _take(_old[_name][_s]).shape
            and torch.equal(_st[_s], _take(_old[_name][_s]))
            for _s in ("exp_avg", "exp_avg_sq")
        ),
        f"A new parameter's exp_avg and exp_avg_sq should be the old ones, sliced like its weight (the first that is not: {_name}).",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed, _keep, _h2 in [(1, [1], 3), (2, [0, 1, 2, 3], 4), (8, [0, 3, 4], 6)]:
    _gen = torch.Generator().manual_seed(_seed)
    _x, _y = torch.randn(16, 4, generator=_gen), torch.randint(0, 3, (16,), generator=_gen)
    _model = _seeded(MLP(h2=_h2), 20 + _seed)
    _opt = torch.optim.Adam(_model.parameters(), lr=0.01)
    train(_model, _opt, _x, _y, 3)
    shrink(_model, _opt, _keep)
    _record = _optimizer_record(_model, _opt)
    _record["parameters"] = {_n: _p.detach() for _n, _p in _model.named_parameters()}
    _record["output on its 16 training inputs"] = attempt(_model, _x)[0]
    observe(
        f"shrink(model, Adam, keep={_keep}) on a random MLP(h2={_h2}) after 3 Adam steps: param_groups order, orphaned state entries, each parameter's shape, state and value",
        _record,
        atol=1e-6,
        hint="fc2 keeps the rows listed in keep (weight and bias), fc3 those columns of its weight and all of its bias; slice each state tensor the way its weight is sliced, put the new tensors in param_groups, and pop every old entry.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Saving and restoring a model that changed shape
#
# A `state_dict` is an ordered dict from parameter **names** to tensors. It does not store
# the code of `forward`, nor the random draws: only the modules' tensors (parameters and
# buffers). After growing, loading it into a model built with the original sizes fails with
# a message that says which tensors and which shapes:

# %%
try:
    MLP(h2=2).load_state_dict(moved.state_dict())
except RuntimeError as error:
    print(error)

# %% [markdown]
# `strict=False` does **not** help here: it forgives names that are missing or unexpected,
# not shapes that differ. It is for a model whose set of layers differs, say a `DynamicNet`
# saved before someone added a layer: `load_state_dict` then returns the `missing_keys` and
# `unexpected_keys` it forgave, and a missing layer keeps its random initial weights.
#
# ### Exercise 7 (2 points): restore a model of the right shape
#
# Write `restore_mlp(state_dict)` that reads the layer sizes from the shapes in the state
# dict (`fc1.weight` has shape `(h1, d_in)`, and so on), builds an `MLP` of those sizes,
# loads the state dict with `strict=True` and returns the model.


# %% nbgrader={"solution": true, "grade_id": "restore_mlp"}
def restore_mlp(state_dict):
    ### BEGIN SOLUTION
    h1, d_in = state_dict["fc1.weight"].shape
    h2 = state_dict["fc2.weight"].shape[0]
    d_out = state_dict["fc3.weight"].shape[0]
    restored = MLP(d_in=d_in, h1=h1, h2=h2, d_out=d_out)
    restored.load_state_dict(state_dict, strict=True)
    return restored
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_restore_mlp"}
def _restored(_model, _x):
    """restore_mlp on _model's state dict after a round trip through bytes; returns (the
    restored model, its output on _x, its output after the state dict's tensors changed, the
    error or None)."""
    _buffer = io.BytesIO()
    torch.save(_model.state_dict(), _buffer)
    _sd = torch.load(io.BytesIO(_buffer.getvalue()))
    _back, _error = attempt(restore_mlp, _sd)
    if _error is not None or not isinstance(_back, MLP):
        return _back, None, None, _error or "it did not return an MLP"
    _out = _back(_x).detach()
    with torch.no_grad():
        for _t in _sd.values():
            _t.add_(1.0)
    return _back, _out, _back(_x).detach(), None


_model, _x = MLP(h2=10), torch.randn(7, 4)  # the shape of a grown MLP
_back, _out, _after, _error = _restored(_model, _x)
check(
    _error is None,
    f"restore_mlp on the state dict of an MLP(h2=10) should return an MLP, built with the sizes read from the shapes (the error: {_error}).",
)
check(
    torch.equal(_out, _model(_x)), "The restored model computes something else than the saved one."
)
check(
    torch.equal(_after, _out),
    "Changing the state dict's tensors after restore_mlp returned changed the restored model: it must hold its own copies (load_state_dict copies them; assign=True would not).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed, _sizes in [(9, dict(d_in=7, h1=2, h2=9, d_out=5)), (10, dict(h1=5, h2=3))]:
    _model = _seeded(MLP(**_sizes), _seed)
    _x = torch.randn(7, _model.fc1.in_features, generator=torch.Generator().manual_seed(_seed))
    _back, _out, _after, _error = _restored(_model, _x)
    _layers = _error or [
        [_l.in_features, _l.out_features] for _l in (_back.fc1, _back.fc2, _back.fc3)
    ]
    observe(
        f"restore_mlp(state_dict) on the saved state of a random MLP({_sizes}): the layer sizes, the output on 7 random inputs, before and after the state dict's tensors were changed",
        {
            "layer sizes (in, out)": _layers,
            "output": _out,
            "output after the state dict changed": _after,
        },
        atol=1e-6,
        hint="Read the sizes from the shapes (fc1.weight is (h1, d_in), fc2.weight (h2, h1), fc3.weight (d_out, h2)), build that MLP and load_state_dict(state_dict, strict=True), which copies the tensors.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ### The optimizer's state_dict knows no names
#
# `optimizer.state_dict()` stores the state under the **position** of each parameter in
# `param_groups` (0, 1, 2, ...), not under its name, and loading it matches positions only.
# So after a harmless-looking refactor that defines `b` before `a`, the state lands on the
# wrong tensors, and when the shapes agree nobody complains:


# %%
class TwoBranchV2(TwoBranch):  # the same model, layers declared in the other order
    def __init__(self):
        nn.Module.__init__(self)
        self.b, self.a = nn.Linear(3, 2), nn.Linear(3, 2)


torch.manual_seed(0)
old = TwoBranch()
old_opt = torch.optim.Adam(old.parameters(), lr=0.1)
for _ in range(3):  # only branch a trains
    old_opt.zero_grad()
    old(x3, 0).pow(2).mean().backward()
    old_opt.step()
new = TwoBranchV2()
new.load_state_dict(old.state_dict())  # by name: fine
new_opt = torch.optim.Adam(new.parameters(), lr=0.1)
new_opt.load_state_dict(old_opt.state_dict())  # by position: no error, no warning
print("parameters with Adam state:", [n for n, p in new.named_parameters() if p in new_opt.state])


def optimizer_state_by_name(model, optimizer):
    """{parameter name: a copy of its optimizer state (cloned tensors)}, for those with state."""
    return {
        name: {k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state[p].items()}
        for name, p in model.named_parameters()
        if p in optimizer.state
    }


# %% [markdown]
# Branch `b` received the moments that `a` earned, and `a` lost its own. Had the shapes
# differed, loading would still have said nothing, and the next `step()` would have failed
# on the mismatched shapes. The fix is to save the optimizer state **by parameter name**, the
# way the model's state dict does: `optimizer_state_by_name`, above, is one dict comprehension.
#
# ### Exercise 8 (2 points): load optimizer state by name
#
# Write `load_optimizer_state_by_name(model, optimizer, named_state)`, which takes what
# `optimizer_state_by_name` returns and puts each saved state on the parameter of the same
# name in `model`, as cloned tensors, in `optimizer.state`. If a saved state tensor's shape
# differs from its parameter's, raise a `ValueError` whose message names the parameter (the
# scalar `step` has shape `()`: skip such 0-d tensors in the shape check).


# %% nbgrader={"solution": true, "grade_id": "state_by_name"}
def load_optimizer_state_by_name(model, optimizer, named_state):
    ### BEGIN SOLUTION
    params = dict(model.named_parameters())
    for name, state in named_state.items():
        p = params[name]
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.shape != p.shape:
                raise ValueError(f"state {key!r} of {name} has shape {tuple(value.shape)}")
        optimizer.state[p] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in state.items()}
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_state_by_name"}
def _state_record(_model, _opt):
    """For each parameter, by name (sorted): its state, keys sorted, or None."""
    return {
        n: (dict(sorted(_opt.state[p].items())) if isinstance(_opt.state[p], dict) else "?")
        if p in _opt.state
        else None
        for n, p in sorted(_model.named_parameters())
    }


_named = optimizer_state_by_name(old, old_opt)
_dst = TwoBranchV2()
_dst_opt = torch.optim.Adam(_dst.parameters(), lr=0.1)
_result, _error = attempt(load_optimizer_state_by_name, _dst, _dst_opt, _named)
check(
    _error is None and str(_state_record(_dst, _dst_opt)) == str(_state_record(old, old_opt)),
    f"After load_optimizer_state_by_name into a TwoBranchV2, each parameter should hold the saved state of the parameter of the same name (error: {_error}): match by name, not by position.",
)
_saved = [_u for _v in _named.values() for _u in _v.values()]
check(
    all(_t is not _u for _s in _dst_opt.state.values() for _t in _s.values() for _u in _saved),
    "The loaded state shares tensors with the saved copy, which ties the two together: clone the tensors when you load them.",
)
_tb = TwoBranch()
_bad = {"a.weight": dict(step=torch.tensor(1.0), exp_avg=torch.zeros(5, 5))}
_bad["a.weight"]["exp_avg_sq"] = torch.zeros(5, 5)
_result, _error = attempt(
    load_optimizer_state_by_name, _tb, torch.optim.Adam(_tb.parameters()), _bad
)
check(
    _error is not None and _error.startswith("ValueError") and "a.weight" in _error,
    f"Loading state of shape (5, 5) onto a.weight (shape (2, 3)) should raise a ValueError whose message names the parameter, a.weight (yours raised: {_error}).",
)
_good = {"a.weight": dict(step=torch.tensor(3.0), exp_avg=torch.ones(2, 3))}
_good["a.weight"]["exp_avg_sq"] = torch.ones(2, 3)
_result, _error = attempt(
    load_optimizer_state_by_name, _tb, torch.optim.Adam(_tb.parameters()), _good
)
check(
    _error is None,
    f"Loading a state that fits (exp_avg of shape (2, 3), and the 0-d step) raised an error (the error: {_error}): skip 0-d tensors like step in the shape check.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_m = _seeded(MLP(), 4)
_o = torch.optim.Adam(_m.parameters(), lr=0.01)
_gen = torch.Generator().manual_seed(40)
train(_m, _o, torch.randn(32, 4, generator=_gen), torch.randint(0, 3, (32,), generator=_gen), 2)
_named = optimizer_state_by_name(_m, _o)
_dst = MLP()
_dst_opt = torch.optim.Adam(_dst.parameters(), lr=0.1)
load_optimizer_state_by_name(_dst, _dst_opt, _named)
with torch.no_grad():  # the saved copy changes afterwards: the loaded state must not follow
    for _t in (_t for _s in _named.values() for _t in _s.values()):
        _t.add_(1.0)
_record = {
    "loaded into a new MLP, read after the saved tensors changed": _state_record(_dst, _dst_opt)
}
_tb = _seeded(TwoBranch(), 5)
_tb_opt = torch.optim.Adam(_tb.parameters(), lr=0.1)
_x3h = torch.randn(8, 3, generator=_gen)
for _ in range(2):  # only branch a trains
    _tb_opt.zero_grad()
    _tb(_x3h, 0).pow(2).mean().backward()
    _tb_opt.step()
_v2 = TwoBranchV2()
_v2_opt = torch.optim.Adam(_v2.parameters(), lr=0.1)
load_optimizer_state_by_name(_v2, _v2_opt, optimizer_state_by_name(_tb, _tb_opt))
_record["a TwoBranch's state loaded into a TwoBranchV2"] = _state_record(_v2, _v2_opt)
for _sizes in [dict(d_in=6), dict(d_out=5)]:
    _wrong = MLP(**_sizes)  # one layer's shapes differ from the saved MLP's
    _wrong_opt, _state = torch.optim.Adam(_wrong.parameters()), optimizer_state_by_name(_m, _o)
    _result, _error = attempt(load_optimizer_state_by_name, _wrong, _wrong_opt, _state)
    _record[f"loaded into an MLP({_sizes}): ValueError, and the layers it names"] = [
        bool(_error and _error.startswith("ValueError")),
        [_l for _l in ("fc1", "fc2", "fc3") if _error and _l in _error],
    ]
observe(
    "load_optimizer_state_by_name with a random MLP's saved Adam state (into a new MLP, then into MLPs whose shapes differ), and with a TwoBranch's loaded into a TwoBranchV2",
    _record,
    rtol=0,
    atol=0,
    hint="Load each saved state onto the parameter of the same name, as cloned tensors, and raise a ValueError naming the parameter when a state tensor's shape (0-d ones excepted) differs from it.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * A dynamic graph and its unrolled static twin give the same gradients; a shared layer
#   used twice gets the sum of both contributions, and a layer not used gets `None`.
# * A `None` gradient means "skip me" to the optimizers of `torch.optim`, LBFGS excepted; a
#   zero gradient still lets momentum and Adam move a parameter, by a step that does not
#   depend on the size of the last real gradient. `zero_grad(set_to_none=...)` chooses.
# * When a layer grows or shrinks, keep the function and move the optimizer state.
# * A `state_dict` maps names to tensors; loading checks names and shapes (`strict=False`
#   forgives names only). An optimizer's `state_dict` matches by position: save it by name.
