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
# A dynamic graph is rebuilt on every forward pass, so a model may take a different path,
# or even grow a layer, from one batch to the next. This lab asks what that means for
# training: are the gradients those of the equivalent static graph, what do the optimizers
# do to a parameter the graph did **not** use, how do you widen or narrow a layer without
# losing what the network and its optimizer learned, and how do you save and load a model
# that changed shape? Everything runs on small random data on a CPU; where the text speaks
# of a measurement, read it in the output of the cell above: it is your machine's.
#
# **How this lab works.** Cells marked *exercise* are yours: replace
# `raise NotImplementedError(...)` with your code. The cell after each exercise is a
# *check*: run it, and if something is wrong it tells you what, in words. When you submit,
# the same checks run again with extra hidden cases, so make the code right, not just the
# printed numbers. Run the notebook top to bottom (*Kernel > Restart and run all*) first.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import copy
import io
import random
import time

import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

# The tensors of this lab are tiny: one thread is faster than several fighting over them.
torch.set_num_threads(1)
# While the notebook is graded (nbgrader sets NBGRADER_EXECUTION), the experiments are shorter.
GRADING = bool(os.environ.get("NBGRADER_EXECUTION"))


def attempt(fn, *args, **kwargs):
    """(fn(*args, **kwargs), None), or (None, "the error, in one line") if it raised: the
    checks then say in words what failed. NotImplementedError (not answered yet) goes through."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        raise
    except Exception as error:
        text = str(error).splitlines()[0][:150] if str(error) else ""
        return None, f"{type(error).__name__}: {text}"


print("torch", torch.__version__, "| grading mode" if GRADING else "")

# %% [markdown]
# ## 1. A dynamic graph has the gradients of its unrolled twin
#
# Our running model is the course's `DynamicNet`: an input layer, one *middle* layer that
# the forward pass applies 0 to `max_depth` times (its own random generator `self.rng`
# draws the depth on every call, unless you pass `depth`), and an output layer followed by
# `log_softmax`, so the loss is `F.nll_loss`. The middle layer's weights are **shared** by
# every repetition. Here it gets small sizes: 5 inputs, 8 hidden units, 3 classes, and we
# work in `float64`, so that "equal" can mean equal to $10^{-12}$.


# %%
class DynamicNet(nn.Module):
    """The middle layer is applied 0 to max_depth times, a new draw on every call."""

    def __init__(self, d_in=784, hidden=100, d_out=10, max_depth=3, seed=None):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_linear = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, d_out)
        self.max_depth = max_depth
        self.rng = random.Random(seed)
        self.last_depth = None

    def forward(self, x, depth=None):
        if depth is None:
            depth = self.rng.randint(0, self.max_depth)
        self.last_depth = depth
        h = F.relu(self.input_linear(x.flatten(1)))
        for _ in range(depth):
            h = F.relu(self.middle_linear(h))
        return F.log_softmax(self.output_linear(h), dim=1)  # log-probabilities: nll_loss


net = DynamicNet(5, 8, 3, seed=0).double()
x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 3, (16,))
for depth in range(4):
    net.zero_grad(set_to_none=True)
    F.nll_loss(net(x, depth), y).backward()
    g = net.middle_linear.weight.grad
    print(
        f"depth {depth}: middle_linear.weight.grad is",
        "None" if g is None else f"norm {g.norm():.4f}",
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
# log-probabilities, as one straight-line expression: no loop, no `if` and no call to `net`
# or its layers. Use the tensors in the dict `p = dict(net.named_parameters())` (for example
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
# Compare the two graphs: the gradients of the same loss with respect to the same
# parameters, once through `net(x, 2)` and once through your expression.


# %%
def gradients(loss, params):
    """d loss / d p for every p, as a list (None where p was not used)."""
    return torch.autograd.grad(loss, params, allow_unused=True)


dynamic = gradients(F.nll_loss(net(x, 2), y), list(net.parameters()))
static = gradients(
    F.nll_loss(unrolled_depth2(dict(net.named_parameters()), x), y), list(net.parameters())
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
    "unrolled_depth2(p, x) on the net above and x of shape (16, 5) should return the "
    f"log-probabilities, a tensor of shape (16, 3) (error: {_error}). A linear layer computes "
    "x @ W.T + b.",
)
_static = gradients(F.nll_loss(_out, y), list(net.parameters()))
check(
    all(_g is not None for _g in _static),
    "Some parameter got no gradient through unrolled_depth2: every one of the six tensors in p "
    "should be used.",
)
_gap = max((_u - _v).abs().max().item() for _u, _v in zip(dynamic, _static, strict=True))
check(
    _gap < 1e-12,
    f"The gradients differ from net(x, 2) by up to {_gap:.1e}. Apply the middle layer twice, "
    "a ReLU after the input layer and after each middle layer, then log_softmax over dim 1 "
    "on the output layer, with no ReLU before it.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed in range(3):
    _net = _seeded(DynamicNet(4, 6, 5).double(), 100 + _seed)
    _gen = torch.Generator().manual_seed(600 + _seed)
    _x = torch.randn(9, 4, dtype=torch.float64, generator=_gen)
    _out = unrolled_depth2(dict(_net.named_parameters()), _x)
    _grads = gradients(
        F.nll_loss(_out, torch.randint(0, 5, (9,), generator=_gen)), [*_net.parameters()]
    )
    observe(
        f"unrolled_depth2(p, x) on random DynamicNet(4, 6, 5) parameters (draw {_seed}) and 9 "
        "random inputs: the log-probabilities, and the gradients of nll_loss",
        {"log-probabilities": _out.detach(), "gradients": list(_grads)},
        rtol=1e-9,
        atol=1e-12,
        hint="A ReLU after the input layer and after each of the two middle layers, the same "
        "middle weights twice, and log_softmax(dim=1) of the output layer, no ReLU before it.",
    )
### END HIDDEN TESTS

# %% [markdown]
# The differences printed above are zero or a few units in the last digit of a `float64`:
# the two graphs hold the same operations. "Dynamic" is about *when* the graph is built, not
# about *what* is differentiated.
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
# The formula is simple, but "the same" can mean bit for bit. Compare two ways of writing
# the last update in `float64` with what `torch.optim.SGD` does:

# %%
p0, g0 = torch.randn(1000, dtype=torch.float64), torch.randn(1000, dtype=torch.float64)
reference = torch.nn.Parameter(p0.clone())
reference.grad = g0.clone()
torch.optim.SGD([reference], lr=0.1, momentum=0.9).step()
for label, mine in [("p - lr * b", p0 - 0.1 * g0), ("p.add(b, alpha=-lr)", p0.add(g0, alpha=-0.1))]:
    differ = int((mine != reference.detach()).sum())
    print(f"{label:20} differs from torch.optim.SGD in {differ} of 1000 entries")

# %% [markdown]
# On a CPU, `p.add(b, alpha=-lr)` is what `torch.optim.SGD` itself calls, so it agrees bit
# for bit. `p - lr * b` rounds `lr * b` first and subtracts afterwards, while the fused form
# may round once, so some entries may differ in their last bit: the output says how many
# on your machine. Both are the same formula, rounded differently, so a hand-written update
# is graded to a tolerance: below, yours must agree with `torch.optim.SGD` to $10^{-12}$,
# and the check shows, without grading it, whether it is also identical bit for bit.
#
# ### Exercise 2 (2 points): one SGD-with-momentum step by hand
#
# Write `sgd_momentum_step(params, buffers, lr, momentum)`. `params` is a list of tensors
# with `.grad` set (or `None`); `buffers` is a list of the same length holding each
# momentum buffer, `None` before the first step. Update every parameter **in place**
# (inside `torch.no_grad()`), and return the new list of buffers. It must give the results
# of `torch.optim.SGD(params, lr=lr, momentum=momentum)`, up to float rounding, including
# what SGD does with a parameter whose `.grad` is `None` (the check's message says it if you
# are unsure; section 3 explains it).


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
    f"sgd_momentum_step on two (40, 30) parameters should return a list of two buffers (error: "
    f"{_error}).",
)
check(
    torch.allclose(_ref[0], _mine[0], rtol=1e-12, atol=1e-12),
    "After three steps your first parameter is not where torch.optim.SGD puts it: on step 1 the "
    "buffer is the gradient itself, later it is momentum * buffer + gradient, and each step "
    "subtracts lr * buffer, in place, from every parameter of the list.",
)
print("Identical to torch.optim.SGD bit for bit (not graded):", torch.equal(_ref[0], _mine[0]))
check(
    torch.allclose(_ref[1], _mine[1], rtol=1e-12, atol=1e-12),
    "A parameter whose .grad was None on step 2 ended elsewhere than torch.optim.SGD puts it. "
    "SGD skips such a parameter entirely: no update, and its buffer kept as it was (not None, "
    "which would restart the momentum, and not a zero gradient).",
)
_p = nn.Parameter(torch.zeros(5, dtype=torch.float64))
_p.grad = torch.ones(5, dtype=torch.float64)
_buffers = sgd_momentum_step([_p], [None], 0.1, 0.9)
_kept = _buffers[0].clone()
_p.grad.mul_(-2.0)  # what the next backward does to .grad: it changes it in place
check(
    torch.equal(_buffers[0], _kept),
    "The buffer you returned after a first step changed when .grad was changed in place "
    "afterwards, as the next backward() does: it must be a copy of the gradient "
    "(p.grad.clone()), not the .grad tensor itself.",
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
for _lr, _mu, _grads in [
    (0.05, 0.5, _steps),
    (0.3, 0.99, _steps),
    (0.1, 0.9, [_steps[0], [None] * 3]),
]:
    _params, _buffers = [nn.Parameter(_t.clone()) for _t in _start], [None] * 3
    for _step in _grads:
        for _p, _g in zip(_params, _step, strict=True):
            _p.grad = None if _g is None else _g.clone()
        _buffers = sgd_momentum_step(_params, _buffers, _lr, _mu)
        for _p in _params:  # as the next backward would: a buffer that is the .grad changes too
            if _p.grad is not None:
                _p.grad.mul_(-2.0)
    observe(  # to a tolerance: the same formula may round differently
        f"sgd_momentum_step(params, buffers, lr={_lr}, momentum={_mu}): {len(_grads)} steps on "
        "three random parameters of different shapes, some steps with .grad None",
        {
            "parameters": [_p.detach() for _p in _params],
            "buffers (None read as zeros)": [
                torch.zeros(_s, dtype=torch.float64) if _b is None else _b
                for _s, _b in zip(_shapes, _buffers, strict=True)
            ],
        },
        rtol=1e-10,
        atol=1e-12,
        hint="As torch.optim.SGD: the buffer is a clone of the gradient on the first step, "
        "momentum * buffer + gradient later, then p -= lr * buffer in place; a parameter whose "
        ".grad is None is skipped and keeps its buffer.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Gradients come from the graph, updates come from a rule. Everything else in this lab is
# about the optimizer's *state* (the buffers you just kept), which outlives every graph.
#
# ## 3. Parameters the graph did not use
#
# In `DynamicNet` the middle layer sits out whenever the draw is 0. What happens to it on
# that step depends on what its `.grad` holds, and that depends on how you cleared the
# gradients before `backward()`:
#
# * `optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0) sets `.grad` to
#   `None`; a parameter the graph did not reach keeps `None`;
# * `optimizer.zero_grad(set_to_none=False)` fills `.grad` with zeros; an unused parameter
#   then holds a gradient of zero, which is a perfectly good number to an optimizer.
#
# `TwoBranch` has two layers of the same shape; `coin` picks which ones the forward pass
# uses (0: only `a`, 1: only `b`, 2: both).


# %%
class TwoBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 2)
        self.b = nn.Linear(3, 2)

    def forward(self, x, coin):
        out = 0
        if coin in (0, 2):
            out = out + self.a(x)
        if coin in (1, 2):
            out = out + self.b(x)
        return out


x3 = torch.randn(8, 3)

# %% [markdown]
# ### Exercise 3 (2 points): how far does an unused layer move?
#
# Write `unused_drift(net, optimizer, x, set_to_none)` that does two training steps on the
# `TwoBranch` `net` with the loss `net(x, coin).pow(2).mean()`:
#
# 1. clear the gradients with `optimizer.zero_grad(set_to_none=set_to_none)`, use
#    **both** branches (`coin=2`), `backward()`, `optimizer.step()`;
# 2. clear them again the same way, use **only** branch `a` (`coin=0`), `backward()`,
#    `optimizer.step()`.
#
# Return how far branch `b`'s weight moved during step 2 alone, as a float: the norm
# `(b_after - b_before).norm().item()` of the change of `net.b.weight` (take `b_before` as
# a `.clone()` just before step 2).


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
check(_error is None, f"unused_drift failed on a TwoBranch with SGD(momentum=0.9) with {_error}.")
check(isinstance(_drift, float), "unused_drift should return a float (use .item()).")
check(
    abs(_drift - 0.1 * 0.9 * _g_b) < 1e-6,
    f"With set_to_none=False and momentum 0.9, branch b should move by lr * momentum * |g1| in "
    f"step 2 (its gradient is zero, its momentum buffer is not); it moved {_drift:.4f}. If 0: "
    "pass set_to_none to zero_grad (its default is True), and take b_before as a .clone() (else "
    "it is the very tensor that step() changes). If larger: clear the gradients before step 2 "
    "as well, and measure step 2 alone.",
)
(_drift, _error), _g_b = _drift_sgd(True)
check(
    _drift == 0.0,
    f"With set_to_none=True branch b's .grad is None in step 2, so SGD skips it, but it moved by "
    f"{_drift}. Use coin=0 in step 2 and clear the gradients with set_to_none.",
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
        _got = unused_drift(_net, _make(_net.parameters()), _x, _stn)
        observe(
            f"unused_drift(net, {_label}, x, set_to_none={_stn}) on a random TwoBranch and 5 "
            "random inputs",
            {
                "returned drift of b": _got,
                "weights after": [_net.a.weight.detach(), _net.b.weight.detach()],
            },
            atol=1e-6,
            hint="Clear with optimizer.zero_grad(set_to_none=set_to_none) before each step, use "
            "coin=2 then coin=0, and return the norm of b's change in step 2 alone (from a "
            ".clone() taken just before it).",
        )
### END HIDDEN TESTS

# %% [markdown]
# Is that what every optimizer does? The next cell makes the measurement of your function
# for every optimizer class in your `torch.optim` (found by the cell, so a newer PyTorch
# adds rows), on the two weights, the same start each time. It computes the loss in a
# *closure* that `step` calls, because `LBFGS` needs one; where an optimizer cannot run
# here, the row says why.


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
        f"{cls.__name__:10} "
        + (f"cannot run here: {error[:60]}" if error else f"{on:17.4f} {off:18.4f}")
    )

# %% [markdown]
# Read the table: with `set_to_none=True` every optimizer that runs here but one leaves the
# unused branch where it was: they skip a parameter whose `.grad` is `None`. With
# `set_to_none=False` plain SGD still does not move it (a zero gradient is a zero step; the
# table's SGD has the default momentum, 0), but several optimizers **do**, Adam and AdamW
# among them, and so does SGD with momentum (your exercise measured it): momentum keeps
# pushing in the old direction, and so does Adam, whose step is its first moment divided by
# the square root of its second moment, neither of which is zero yet.
#
# `LBFGS` is the exception: it moves such a parameter, whichever way the gradients were
# cleared. It flattens all its parameters into one vector, where a `None` gradient is read
# as zeros, and its step direction mixes the coordinates of that vector through the
# curvature pairs it keeps from earlier steps, so a coordinate whose gradient is zero still
# moves.
#
# How far does Adam go on a zero gradient? Measure it: one step with a gradient, five with a
# zero gradient, then one with `.grad = None`. The four entries of the gradient have very
# different sizes.

# %%
w = nn.Parameter(torch.zeros(4))
adam = torch.optim.Adam([w], lr=0.1)
grads = [torch.tensor([1.0, -2.0, 0.01, 300.0])] + [torch.zeros(4)] * 5 + [None]
print(f"{'step':>4}  {'.grad':<26} {'how far each entry moved':<34} state['step']")
for number, grad in enumerate(grads, 1):
    before = w.detach().clone()
    w.grad = grad
    adam.step()
    moved = " ".join(f"{m:.4f}" for m in (w.detach() - before).abs().tolist())
    shown = "None" if grad is None else " ".join(f"{g:g}" for g in grad.tolist())
    print(f"{number:>4}  {shown:<26} {moved:<34} {int(adam.state[w]['step'])}")
    if number == 1:
        after_step_1 = w.detach().clone()
for _ in range(45):  # 45 more steps with a zero gradient: 50 in all
    w.grad = torch.zeros(4)
    adam.step()
moved = (w.detach() - after_step_1).abs()
print("drift over the 50 zero-gradient steps, per entry:", " ".join(f"{d:.3f}" for d in moved))

# %% [markdown]
# Adam's first step is about `lr` in size, whatever the size of the gradient. On the steps
# with a **zero** gradient every entry keeps moving, in the direction of the last real step,
# by the same amount for a gradient of 0.01 as for one of 300. The step with `.grad = None`
# moves nothing, and `state["step"]` does not advance. Why: after one step with gradient $g$
# and $t-1$ steps with 0, Adam's bias-corrected moments are
# $\hat m = (1-\beta_1)\beta_1^{t-1} g / (1-\beta_1^t)$ and
# $\hat v = (1-\beta_2)\beta_2^{t-1} g^2 / (1-\beta_2^t)$, and its step
# $\mathrm{lr}\,\hat m / (\sqrt{\hat v} + \epsilon)$ does not depend on the size of $g$
# (unless $g$ is as small as $\epsilon$). The first moment decays by $\beta_1$ a step, the
# root of the second only by $\sqrt{\beta_2}$, so the steps shrink, but they add up to
# several times the one real step: compare the last line of the output, the drift of a
# parameter the graph stopped using, with its first step.
#
# For `DynamicNet` this decides what "skipping a layer" means. With `set_to_none=True` a
# skipped middle layer is frozen for that step, and Adam's per-parameter step counter
# (`state["step"]`) does not advance for it. Count, over 40 steps in which `DynamicNet`
# draws its own depth:

# %%
torch.manual_seed(0)
dyn = DynamicNet(5, 8, 3, seed=0)
opt = torch.optim.Adam(dyn.parameters(), lr=1e-2)
xs, ys = torch.randn(64, 5), torch.randint(0, 3, (64,))
depths = []
for _ in range(40):
    opt.zero_grad(set_to_none=True)
    F.nll_loss(dyn(xs), ys).backward()
    opt.step()
    depths.append(dyn.last_depth)
print("steps with depth 0 (middle layer unused):", depths.count(0), "of 40")
for name, p in dyn.named_parameters():
    print(f"{name:22} Adam steps taken: {int(opt.state[p]['step'])}")

# %% [markdown]
# The middle layer's counter is the number of steps at which it was in the graph. Neither
# behaviour is wrong, but they train different models, so choose on purpose (and know that
# code written before PyTorch 2.0 defaulted to `set_to_none=False`).
#
# ## 4. Growing and shrinking a layer during training
#
# Changing the width of a hidden layer changes the **shapes** of the weights on both sides
# of it, so we replace those parameters by new tensors (new `nn.Linear` layers). Two things
# should survive:
#
# * the **function**: right after widening, the network should compute what it computed
#   before, up to float rounding (so training does not take a step back);
# * the **optimizer state** of the old weights: Adam's moments `exp_avg` and `exp_avg_sq`
#   and its `step` count hold what it learned about each weight.
#
# Our model for this section is a plain three-layer network; we resize the hidden layer
# between `fc2` and `fc3`.


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
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def optimizer_report(model, optimizer):
    """Which parameters the optimizer updates, what state it holds, and what is orphaned."""
    in_model = {id(p): name for name, p in model.named_parameters()}
    for p in (p for group in optimizer.param_groups for p in group["params"]):
        shapes = {k: tuple(v.shape) for k, v in optimizer.state.get(p, {}).items() if v.dim()}
        print(f"  {in_model.get(id(p), '(not in model!)'):12} {tuple(p.shape)!s:8} {shapes}")
    stale = [p for p in optimizer.state if id(p) not in in_model]
    print(f"  orphaned state entries (state of tensors the model no longer has): {len(stale)}")


xg, yg = torch.randn(32, 4), torch.randint(0, 3, (32,))
torch.manual_seed(0)
mlp = MLP()
adam = torch.optim.Adam(mlp.parameters(), lr=1e-2)
train(mlp, adam, xg, yg, 5)
optimizer_report(mlp, adam)

# %% [markdown]
# ### Exercise 4 (2 points): widen a pair of layers without changing the function
#
# Write `widen_pair(first, second, extra)` that takes `first = nn.Linear(a, h)` and
# `second = nn.Linear(h, b)` and returns **new** layers `nn.Linear(a, h + extra)` and
# `nn.Linear(h + extra, b)` such that `second(relu(first(x)))` is unchanged. The trick: keep
# every old weight in place, give each new hidden unit small random **incoming** weights
# (rows of `first.weight`), and **zero outgoing** weights (columns of `second.weight`), so the
# new units exist but do not yet contribute. Copy values inside `torch.no_grad()`. (Think
# about what happens if the incoming weights are zero too: the function is still kept, but
# look at the gradient of the new weights.)


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
check(
    _error is None
    and isinstance(_pair, tuple)
    and len(_pair) == 2
    and all(isinstance(_l, nn.Linear) for _l in _pair),
    f"widen_pair(Linear(4, 3), Linear(3, 2), 2) should return a tuple of two nn.Linear layers "
    f"(error: {_error}).",
)
_nf, _ns = _pair
check(
    _nf.weight.shape == (5, 4) and _ns.weight.shape == (2, 5),
    f"Expected weights of shape (5, 4) and (2, 5), got {tuple(_nf.weight.shape)} and "
    f"{tuple(_ns.weight.shape)}.",
)
check(
    all(
        torch.equal(_a, _b)
        for _a, _b in zip([*_f.parameters(), *_s.parameters()], _old, strict=True)
    ),
    "widen_pair changed the old layers: build new ones and copy the old weights into them.",
)
_x = torch.randn(20, 4)
_y = _ns(F.relu(_nf(_x)))
check(
    (_y - _s(F.relu(_f(_x)))).abs().max().item() < 1e-6,
    "The widened pair computes a different function: keep the old weights in the first rows of "
    "the new first layer and the first columns of the new second layer, copy both old biases, "
    "and make the new units' outgoing weights zero.",
)
_y.pow(2).sum().backward()
check(
    _ns.weight.grad[:, 3:].abs().sum().item() + _nf.weight.grad[3:].abs().sum().item() > 0,
    "The new units get no gradient at all, so training can never switch them on: with zero "
    "incoming AND zero outgoing weights they output relu(0) = 0 and pass back nothing. "
    "Give them small random incoming weights.",
)
with torch.no_grad():
    for _p in [*_f.parameters(), *_s.parameters()]:
        _p.add_(1.0)
check(
    torch.equal(_ns(F.relu(_nf(_x))), _y),
    "After widen_pair returned, changing the old layers' weights changed what the new pair "
    "computes: the new layers must hold copies of the old weights and biases, not the old "
    "tensors themselves.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _a, _h, _b, _extra, _seed in [(6, 5, 4, 3, 1), (2, 1, 3, 4, 2), (5, 4, 2, 1, 3)]:
    _f, _s = _seeded(nn.Linear(_a, _h), 50 + _seed), _seeded(nn.Linear(_h, _b), 60 + _seed)
    _nf, _ns = widen_pair(_f, _s, _extra)
    _x = torch.randn(200, _a, generator=torch.Generator().manual_seed(70 + _seed))
    _y = _ns(F.relu(_nf(_x)))
    _y.pow(2).sum().backward()
    _record = {  # the new units' incoming weights are random: only what every answer gives
        "new first weight shape": list(_nf.weight.shape),
        "new first weight and bias, old rows": [_nf.weight[:_h].detach(), _nf.bias[:_h].detach()],
        "new second weight and bias": [_ns.weight.detach(), _ns.bias.detach()],
        "old layers after the call": [_t.detach() for _t in (*_f.parameters(), *_s.parameters())],
        "output on 200 random inputs": _y.detach(),
        "new outgoing weights with a nonzero gradient": int((_ns.weight.grad[:, _h:] != 0).sum()),
    }
    with torch.no_grad():
        for _p in [*_f.parameters(), *_s.parameters()]:
            _p.add_(1.0)
    _record["output after the old layers' weights were changed"] = _ns(F.relu(_nf(_x))).detach()
    observe(
        f"widen_pair(Linear({_a}, {_h}), Linear({_h}, {_b}), extra={_extra}) on random layers",
        _record,
        atol=1e-6,
        hint="Old weights and biases go, as copies, in the first rows of the new first layer and "
        "the first columns of the new second layer (whose bias is the old one); the new units "
        "get small random incoming and zero outgoing weights.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Zero outgoing weights keep the output as it was, and the gradient of those weights is the
# new units' activation times the gradient arriving at the next layer, which is not zero,
# so the next step starts using them.
#
# *Net2Net* (Chen, Goodfellow and Shlens, 2016) widens another way. Its Net2WiderNet makes
# each new unit a **copy** of an existing unit (the same incoming weights and bias) and
# splits the copied unit's outgoing weights among its copies: with one copy, both get
# **half** of them. The sum the next layer computes is the same up to rounding, and the new
# unit starts out useful instead of silent. But the two copies then get the same gradient,
# so they would stay copies forever: Net2Net adds a little noise to break that symmetry.
#
# ### Exercise 5 (3 points): grow the hidden layer, and the optimizer with it
#
# Write `grow(model, optimizer, extra)` for an `MLP` trained with Adam:
#
# 1. replace `model.fc2` and `model.fc3` with the layers from `widen_pair(model.fc2,
#    model.fc3, extra)`;
# 2. in the optimizer's `param_groups`, put each new parameter where its old one was, so
#    the optimizer updates the new tensors and forgets the old ones;
# 3. move the state: the optimizer keys its state by the parameter tensor itself
#    (`optimizer.state[p]`). For each replaced parameter, delete the old entry and make a new
#    one whose `exp_avg` and `exp_avg_sq` have the new shape, hold the old values
#    **bit for bit** where the old weights are (`new[:rows, :cols] = old`), zeros elsewhere,
#    and whose `step` is a copy of the old one. Leave `fc1`'s state untouched.
#
# Return nothing. Adam makes a parameter's state on its first step, so a parameter that
# never took a step has no state: skip it. Call `widen_pair` by that name: the check puts a
# stand-in in its place (new layers of the right shapes, arbitrary weights), so that it
# grades `grow` alone, and a mistake in exercise 4 costs points in exercise 4 only.


# %% nbgrader={"solution": true, "grade_id": "grow"}
def grow(model, optimizer, extra):
    ### BEGIN SOLUTION
    new_fc2, new_fc3 = widen_pair(model.fc2, model.fc3, extra)
    pairs = [
        (model.fc2.weight, new_fc2.weight),
        (model.fc2.bias, new_fc2.bias),
        (model.fc3.weight, new_fc3.weight),
        (model.fc3.bias, new_fc3.bias),
    ]
    model.fc2, model.fc3 = new_fc2, new_fc3
    for old, new in pairs:
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


# %%
torch.manual_seed(0)
grown = MLP()
adam = torch.optim.Adam(grown.parameters(), lr=1e-2)
train(grown, adam, xg, yg, 5)
before = grown(xg)
grow(grown, adam, 3)
print("largest change in the output:", (grown(xg) - before).abs().max().item())
optimizer_report(grown, adam)
train(grown, adam, xg, yg, 5)  # and training goes on


# %% nbgrader={"grade": true, "points": 3, "grade_id": "test_grow"}
### BEGIN HIDDEN TESTS
# (first, so that test_shrink has it even when a check here fails)
def _optimizer_record(_model, _opt):
    """What an optimizer holds for a model: the names in param_groups order, the number of
    orphaned state entries, and each parameter's shape and state (keys sorted), by name."""
    _names = {id(p): n for n, p in _model.named_parameters()}
    return {
        "param_groups order": [_names.get(id(p)) for g in _opt.param_groups for p in g["params"]],
        "orphaned state entries": sum(id(p) not in _names for p in _opt.state),
        "parameter shapes": {n: list(p.shape) for n, p in _model.named_parameters()},
        "state": {
            n: dict(sorted(_opt.state[p].items())) if p in _opt.state else None
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
        _made.append(
            (
                nn.Linear(first.in_features, first.out_features + extra),
                nn.Linear(first.out_features + extra, second.out_features),
            )
        )
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
    _error is None, f"grow(model, Adam, 3) on an MLP(h2=6) after 3 Adam steps failed with {_error}."
)
_names = {id(_p): _n for _n, _p in _model.named_parameters()}
check(
    _made == [(_model.fc2, _model.fc3)]
    and [_names.get(id(_p)) for _g in _opt.param_groups for _p in _g["params"]] == list(_old)
    and all(id(_p) in _names for _p in _opt.state),
    "model.fc2 and model.fc3 should be the two layers that widen_pair(model.fc2, model.fc3, "
    "extra) returns (call it once, by that name); param_groups should hold the model's "
    "parameters, each new tensor where its old one was; and optimizer.state no entry for an "
    "old tensor (pop it when you move it: nothing will ever use it).",
)
for _name, _p in _model.named_parameters():
    _shape, _state = _old[_name]
    _new, _idx = _opt.state.get(_p, {}), tuple(slice(0, _n) for _n in _shape)
    check(
        all(
            _k in _new
            and _new[_k].shape == _p.shape
            and torch.equal(_new[_k][_idx], _state[_k])
            and _new[_k].count_nonzero() == _state[_k].count_nonzero()
            for _k in ("exp_avg", "exp_avg_sq")
        )
        and float(_new.get("step", -1)) == float(_state["step"]),
        f"The new {_name}'s state should hold exp_avg and exp_avg_sq of its new shape, with the "
        "old values bit for bit where the old weights are and zeros at the new units, and the "
        "old step count (a reset step changes Adam's bias correction); fc1's state stays as it "
        "was.",
    )
_before = {_n: _p.detach().clone() for _n, _p in _model.named_parameters()}
train(_model, _opt, _x, _y, 1)
check(
    all(not torch.equal(_p, _before[_n]) for _n, _p in _model.named_parameters()),
    "After one more Adam step some parameter of the grown model did not move: the optimizer "
    "must update the new tensors.",
)
_model = MLP()
_opt = torch.optim.Adam(_model.parameters(), lr=0.01)  # no step taken: no state at all yet
_made, _error = _grow_with_stand_in(_model, _opt, 2)
check(
    _error is None
    and [id(_p) for _g in _opt.param_groups for _p in _g["params"]]
    == [id(_p) for _p in _model.parameters()]
    and len(_opt.state) == 0,
    f"For an optimizer that has not taken a step yet (no entry in optimizer.state), grow should "
    f"put the new tensors in param_groups and leave optimizer.state empty: skip a parameter "
    f"without state (reading optimizer.state[old] creates an empty entry). Error: {_error}.",
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
    train(_model, _opt, _x, _y, 1)
    _record["parameters after one more Adam step"] = [_p.detach() for _p in _model.parameters()]
    observe(
        f"grow(model, Adam, extra={_extra}) on a random MLP(h2={_h2}) after {_steps} Adam steps "
        "(the stand-in for widen_pair gives the new layers fixed weights): param_groups order, "
        "orphaned state entries, each parameter's shape and state, then one more step",
        _record,
        atol=1e-6,
        hint="Put each new tensor where its old one was in param_groups, pop the old entries "
        "(only those that exist), and give each new tensor the old exp_avg and exp_avg_sq bit "
        "for bit (zeros at the new units) and a copy of the old step.",
    )
### END HIDDEN TESTS

# %% [markdown]
# After growing, the old weights take the same Adam step they would have taken in the
# small model: the new units add zero to the output (the printed change of the output above
# is zero), so the old gradients are unchanged, and the moments and step count came along.
# Had you created a fresh `Adam`, every weight would restart with `step = 1`, whose update
# is about `lr` in size for every weight, a jolt to a network in the middle of training.
#
# See it. The next cell trains an `MLP` whose hidden layer has only 2 units, grows it to 8
# halfway through, and from then on trains three copies side by side: grown with your
# `grow` (state moved), grown the same way but handed a fresh `Adam`, and not grown at all.

# %%
gen = torch.Generator().manual_seed(0)
x_fit = torch.randn(512, 4, generator=gen)
teacher = torch.randn(4, 16, generator=gen), torch.randn(16, 3, generator=gen)
y_fit = (torch.tanh(x_fit @ teacher[0]) @ teacher[1]).argmax(1)  # labels a wider net can learn

STEPS, GROW_AT, LR = 300, 150, 0.05
torch.manual_seed(0)
narrow = MLP(h2=2)
runs = {"grow (state moved)": (narrow, torch.optim.Adam(narrow.parameters(), lr=LR))}
curves = {name: [] for name in ("grow (state moved)", "fresh Adam", "not grown")}
for step in range(STEPS):
    if step == GROW_AT:
        runs["not grown"] = copy.deepcopy(runs["grow (state moved)"])  # model and Adam
        grow(narrow, runs["grow (state moved)"][1], 6)
        twin = copy.deepcopy(narrow)  # the same grown weights, and a new Adam
        runs["fresh Adam"] = (twin, torch.optim.Adam(twin.parameters(), lr=LR))
    for name, (model, optimizer) in runs.items():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x_fit), y_fit)
        loss.backward()
        optimizer.step()
        curves[name].append(loss.item())
