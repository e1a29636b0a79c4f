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
# or even grow a layer, from one batch to the next. This lab answers four questions that
# come up as soon as you train such a model, each with a measurement you can repeat:
#
# 1. Are the gradients of a dynamic graph the same as those of the equivalent static
#    graph, and is an optimizer step anything more than the chain rule plus an update rule?
# 2. What do the optimizers do to a parameter the graph did **not** use this step?
# 3. How do you widen or narrow a layer during training without losing what the network
#    (and the optimizer) has learned? And does changing the structure too often hurt
#    training, as a forum answer warns?
# 4. What does the saved model look like after it changed shape, and how do you load it?
#
# Everything runs on small random data made here, in a few seconds on a CPU.
#
# **How this lab works.** Cells marked *exercise* are yours: replace
# `raise NotImplementedError(...)` with your code. The cell after each exercise is a
# *check*: run it, and if something is wrong it tells you what, in words. When you submit,
# the same checks run again with extra hidden cases, so make the code right, not just the
# printed numbers. Run the notebook top to bottom (*Kernel > Restart and run all*) before
# you submit.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import copy
import io
import random

import matplotlib.pyplot as plt
import torch.nn.functional as F
from livelossplot import PlotLosses
from livelossplot.outputs import MatplotlibPlot
from torch import nn
from tqdm.auto import tqdm

random.seed(0)
# The tensors of this lab are tiny: one thread is faster than several fighting over them.
torch.set_num_threads(1)
# While the notebook is graded (nbgrader sets NBGRADER_EXECUTION), no live plots are drawn.
GRADING = bool(os.environ.get("NBGRADER_EXECUTION"))


def live_plot(groups):
    """A live plot of the named curves (livelossplot), 5 x 2 inches each; None while grading."""
    if GRADING:
        return None
    return PlotLosses(groups=groups, step_names="step", outputs=[MatplotlibPlot(cell_size=(5, 2))])


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
# Our running model is a small `DynamicNet`: an input layer, one *middle* layer that the
# forward pass applies 0 to 3 times (a dice roll decides, or you pass `depth`), and an
# output layer. The middle layer's weights are **shared** by every repetition.
#
# We work in `float64` in this section, so that "equal" can mean equal to $10^{-12}$.


# %%
class DynamicNet(nn.Module):
    def __init__(self, d_in=5, hidden=8, d_out=3):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_linear = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, d_out)

    def forward(self, x, depth=None):
        if depth is None:
            depth = random.randint(0, 3)  # the dice roll: a new graph every call
        h = torch.relu(self.input_linear(x))
        for _ in range(depth):
            h = torch.relu(self.middle_linear(h))
        return self.output_linear(h)  # logits: cross_entropy applies log_softmax itself


net = DynamicNet().double()
x = torch.randn(16, 5, dtype=torch.float64)
y = torch.randint(0, 3, (16,))

for depth in range(4):
    net.zero_grad(set_to_none=True)
    F.cross_entropy(net(x, depth), y).backward()
    g = net.middle_linear.weight.grad
    print(
        f"depth {depth}: middle_linear.weight.grad is",
        "None" if g is None else f"a tensor, norm {g.norm():.4f}",
    )

# %% [markdown]
# With `depth = 0` the middle layer is not in the graph, so `backward()` never reaches it
# and its `.grad` stays `None`. With depth 2 or 3 the same weight appears several times in
# the graph, and its gradient is the **sum** of the contributions of every use.
#
# In the picture of the depth-2 graph, `middle_linear.weight` appears once (a blue box and
# its `AccumulateGrad` node), with two arrows leaving that node, one per use; backward adds
# what comes back along both:

# %%
draw(F.cross_entropy(net(x, 2), y), params=dict(net.named_parameters()))

# %% [markdown]
# A static-graph framework would have you write the depth-2 network out as one fixed
# expression. Nothing about the chain rule changes: the dynamic graph of `net(x, 2)` *is*
# that expression, recorded while it ran.
#
# ### Exercise 1 (2 points): unroll the depth-2 graph by hand
#
# Write `unrolled_depth2(p, x)` that computes the logits of `DynamicNet` at depth 2 as one
# straight-line expression, with no loop, no `if` and no call to `net` or its layers: use
# the tensors in the dict `p = dict(net.named_parameters())` (for example
# `p["middle_linear.weight"]`) with `@`, `.T`, `+` and `torch.relu`. A linear layer
# computes `x @ W.T + b`.


# %% nbgrader={"solution": true, "grade_id": "unrolled_depth2"}
def unrolled_depth2(p, x):
    ### BEGIN SOLUTION
    h = torch.relu(x @ p["input_linear.weight"].T + p["input_linear.bias"])
    h = torch.relu(h @ p["middle_linear.weight"].T + p["middle_linear.bias"])
    h = torch.relu(h @ p["middle_linear.weight"].T + p["middle_linear.bias"])
    return h @ p["output_linear.weight"].T + p["output_linear.bias"]
    ### END SOLUTION


# %% [markdown]
# Now compare the two graphs: the gradients of the same loss with respect to the same
# parameters, once through `net(x, 2)` and once through your expression.


# %%
def gradients(loss, params):
    """d loss / d p for every p, as a list (None where p was not used)."""
    return torch.autograd.grad(loss, params, allow_unused=True)


params = list(net.parameters())
names = [name for name, _ in net.named_parameters()]
dynamic = gradients(F.cross_entropy(net(x, 2), y), params)
static = gradients(F.cross_entropy(unrolled_depth2(dict(net.named_parameters()), x), y), params)
for name, a, b in zip(names, dynamic, static, strict=True):
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
    _error is None,
    f"unrolled_depth2(p, x) failed on the net above and x of shape (16, 5) with {_error}. "
    "A linear layer computes x @ W.T + b.",
)
check(
    isinstance(_out, torch.Tensor) and _out.shape == (16, 3),
    "unrolled_depth2 should return the logits, a tensor of shape (batch, 3).",
)
_params = list(net.parameters())
_dynamic = gradients(F.cross_entropy(net(x, 2), y), _params)
_static = gradients(F.cross_entropy(_out, y), _params)
check(
    all(_g is not None for _g in _static),
    "Some parameter got no gradient through unrolled_depth2: every one of the six tensors in p "
    "should be used.",
)
_gap = max((_u - _v).abs().max().item() for _u, _v in zip(_dynamic, _static, strict=True))
check(
    _gap < 1e-12,
    f"The gradients differ from net(x, 2) by up to {_gap:.1e}. Apply the middle layer twice, "
    "a ReLU after the input layer and after each middle layer, and no ReLU after the output "
    "layer (the logits may be negative).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed in range(3):
    _net = _seeded(DynamicNet(d_in=4, hidden=6, d_out=5).double(), 100 + _seed)
    _gen = torch.Generator().manual_seed(600 + _seed)
    _x = torch.randn(9, 4, dtype=torch.float64, generator=_gen)
    _y = torch.randint(0, 5, (9,), generator=_gen)
    _logits = unrolled_depth2(dict(_net.named_parameters()), _x)
    _grads = gradients(F.cross_entropy(_logits, _y), list(_net.parameters()))
    observe(
        f"unrolled_depth2(p, x) on random DynamicNet(d_in=4, hidden=6, d_out=5) parameters "
        f"(draw {_seed}) and 9 random inputs: the logits, and the cross-entropy's gradients",
        {
            "logits": _logits.detach(),
            "gradients": dict(zip([_n for _n, _ in _net.named_parameters()], _grads, strict=True)),
        },
        rtol=1e-9,
        atol=1e-12,
        hint="A ReLU after the input layer and after each of the two middle layers, the same "
        "middle weights twice, and no ReLU after the output layer.",
    )
### END HIDDEN TESTS

# %% [markdown]
# The differences are zero or a few units in the 16th digit: the two graphs hold the same
# operations, so backpropagation through them does the same arithmetic. "Dynamic" is about
# *when* the graph is built, not about *what* is differentiated.

# %% [markdown]
# ## 2. An optimizer step is an update rule, nothing more
#
# After `backward()` every used parameter holds its gradient in `.grad`. An optimizer only
# reads `.grad` and changes the parameter in place; it never looks at the graph.
# Stochastic gradient descent with momentum $\mu$ and learning rate $\eta$ keeps one
# *momentum buffer* $b$ per parameter:
#
# $$b \leftarrow g \ \text{(first step)},\qquad b \leftarrow \mu\, b + g \ \text{(later steps)},
#   \qquad p \leftarrow p - \eta\, b .$$
#
# The formula is simple, but "the same" can mean bit for bit. Compare two ways of writing
# the last update in `float64`:

# %%
p0 = torch.randn(1000, dtype=torch.float64)
g0 = torch.randn(1000, dtype=torch.float64)
reference = torch.nn.Parameter(p0.clone())
reference.grad = g0.clone()
torch.optim.SGD([reference], lr=0.1, momentum=0.9).step()
for label, mine in [
    ("p - lr * b            ", p0 - 0.1 * g0),
    ("p.add(b, alpha=-lr)   ", p0.add(g0, alpha=-0.1)),
]:
    gap = (mine - reference.detach()).abs().max().item()
    differ = int((mine != reference.detach()).sum())
    print(
        f"{label} identical to torch.optim.SGD: {torch.equal(mine, reference.detach())!s:5}",
        f"({differ} of 1000 entries differ, by up to {gap:.1e})",
    )

# %% [markdown]
# When we ran it (torch 2.14.1, on a CPU), `p - lr * b` differed from `torch.optim.SGD` in
# 119 of the 1000 entries, each time by one rounding (a gap around $10^{-16}$), while
# `p.add(b, alpha=-lr)` (what `torch.optim.SGD` itself calls) was identical: the `alpha` form
# computes $p + \alpha b$ in one kernel, so it rounds differently from a separate multiply and
# subtract. Check the output above on yours.
#
# Both are right: they are the same formula, rounded differently. So a hand-written update is
# graded to a tolerance, not bit for bit: below, yours must agree with `torch.optim.SGD` to
# $10^{-12}$ in `float64`, and the check prints, without grading it, whether it is also
# identical bit for bit.
#
# ### Exercise 2 (2 points): one SGD-with-momentum step by hand
#
# Write `sgd_momentum_step(params, buffers, lr, momentum)`. `params` is a list of tensors
# with `.grad` set (or `None`); `buffers` is a list of the same length holding each
# momentum buffer, `None` before the first step. Update every parameter **in place**
# (inside `torch.no_grad()`), and return the new list of buffers. It must give the results
# of `torch.optim.SGD(params, lr=lr, momentum=momentum)`, up to float rounding.
#
# Do what `torch.optim.SGD` does with a parameter whose `.grad` is `None`: find out in the
# next check's message if you are unsure, or read section 3 first.


# %% nbgrader={"solution": true, "grade_id": "sgd_momentum_step"}
def sgd_momentum_step(params, buffers, lr, momentum):
    ### BEGIN SOLUTION
    new_buffers = []
    with torch.no_grad():
        for p, b in zip(params, buffers, strict=True):
            if p.grad is None:  # not used: torch.optim skips it, buffer and all
                new_buffers.append(b)
                continue
            if b is None:
                b = p.grad.detach().clone()
            else:
                b = b.mul(momentum).add(p.grad)
            p.add_(b, alpha=-lr)
            new_buffers.append(b)
    return new_buffers
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_sgd_momentum_step"}
def _compare_with_sgd(_grads_per_step, _shapes, _lr, _momentum):
    """torch.optim.SGD and sgd_momentum_step side by side (a gradient None: not used); returns
    (SGD's parameters, yours, what each of your calls returned, the first error or None)."""
    _start = [torch.randn(_s, dtype=torch.float64) for _s in _shapes]
    _ref = [nn.Parameter(_t.clone()) for _t in _start]
    _mine = [nn.Parameter(_t.clone()) for _t in _start]
    _opt = torch.optim.SGD(_ref, lr=_lr, momentum=_momentum)
    _buffers, _returned = [None] * len(_shapes), []
    for _grads in _grads_per_step:
        for _r, _m, _g in zip(_ref, _mine, _grads, strict=True):
            _r.grad = None if _g is None else _g.clone()
            _m.grad = None if _g is None else _g.clone()
        _opt.step()
        _buffers, _error = attempt(sgd_momentum_step, _mine, _buffers, _lr, _momentum)
        if _error is not None:
            return _ref, _mine, _returned, _error
        _returned.append(_buffers)
        if not (isinstance(_buffers, list) and len(_buffers) == len(_shapes)):
            break
    return _ref, _mine, _returned, None


def _close(_a, _b):
    return torch.allclose(_a, _b, rtol=1e-12, atol=1e-12)


_g1, _g2 = torch.randn(40, 30, dtype=torch.float64), torch.randn(40, 30, dtype=torch.float64)
_ref, _mine, _returned, _error = _compare_with_sgd([[_g1], [_g2]], [(40, 30)], 0.1, 0.9)
check(_error is None, f"sgd_momentum_step failed on one (40, 30) parameter with {_error}.")
check(
    all(isinstance(_b, list) and len(_b) == 1 for _b in _returned),
    "sgd_momentum_step should return a list with one buffer per parameter.",
)
check(
    _close(_ref[0], _mine[0]),
    "After two steps your parameter is not where torch.optim.SGD puts it: on step 1 the buffer "
    "is the gradient itself, on step 2 it is momentum * buffer + gradient, and each step "
    "subtracts lr * buffer, in place.",
)
print(
    "After two steps, identical to torch.optim.SGD bit for bit:",
    torch.equal(_ref[0], _mine[0]),
    "(shown, not graded: the check above allows a difference of 1e-12)",
)
_p = nn.Parameter(torch.zeros(5, dtype=torch.float64))
_p.grad = torch.ones(5, dtype=torch.float64)
_buffers, _error = attempt(sgd_momentum_step, [_p], [None], 0.1, 0.9)
check(_error is None, f"sgd_momentum_step failed on one parameter of 5 zeros with {_error}.")
check(
    isinstance(_buffers, list) and len(_buffers) == 1 and isinstance(_buffers[0], torch.Tensor),
    "After a step with a gradient, sgd_momentum_step should return a list holding that "
    "parameter's buffer, a tensor.",
)
_kept = _buffers[0].clone()
_p.grad.mul_(-2.0)  # what the next backward does to .grad: it changes it in place
check(
    torch.equal(_buffers[0], _kept),
    "The buffer you returned changed when .grad was changed in place afterwards, as the next "
    "backward() does: on the first step the buffer must be a copy of the gradient "
    "(p.grad.clone()), not the .grad tensor itself.",
)
_ref, _mine, _returned, _error = _compare_with_sgd(
    [[_g1, _g2], [_g2, None]], [(40, 30), (40, 30)], 0.1, 0.9
)
check(_error is None, f"sgd_momentum_step failed when one .grad was None, with {_error}.")
check(
    _close(_ref[1], _mine[1]),
    "A parameter whose .grad is None (the graph did not use it this step) moved differently "
    "from torch.optim.SGD, which skips it entirely: no update, buffer left as it was. Do not "
    "treat a missing gradient as a zero gradient.",
)
check(
    _close(_ref[0], _mine[0]),
    "With two parameters, the first one did not end where torch.optim.SGD puts it: update "
    "every parameter of the list, each with its own buffer.",
)
with torch.random.fork_rng(devices=[]):  # leaves the random numbers of the next cells as they were
    _ref, _mine, _returned, _error = _compare_with_sgd(
        [[_g1, _g2], [_g2, None], [_g1, _g1]], [(40, 30), (40, 30)], 0.1, 0.9
    )
check(_error is None, f"sgd_momentum_step failed on the step after a .grad None, with {_error}.")
check(
    _close(_ref[1], _mine[1]),
    "On the step after one where .grad was None, your parameter moved differently from "
    "torch.optim.SGD. Skipping a parameter keeps its momentum buffer as it was, so the next "
    "step continues with momentum * old buffer + gradient: return the old buffer for a skipped "
    "parameter, not None (which would restart the momentum from scratch).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(7)
_coin = random.Random(7)
_shapes = [(50,), (30, 20), (4, 4, 4)]
_steps = [
    [
        torch.randn(_s, dtype=torch.float64, generator=_gen) if _coin.random() < 0.7 else None
        for _s in _shapes
    ]
    for _ in range(6)
]
_start = [torch.randn(_s, dtype=torch.float64, generator=_gen) for _s in _shapes]


def _run_steps(_grads_per_step, _lr, _momentum, _with_buffers=True):
    """sgd_momentum_step from _start, step after step. After each step every .grad is changed
    in place (as the next backward would), so a buffer that is the .grad itself changes too."""
    _params = [nn.Parameter(_t.clone()) for _t in _start]
    _buffers = [None] * len(_params)
    for _grads in _grads_per_step:
        for _p, _g in zip(_params, _grads, strict=True):
            _p.grad = None if _g is None else _g.clone()
        _buffers = sgd_momentum_step(_params, _buffers, _lr, _momentum)
        for _p in _params:
            if _p.grad is not None:
                _p.grad.mul_(-2.0)
    _record = {"parameters": [_p.detach() for _p in _params]}
    if _with_buffers:
        _record["buffers (None read as zeros)"] = [
            torch.zeros(_s, dtype=torch.float64) if _b is None else _b
            for _s, _b in zip(_shapes, _buffers, strict=True)
        ]
    return _record


for _lr, _mu in [(0.05, 0.5), (0.3, 0.99)]:
    observe(  # to a tolerance: the same formula may round differently
        f"sgd_momentum_step(params, buffers, lr={_lr}, momentum={_mu}): 6 steps on three "
        "random parameters of different shapes, some steps with .grad None",
        _run_steps(_steps, _lr, _mu),
        rtol=1e-10,
        atol=1e-12,
        hint="As torch.optim.SGD: the buffer is a clone of the gradient on the first step, "
        "momentum * buffer + gradient later, then p -= lr * buffer in place; a parameter whose "
        ".grad is None is skipped and keeps its buffer.",
    )
observe(
    "sgd_momentum_step(params, buffers, lr=0.2, momentum=0.0): 6 steps on three random "
    "parameters, some steps with .grad None: the parameters",
    _run_steps(_steps, 0.2, 0.0, _with_buffers=False),
    rtol=1e-10,
    atol=1e-12,
    hint="With momentum 0 the buffer is the gradient of this step alone: p -= lr * gradient.",
)
observe(
    "sgd_momentum_step(params, buffers, lr=0.1, momentum=0.9) on three random parameters: one "
    "step with gradients, then one step where every .grad is None",
    _run_steps([_steps[0], [None, None, None]], 0.1, 0.9),
    rtol=1e-10,
    atol=1e-12,
    hint="A parameter whose .grad is None is not updated at all, and keeps its buffer as it was.",
)
### END HIDDEN TESTS

# %% [markdown]
# Gradients come from the graph, updates come from a rule. Everything else in this lab is
# about the optimizer's *state* (the buffers you just kept), which outlives every graph.

# %% [markdown]
# ## 3. Parameters the graph did not use
#
# In `DynamicNet` the middle layer sits out whenever the dice roll 0. What happens to it
# on that step depends on what its `.grad` holds, and that depends on how you cleared the
# gradients before `backward()`:
#
# * `optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0) sets `.grad` to
#   `None`; a parameter the graph did not reach keeps `None`;
# * `optimizer.zero_grad(set_to_none=False)` fills `.grad` with zeros; an unused parameter
#   then holds a gradient of zero, which is a perfectly good number to an optimizer.
#
# Let's measure it rather than guess. `TwoBranch` has two layers of the same shape; `coin`
# picks which ones the forward pass uses (0: only `a`, 1: only `b`, 2: both).


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


# %% [markdown]
# Fill the table: four optimizers, both ways of clearing gradients, same start each time.

# %%
optimizers = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "SGD momentum=0.9": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.1),
}
print(f"{'optimizer':18} {'set_to_none=True':>17} {'set_to_none=False':>18}")
for label, make in optimizers.items():
    row = []
    for set_to_none in (True, False):
        torch.manual_seed(1)
        two = TwoBranch()
        row.append(unused_drift(two, make(two.parameters()), x3, set_to_none))
    print(f"{label:18} {row[0]:17.4f} {row[1]:18.4f}")

# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_unused_drift"}
torch.manual_seed(3)
_net = TwoBranch()
_probe = copy.deepcopy(_net)  # to compute branch b's first gradient independently
_probe(x3, 2).pow(2).mean().backward()
_g_b = _probe.b.weight.grad
_drift, _error = attempt(
    unused_drift, _net, torch.optim.SGD(_net.parameters(), lr=0.1, momentum=0.9), x3, False
)
check(_error is None, f"unused_drift failed on a TwoBranch with SGD(momentum=0.9) with {_error}.")
check(isinstance(_drift, float), "unused_drift should return a float (use .item()).")
_expected = 0.1 * 0.9 * _g_b.norm().item()
if _drift == 0.0:
    _hint = (
        "It did not move at all: either you cleared the gradients with set_to_none=True (what "
        "zero_grad() does by default) instead of the set_to_none you were given, or b_before is "
        "not a .clone(): without it, b_before is the very tensor that optimizer.step() changes "
        "in place, so the difference is always 0."
    )
elif abs(_drift - 0.1 * 1.9 * _g_b.norm().item()) < 1e-6:
    _hint = (
        "That is lr * 1.9 * |g1|: the gradients were not cleared before step 2, so step 1's "
        "gradient was still in .grad and counted again. Call "
        "optimizer.zero_grad(set_to_none=set_to_none) before step 2 as well."
    )
else:
    _hint = "Did you pass set_to_none to zero_grad, and measure only step 2?"
check(
    abs(_drift - _expected) < 1e-6,
    f"With set_to_none=False and momentum 0.9, branch b should move by lr * momentum * |g1| = "
    f"{_expected:.4f} in step 2 (its gradient is zero, but its momentum buffer is not), got "
    f"{_drift:.4f}. {_hint}",
)
torch.manual_seed(3)
_net = TwoBranch()
_drift = unused_drift(_net, torch.optim.SGD(_net.parameters(), lr=0.1, momentum=0.9), x3, True)
check(isinstance(_drift, float), "unused_drift should return a float (use .item()).")
check(
    _drift == 0.0,
    f"With set_to_none=True branch b's .grad is None in step 2, so SGD skips it, but it moved by "
    f"{_drift:.4f}. Use coin=0 in step 2 and clear the gradients with set_to_none.",
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
                "a.weight after": _net.a.weight.detach(),
                "b.weight after": _net.b.weight.detach(),
            },
            atol=1e-6,
            hint="Clear with optimizer.zero_grad(set_to_none=set_to_none) before each step, use "
            "coin=2 then coin=0, and return the norm of b's change in step 2 alone (from a "
            ".clone() taken just before it).",
        )
### END HIDDEN TESTS

# %% [markdown]
# What the table shows (look at your numbers): with `set_to_none=True` nothing moves the
# unused branch, because every `torch.optim` optimizer skips a parameter whose `.grad` is
# `None` (we tried all of them with torch 2.14; LBFGS reads a `None` gradient as zeros, which
# for it comes to the same). With `set_to_none=False` plain SGD still does not move it (a
# zero gradient is a zero step), but SGD with momentum, Adam and AdamW **do**: momentum keeps
# pushing in the old direction, and so does Adam, whose step is its first moment divided by
# the square root of its second moment, neither of which is zero yet.
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
drift = (w.detach() - after_step_1).abs()
print("drift over the 50 zero-gradient steps, per entry:", " ".join(f"{d:.3f}" for d in drift))

# %% [markdown]
# When we ran it (torch 2.14.1), every entry moved by 0.1 on the first step (Adam's first
# step is `lr` in size, whatever the gradient), and then, on the five steps with a **zero**
# gradient, by 0.0670, 0.0518, 0.0424, 0.0359 and 0.0309: 67%, 52%, 42%, 36% and 31% of
# `lr`, the same for a gradient of 0.01 as for one of 300, always in the direction of the
# last real step. The step with `.grad = None` moved nothing, and `state["step"]` stayed at 6.
#
# Why: after one step with gradient $g$ and $t-1$ steps with 0, Adam's bias-corrected moments
# are $\hat m = (1-\beta_1)\beta_1^{t-1} g / (1-\beta_1^t)$ and
# $\hat v = (1-\beta_2)\beta_2^{t-1} g^2 / (1-\beta_2^t)$, and the step
# $\mathrm{lr}\,\hat m / (\sqrt{\hat v} + \epsilon)$ does not depend on the size of $g$
# (for $t = 2$: $0.1 \times 0.4737 / 0.7069 = 0.0670$). The first moment decays by
# $\beta_1 = 0.9$ a step, the root of the second only by $\sqrt{\beta_2} \approx 0.9995$,
# so the steps shrink slowly, by about 9% a step once the bias corrections settle. Over the
# 50 zero-gradient steps each entry drifted by 0.497 in all, five times its one real step: a
# parameter the graph stopped using keeps moving for tens of steps.
#
# For `DynamicNet` this decides what "skipping a layer" means. With `set_to_none=True` a
# skipped middle layer is frozen for that step, and Adam's per-parameter step counter
# (`state["step"]`) does not advance for it. Watch the counters after 40 steps with random
# depth. The loop rolls the dice itself, `dyn(xs, depth)`, only so that the plot can show
# each step's depth next to its loss.