curves = {name: curves["grow (state moved)"][: STEPS - len(c)] + c for name, c in curves.items()}
print(f"{'cross-entropy':20} {'before growing':>15} {'after 1 step':>13} {'at the end':>11}")
for name, c in curves.items():
    print(f"{name:20} {c[GROW_AT - 1]:15.4f} {c[GROW_AT + 1]:13.4f} {c[-1]:11.4f}")

# %% [markdown]
# Read the table. The run whose state moved does not jump: the grown network computes the
# same function, and Adam carries on where it was. The fresh `Adam` has the same weights,
# but its first step moves every weight by about `lr`: compare its loss one step after
# growing with the others', and where each ends. The last row is what the 2-unit layer
# manages without growing.
#
# ### Exercise 6 (2 points): shrink the hidden layer, leaving no orphans
#
# Write `shrink(model, optimizer, keep)` that keeps only the hidden units of `fc2` listed
# in `keep` (a list of indices, in increasing order): new `fc2` keeps those rows of its
# weight and bias, new `fc3` keeps those columns of its weight (and all of its bias). Move
# the optimizer as in exercise 5, slicing each state tensor the same way as its weight, and
# delete every old entry. Return nothing. (An orphaned entry is not just wasted memory:
# `optimizer.state_dict()` looks up every state key in `param_groups` and raises a
# `KeyError` on one it cannot find.)


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