# %%
torch.manual_seed(0)
random.seed(0)
dyn = DynamicNet()
opt = torch.optim.Adam(dyn.parameters(), lr=1e-2)
xs, ys = torch.randn(64, 5), torch.randint(0, 3, (64,))
live = live_plot({"loss": ["loss"], "depth": ["depth"]})
for start in range(0, 40, 20):  # a progress bar per 20 steps, then the plot is redrawn
    for _ in tqdm(range(20), desc=f"steps {start + 1}-{start + 20}", leave=False, disable=GRADING):
        depth = random.randint(0, 3)  # the same dice roll dyn(xs) would make
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(dyn(xs, depth), ys)
        loss.backward()
        opt.step()
        if live is not None:
            live.update({"loss": loss.item(), "depth": depth})
    if live is not None:
        live.send()
for name, p in dyn.named_parameters():
    print(f"{name:22} Adam steps taken: {int(opt.state[p]['step'])}")

# %% [markdown]
# The middle layer took fewer Adam steps than the others: it only counts the batches in
# which it was part of the graph. Neither behaviour is wrong, but they train different
# models, so choose on purpose (and know that code written before PyTorch 2.0 defaulted to
# `set_to_none=False`).

# %% [markdown]
# ## 4. Growing and shrinking a layer during training
#
# Changing the width of a hidden layer changes the **shapes** of the weights on both sides
# of it, so those parameters must be replaced by new tensors. Two things should survive:
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
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def train(model, optimizer, x, y, steps):
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def optimizer_report(model, optimizer):
    """Which parameters the optimizer updates, what state it holds, and what is orphaned."""
    in_model = {id(p): name for name, p in model.named_parameters()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            shapes = {
                k: tuple(v.shape) for k, v in state.items() if torch.is_tensor(v) and v.dim() > 0
            }
            print(
                f"  {in_model.get(id(p), '(not in model!)'):12} {tuple(p.shape)!s:8} state {shapes}"
            )
    stale = [p for p in optimizer.state if id(p) not in in_model]
    print(
        f"  orphaned state entries (optimizer state of tensors the model no longer has): {len(stale)}"
    )


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
# new units exist but do not yet contribute. (This is not Net2Net's recipe: that one comes
# after the exercise.)
#
# Think about what happens if you make the incoming weights zero too: the function is still
# preserved, but look at the gradient of the new weights. Copy values inside
# `torch.no_grad()`.


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


# %%
torch.manual_seed(0)
f, s = nn.Linear(4, 3), nn.Linear(3, 2)
f2, s2 = widen_pair(f, s, 2)
xw = torch.randn(5, 4)
print("before:", s(torch.relu(f(xw)))[0])
print("after: ", s2(torch.relu(f2(xw)))[0])
s2(torch.relu(f2(xw))).pow(2).sum().backward()
print(
    "gradient reaching the new units' outgoing weights:", s2.weight.grad[:, 3:].abs().sum().item()
)


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_widen_pair"}
torch.manual_seed(0)
_f, _s = nn.Linear(4, 3), nn.Linear(3, 2)
_f_old, _s_old = copy.deepcopy(_f), copy.deepcopy(_s)
_pair, _error = attempt(widen_pair, _f, _s, 2)
check(_error is None, f"widen_pair(Linear(4, 3), Linear(3, 2), 2) failed with {_error}.")
check(
    isinstance(_pair, tuple)
    and len(_pair) == 2
    and all(isinstance(_layer, nn.Linear) for _layer in _pair),
    "widen_pair should return two nn.Linear layers, as a tuple (new_first, new_second).",
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
        for _a, _b in zip(
            [*_f.parameters(), *_s.parameters()],
            [*_f_old.parameters(), *_s_old.parameters()],
            strict=True,
        )
    ),
    "widen_pair changed the old layers: build new ones and copy the old weights into them.",
)
check(
    torch.equal(_nf.weight[:3], _f.weight) and torch.equal(_ns.weight[:, :3], _s.weight),
    "The old weights should sit unchanged in the first rows of the new first layer and "
    "the first columns of the new second layer.",
)
check(
    torch.equal(_nf.bias[:3], _f.bias) and torch.equal(_ns.bias, _s.bias),
    "Copy the old biases too: the first layer's into the first entries of the new first "
    "layer's bias, and the second layer's into the whole bias of the new second layer (a new "
    "nn.Linear starts with a random bias, which would change the output).",
)
_x = torch.randn(20, 4)
_gap = (_ns(torch.relu(_nf(_x))) - _s(torch.relu(_f(_x)))).abs().max().item()
check(
    _gap < 1e-6,
    f"The widened pair computes a different function (gap {_gap:.1e}): the new units' "
    "outgoing weights (the new columns of the second layer) must be zero, and the old "
    "biases copied into the new layers.",
)
_ns(torch.relu(_nf(_x))).pow(2).sum().backward()
_learn = _ns.weight.grad[:, 3:].abs().sum().item() + _nf.weight.grad[3:].abs().sum().item()
check(
    _learn > 0,
    "The new units get no gradient at all, so training can never switch them on: with zero "
    "incoming AND zero outgoing weights they output relu(0) = 0 and pass back nothing. "
    "Give them small random incoming weights.",
)
with torch.no_grad():
    for _p in [*_f.parameters(), *_s.parameters()]:
        _p.add_(1.0)
_after = _ns(torch.relu(_nf(_x))) - _s_old(torch.relu(_f_old(_x)))
check(
    _after.abs().max().item() < 1e-6,
    "After widen_pair returned, changing the old layers' weights changed what the new pair "
    "computes: the new layers must hold copies of the old weights and biases, not the old "
    "tensors themselves.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _a, _h, _b, _extra, _seed in [(6, 5, 4, 3, 1), (2, 1, 3, 4, 2), (5, 4, 2, 1, 3)]:
    _f, _s = _seeded(nn.Linear(_a, _h), 50 + _seed), _seeded(nn.Linear(_h, _b), 60 + _seed)
    _nf, _ns = widen_pair(_f, _s, _extra)
    _call = f"widen_pair(Linear({_a}, {_h}), Linear({_h}, {_b}), extra={_extra}) on random layers"
    # the new units' incoming weights are random: only what every right answer gives is recorded
    observe(
        f"{_call}: the new layers",
        {
            "new first weight shape": list(_nf.weight.shape),
            "new second weight shape": list(_ns.weight.shape),
            "new first weight, old rows": _nf.weight[:_h].detach(),
            "new first bias, old entries": _nf.bias[:_h].detach(),
            "new second weight": _ns.weight.detach(),  # old columns, then the new units' zeros
            "new second bias": _ns.bias.detach(),
        },
        hint="Old weights and biases go in the first rows of the new first layer and the first "
        "columns of the new second layer (whose bias is the old one); the new units' outgoing "
        "weights are zero.",
    )
    observe(
        f"{_call}: the old layers after the call",
        {
            "first weight": _f.weight.detach(),
            "first bias": _f.bias.detach(),
            "second weight": _s.weight.detach(),
            "second bias": _s.bias.detach(),
        },
        hint="Build new layers and copy into them; leave the old layers as they were.",
    )
    _x = torch.randn(200, _a, generator=torch.Generator().manual_seed(70 + _seed))
    _y = _ns(torch.relu(_nf(_x)))
    _y.pow(2).sum().backward()
    observe(f"{_call}: output of the widened pair on 200 random inputs", _y.detach(), atol=1e-6)
    observe(
        f"{_call}: how many of the new units' outgoing weights get a nonzero gradient",
        int((_ns.weight.grad[:, _h:] != 0).sum()),
        hint="Give the new units small random incoming weights: with zero incoming and outgoing "
        "weights they pass back no gradient, and never learn.",
    )
    with torch.no_grad():
        for _p in [*_f.parameters(), *_s.parameters()]:
            _p.add_(1.0)
    observe(
        f"{_call}: output of the widened pair after the old layers' weights and biases were "
        "changed",
        _ns(torch.relu(_nf(_x))).detach(),
        atol=1e-6,
        hint="The new layers must hold copies of the old weights, not the old layers themselves.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Zero outgoing weights keep the output as it was, and the gradient of those weights is the
# new units' activation, which is nonzero, so the next step starts using them.
#
# *Net2Net* (Chen, Goodfellow and Shlens, 2016) widens another way. Its Net2WiderNet makes
# each new unit a **copy** of an existing unit (the same incoming weights and bias) and
# splits the copied unit's outgoing weights among its copies: with one copy, both get
# **half** of them. The sum the next layer computes is the same, and the new unit starts out
# useful instead of silent. But the two copies then get the same gradient, so they would
# stay copies forever: Net2Net adds a little noise to break that symmetry. See both facts:


# %%
def split_and_halve(first, second, unit):
    """Net2WiderNet for one unit: append a copy of hidden `unit`, halve its outgoing weights."""
    new_first = nn.Linear(first.in_features, first.out_features + 1)
    new_second = nn.Linear(first.out_features + 1, second.out_features)
    with torch.no_grad():
        new_first.weight.copy_(torch.cat([first.weight, first.weight[unit : unit + 1]]))
        new_first.bias.copy_(torch.cat([first.bias, first.bias[unit : unit + 1]]))
        half = second.weight[:, unit : unit + 1] / 2
        new_second.weight.copy_(torch.cat([second.weight, half], dim=1))
        new_second.weight[:, unit : unit + 1] = half
        new_second.bias.copy_(second.bias)
    return new_first, new_second


torch.manual_seed(0)
f, s = nn.Linear(4, 3), nn.Linear(3, 2)
f3, s3 = split_and_halve(f, s, unit=1)
xs3 = torch.randn(200, 4)
gap = (s3(torch.relu(f3(xs3))) - s(torch.relu(f(xs3)))).abs().max().item()
print(f"largest change of the output on 200 inputs: {gap:.1e}")
s3(torch.relu(f3(xs3))).pow(2).sum().backward()
same = torch.equal(f3.weight.grad[1], f3.weight.grad[3])
print("unit 1 and its copy (unit 3) get the same gradient on their incoming weights:", same)

# %% [markdown]
# When we ran it the output changed by $3 \times 10^{-8}$ at most (float32 rounding: the
# two halves are added separately), and the two copies' gradients were identical, as they
# must be.
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
# Return nothing. A parameter that never took a step may have no state at all: skip it.
#
# Call `widen_pair` by that name: while the check below runs `grow`, it puts a stand-in in
# place of your `widen_pair` (new layers of the right shapes, with arbitrary weights), so that
# it grades `grow` alone, and a mistake in exercise 4 costs points in exercise 4 only.


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
                    bigger = torch.zeros_like(new)
                    bigger[tuple(slice(0, n) for n in old.shape)] = value
                    moved[key] = bigger
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
        "param_groups order": [
            _names.get(id(p), "(not in model)") for g in _opt.param_groups for p in g["params"]
        ],
        "orphaned state entries": sum(id(p) not in _names for p in _opt.state),
        "parameter shapes": {n: list(p.shape) for n, p in _model.named_parameters()},
        "state": {
            n: dict(sorted(_opt.state[p].items())) if p in _opt.state else None
            for n, p in _model.named_parameters()
        },
    }


### END HIDDEN TESTS
def _stand_in_widen(first, second, extra):
    """Stands in for your widen_pair while grow is checked, so that this check grades grow
    alone: new layers of the widened shapes, with weights drawn from a fixed seed (they do not
    preserve the function: that is widen_pair's job, checked in exercise 4)."""
    _gen = torch.Generator().manual_seed(1000 * first.out_features + extra)
    _first = nn.Linear(first.in_features, first.out_features + extra)
    _second = nn.Linear(first.out_features + extra, second.out_features)
    with torch.no_grad():
        for _p in [*_first.parameters(), *_second.parameters()]:
            _p.copy_(0.3 * torch.randn(_p.shape, generator=_gen))
    _stand_in_widen.made.append((_first, _second))
    return _first, _second


def _grow_with_stand_in(_model, _opt, _extra):
    """grow(_model, _opt, _extra) with the stand-in for widen_pair; returns the error, or None."""
    _yours = globals().get("widen_pair")
    _stand_in_widen.made = []
    globals()["widen_pair"] = _stand_in_widen
    try:
        return attempt(grow, _model, _opt, _extra)[1]
    finally:
        if _yours is not None:
            globals()["widen_pair"] = _yours


torch.manual_seed(0)
_x, _y = torch.randn(16, 4), torch.randint(0, 3, (16,))
_model = MLP(h2=6)
_opt = torch.optim.Adam(_model.parameters(), lr=0.01)
train(_model, _opt, _x, _y, 3)
_fc1_state = {_k: _v.clone() for _k, _v in _opt.state[_model.fc1.weight].items()}
_old_names = [_n for _n, _ in _model.named_parameters()]
_old_state = {
    _n: {_k: _v.clone() for _k, _v in _opt.state[_p].items()}
    for _n, _p in _model.named_parameters()
}
_old_shapes = {_n: _p.shape for _n, _p in _model.named_parameters()}
_error = _grow_with_stand_in(_model, _opt, 3)
check(
    _error is None, f"grow(model, Adam, 3) on an MLP(h2=6) after 3 Adam steps failed with {_error}."
)
check(
    len(_stand_in_widen.made) == 1
    and _model.fc2 is _stand_in_widen.made[0][0]
    and _model.fc3 is _stand_in_widen.made[0][1],
    "model.fc2 and model.fc3 should be replaced by the two layers that widen_pair(model.fc2, "
    "model.fc3, extra) returns (call it once, by that name).",
)
_params = [_p for _g in _opt.param_groups for _p in _g["params"]]
_names = {id(_p): _n for _n, _p in _model.named_parameters()}
check(
    [_names.get(id(_p)) for _p in _params] == _old_names,
    "The optimizer's param_groups should hold exactly the model's current parameters, each new "
    "fc2/fc3 tensor where its old one was.",
)
check(
    all(id(_p) in _names for _p in _opt.state),
    "optimizer.state still holds entries for the old fc2/fc3 tensors: move them to the new "
    "tensors and delete the old entries (they are orphans: nothing will ever use them).",
)
check(
    all(torch.equal(_opt.state[_model.fc1.weight][_k], _v) for _k, _v in _fc1_state.items()),
    "fc1's optimizer state changed: only the parameters of fc2 and fc3 are replaced.",
)
for _name, _p in _model.named_parameters():
    check(_p in _opt.state, f"The new {_name} has no optimizer state: carry its old state over.")
    _st = _opt.state[_p]
    _idx = tuple(slice(0, _n) for _n in _old_shapes[_name])
    for _k in ("exp_avg", "exp_avg_sq"):
        check(
            _k in _st
            and _st[_k].shape == _p.shape
            and torch.equal(_st[_k][_idx], _old_state[_name][_k]),
            f"state[{_name}][{_k!r}] should have the new shape {tuple(_p.shape)} and hold the old "
            "values bit for bit where the old weights are.",
        )
        check(
            _st[_k].count_nonzero() == _old_state[_name][_k].count_nonzero(),
            f"state[{_name}][{_k!r}] should be zero at the new units: they have no history yet.",
        )
    check(
        "step" in _st and float(_st["step"]) == float(_old_state[_name]["step"]),
        f"state[{_name}]['step'] should keep the old step count ({float(_old_state[_name]['step']):.0f}); "
        "resetting it changes Adam's bias correction.",
    )
_before = {_n: _p.detach().clone() for _n, _p in _model.named_parameters()}
train(_model, _opt, _x, _y, 1)
check(
    all(not torch.equal(_p, _before[_n]) for _n, _p in _model.named_parameters())
    and all(float(_opt.state[_p]["step"]) == 4 for _p in _model.parameters()),
    "After one more Adam step every parameter of the grown model should have moved, and each "
    "state['step'] should be 4: the optimizer must update the new tensors, with the moved state.",
)
torch.manual_seed(0)
_model = MLP()
_opt = torch.optim.Adam(_model.parameters(), lr=0.01)  # no step taken: no state at all yet
_error = _grow_with_stand_in(_model, _opt, 2)
check(
    _error is None,
    f"grow failed with {_error} for an optimizer that has not taken a step yet: its "
    "optimizer.state has no entry for any parameter, so there is nothing to move. Move the "
    "state of a parameter that has an entry there, and skip the others.",
)
_params = [_p for _g in _opt.param_groups for _p in _g["params"]]
check(
    _model.fc2.out_features == 8
    and {id(_p) for _p in _params} == {id(_p) for _p in _model.parameters()}
    and len(_params) == 6,
    "With an optimizer that has no state yet, grow should still widen the model and put the "
    "new fc2/fc3 tensors in param_groups.",
)
check(
    all(id(_p) in {id(_q) for _q in _model.parameters()} for _p in _opt.state),
    "With an optimizer that has no state yet, grow left entries for the old fc2/fc3 tensors in "
    "optimizer.state (reading optimizer.state[old] for a tensor without state creates an "
    "empty entry): skip a parameter that has no state.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed, _extra, _h2 in [(5, 1, 2), (6, 5, 4)]:
    _gen = torch.Generator().manual_seed(_seed)
    _x, _y = torch.randn(16, 4, generator=_gen), torch.randint(0, 3, (16,), generator=_gen)
    _model = _seeded(MLP(h2=_h2), 20 + _seed)
    _opt = torch.optim.Adam(_model.parameters(), lr=0.01)
    train(_model, _opt, _x, _y, 3)
    _grow_with_stand_in(_model, _opt, _extra)
    _call = f"grow(model, Adam, extra={_extra}) on a random MLP(h2={_h2}) after 3 Adam steps"
    # the new units' state is zeros and the old values are kept, so all of it is recorded
    observe(
        f"{_call}: param_groups order, orphaned state entries, each parameter's shape and state",
        _optimizer_record(_model, _opt),
        rtol=0,
        atol=0,
        hint="Put each new tensor where its old one was in param_groups, pop the old entries, "
        "and give each new tensor the old exp_avg and exp_avg_sq bit for bit (zeros at the new "
        "units) and a copy of the old step.",
    )
    train(_model, _opt, _x, _y, 1)
    observe(
        f"{_call}: every parameter after one more Adam step (the stand-in for widen_pair gives "
        "the new layers fixed weights)",
        {_name: _p.detach() for _name, _p in _model.named_parameters()},
        atol=1e-6,
        hint="The optimizer must update the new tensors, with the old state moved onto them.",
    )
_model = _seeded(MLP(h2=4), 30)
_opt = torch.optim.Adam(_model.parameters(), lr=0.01)
_grow_with_stand_in(_model, _opt, 3)
observe(
    "grow(model, Adam, extra=3) on a random MLP(h2=4) whose Adam took no step yet: "
    "param_groups order, orphaned state entries, each parameter's shape and state",
    _optimizer_record(_model, _opt),
    rtol=0,
    atol=0,
    hint="Move only the state a parameter has: reading optimizer.state[old] for a tensor without "
    "state creates an empty entry.",
)
### END HIDDEN TESTS

# %% [markdown]
# After growing, the old weights take the same Adam step they would have taken in the
# small model: the new units add zero to the output (the output above did not change at all
# when we ran it), so the old gradients are unchanged, and the moments and step count came
# along. Had you created a fresh `Adam`, every weight
# would restart with `step = 1`, whose bias-corrected update is about `lr` in size for
# every weight, a jolt to a network in the middle of training.
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
live = live_plot({"cross-entropy": list(curves)})
for start in range(0, STEPS, 75):  # a progress bar per 75 steps, then the plot is redrawn
    for step in tqdm(range(start, start + 75), desc="training", leave=False, disable=GRADING):
        if step == GROW_AT:
            runs["not grown"] = copy.deepcopy(runs["grow (state moved)"])  # model and Adam
            grow(narrow, runs["grow (state moved)"][1], 6)
            twin = copy.deepcopy(narrow)  # the same grown weights, and a new Adam
            runs["fresh Adam"] = (twin, torch.optim.Adam(twin.parameters(), lr=LR))
        now = {}
        for name, (model, optimizer) in runs.items():
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_fit), y_fit)
            loss.backward()
            optimizer.step()
            now[name] = loss.item()
        for name, curve in curves.items():  # before growing, the three runs are one
            curve.append(now.get(name, now["grow (state moved)"]))
        if live is not None:
            live.update({name: curve[-1] for name, curve in curves.items()})
    if live is not None:
        live.send()

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
for (name, curve), color in zip(curves.items(), ["C0", "C3", "0.6"], strict=True):
    ax.plot(curve, label=name, color=color, linewidth=1.2)