# %%
torch.manual_seed(0)
small = MLP()
adam = torch.optim.Adam(small.parameters(), lr=1e-2)
train(small, adam, xg, yg, 5)
shrink(small, adam, [0, 2, 3, 5])
optimizer_report(small, adam)
print("optimizer.state_dict() holds state for", len(adam.state_dict()["state"]), "parameters")


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
check(_error is None, f"shrink(model, Adam, [0, 2, 3, 5]) on an MLP(h2=6) failed with {_error}.")
with torch.no_grad():
    _ref.fc3.weight[:, [1, 4]] = 0.0  # the small model = the big one with those units silenced
check(
    _model.fc2.out_features == 4 and (_model(_x) - _ref(_x)).abs().max().item() < 1e-6,
    "The shrunk model should have 4 hidden units and compute the old one minus the dropped "
    "units: keep the rows of fc2's weight and bias listed in keep, those columns of fc3's "
    "weight, and all of fc3's bias.",
)
_ids = {id(_p) for _p in _model.parameters()}
check(
    [id(_p) for _g in _opt.param_groups for _p in _g["params"]]
    == [id(_p) for _p in _model.parameters()],
    "The optimizer's param_groups should hold exactly the model's current parameters.",
)
check(
    all(id(_p) in _ids for _p in _opt.state),
    "optimizer.state has orphaned entries (state of tensors the model no longer has): pop the "
    "old entries when you move them. Orphans waste memory, and optimizer.state_dict() fails "
    "on them with a KeyError, so you could not save.",
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
        all(
            _s in _st and torch.equal(_st[_s], _take(_old[_name][_s]))
            for _s in ("exp_avg", "exp_avg_sq")
        ),
        f"The new {_name}'s exp_avg and exp_avg_sq should be the old ones, sliced like the weight.",
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
    _record["output on its 16 training inputs"] = _model(_x).detach()
    observe(
        f"shrink(model, Adam, keep={_keep}) on a random MLP(h2={_h2}) after 3 Adam steps: "
        "param_groups order, orphaned state entries, each parameter's shape, state and value",
        _record,
        atol=1e-6,
        hint="fc2 keeps the rows listed in keep (weight and bias), fc3 those columns of its "
        "weight and all of its bias; slice each state tensor the way its weight is sliced, put "
        "the new tensors in param_groups, and pop every old entry.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ### How often may the structure change?
#
# A forum answer on dynamic graphs warns that changing the hidden layers changes the
# optimisation objective, "so if you change it too often, it may be complex for your
# optimization to converge properly as the point where it tries to converge to moves every
# time you change the structure". Let's measure it on `DynamicNet`, whose structure is its
# depth. Each run trains a `DynamicNet(4, 16, 3)` with Adam on the data of the growing
# experiment, and draws a new depth (0 to 3, from the model's own `rng`) every `k` steps:
# every step (`k = 1`, what `DynamicNet` does by itself), every 10, 50 or 200 steps. At the
# end we average the loss over the four depths: how good the model is at any depth. Five
# seeds per `k` (while the notebook is graded: one seed, fewer steps).


# %%
def depth_every(k, seed, steps):
    """Train a DynamicNet with Adam, a new depth every k steps. Returns the training loss of
    each step, and at the end the loss averaged over the four depths."""
    torch.manual_seed(seed)
    net = DynamicNet(4, 16, 3, seed=seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    train_loss = []
    for step in range(steps):
        if step % k == 0:
            depth = net.rng.randint(0, net.max_depth)
        optimizer.zero_grad()
        loss = F.nll_loss(net(x_fit, depth), y_fit)
        loss.backward()
        optimizer.step()
        train_loss.append(loss.item())
    with torch.no_grad():
        return train_loss, sum(F.nll_loss(net(x_fit, d), y_fit).item() for d in range(4)) / 4


EVERY, SEEDS, DEPTH_STEPS = (1, 10, 50, 200), range(1 if GRADING else 5), 100 if GRADING else 600
started = time.perf_counter()
runs = {
    k: [depth_every(k, seed, DEPTH_STEPS) for seed in SEEDS] for k in tqdm(EVERY, disable=GRADING)
}
print(f"{len(SEEDS)} seed(s), {DEPTH_STEPS} steps each, {time.perf_counter() - started:.0f} s")
for k, results in runs.items():
    final = torch.tensor([at_any_depth for _, at_any_depth in results])
    curve = torch.tensor(results[0][0])  # the first seed's training loss
    print(
        f"new depth every {k:>3} step(s): loss at any depth {final.mean():.3f} (seeds: "
        f"{final.min():.3f} to {final.max():.3f}); training loss as low as {curve.min():.4f}, "
        f"up {(curve[1:] / curve[:-1]).max():.0f} times at most in one step"
    )

# %% [markdown]
# Read the output. During a long stretch at one depth the training loss at that depth falls
# far lower, the shared weights specialise to that depth, and the next change of depth sends
# the loss up many times over in one step. In the runs we made, the loss at any depth was
# lowest with a new depth at every step and highest with one every 200 steps; see whether
# yours agree. So the forum's picture of a target that moves with the structure holds, but
# here it is the *rare* changes that move it: a structure redrawn at every step gives the
# optimizer one fixed target, the average over the structures. This measures one model, one
# optimizer and one kind of change (the depth, with the weights and Adam's state kept); a
# change that resets weights or the optimizer's state, like the fresh `Adam`, is another
# matter.

# %% [markdown]
# ## 5. Saving and restoring a model that changed shape
#
# A `state_dict` is an ordered dict from parameter **names** to tensors. It does not store
# the code of `forward`, nor the random draws: only the modules' tensors (parameters and
# buffers). After growing, the names are the same and the shapes are new, and loading it
# into a model built with the original sizes fails with a message that says which tensors
# and which shapes:

# %%
torch.manual_seed(0)
model = MLP()
grow(model, torch.optim.Adam(model.parameters()), 4)
saved = model.state_dict()
print({name: tuple(t.shape) for name, t in saved.items()})
try:
    MLP().load_state_dict(saved)
except RuntimeError as error:
    print(error)

# %% [markdown]
# `strict=False` does **not** help here: it forgives names that are missing or unexpected,
# not shapes that differ (try it). It is for models whose set of layers differs, like a
# `DynamicNet` saved before someone added a layer:


# %%
class DynamicNetPlus(DynamicNet):
    """DynamicNet with one more layer, as a later version of the code might have."""

    def __init__(self, d_in=784, hidden=100, d_out=10, max_depth=3, seed=None):
        super().__init__(d_in, hidden, d_out, max_depth, seed)
        self.extra_linear = nn.Linear(hidden, hidden)


for source, target in [(DynamicNet, DynamicNetPlus), (DynamicNetPlus, DynamicNet)]:
    result = target(5, 8, 3).load_state_dict(source(5, 8, 3).state_dict(), strict=False)
    print(f"{source.__name__} into {target.__name__}:", result)

# %% [markdown]
# The missing `extra_linear` keeps its random initial weights: `strict=False` is a promise
# that you know that, not a fix.
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
    _buffer.seek(0)
    _sd = torch.load(_buffer)
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
    f"restore_mlp on the state dict of an MLP(h2=10) should return an MLP: {_error}. Read the "
    "sizes from the shapes.",
)
check(
    torch.equal(_out, _model(_x)), "The restored model computes something else than the saved one."
)
check(
    torch.equal(_after, _out),
    "Changing the state dict's tensors after restore_mlp returned changed the restored model: "
    "it must hold its own copies (load_state_dict copies them; assign=True would not).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed, _sizes in [(9, dict(d_in=7, h1=2, h2=9, d_out=5)), (10, dict(h1=5, h2=3))]:
    _model = _seeded(MLP(**_sizes), _seed)
    _x = torch.randn(7, _model.fc1.in_features, generator=torch.Generator().manual_seed(_seed))
    _back, _out, _after, _error = _restored(_model, _x)
    observe(
        f"restore_mlp(state_dict) on the saved state of a random MLP({_sizes}): the layer sizes, "
        "the output on 7 random inputs, before and after the state dict's tensors were changed",
        {
            "layer sizes (in, out)": [
                [_l.in_features, _l.out_features] for _l in (_back.fc1, _back.fc2, _back.fc3)
            ],
            "output": _out,
            "output after the state dict changed": _after,
        },
        atol=1e-6,
        hint="Read the sizes from the shapes (fc1.weight is (h1, d_in), fc2.weight (h2, h1), "
        "fc3.weight (d_out, h2)), build that MLP and load_state_dict(state_dict, strict=True), "
        "which copies the tensors.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ### The optimizer's state_dict knows no names
#
# `optimizer.state_dict()` stores the state under the **position** of each parameter in
# `param_groups` (0, 1, 2, ...), not under its name, and loading it matches positions only.
# So if the model you load into lists its parameters in another order, for instance after a
# harmless-looking refactor that defines `b` before `a`, the state lands on the wrong
# tensors, and when the shapes agree nobody complains:


# %%
class TwoBranchV2(TwoBranch):  # the same model, layers declared in the other order
    def __init__(self):
        nn.Module.__init__(self)
        self.b = nn.Linear(3, 2)
        self.a = nn.Linear(3, 2)


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
print(
    "parameters with Adam state:",
    [name for name, p in new.named_parameters() if p in new_opt.state],
)

# %% [markdown]
# Branch `b` received the moments that `a` earned, and `a` lost its own. Had the shapes
# differed, loading would still have said nothing, and the next `step()` would have failed
# on the mismatched shapes. The fix is to save the optimizer state **by parameter name**, the
# way the model's state dict does. Saving is one dict comprehension:


# %%
def optimizer_state_by_name(model, optimizer):
    """{parameter name: a copy of its optimizer state (cloned tensors)}, for those with state."""
    return {
        name: {k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state[p].items()}
        for name, p in model.named_parameters()
        if p in optimizer.state
    }


# %% [markdown]
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


# %%
new_opt = torch.optim.Adam(new.parameters(), lr=0.1)
load_optimizer_state_by_name(new, new_opt, optimizer_state_by_name(old, old_opt))
print(
    "parameters with Adam state:",
    [name for name, p in new.named_parameters() if p in new_opt.state],
)


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_state_by_name"}
def _state_record(_model, _opt):
    """For each parameter, by name (sorted): its state, keys sorted, or None."""
    return {
        n: dict(sorted(_opt.state[p].items())) if p in _opt.state else None
        for n, p in sorted(_model.named_parameters())
    }


_named = optimizer_state_by_name(old, old_opt)
_dst = TwoBranchV2()
_dst_opt = torch.optim.Adam(_dst.parameters(), lr=0.1)
_result, _error = attempt(load_optimizer_state_by_name, _dst, _dst_opt, _named)
check(
    _error is None and str(_state_record(_dst, _dst_opt)) == str(_state_record(old, old_opt)),
    "After load_optimizer_state_by_name into a TwoBranchV2, each parameter should hold the saved "
    f"state of the parameter of the same name (error: {_error}): match by name, not by position.",
)
check(
    all(
        _t is not _u
        for _s in _dst_opt.state.values()
        for _t in _s.values()
        for _v in _named.values()
        for _u in _v.values()
    ),
    "The loaded state shares tensors with the saved copy, which ties the two together: clone "
    "the tensors when you load them.",
)
_tb = TwoBranch()
_bad = {
    "a.weight": {
        "step": torch.tensor(1.0),
        "exp_avg": torch.zeros(5, 5),
        "exp_avg_sq": torch.zeros(5, 5),
    }
}
_result, _error = attempt(
    load_optimizer_state_by_name, _tb, torch.optim.Adam(_tb.parameters()), _bad
)
check(
    _error is not None and _error.startswith("ValueError") and "a.weight" in _error,
    "Loading state of shape (5, 5) onto a.weight (shape (2, 3)) should raise a ValueError whose "
    f"message names the parameter, a.weight; got: {_error}.",
)
_good = {
    "a.weight": {
        "step": torch.tensor(3.0),
        "exp_avg": torch.ones(2, 3),
        "exp_avg_sq": torch.ones(2, 3),
    }
}
_result, _error = attempt(
    load_optimizer_state_by_name, _tb, torch.optim.Adam(_tb.parameters()), _good
)
check(
    _error is None,
    f"Loading a state that fits (exp_avg of shape (2, 3), and the 0-d step) raised {_error}: "
    "skip 0-d tensors like step in the shape check.",
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
    _result, _error = attempt(
        load_optimizer_state_by_name,
        _wrong,
        torch.optim.Adam(_wrong.parameters()),
        optimizer_state_by_name(_m, _o),
    )
    _record[f"loaded into an MLP({_sizes}): ValueError, and the layers it names"] = [
        bool(_error and _error.startswith("ValueError")),
        [_l for _l in ("fc1", "fc2", "fc3") if _error and _l in _error],
    ]
observe(
    "load_optimizer_state_by_name with a random MLP's saved Adam state (into a new MLP, then "
    "into MLPs whose shapes differ), and with a TwoBranch's loaded into a TwoBranchV2",
    _record,
    rtol=0,
    atol=0,
    hint="Load each saved state onto the parameter of the same name, as cloned tensors, and "
    "raise a ValueError naming the parameter when a state tensor's shape (0-d ones excepted) "
    "differs from it.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * A dynamic graph and its unrolled static twin give the same gradients; a shared layer
#   used twice gets the sum of both contributions, and a layer not used gets `None`.
# * An optimizer step is an update rule applied to `.grad`: compare two implementations of
#   one with a tolerance, since they may round differently.
# * A `None` gradient means "skip me" to the optimizers of `torch.optim`, LBFGS excepted; a
#   zero gradient still lets momentum and Adam move a parameter, by a step that does not
#   depend on the size of the last real gradient. `zero_grad(set_to_none=...)` chooses.
# * When a layer grows or shrinks, keep the function, and move the optimizer state to the
#   new tensors, deleting the old entries. How often the structure changes matters: measure.
# * A `state_dict` maps names to tensors and knows nothing of `forward`; loading checks
#   names and shapes (`strict=False` forgives names only). An optimizer's `state_dict`
#   matches by position: save it by name when the model's layout may change.