ax.axvline(GROW_AT, color="black", linestyle=":", linewidth=1)
ax.annotate("hidden layer grows 2 -> 8", (GROW_AT, 1.0), xytext=(5, 0), textcoords="offset points")
ax.set_yscale("log")
ax.set_xlabel("training step (full batch of 512)")
ax.set_ylabel("cross-entropy (log scale)")
ax.set_title("Growing a layer in the middle of training, with Adam")
ax.legend()
plt.show()

# %% [markdown]
# At the dotted line the blue curve does not jump: the grown network computes the same
# function, and Adam carries on where it was. The red curve, same weights but a fresh Adam,
# jumps up, because its first step moves every weight by about `lr`, and in this run it
# never catches up. The gray curve is what the 2-unit layer manages without growing.
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
_old_state = {
    _n: {_k: _v.clone() for _k, _v in _opt.state[_p].items()}
    for _n, _p in _model.named_parameters()
}
_keep = [0, 2, 3, 5]
_result, _error = attempt(shrink, _model, _opt, _keep)
check(_error is None, f"shrink(model, Adam, [0, 2, 3, 5]) on an MLP(h2=6) failed with {_error}.")
check(
    _model.fc2.out_features == 4 and _model.fc3.in_features == 4,
    "After shrink with 4 units kept, fc2 should have 4 outputs and fc3 4 inputs.",
)
with torch.no_grad():
    _ref.fc3.weight[:, [1, 4]] = 0.0  # the small model = the big one with those units silenced
_gap = (_model(_x) - _ref(_x)).abs().max().item()
check(
    _gap < 1e-6,
    f"The shrunk model should compute the old one minus the dropped units (gap {_gap:.1e}).",
)
_model_ids = {id(_p) for _p in _model.parameters()}
_params = [_p for _g in _opt.param_groups for _p in _g["params"]]
check(
    {id(_p) for _p in _params} == _model_ids and len(_params) == 6,
    "The optimizer's param_groups should hold exactly the model's current parameters.",
)
_orphans = [_p for _p in _opt.state if id(_p) not in _model_ids]
check(
    not _orphans,
    f"optimizer.state has {len(_orphans)} orphaned entries (state of tensors the model no "
    "longer has): pop the old entries when you move them. Orphans waste memory, and "
    "optimizer.state_dict() fails on them with a KeyError, so you could not save.",
)
_k = torch.tensor(_keep)
for _name, _take in [
    ("fc2.weight", lambda t: t[_k]),
    ("fc2.bias", lambda t: t[_k]),
    ("fc3.weight", lambda t: t[:, _k]),
    ("fc3.bias", lambda t: t),
]:
    _p = dict(_model.named_parameters())[_name]
    check(_p in _opt.state, f"The new {_name} has no optimizer state: carry its old state over.")
    for _key in ("exp_avg", "exp_avg_sq"):
        check(
            _key in _opt.state[_p]
            and torch.equal(_opt.state[_p][_key], _take(_old_state[_name][_key])),
            f"state[{_name}][{_key!r}] should be the old state, sliced like the weight.",
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
    _call = f"shrink(model, Adam, keep={_keep}) on a random MLP(h2={_h2}) after 3 Adam steps"
    observe(
        f"{_call}: param_groups order, orphaned state entries, each parameter's shape and state",
        _optimizer_record(_model, _opt),
        rtol=0,
        atol=0,
        hint="Slice each state tensor the way its weight is sliced, put the new tensors in "
        "param_groups, and pop every old entry.",
    )
    observe(
        f"{_call}: the new parameters",
        {_name: _p.detach() for _name, _p in _model.named_parameters()},
        rtol=0,
        atol=0,
        hint="fc2 keeps the rows listed in keep (weight and bias), fc3 those columns of its "
        "weight and all of its bias.",
    )
    observe(f"{_call}: output on its 16 training inputs", _model(_x).detach(), atol=1e-6)
### END HIDDEN TESTS

# %% [markdown]
# ### How often may the structure change?
#
# A forum answer on dynamic graphs warns that changing the hidden layers changes the
# optimisation objective, "so if you change it too often, it may be complex for your
# optimization to converge properly as the point where it tries to converge to moves every
# time you change the structure". Let's measure it on `DynamicNet` (section 1), whose
# structure is its depth. Each run trains a `DynamicNet` with Adam on the data of the growing
# experiment above, and draws a new depth (0 to 3) every `k` steps: every step (`k = 1`, what
# `DynamicNet` does), every 10, 50 or 200 steps. Two measures:
#
# * the training loss, at the depth in use: what the optimizer sees;
# * every 10 steps, the loss averaged over the four depths: how good the model is as a
#   model that may run at any depth.
#
# Five seeds per `k` (the seed fixes the first weights and the depths drawn). This took
# about 35 seconds on the shared 2-core machine where we measured it (one seed and 100 steps
# while the notebook is graded).


# %%
def depth_every(k, seed, steps):
    """Train a DynamicNet with Adam, a new depth every k steps. Returns the training loss of
    each step, and every 10 steps the loss averaged over the four depths."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    net = DynamicNet(d_in=4, hidden=16, d_out=3)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    train_loss, any_depth = [], []
    for step in range(steps):
        if step % k == 0:
            depth = rng.randint(0, 3)
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x_fit, depth), y_fit)
        loss.backward()
        optimizer.step()
        train_loss.append(loss.item())
        if step % 10 == 9:
            with torch.no_grad():
                losses = [F.cross_entropy(net(x_fit, d), y_fit).item() for d in range(4)]
            any_depth.append(sum(losses) / 4)
    return train_loss, any_depth


EVERY = (1, 10, 50, 200)
SEEDS, STRUCTURE_STEPS = ((0,), 100) if GRADING else (range(5), 600)
runs = {
    k: [depth_every(k, seed, STRUCTURE_STEPS) for seed in tqdm(SEEDS, desc=f"k = {k}", leave=False)]
    for k in EVERY
}
print(f"loss averaged over the four depths after {STRUCTURE_STEPS} steps, per seed:")
for k, results in runs.items():
    final = torch.tensor([any_depth[-1] for _, any_depth in results])
    print(
        f"  new depth every {k:>3} step(s): "
        + " ".join(f"{v:6.3f}" for v in final)
        + f" | mean {final.mean():.3f}, min {final.min():.3f}, max {final.max():.3f}"
    )
if GRADING:
    print("(grading mode: one seed, 100 steps: these numbers mean nothing)")
else:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5))
    for index, k in enumerate(EVERY):
        color = f"C{index}"
        left.plot(runs[k][0][0], color=color, linewidth=0.8, label=f"every {k}")
        curves = torch.tensor([any_depth for _, any_depth in runs[k]])
        at = range(10, 10 * curves.shape[1] + 1, 10)
        right.plot(at, curves.mean(0), color=color, label=f"every {k}")
        right.fill_between(at, curves.min(0).values, curves.max(0).values, color=color, alpha=0.2)
    left.set_title("training loss at the depth in use (seed 0)")
    right.set_title(
        f"loss averaged over the 4 depths\n(mean of {len(SEEDS)} seeds; band: min to max)"
    )
    for ax in (left, right):
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.legend(title="new depth")
    plt.show()

# %% [markdown]
# When we ran it, the more often the depth changed, the better the model did at every depth.
# After 600 steps the loss averaged over the four depths was 0.038 (0.028 to 0.055 over the
# five seeds) with a new depth every step, 0.076 every 10 steps, 0.113 every 50 steps, and
# 3.80 (0.83 to 10.5) every 200 steps. The left plot shows why: during a long stretch at one
# depth the training loss at that depth falls far lower (the red curve reaches about
# 0.0002), the shared weights specialise to that depth, and the next change of depth sends
# the loss up by orders of magnitude (above 10 at some changes, with a new depth every 50
# steps).
#
# So the forum's picture of a target that moves with the structure is right, but here it is
# the *rare* changes that move it: a structure redrawn at every step gives the optimizer one
# fixed target, the average over the structures, and Adam converges to it. This measures one
# model, one optimizer and one kind of change (the depth, with the weights and Adam's state
# kept). A change that resets weights or the optimizer's state, like the fresh `Adam` of the
# growing experiment above, is another matter, which this experiment does not measure.

# %% [markdown]
# ## 5. Saving and restoring a model that changed shape
#
# A `state_dict` is an ordered dict from parameter **names** to tensors. It does not store
# the code of `forward`, nor the dice rolls: only the modules' tensors. After growing, the
# names are the same and the shapes are new:

# %%
torch.manual_seed(0)
model = MLP()
grow(model, torch.optim.Adam(model.parameters()), 4)
saved = model.state_dict()
for name, t in saved.items():
    print(f"{name:12} {tuple(t.shape)}")

# %% [markdown]
# Loading it into a model built with the original sizes fails, and the message says which
# tensors and which shapes:

# %%
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
    def __init__(self):
        super().__init__()
        self.extra_linear = nn.Linear(8, 8)


result = DynamicNetPlus().load_state_dict(DynamicNet().state_dict(), strict=False)
print("missing:   ", result.missing_keys)
print("unexpected:", result.unexpected_keys)
result = DynamicNet().load_state_dict(DynamicNetPlus().state_dict(), strict=False)
print("missing:   ", result.missing_keys)
print("unexpected:", result.unexpected_keys)

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
_model = MLP(h2=10)  # the shape of a grown MLP
_buffer = io.BytesIO()
torch.save(_model.state_dict(), _buffer)  # a real round trip through bytes
_buffer.seek(0)
_sd = torch.load(_buffer)
_back, _error = attempt(restore_mlp, _sd)
check(
    _error is None,
    f"restore_mlp failed on the state dict of an MLP(h2=10) with {_error}: read the sizes "
    "from the shapes.",
)
check(isinstance(_back, MLP), "restore_mlp should return an MLP.")
_x = torch.randn(7, 4)
check(
    torch.equal(_back(_x), _model(_x)),
    "The restored model computes something else than the saved one.",
)
with torch.no_grad():
    for _t in _sd.values():
        _t.add_(1.0)
check(
    torch.equal(_back(_x), _model(_x)),
    "Changing the state dict's tensors after restore_mlp returned changed the restored model: "
    "it must hold its own copies (load_state_dict copies them; assign=True would not).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed, _sizes in [(9, dict(d_in=7, h1=2, h2=9, d_out=5)), (10, dict(h1=5, h2=3))]:
    _model = _seeded(MLP(**_sizes), _seed)
    _buffer = io.BytesIO()
    torch.save(_model.state_dict(), _buffer)  # a real round trip through bytes
    _buffer.seek(0)
    _sd = torch.load(_buffer)
    _back = restore_mlp(_sd)
    _x = torch.randn(7, _model.fc1.in_features, generator=torch.Generator().manual_seed(_seed))
    _call = "restore_mlp(state_dict) on the saved state of a random MLP({})".format(
        ", ".join(f"{_k}={_v}" for _k, _v in _sizes.items())
    )
    observe(
        f"{_call}: the restored model",
        {
            "type": type(_back).__name__,
            "layer sizes (in, out)": [
                [_l.in_features, _l.out_features] for _l in (_back.fc1, _back.fc2, _back.fc3)
            ],
            "parameters": {_n: _p.detach() for _n, _p in _back.named_parameters()},
        },
        rtol=0,
        atol=0,
        hint="Read the sizes from the shapes (fc1.weight is (h1, d_in), fc2.weight (h2, h1), "
        "fc3.weight (d_out, h2)), build that MLP and load_state_dict(state_dict, strict=True).",
    )
    observe(f"{_call}: output on 7 random inputs", _back(_x).detach(), atol=1e-6)
    with torch.no_grad():
        for _t in _sd.values():
            _t.add_(1.0)
    observe(
        f"{_call}: output on the same inputs after the state dict's tensors were changed",
        _back(_x).detach(),
        atol=1e-6,
        hint="The restored model must hold its own copies of the tensors (load_state_dict "
        "copies them), not the state dict's tensors.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ### The optimizer's state_dict knows no names
#
# `optimizer.state_dict()` stores the state under the **position** of each parameter in
# `param_groups` (0, 1, 2, ...), not under its name. Loading it matches positions only. So
# if the model you load into lists its parameters in another order, for instance after a
# harmless-looking refactor that defines `b` before `a`, the state lands on the wrong
# tensors, and when the shapes agree nobody complains:


# %%
class TwoBranchV2(nn.Module):  # the same model, layers declared in the other order
    def __init__(self):
        super().__init__()
        self.b = nn.Linear(3, 2)
        self.a = nn.Linear(3, 2)

    forward = TwoBranch.forward


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
for name, p in new.named_parameters():
    print(f"{name:9} has Adam state: {p in new_opt.state}")

# %% [markdown]
# Branch `b` received the moments that `a` earned, and `a` lost its own. Had the shapes
# differed, you would at least get an error at the next `step()`. The fix is to save the
# optimizer state **by parameter name**, the way the model's state dict does.
#
# ### Exercise 8 (2 points): optimizer state by name
#
# Write two functions:
#
# * `optimizer_state_by_name(model, optimizer)` returns a dict from parameter name to a
#   copy of that parameter's state dict (clone the tensors), for every parameter that has
#   state;
# * `load_optimizer_state_by_name(model, optimizer, named_state)` puts each saved state
#   on the parameter of the same name (cloned tensors), and raises a `ValueError` that
#   names the parameter if a saved state tensor's shape differs from the parameter's (the
#   scalar `step` has shape `()`: skip such 0-d tensors in the shape check).


# %% nbgrader={"solution": true, "grade_id": "state_by_name"}
def optimizer_state_by_name(model, optimizer):
    ### BEGIN SOLUTION
    return {
        name: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in optimizer.state[p].items()}
        for name, p in model.named_parameters()
        if p in optimizer.state
    }
    ### END SOLUTION


def load_optimizer_state_by_name(model, optimizer, named_state):
    ### BEGIN SOLUTION
    params = dict(model.named_parameters())
    for name, state in named_state.items():
        p = params[name]
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.shape != p.shape:
                raise ValueError(
                    f"state {key!r} of {name} has shape {tuple(value.shape)}, "
                    f"the parameter has {tuple(p.shape)}"
                )
        optimizer.state[p] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in state.items()}
    ### END SOLUTION


# %%
saved_state = optimizer_state_by_name(old, old_opt)
new_opt = torch.optim.Adam(new.parameters(), lr=0.1)
load_optimizer_state_by_name(new, new_opt, saved_state)
for name, p in new.named_parameters():
    print(f"{name:9} has Adam state: {p in new_opt.state}")


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_state_by_name"}
_named, _error = attempt(optimizer_state_by_name, old, old_opt)
check(
    _error is None,
    f"optimizer_state_by_name(model, optimizer) failed on the TwoBranch above with {_error}.",
)
check(isinstance(_named, dict), "optimizer_state_by_name should return a dict.")
_with_state = {_n for _n, _p in old.named_parameters() if _p in old_opt.state}
check(
    set(_named) == _with_state,
    f"Expected keys {sorted(_with_state)} (the names of the parameters with state), got {sorted(_named)}.",
)
_src_params = dict(old.named_parameters())
check(
    all(
        _t is not old_opt.state[_src_params[_n]][_k]
        for _n, _state in _named.items()
        for _k, _t in _state.items()
        if torch.is_tensor(_t)
    ),
    "optimizer_state_by_name returned the optimizer's own state tensors: clone them, or the "
    "saved copy changes with every later step (Adam updates its state in place).",
)
_dst = TwoBranchV2()
_dst_opt = torch.optim.Adam(_dst.parameters(), lr=0.1)
_result, _error = attempt(load_optimizer_state_by_name, _dst, _dst_opt, _named)
check(
    _error is None,
    f"load_optimizer_state_by_name failed on a TwoBranchV2 with the saved state, with {_error}.",
)
for _name, _p in _dst.named_parameters():
    _had = _src_params[_name] in old_opt.state
    check(
        (_p in _dst_opt.state) == _had,
        f"{_name} {'should' if _had else 'should not'} have optimizer state after loading: "
        "match by name, not by position.",
    )
    if _had:
        for _k, _v in old_opt.state[_src_params[_name]].items():
            check(
                _k in _dst_opt.state[_p] and torch.equal(_dst_opt.state[_p][_k], _v),
                f"state[{_name}][{_k!r}] differs from the saved one.",
            )
            check(
                _dst_opt.state[_p][_k] is not _named[_name][_k],
                "Clone the state tensors when you load them: sharing them with the saved copy "
                "ties the two together.",
            )
_bad = {
    "a.weight": {
        "step": torch.tensor(1.0),
        "exp_avg": torch.zeros(5, 5),
        "exp_avg_sq": torch.zeros(5, 5),
    }
}
_tb = TwoBranch()
try:
    load_optimizer_state_by_name(_tb, torch.optim.Adam(_tb.parameters()), _bad)
    _raised = None
except NotImplementedError:
    raise
except Exception as _e:
    _raised = _e
check(
    isinstance(_raised, ValueError),
    "Loading state of shape (5, 5) onto a.weight (shape (2, 3)) should raise a ValueError; "
    f"got {type(_raised).__name__ if _raised is not None else 'no error'}.",
)
check(
    "a.weight" in str(_raised),
    "The ValueError's message should name the parameter, a.weight, so that the reader knows "
    "which one does not fit.",
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


def _named_record(_named):
    """The saved state, canonical: names and state keys sorted."""
    return {n: dict(sorted(_named[n].items())) for n in sorted(_named)}


def _loaded_record(_model, _opt):
    """For each parameter (the model's order): its state after loading, keys sorted, or None."""
    return {
        n: dict(sorted(_opt.state[p].items())) if p in _opt.state else None
        for n, p in _model.named_parameters()
    }


_m = _seeded(MLP(), 4)
_o = torch.optim.Adam(_m.parameters(), lr=0.01)
_gen = torch.Generator().manual_seed(40)
_xh, _yh = torch.randn(32, 4, generator=_gen), torch.randint(0, 3, (32,), generator=_gen)
train(_m, _o, _xh, _yh, 2)
_named = optimizer_state_by_name(_m, _o)
train(_m, _o, _xh, _yh, 1)  # Adam changes its state tensors in place: a copy must not follow
observe(
    "optimizer_state_by_name(model, Adam) on a random MLP after 2 Adam steps, read after the "
    "optimizer took a third step",
    _named_record(_named),
    rtol=0,
    atol=0,
    hint="Return a copy of each parameter's state with cloned tensors: the optimizer goes on "
    "changing its own tensors in place.",
)
_dst = MLP()
_dst_opt = torch.optim.Adam(_dst.parameters(), lr=0.1)
load_optimizer_state_by_name(_dst, _dst_opt, _named)
with torch.no_grad():  # the saved copy changes afterwards: the loaded state must not follow
    for _state in _named.values():
        for _t in _state.values():
            if torch.is_tensor(_t):
                _t.add_(1.0)
observe(
    "load_optimizer_state_by_name(model, Adam, saved) into a new MLP, read after the saved "
    "tensors were changed",
    _loaded_record(_dst, _dst_opt),
    rtol=0,
    atol=0,
    hint="Put each saved state on the parameter of the same name, as cloned tensors.",
)
# a model that declares its layers in the other order: only names can match the state
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
observe(
    "a random TwoBranch's Adam state (only branch a trained), saved by name and loaded into a "
    "TwoBranchV2 (layers declared in the other order)",
    _loaded_record(_v2, _v2_opt),
    rtol=0,
    atol=0,
    hint="Match by name, not by position: a.weight's state belongs on the new model's a.weight, "
    "and b, which has no state, gets none.",
)
for _label, _sizes in [("d_in=6", dict(d_in=6)), ("d_out=5", dict(d_out=5))]:
    _wrong = MLP(**_sizes)  # one layer's shapes differ from the saved MLP's
    try:
        load_optimizer_state_by_name(
            _wrong, torch.optim.Adam(_wrong.parameters()), optimizer_state_by_name(_m, _o)
        )
        _raised, _layers = False, []
    except ValueError as _error:
        _raised, _layers = True, [_l for _l in ("fc1", "fc2", "fc3") if _l in str(_error)]
    observe(
        f"load_optimizer_state_by_name into an MLP({_label}) with a default MLP's saved state: "
        "whether it raised ValueError, and the layers its message names",
        {"raised ValueError": _raised, "layers named in the message": _layers},
        hint="Compare each saved state tensor's shape (0-d ones excepted) with its parameter's, "
        "and raise a ValueError whose message names that parameter.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * A dynamic graph and its unrolled static twin give the same gradients; a shared layer
#   used twice gets the sum of both contributions, and a layer not used gets `None`.
# * An optimizer step is an update rule applied to `.grad`; yours matched `torch.optim.SGD`
#   to rounding, and bit for bit only if it used the same operations: two correct programs
#   may round differently, so compare them with a tolerance.
# * A `None` gradient means "skip me" to every `torch.optim` optimizer; a zero gradient
#   still lets momentum and Adam move a parameter (Adam by 67% of `lr` on the first step
#   after the last real gradient, whatever its size). `zero_grad(set_to_none=...)` chooses.
# * Net2WiderNet copies a unit and halves its outgoing weights; zero outgoing weights for new
#   random units is another function-preserving trick. Either way the optimizer state must
#   follow the new tensors.
# * Drawing a new depth at every step did not hurt `DynamicNet`'s training; keeping one depth
#   for long stretches did (see the measurement in section 4).
# * The optimizer keys its state by tensor, so replaced tensors need their state moved, old
#   entries deleted, and nothing left orphaned.
# * A `state_dict` maps names to tensors and knows nothing of `forward`; loading checks
#   names and shapes (`strict=False` forgives names only). An optimizer's `state_dict`
#   matches by position: save it by name when the model's layout may change.
