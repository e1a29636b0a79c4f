# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 11: Autograd in practice: NaN gradients, mixed precision, hygiene, custom operators
#
# After ten labs you know how the graph is built and how `backward()` walks it. This lab is about
# what goes wrong when it meets real training code: bugs that raise no error, only a NaN, a zero or
# a climbing memory curve. Each section shows one, measures it, and ends with a habit:
#
# 1. **NaN through `torch.where`**: a forward value that is fine and a gradient that is not;
# 2. **non-smooth points**: what autograd answers at a kink (`relu`, `abs`, `sqrt`, a norm, `max`);
# 3. **mixed precision**: `torch.autocast`, `float16` gradients that underflow, `GradScaler`;
# 4. **everyday hygiene**: `total += loss`, freezing layers, clipping, a step inside `backward()`;
# 5. **a custom operator the compiler can see**: `torch.library.custom_op`;
# 6. **the compiler's backward**: what AOTAutograd makes of your backward pass.
#
# %course-include how_this_lab_works.md

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import copy
import logging
import math

import torch.nn.functional as F
from torch import nn

torch.set_num_threads(1)
# The compiler logs only at ERROR here (lab 8 says what it logs); this lab counts graphs itself.
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
logging.getLogger("torch.fx").setLevel(logging.ERROR)


def compiled_graphs(fn, *args, fullgraph=False):
    """(fn(*args) compiled, the number of graphs it made): n graphs, n - 1 breaks or more."""
    count = []

    def counting(graph_module, example_inputs):
        count.append(graph_module)
        return graph_module.forward

    torch.compiler.reset()
    out = torch.compile(fn, backend=counting, fullgraph=fullgraph)(*args)
    return out, len(count)


print("torch", torch.__version__, "| grading run" if GRADING else "")

# %% [markdown]
# ## 1. NaN through `torch.where`
#
# You want $\sqrt{x}$ where $x > 0$ and $0$ elsewhere, so you write what reads right:


# %%
x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
y = torch.where(x > 0, x.sqrt(), 0.0)
y.sum().backward()
print("forward: ", y.detach())
print("gradient:", x.grad)

# %% [markdown]
# The forward value is exactly what you asked for, and the gradient is NaN at $x \le 0$. One NaN in
# one gradient, and after the optimizer step every weight it touches is NaN.
#
# Why: `torch.where` does not run one branch per element. Both branch tensors, `x.sqrt()` and `0.0`,
# are computed in full, for every element, and both are in the graph. In the forward pass `where`
# picks, per element. In the backward pass, `where` sends the incoming gradient to the chosen branch
# and **a zero** to the other. So at $x = -1$ the node of `sqrt` receives a gradient of 0 and
# multiplies it by its local derivative $1 / (2\sqrt{x})$, which is NaN at $-1$ (and $\infty$ at
# $0$). And $0 \cdot \mathrm{NaN} = \mathrm{NaN}$, $0 \cdot \infty = \mathrm{NaN}$: the zero does
# not protect you. Look at the pieces:

# %%
x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
root = x.sqrt()
print("sqrt(x), computed for every element:     ", root.detach())
(d_root,) = torch.autograd.grad(root.sum(), x)
print("its local derivative 1 / (2 sqrt(x)):     ", d_root)
y = torch.where(x > 0, root, 0.0)
(g_root,) = torch.autograd.grad(y.sum(), root, retain_graph=True)
print("what where sends back to the sqrt branch: ", g_root)
print("product, as sqrt's backward computes it:  ", g_root * d_root)

# %% [markdown]
# **The double-`where` fix.** Make the unsafe branch safe *before* the operation: replace the inputs
# it must not see by a harmless value, compute, then select as before. The inner `where` also blocks
# the way back: its backward sends a zero to `x` at the masked elements, whatever the NaN behind it.
# (A `where` passes gradients by selecting, not by multiplying, so the NaN of the branch it did not
# choose never reaches `x`.)

# %%
x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
safe_x = torch.where(x > 0, x, 1.0)  # any value where sqrt and its derivative are finite
y = torch.where(x > 0, safe_x.sqrt(), 0.0)
y.sum().backward()
print("forward: ", y.detach())
print("gradient:", x.grad)

# %% [markdown]
# What does not help: `torch.nan_to_num` on the output (the NaN is made in the backward pass, after
# the output), multiplying by a mask instead of `where` (`mask * x.sqrt()`: NaN in the forward pass
# too, since `0 * NaN` is NaN), and `x.abs()` inside the branch, which only moves the NaN to
# $x = 0$. Try them:

# %%
tries = {
    "where(x > 0, sqrt(x), 0).nan_to_num()": lambda t: torch.where(t > 0, t.sqrt(), 0).nan_to_num(),
    "(x > 0) * sqrt(x)": lambda t: (t > 0) * t.sqrt(),
    "where(x > 0, sqrt(|x|), 0)": lambda t: torch.where(t > 0, t.abs().sqrt(), 0.0),
    "sqrt(x.clamp(min=0))": lambda t: t.clamp(min=0).sqrt(),
}
for name, fn in tries.items():
    x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
    y = fn(x)
    y.sum().backward()
    print(f"{name:40} forward {y.detach().tolist()}  gradient {x.grad.tolist()}")

# %% [markdown]
# The last one works here, in torch 2.14.1: `clamp(min=0)` sends back a zero gradient at and below
# its bound, by selecting like `where`, so the $\infty$ of `sqrt` at 0 stops there (on torch 2.10
# `clamp` still passes the gradient at its bound, and the gradient at 0 is $\infty$: the printout
# above says which your torch does). It works for `sqrt` because $\sqrt{0}$ is finite. For
# $x \log x$, the next exercise, a clamp alone gives $0 \cdot \log 0 = 0 \cdot (-\infty)$, NaN, in
# the forward value at 0.
#
# ### Exercise 1 (2 points): an entropy term without NaN
#
# Every entropy $-\sum_i p_i \log p_i$ meets a probability $p_i = 0$, where $p \log p$ should be its
# limit, 0. Write `xlogx(x)`, elementwise for a tensor of any shape and floating dtype:
#
# * the value is $x \log x$ where $x > 0$, and $0$ where $x \le 0$;
# * the gradient is $\log x + 1$ where $x > 0$, and $0$ where $x \le 0$, never NaN;
# * do not change the function near 0: no `clamp(min=1e-12)` or `+ eps` (the hidden checks use
#   positive $x$ as small as $10^{-30}$, whose gradient $\log x + 1$ is far from 0).
#
# Use the double `where`.


# %% nbgrader={"solution": true, "grade_id": "xlogx"}
def xlogx(x):
    ### BEGIN SOLUTION
    positive = x > 0
    safe = torch.where(positive, x, torch.ones_like(x))
    return torch.where(positive, safe * safe.log(), torch.zeros_like(x))
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_xlogx"}
check(defined("xlogx"), "xlogx is not defined: run the exercise cell above.")
_x = torch.tensor([-2.0, 0.0, 1e-30, 0.5, 1.0, 3.0], dtype=torch.float64, requires_grad=True)
_y, _error = attempt(xlogx, _x)
check(
    isinstance(_y, torch.Tensor) and _y.shape == _x.shape and _y.dtype == _x.dtype,
    f"xlogx(x) should return a tensor shaped and typed like x (the error it raised, if any: "
    f"{_error}); call it in a cell of your own to see what it does.",
)
_d = _x.detach()
_want = torch.where(_d > 0, _d * _d.log(), 0.0)  # x log x, its NaN at x <= 0 not selected
check(
    not _y.isnan().any(),
    "xlogx(x) has NaN in its forward value: at x = 0, x * log(x) is 0 * (-inf) = NaN, and at "
    "x < 0 the log is NaN. Multiplying by a mask keeps the NaN; select with torch.where.",
)
check(
    torch.allclose(_y.detach(), _want, atol=1e-12),
    "xlogx(x) should be x log(x) where x > 0 and 0 where x <= 0.",
)
_g, _error = attempt(torch.autograd.grad, _y.sum(), _x)
check(
    _error is None or "does not require grad" not in _error,
    "the gradient of xlogx(x).sum() could not be computed: its output has no graph, so no "
    "gradient reaches x (.detach(), .data, torch.tensor(...) cut it). Compute from x itself.",
)
check(
    _error is None,
    f"the gradient of xlogx(x).sum() could not be computed (the error: {_error}); call it in a "
    "cell of your own to see the whole message.",
)
_g = _g[0]
check(
    not _g.isnan().any(),
    "the gradient of xlogx(x) has NaN where x <= 0: the branch x * log(x) still sees those x. "
    "Replace them by a safe value with an inner torch.where before the log, then select.",
)
check(
    torch.all(_g[:2] == 0),
    "the gradient of xlogx(x) should be 0 where x <= 0, where the function is the constant 0.",
)
_at = _x.detach()[3:]  # 0.5, 1 and 3: away from 0, where no clamp or eps acts
check(
    not torch.allclose(_g[3:], _at.log()),
    "the gradient of xlogx(x) is log(x) where x > 0, without the + 1 of the product rule "
    "d(x log x)/dx = log x + x * (1/x): the log(x) factor passes no gradient to x (detached?).",
)
check(
    not torch.allclose(_g[3:], torch.ones_like(_at)),
    "the gradient of xlogx(x) is 1 where x > 0, the x * (1/x) of the product rule without its "
    "log x: the factor x in front of log(x) passes no gradient to x (detached, or a copy?).",
)
check(
    torch.allclose(_g[3:], _at.log() + 1),
    f"the gradient of xlogx(x) should be log(x) + 1 where x > 0 (at x = 0.5, 1 and 3 it is "
    f"{_g[3:].tolist()}, and should be {(_at.log() + 1).tolist()}).",
)
check(
    abs(_g[2].item() - (math.log(1e-30) + 1)) < 1e-6,
    f"the gradient of xlogx(x) is right at x = 0.5, 1, 3 but not at 1e-30 ({_g[2].item():.4g}, not "
    "-68.08): the function changes near 0, as a clamp or an eps does; keep x itself where x > 0.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(111)
for _shape, _dtype in (((7,), torch.float64), ((3, 4), torch.float64), ((2, 5), torch.float32)):
    _x = torch.randn(_shape, generator=_gen, dtype=torch.float64)
    _x = torch.where(torch.rand(_shape, generator=_gen, dtype=torch.float64) < 0.2, 0.0, _x)
    _x.view(-1)[0] = 1e-30
    _x = _x.to(_dtype).requires_grad_()
    _w = torch.randn(_shape, generator=_gen, dtype=_dtype)
    _y = xlogx(_x)
    _g = None
    if isinstance(_y, torch.Tensor) and _y.shape == _x.shape and _y.requires_grad:
        (_g,) = torch.autograd.grad((_w * _y).sum(), _x, allow_unused=True)
    observe(
        f"xlogx(x) on a random {_dtype} tensor of shape {_shape} with zeros, negatives and "
        "1e-30, and the gradient of sum(w * xlogx(x))",
        {"value": _y, "gradient": _g},
        rtol=1e-5,
        atol=1e-6,
        hint="x log x where x > 0 and 0 elsewhere, with an inner where that replaces x <= 0 by "
        "a safe value before the log: no NaN, no eps.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Non-smooth points: what autograd answers at a kink
#
# $\mathrm{relu}(x) = \max(x, 0)$ has no derivative at $x = 0$, yet `backward()` returns a number
# there: every non-smooth function in PyTorch has a rule for its kinks, chosen by its authors.
# Before you run the next cell, **predict** each gradient at the point given, in `my_guesses` (a
# number, a list of numbers, `"nan"` or `"inf"`); the cell after it measures and compares. Nothing
# here is graded: be surprised now rather than in a training run.

# %%
my_guesses = {
    "relu at 0": None,
    "abs at 0": None,
    "sqrt at 0": None,
    "norm of the zero vector [0, 0, 0]": None,
    "sqrt(sum(x ** 2)) at [0, 0, 0]": None,
    "max of [1, 3, 3, 2]": None,
    "max(dim=0) of [1, 3, 3, 2]": None,
}

# %%
cases = {
    "relu at 0": (torch.relu, [0.0]),
    "abs at 0": (torch.abs, [0.0]),
    "sqrt at 0": (torch.sqrt, [0.0]),
    "norm of the zero vector [0, 0, 0]": (torch.linalg.vector_norm, [0.0, 0.0, 0.0]),
    "sqrt(sum(x ** 2)) at [0, 0, 0]": (lambda t: (t**2).sum().sqrt(), [0.0, 0.0, 0.0]),
    "max of [1, 3, 3, 2]": (torch.max, [1.0, 3.0, 3.0, 2.0]),
    "max(dim=0) of [1, 3, 3, 2]": (lambda t: t.max(dim=0).values, [1.0, 3.0, 3.0, 2.0]),
}
for name, (fn, point) in cases.items():
    t = torch.tensor(point, requires_grad=True)
    fn(t).sum().backward()
    print(f"{name:36} autograd: {t.grad.tolist()}   your guess: {my_guesses.get(name)}")

# %% [markdown]
# How to read them:
#
# * `relu` and `abs` answer 0 at 0, a valid *subgradient* (any slope between the two one-sided ones
#   is one). For `relu`, 0 also means a unit that is exactly off stays off.
# * `sqrt` answers $\infty$ at 0: that is its derivative's limit, not a choice. Multiplied by a zero
#   somewhere downstream, it becomes the NaN of section 1.
# * `torch.linalg.vector_norm` of a zero vector answers 0, a subgradient, by a rule written for that
#   case; the same norm written by hand, `sqrt(sum(x ** 2))`, gives NaN: its `sqrt` gets $\infty$,
#   and the square's derivative $2x = 0$ makes it $0 \cdot \infty$. Use `vector_norm`.
# * `max` with ties: the full reduction `t.max()` shares the gradient equally among the tied maxima
#   (0.5 each here), while `t.max(dim=0)` returns one index and sends the whole gradient there. Same
#   forward value, different gradients.
#
# ## 3. Mixed precision: `autocast` and `GradScaler`
#
# Training in 16-bit floats halves the memory of activations and runs faster where the hardware has
# 16-bit units. `torch.autocast` does it per operation: inside the `with` block, operations that
# gain from lower precision (matrix products, convolutions) run in it, and some that need the range
# or accuracy of `float32` run in `float32`: on the CPU autocast of this lab, the losses
# (`mse_loss`, `cross_entropy`, `nll_loss`), while reductions such as `sum`, `mean` and `softmax`
# stay in 16 bits. Your parameters stay `float32`. On a CPU the lower precision is `bfloat16` by
# default; on an NVIDIA GPU it is usually `float16`:

# %%
layer = nn.Linear(4, 3)
inputs, targets = torch.randn(8, 4), torch.randn(8, 3)
with torch.autocast("cpu", dtype=torch.bfloat16):
    hidden = layer(inputs)
    outputs = {
        "layer(inputs)  (a matrix product)": hidden,
        "hidden.relu()": hidden.relu(),
        "hidden.sum()  (a reduction)": hidden.sum(),
        "hidden.softmax(dim=1)": hidden.softmax(dim=1),
        "F.mse_loss(hidden, targets)": F.mse_loss(hidden, targets),
        "F.cross_entropy(hidden, labels)": F.cross_entropy(hidden, torch.tensor([0, 1] * 4)),
    }
for name, value in outputs.items():
    print(f"{name:36} {value.dtype}")
outputs["F.mse_loss(hidden, targets)"].backward()
print("after the block: layer.weight", layer.weight.dtype, "| its .grad", layer.weight.grad.dtype)

# %% [markdown]
# `bfloat16` has the exponent range of `float32` and fewer digits: the same smallest normal number,
# $2^{-126}$, so it underflows sooner than `float32` only below that (its subnormals stop at
# $2^{-133}$, those of `float32` at $2^{-149}$). `float16` has more digits but a tiny range: its
# smallest positive number is $2^{-24} \approx 6 \cdot 10^{-8}$, and anything below half of it
# rounds to 0. Gradients are often that small late in training, when the residuals are small. The
# cell measures it on a small network whose residuals are about a thousandth, with `float16`
# autocast (which this CPU runs too; on a GPU the same code runs with `"cuda"`): for each way of
# running the backward pass, the fraction of gradient entries that are 0 although in `float32` they
# are not.


# %%
def small_net():
    torch.manual_seed(0)
    layers = []
    for width_in in (32, 64, 64, 64):
        layers += [nn.Linear(width_in, 64), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(64, 1))


gen = torch.Generator().manual_seed(1)
data = torch.randn(256, 32, generator=gen)
with torch.no_grad():
    labels = small_net()(data) + 1e-3 * torch.randn(256, 1, generator=gen)


def gradients(dtype=None, scale=1.0):
    """All parameter gradients of small_net's MSE loss, in one vector, divided by `scale`."""
    net = small_net()
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = F.mse_loss(net(data), labels)
    (loss * scale).backward()
    return torch.cat([p.grad.flatten() for p in net.parameters()]) / scale


exact = gradients()
print(f"{exact.numel()} gradient entries; in float32 {int((exact == 0).sum())} are 0")
for label, dtype, scale in (
    ("float16, no scaling", torch.float16, 1.0),
    ("float16, loss scaled by 2**8", torch.float16, 2.0**8),
    ("float16, loss scaled by 2**16", torch.float16, 2.0**16),
    ("bfloat16, no scaling", torch.bfloat16, 1.0),
):
    got = gradients(dtype, scale)
    vanished = ((got == 0) & (exact != 0)).float().mean().item()
    print(f"{label:32} vanished: {100 * vanished:6.2f}%   finite: {bool(got.isfinite().all())}")

# %% [markdown]
# Multiplying the loss by a scale $s$ multiplies every gradient in the backward pass by $s$ (the
# chain rule is linear), which lifts the small ones above `float16`'s floor; dividing the `float32`
# parameter gradients by $s$ afterwards gives the true values back. Too large a scale overflows to
# `inf` instead. `torch.amp.GradScaler` picks the scale for you:
#
# * `scaler.scale(loss)` multiplies the loss by the current scale (65536 to start with);
# * `scaler.unscale_(optimizer)` divides the gradients of the optimizer's parameters by it, in
#   place, and records whether any is `inf` or NaN;
# * `scaler.step(optimizer)` calls `optimizer.step()` only if none was, and skips the step otherwise
#   (it unscales first if you have not);
# * `scaler.update()` halves the scale after a skipped step, and doubles it after 2000 steps in a
#   row without one.
#
# Anything that reads the gradients between `backward()` and the step must see them unscaled:
# `clip_grad_norm_` clips the norm of the gradients *as they are*, so call `unscale_` first.
#
# ### Exercise 2 (2 points): a mixed-precision training step
#
# Write `amp_step(model, optimizer, scaler, x, y, max_norm)`, one training step that returns the
# pair `(loss, norm)` as Python floats:
#
# 1. clear the gradients (`optimizer.zero_grad()`);
# 2. compute the loss `F.mse_loss(model(x), y)` inside `torch.autocast("cpu", dtype=torch.float16)`;
# 3. backward on the scaled loss, unscale, clip the gradients' total norm to `max_norm` with
#    `torch.nn.utils.clip_grad_norm_` (it returns the norm before clipping: that is `norm`);
# 4. step through the scaler and update it.


# %% nbgrader={"solution": true, "grade_id": "amp_step"}
def amp_step(model, optimizer, scaler, x, y, max_norm):
    ### BEGIN SOLUTION
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item(), norm.item()
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_amp_step"}
### BEGIN HIDDEN TESTS
def _amp_run(seed, steps, max_norm, width):
    """amp_step training a fresh model; an inf in the step before the last, which must train."""
    _g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    _model = nn.Sequential(nn.Linear(5, width), nn.Tanh(), nn.Linear(width, 2))
    _opt = torch.optim.SGD(_model.parameters(), lr=0.05, momentum=0.5)
    _scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    _out = []
    for _k in range(steps):
        _x = 3 * torch.randn(16, 5, generator=_g)
        if _k == steps - 2:
            _x[0, 0] = float("inf")
        _y = torch.randn(16, 2, generator=_g)
        _r = amp_step(_model, _opt, _scaler, _x, _y, max_norm)
        _loss, _norm = _r if isinstance(_r, tuple) and len(_r) == 2 else ("not a pair", None)
        _out.append(
            {"scale after the step with inf": _scaler.get_scale()}
            if _k == steps - 2
            else {"loss": _loss, "norm": _norm, "scale after": _scaler.get_scale()}
        )
    _out.append({"parameters": [p.detach().clone() for p in _model.parameters()]})
    return _out


### END HIDDEN TESTS
check(defined("amp_step"), "amp_step is not defined: run the exercise cell above.")
torch.manual_seed(0)
_model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
_copy = copy.deepcopy(_model)
_opt = torch.optim.SGD(_model.parameters(), lr=0.1)
_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
_x, _y = 4 * torch.randn(8, 3), torch.randn(8, 1)
_result, _error = attempt(amp_step, _model, _opt, _scaler, _x, _y, 0.1)
check(
    isinstance(_result, tuple) and len(_result) == 2,
    "amp_step(model, optimizer, scaler, x, y, 0.1) should return a pair (loss, norm) (the error "
    f"it raised, if any: {_error}); call it in a cell of your own to see what it does.",
)
_loss, _norm = _result
check(
    type(_loss) is float and type(_norm) is float,
    "amp_step should return (loss, norm) as Python floats: a tensor loss keeps its whole graph "
    "alive in the caller's list. Use .item().",
)
with torch.autocast("cpu", dtype=torch.float16):
    _ref_loss = F.mse_loss(_copy(_x), _y)
_ref_grads = torch.autograd.grad(_ref_loss * 2.0**10, list(_copy.parameters()))
_true_norm = torch.cat([g.flatten() / 2.0**10 for g in _ref_grads]).norm().item()
check(
    abs(_loss - _ref_loss.item()) < 1e-3 * (1 + abs(_ref_loss.item())),
    "amp_step: the loss should be F.mse_loss(model(x), y), computed under "
    "torch.autocast('cpu', dtype=torch.float16).",
)
check(
    math.isfinite(_norm),
    "amp_step returned an infinite or NaN norm on a finite input, where the scaler passed in "
    "(scale 1024) does not overflow float16: was the loss scaled by another scaler, or twice?",
)
check(
    abs(_norm / _true_norm - 2.0**10) > 1,
    "amp_step: the norm is 1024 times the true one, the scale: the gradients were clipped "
    "while still scaled. Call scaler.unscale_(optimizer) before clip_grad_norm_.",
)
check(
    abs(_norm - _true_norm) < 1e-2 * _true_norm,
    "amp_step: the norm should be the total norm of the unscaled gradients, as "
    "clip_grad_norm_ returns it after scaler.unscale_(optimizer).",
)
_moved = nn.utils.parameters_to_vector(_model.parameters())
_moved = _moved - nn.utils.parameters_to_vector(_copy.parameters())
check(
    abs(_moved.norm().item() - 0.1 * 0.1) < 2e-3,
    f"amp_step: with lr 0.1 and max_norm 0.1 the step should move the parameters by 0.01 in all "
    f"(it moved them by {_moved.norm().item():.3g}): unscale_, clip, step, update, in this order.",
)
_x[0, 0] = float("inf")
_before = [p.detach().clone() for p in _model.parameters()]
_result, _error = attempt(amp_step, _model, _opt, _scaler, _x, _y, 0.1)
check(
    _error is None or "after step()" not in _error,
    "a second call of amp_step(...) raised an error that unscale_() is called after step(): "
    "the first call did not end with scaler.update().",
)
check(
    _error is None,
    f"a second call of amp_step(...) raised an error (the error: {_error}); call it twice in a "
    "cell of your own to see the whole message.",
)
check(
    all(torch.equal(p, q) for p, q in zip(_model.parameters(), _before, strict=True)),
    "amp_step on an input with an inf changed the parameters: the gradients were inf or NaN, "
    "so the step must be skipped. Step with scaler.step(optimizer), not optimizer.step().",
)
check(
    _scaler.get_scale() == 2.0**9,
    "amp_step on an input with an inf should halve the scale (1024 to 512): call "
    "scaler.update() after scaler.step(optimizer).",
)
_x[0, 0] = 1.0
_result, _error = attempt(amp_step, _model, _opt, _scaler, _x, _y, 0.1)
check(
    isinstance(_result, tuple) and len(_result) == 2,
    "a third call of amp_step(...), on a finite input after the skipped step, did not return "
    f"a pair (loss, norm) (the error it raised, if any: {_error}).",
)
check(
    math.isfinite(_result[1]),
    "after the skipped step, amp_step on a finite input returned an infinite norm, and every "
    "later step would be skipped too: the gradients still held the skipped step's inf. Clear "
    "them at the start of each step with optimizer.zero_grad().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _seed, _steps, _max_norm, _width in ((112, 4, 0.5, 6), (113, 3, 5.0, 9)):
    observe(
        f"amp_step on a fresh random model, {_steps} steps with max_norm {_max_norm}, the one "
        "before the last on an input with an inf",
        _amp_run(_seed, _steps, _max_norm, _width),
        rtol=2e-3,
        atol=1e-5,
        hint="zero_grad; loss under autocast float16; scaler.scale(loss).backward(); "
        "scaler.unscale_(optimizer); clip_grad_norm_; scaler.step(optimizer); scaler.update(); "
        "return loss.item(), norm.item().",
    )
### END HIDDEN TESTS

# %% [markdown]
# The rest of the recipe (PyTorch's AMP notes), with a cell. Autocast covers the forward pass and
# the loss: call `backward()` after the `with` block (each backward operation runs in the type
# autocast chose for its forward operation). With `bfloat16`, leave the scaler out: its range is
# that of `float32` (the table's `bfloat16` row). Accumulating over micro-batches, scale each
# micro-batch's loss and call `scaler.step` and `scaler.update` once, after the last one: the scale
# must not change while the gradients add up. Save `scaler.state_dict()` with the model and the
# optimizer: a fresh scaler starts again at 65536 and must find its scale anew. A custom
# `autograd.Function` that must run in `float32` takes `custom_fwd` (with `cast_inputs`) and
# `custom_bwd`, as the cell's `Exp` does, in lab 9's older style, `forward(ctx, x)`: with a
# `setup_context`, the backward fails (torch 2.10 to 2.15).


# %%
class Exp(torch.autograd.Function):  # exp(x), computed in float32 even under autocast
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad_output):
        return grad_output * ctx.saved_tensors[0].exp()


torch.manual_seed(0)
model = nn.Linear(5, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
xb, yb = torch.randn(16, 5), torch.randn(16, 2)
with torch.autocast("cpu", dtype=torch.float16):
    hidden = model(xb)
    out = Exp.apply(hidden)
out.mean().backward()  # after the with block; custom_bwd runs Exp's backward as its forward ran
print("under autocast: model(x) is", hidden.dtype, "| Exp.apply(model(x)) is", out.dtype)
optimizer.zero_grad()
for x_part, y_part in zip(xb.chunk(4), yb.chunk(4), strict=True):  # 4 micro-batches, 1 step
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x_part), y_part) / 4
    scaler.scale(loss).backward()
scaler.unscale_(optimizer)
whole = torch.autograd.grad(F.mse_loss(model(xb), yb), model.weight)[0]
print("accumulated vs whole batch, largest gap:", (model.weight.grad - whole).abs().max().item())
scaler.step(optimizer)
scaler.update()
print("scaler.state_dict(), to save:", scaler.state_dict())
print("the scale of a fresh scaler:", torch.amp.GradScaler("cpu").get_scale())

# %% [markdown]
# ## 4. Everyday hygiene, measured
#
# ### `total += loss` keeps every graph alive
#
# The classic leak: summing losses for a log, typically in an evaluation loop written without
# `torch.no_grad()`. `total += loss` adds a *tensor*, so `total` becomes the output of an addition
# whose inputs are every loss so far, each with its graph, and each graph holds the activations it
# saved for backward. Nothing is freed until `total` goes. After each batch, both ways, the cell
# counts the bytes of the tensors autograd keeps for backward (with a `saved_tensors_hooks` pair;
# the weights, alive anyway, left out).


# %%
class SavedBytes:
    """Holds a saved tensor; counts the bytes of the storages held (each once, not the weights)."""

    held, skip = {}, set()  # held: storage address -> [holders, bytes]; skip: the weights

    def __init__(self, tensor):
        self.tensor = tensor.detach()  # detached: a saved output would otherwise hold itself
        self.key = tensor.untyped_storage().data_ptr()
        if self.key not in SavedBytes.skip:
            entry = SavedBytes.held.setdefault(self.key, [0, tensor.untyped_storage().nbytes()])
            entry[0] += 1

    def __del__(self):
        entry = SavedBytes.held.get(self.key)
        if entry is not None:
            entry[0] -= 1
            if entry[0] == 0:
                del SavedBytes.held[self.key]

    @staticmethod
    def kib():
        return round(sum(nbytes for _, nbytes in SavedBytes.held.values()) / 1024)


def saved_kib_per_batch(log_with_item, batches=5):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 1))
    SavedBytes.skip = {p.untyped_storage().data_ptr() for p in net.parameters()}
    total, alive = 0.0, []
    with torch.autograd.graph.saved_tensors_hooks(SavedBytes, lambda box: box.tensor):
        for _ in range(batches):
            loss = net(torch.randn(128, 64)).pow(2).mean()
            total += loss.item() if log_with_item else loss
            del loss
            alive.append(SavedBytes.kib())
    return alive


for way in (False, True):
    label = "total += loss.item()" if way else "total += loss"
    print(f"{label:22} KiB of activations held after each batch: {saved_kib_per_batch(way)}")

# %% [markdown]
# In a training loop, each loss gets its own `backward()`, which frees that graph's saved tensors;
# but `total += loss` still links every step's graph nodes into one chain that grows by a few nodes
# per step, and `total` is a tensor that requires grad. Counted:


# %%
def graph_nodes(tensor):
    """How many autograd nodes the graph behind `tensor` has."""
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [next_node for next_node, _ in node.next_functions]
    return len(seen)


torch.manual_seed(0)
net = nn.Linear(8, 1)
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
total = 0.0
for step in range(1, 101):
    optimizer.zero_grad()
    loss = net(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    total += loss
    if step in (1, 10, 100):
        nodes, grad = graph_nodes(total), total.requires_grad
        print(f"after {step:3} steps: total.requires_grad = {grad}, {nodes} nodes")

# %% [markdown]
# Log with `loss.item()` (a Python float) or `loss.detach()`, and evaluate under `torch.no_grad()`.
#
# ### Freezing for fine-tuning, and what the optimizer then does
#
# To fine-tune only the last layer of a network, turn off `requires_grad` on the others:
# `module.requires_grad_(False)`. Then `backward()` computes no gradient for them, their `.grad`
# stays `None`, and the forward pass records no graph for their weights. An optimizer skips a
# parameter whose `.grad` is `None`, even with momentum or weight decay (all but `LBFGS`, as lab 6
# showed: it moves a parameter frozen after training began), so you may still hand it all
# parameters; handing it only the trainable ones is cleaner (no state kept for the others). The trap
# is a `.grad` that is a tensor of zeros instead of `None`: the optimizer then steps the frozen
# parameter anyway, and Adam, with its running averages, moves it. Measured:


# %%
def frozen_move(optimizer_class, set_to_none):
    """How far the first layer moves in 3 steps after it is frozen, with 3 steps before."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    optimizer = optimizer_class(net.parameters(), lr=0.01)
    batch = torch.randn(8, 3)
    for step in range(6):
        if step == 3:
            net[0].requires_grad_(False)
            before = net[0].weight.detach().clone()
        optimizer.zero_grad(set_to_none=set_to_none)
        net(batch).pow(2).mean().backward()
        optimizer.step()
    return (net[0].weight - before).abs().max().item()


for cls in (torch.optim.SGD, torch.optim.Adam):
    for set_to_none in (True, False):
        moved = frozen_move(cls, set_to_none)
        print(f"{cls.__name__:5} set_to_none={set_to_none!s:5}: frozen layer moved {moved:.6f}")

# %% [markdown]
# ### Exercise 3 (2 points): fine-tune the last layer
#
# Write `finetune(model, batches, lr)` for an `nn.Sequential` `model`: freeze every module but the
# last one (`model[-1]`), build `torch.optim.SGD` with `lr` and `momentum=0.9` over the parameters
# that still train, then for each `(x, y)` in `batches` take one step on `F.mse_loss(model(x), y)`,
# clearing the gradients each time. Return the list of the losses as Python floats, one per batch.


# %% nbgrader={"solution": true, "grade_id": "finetune"}
def finetune(model, batches, lr):
    ### BEGIN SOLUTION
    model[:-1].requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=lr, momentum=0.9)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_finetune"}
check(defined("finetune"), "finetune is not defined: run the exercise cell above.")
torch.manual_seed(0)
_model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
_start = copy.deepcopy(_model)
_batches = [(torch.randn(16, 4), torch.randn(16, 2)) for _ in range(3)]
_losses, _error = attempt(finetune, _model, _batches, 0.1)
check(
    isinstance(_losses, list) and len(_losses) == 3,
    "finetune(model, batches, lr) should return a list with one loss per batch (the error it "
    f"raised, if any: {_error}); call it in a cell of your own to see what it does.",
)
check(
    all(type(v) is float for v in _losses),
    "finetune should return the losses as Python floats (loss.item()): a list of tensors keeps "
    "every step's graph alive.",
)
check(
    all(
        torch.equal(p, q)
        for p, q in zip(_model[:-1].parameters(), _start[:-1].parameters(), strict=True)
    ),
    "finetune changed a layer before the last: freeze every module but model[-1] with "
    "requires_grad_(False). (model.eval() freezes nothing: it only changes layers such as "
    "dropout and batch norm.)",
)
check(
    all(not p.requires_grad for p in _model[:-1].parameters()),
    "after finetune, the parameters of the modules before the last should not require grad.",
)
check(
    all(p.requires_grad for p in _model[-1].parameters())
    and not torch.equal(_model[-1].bias, _start[-1].bias)
    and not torch.equal(_model[-1].weight, _start[-1].weight),
    "finetune should train both the weight and the bias of the last layer.",
)
_first = F.mse_loss(_start(_batches[0][0]), _batches[0][1]).item()
check(
    abs(_losses[0] - _first) < 1e-5,
    "finetune: the first loss should be F.mse_loss(model(x), y) on the first batch, before any "
    "step. (The hidden checks also compare the steps: clear the gradients before each backward.)",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(114)
for _sizes in ((3, 5, 2), (6, 4, 4, 1)):
    torch.manual_seed(len(_sizes))
    _layers = []
    for _a, _b in zip(_sizes[:-2], _sizes[1:-1], strict=True):
        _layers += [nn.Linear(_a, _b), nn.ReLU()]
    _model = nn.Sequential(*_layers, nn.Linear(_sizes[-2], _sizes[-1]))
    _batches = [
        (torch.randn(10, _sizes[0], generator=_gen), torch.randn(10, _sizes[-1], generator=_gen))
        for _ in range(4)
    ]
    _losses = finetune(_model, _batches, 0.05)
    observe(
        f"finetune on a random Sequential with layer sizes {_sizes}, 4 random batches, lr 0.05",
        {
            "losses": _losses,
            "parameters after": [p.detach().clone() for p in _model.parameters()],
            "requires_grad after": [p.requires_grad for p in _model.parameters()],
        },
        rtol=1e-4,
        atol=1e-6,
        hint="model[:-1].requires_grad_(False); SGD(trainable, lr, momentum=0.9); per batch: "
        "zero_grad, loss, backward, step, losses.append(loss.item()).",
    )
### END HIDDEN TESTS

# %% [markdown]
# ### Clipping goes after `backward()` and before `step()`
#
# `torch.nn.utils.clip_grad_norm_(parameters, max_norm)` rescales the gradients *that are there* so
# that their total norm is at most `max_norm`, and returns the norm they had. Called before
# `backward()`, it clips the previous step's gradients (or finds none), and the new ones are used
# unclipped; called after `step()`, it clips gradients that were already used:

# %%
torch.manual_seed(0)
net = nn.Linear(10, 1)
batch = 10 * torch.randn(32, 10)
start = nn.utils.parameters_to_vector(net.parameters()).detach()
for where in ("before backward", "after backward", "after step"):
    probe = copy.deepcopy(net)
    optimizer = torch.optim.SGD(probe.parameters(), lr=0.1)
    optimizer.zero_grad()
    if where == "before backward":
        nn.utils.clip_grad_norm_(probe.parameters(), 1.0)
    probe(batch).pow(2).mean().backward()
    if where == "after backward":
        nn.utils.clip_grad_norm_(probe.parameters(), 1.0)
    optimizer.step()
    if where == "after step":
        nn.utils.clip_grad_norm_(probe.parameters(), 1.0)
    step = (nn.utils.parameters_to_vector(probe.parameters()) - start).norm().item()
    print(f"clip {where:16}: the step moved the parameters by {step:8.4f} (lr 0.1)")

# %% [markdown]
# Only the middle one moves the parameters by at most `lr * max_norm` = 0.1.
#
# ### An optimizer step inside `backward()`
#
# A plain training step keeps every parameter's gradient until `optimizer.step()`: gradient memory
# equal to the model's size, at the end of `backward()`. But a parameter's gradient is final as soon
# as `backward()` has accumulated it, and the step for that parameter needs nothing else (for SGD).
# `param.register_post_accumulate_grad_hook(hook)` calls `hook(param)` right after `param.grad` has
# been accumulated, during `backward()`. A hook that steps the parameter and then sets
# `param.grad = None` frees each gradient as soon as it is made, so at most a few gradients are
# alive at once. Hooks run while `backward()` runs, with gradient recording off, and must return
# `None`.
#
# ### Exercise 4 (2 points): SGD inside `backward()`
#
# Write `sgd_in_backward(model, lr)`: register on every parameter of `model` a post-accumulate-grad
# hook that does the SGD step `param -= lr * param.grad` (in place, under `torch.no_grad()`) and
# then sets `param.grad = None`. Return the list of the handles that registering returns (one per
# parameter), so that a caller can `.remove()` them. After that, every `loss.backward()` updates the
# model by itself, with no optimizer.


# %% nbgrader={"solution": true, "grade_id": "sgd_in_backward"}
def sgd_in_backward(model, lr):
    ### BEGIN SOLUTION
    def step(param):
        with torch.no_grad():
            param.add_(param.grad, alpha=-lr)
        param.grad = None

    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters()]
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_sgd_in_backward"}
check(defined("sgd_in_backward"), "sgd_in_backward is not defined: run the exercise cell above.")
torch.manual_seed(0)
_model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
_ref = copy.deepcopy(_model)
_handles, _error = attempt(sgd_in_backward, _model, 0.1)
_listed = isinstance(_handles, list) and len(_handles) == 4
check(
    _listed and all(hasattr(_h, "remove") for _h in _handles),
    "sgd_in_backward(model, lr) should return a list of the handles that registering returns, "
    f"one per parameter (the error it raised, if any: {_error}); call it to see what it does.",
)
for _k in range(2):
    _x = torch.randn(5, 3)
    _grads = torch.autograd.grad(_ref(_x).pow(2).sum(), list(_ref.parameters()))
    with torch.no_grad():
        for _p, _g in zip(_ref.parameters(), _grads, strict=True):
            _p -= 0.1 * _g
    _, _error = attempt(lambda x=_x: _model(x).pow(2).sum().backward())
    check(
        _error is None,
        f"loss.backward() raised an error, with your hooks on the parameters (the error: "
        f"{_error}); run a backward() of your own to see where.",
    )
    check(
        all(p.grad is None for p in _model.parameters()),
        "after backward, every parameter's .grad should be None: set param.grad = None in the "
        "hook, after the step, or the gradient memory is not freed (and gradients accumulate).",
    )
    check(
        all(
            torch.allclose(p, q, atol=1e-6)
            for p, q in zip(_model.parameters(), _ref.parameters(), strict=True)
        ),
        "after backward, the parameters should be param - lr * param.grad, for every parameter "
        "and on every backward (the check ran two).",
    )
for _h in _handles:
    _h.remove()
_before = [p.detach().clone() for p in _model.parameters()]
_model(torch.randn(5, 3)).sum().backward()
check(
    all(torch.equal(p, q) for p, q in zip(_model.parameters(), _before, strict=True)),
    "after removing every handle that sgd_in_backward returned, backward still changed the "
    "parameters: return the handles of the hooks you registered.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(115)
torch.manual_seed(115)
_model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 3))
_handles = sgd_in_backward(_model, 0.03)
_grads_left = []
for _k in range(3):
    _x = torch.randn(7, 4, generator=_gen)
    _t = torch.randn(7, 3, generator=_gen)
    F.mse_loss(_model(_x), _t).backward()
    _grads_left.append([p.grad is None for p in _model.parameters()])
observe(
    "sgd_in_backward(model, 0.03) on a random 3-layer model, then 3 backward passes of an MSE "
    "loss on random batches",
    {
        "number of handles": len(_handles) if isinstance(_handles, list) else None,
        "parameters after": [p.detach().clone() for p in _model.parameters()],
        "grad is None after each backward": _grads_left,
    },
    rtol=1e-5,
    atol=1e-7,
    hint="one hook per parameter: under no_grad, param -= lr * param.grad; then "
    "param.grad = None. Use the hook's argument, not a loop variable.",
)
### END HIDDEN TESTS

# %% [markdown]
# How much gradient memory does it save? One more hook on every parameter adds up the bytes of the
# `.grad` tensors alive and keeps the largest total seen during `backward()`, for a plain SGD step
# after `backward()` and for your hooks.


# %%
def peak_gradient_bytes(use_hooks):
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(256, 256) for _ in range(6)])
    peak = [0]

    def measure(_):
        alive = sum(p.grad.nbytes for p in net.parameters() if p.grad is not None)
        peak[0] = max(peak[0], alive)

    for p in net.parameters():  # registered first, so it runs before the step's hook
        p.register_post_accumulate_grad_hook(measure)
    if use_hooks:
        sgd_in_backward(net, 0.01)
    net(torch.randn(32, 256)).pow(2).mean().backward()
    if not use_hooks:
        torch.optim.SGD(net.parameters(), lr=0.01).step()
    return peak[0], sum(p.numel() * p.element_size() for p in net.parameters())


with your_code("sgd_in_backward"):
    for use_hooks in (False, True):
        peak, size = peak_gradient_bytes(use_hooks)
        label = "SGD inside backward" if use_hooks else "plain SGD after backward"
        print(f"{label:26}: at most {peak >> 10:4} KiB of gradients alive, model {size >> 10} KiB")

# %% [markdown]
# For a model of a billion parameters in `float32` that is 4 GB of gradients not held at once. The
# price: every parameter steps on its own, so anything that needs all gradients together (clipping
# by the total norm, a gradient scaler's check for `inf`) no longer fits in a hook.
#
# ## 5. A custom operator the compiler can see
#
# Sometimes a piece of your model is code that PyTorch cannot look into: a kernel from a C++, CUDA
# or Triton library, or plain Python. Below, plain Python stands for it: `softplus_kernel` computes
# $\log(1 + e^x)$ number by number. Lab 9 would wrap it in an `autograd.Function` (a `forward(x)`
# and a `setup_context`) to give it a gradient. That works for `backward()`, but `torch.compile`
# tries to trace *into* the Function's `forward`, meets code it cannot put in a graph (here
# `tolist()`), and breaks the graph there. Counted:


# %%
def softplus_kernel(x):
    """log(1 + exp(x)), elementwise, in plain Python: opaque to the compiler."""
    values = [max(v, 0.0) + math.log1p(math.exp(-abs(v))) for v in x.detach().flatten().tolist()]
    return torch.tensor(values, dtype=x.dtype).reshape(x.shape)


class SoftplusFunction(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return softplus_kernel(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


def model_step(x, fn):
    return (fn(x.sin()) * 2).sum()


x = torch.randn(6, dtype=torch.float64, requires_grad=True)
if not GRADING:  # while graded, nothing here is checked: its two compilations are skipped
    out, graphs = compiled_graphs(lambda t: model_step(t, SoftplusFunction.apply), x)
    breaks = graphs - 1
    print(f"autograd.Function inside torch.compile: {graphs} graphs, so {breaks} or more breaks")
    try:
        compiled_graphs(lambda t: model_step(t, SoftplusFunction.apply), x, fullgraph=True)
    except Exception as error:
        print("fullgraph=True:", type(error).__name__, str(error).splitlines()[0][:100])

# %% [markdown]
# A **custom operator** is the other way: you tell PyTorch "this is one operation; here is what it
# returns, here is its gradient", and the compiler keeps it in the graph as a single opaque call,
# without looking in. `torch.library` needs three things:
#
# * `@torch.library.custom_op("mylib::name", mutates_args=())` on a function with type annotations
#   (`x: torch.Tensor) -> torch.Tensor`): the operator. Its output must be a new tensor, never its
#   input or a view of it;
# * `@name.register_fake` on a function that returns an empty tensor of the output's shape, dtype
#   and device (`torch.empty_like(x)` when they are the input's): the compiler traces with *fake*
#   tensors, which have shapes but no data, and this tells it what comes out;
# * `name.register_autograd(backward, setup_context=setup_context)`: as in lab 10's Functions,
#   `setup_context(ctx, inputs, output)` saves what `backward(ctx, grad_output)` needs.
#
# `torch.library.opcheck(op, (example,))` then tests that the pieces agree: the schema, the autograd
# registration, the fake function against the real one, and (the slow part) a compiled run.
#
# ### Exercise 5 (2 points): a softplus operator
#
# Define `softplus_op`, a custom operator named `"lab11::softplus"` with `mutates_args=()`, taking a
# tensor `x` and returning `softplus_kernel(x)`. Register a fake function, and an autograd formula:
# the derivative of $\log(1 + e^x)$ is $\sigma(x)$ (`torch.sigmoid`), so `backward` returns
# `grad_output * torch.sigmoid(x)`, with `x` saved in `setup_context`. (Running the cell again
# redefines the operator; that is allowed.)


# %% nbgrader={"solution": true, "grade_id": "softplus_op"}
### BEGIN SOLUTION
@torch.library.custom_op("lab11::softplus", mutates_args=())
def softplus_op(x: torch.Tensor) -> torch.Tensor:
    return softplus_kernel(x)


@softplus_op.register_fake
def _(x):
    return torch.empty_like(x)


def _softplus_setup(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


def _softplus_backward(ctx, grad_output):
    (x,) = ctx.saved_tensors
    return grad_output * torch.sigmoid(x)


softplus_op.register_autograd(_softplus_backward, setup_context=_softplus_setup)
### END SOLUTION

# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_softplus_op"}
check(defined("softplus_op"), "softplus_op is not defined: run the exercise cell above.")
_x = torch.tensor([-3.0, -0.5, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
_y, _error = attempt(softplus_op, _x)
_plain, _plain_error = attempt(softplus_op, _x.detach())
check(
    _error is None or "of type tuple" not in _error,
    "softplus_op(x), on an x that requires grad, tried to save a tuple for backward: "
    "setup_context(ctx, inputs, output) gets the inputs as a tuple; unpack it, (x,) = inputs.",
)
check(
    _error is None or _plain_error is not None,
    f"softplus_op(x) raised an error on an x that requires grad (the error: {_error}), and not "
    "on one that does not: the error is in the autograd registration, whose "
    "setup_context(ctx, inputs, output) runs only then.",
)
check(
    isinstance(_y, torch.Tensor)
    and (_y.shape, _y.dtype) == (_x.shape, _x.dtype)
    and torch.allclose(_y.detach(), F.softplus(_x.detach())),
    "softplus_op(x) should return softplus_kernel(x), that is log(1 + exp(x)) (the error it "
    f"raised, if any: {_error}); call it in a cell of your own to see what it does.",
)
_w = torch.arange(1.0, 5.0, dtype=torch.float64)
_g, _error = attempt(torch.autograd.grad, (_y * _w).sum(), _x)
check(
    _error is None or "no autograd formula was registered" not in _error,
    "backward through softplus_op found no autograd formula: register the gradient with "
    "softplus_op.register_autograd(backward, setup_context=setup_context).",
)
check(
    _error is None,
    f"backward through softplus_op raised an error (the error: {_error}); run it in a cell of "
    "your own to see where.",
)
check(
    torch.allclose(_g[0], _w * torch.sigmoid(_x.detach())),
    "the gradient through softplus_op should be grad_output * sigmoid(x), with x the input "
    "saved in setup_context.",
)
_quick = ("test_schema", "test_autograd_registration", "test_faketensor")  # opcheck's, no compile
_t = torch.randn(3, dtype=torch.float64, requires_grad=True)
_report, _error = attempt(torch.library.opcheck, softplus_op, (_t,), test_utils=_quick)
check(
    _error is None or "test_faketensor failed" not in _error,
    "torch.library.opcheck(softplus_op, ...) failed its test_faketensor: the fake function is "
    "missing, or returns another shape or dtype than softplus_op does.",
)
check(
    _error is None,
    f"torch.library.opcheck(softplus_op, ...) failed (the error: {_error}); run it in a cell of "
    "your own to see which of its tests failed.",
)
_run, _error = attempt(compiled_graphs, lambda t: model_step(t, softplus_op), _x, fullgraph=True)
check(
    _error is None,
    "torch.compile(..., fullgraph=True) of a function that calls softplus_op failed (the error: "
    f"{_error}); run compiled_graphs(lambda t: model_step(t, softplus_op), x, fullgraph=True) "
    "in a cell of your own to see the whole message.",
)
check(
    _run[1] == 1 and torch.allclose(_run[0], model_step(_x, softplus_op)),
    "compiled, a function that calls softplus_op should make one graph with the same value.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(116)
for _shape, _dtype in (((5,), torch.float64), ((2, 3), torch.float32)):
    _x = (3 * torch.randn(_shape, generator=_gen, dtype=torch.float64)).to(_dtype).requires_grad_()
    _w = torch.randn(_shape, generator=_gen, dtype=_dtype)
    _y = softplus_op(_x)
    _g, _gerr = attempt(torch.autograd.grad, (_w * _y).sum(), _x)  # errors are recorded
    _fn = lambda t, w=_w: (w * softplus_op(t.cos())).sum()  # noqa: E731
    _out, _cerr = attempt(compiled_graphs, _fn, _x.detach().requires_grad_(), fullgraph=True)
    _t = _x.detach().requires_grad_()
    _checks, _error = attempt(torch.library.opcheck, softplus_op, (_t,), test_utils=_quick)
    observe(
        f"softplus_op on a random {_dtype} tensor of shape {_shape}: value, gradient of "
        "sum(w * out), the compiled value of sum(w * softplus_op(cos(x))) and opcheck",
        {
            "value": _y,
            "gradient": _gerr or _g[0],
            "output dtype": str(_y.dtype),
            "compiled value and graphs": _cerr or list(_out),
            "opcheck": sorted(_checks.items()) if _error is None else _error,
        },
        rtol=1e-5,
        atol=1e-6,
        hint="custom_op returning softplus_kernel(x); register_fake returning "
        "torch.empty_like(x); register_autograd with grad_output * sigmoid(x).",
    )
### END HIDDEN TESTS

# %% [markdown]
# The same model step with your operator, and the whole `opcheck`, compiled run included:

# %%
if defined("softplus_op"):
    quick = ("test_schema", "test_autograd_registration", "test_faketensor")  # while grading
    tests = quick if GRADING else quick + ("test_aot_dispatch_dynamic",)
    try:
        out, graphs = compiled_graphs(lambda t: model_step(t, softplus_op), x)
        print(f"custom operator inside torch.compile: {graphs} graph(s), so {graphs - 1} breaks")
        print("opcheck:", torch.library.opcheck(softplus_op, (x,), test_utils=tests))
    except Exception as error:  # the check above says why; the compiler's traceback is long
        first = (str(error).strip().splitlines() or [""])[0][:200]
        print(f"softplus_op failed here ({type(error).__name__}: {first}): see its check above.")
else:
    print("Solve exercise 5 first: this cell uses your softplus_op.")

# %% [markdown]
# `torch.func` (lab 10) handles a custom operator unevenly (torch 2.10 to 2.15): `grad` raises, with
# a message about an `autograd.Function`'s `setup_context` although you registered one; `jvp`
# returns a zero tangent without a word (`register_autograd` gives the reverse mode only); `vmap`
# runs the operator once per sample, in a loop, with a warning (torch 2.10 writes it to the error
# stream, not as a Python warning: `warned` stays empty). Called from a `torch.func`-style Function
# of lab 10, with its own `backward` and `jvp`, it gets `grad` and `jvp`; `vmap` still loops.

# %%
if defined("softplus_op"):
    points = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, run in {
            "grad": lambda: torch.func.grad(lambda t: softplus_op(t).sum())(points),
            "jvp's tangent": lambda: torch.func.jvp(softplus_op, (points,), (points * 0 + 1,))[1],
            "vmap": lambda: torch.func.vmap(softplus_op)(points.expand(2, 3)).shape,
        }.items():
            try:
                print(f"{name}: {run()}")
            except Exception as error:
                print(f"{name}: {type(error).__name__}: {str(error).split(' For more')[0]}")
    print("warned:", [str(w.message)[:72] for w in caught if "batching" in str(w.message)])

# %% [markdown]
# ## 6. The compiler's backward: AOTAutograd
#
# Lab 8 showed the front end of `torch.compile`, which turns your Python into a graph of the forward
# pass. What about `backward()`? No tape is recorded while compiled code runs; instead
# **AOTAutograd** ("ahead of time") works on the graph once, at compile time:
#
# 1. it traces your forward graph *and* the backward that autograd would run for it into one **joint
#    graph**, `(inputs, gradient of the output) -> (output, gradients of the inputs)`, written in
#    ATen, PyTorch's operator set (`aten.mm`, `aten.tanh_backward`, ...);
# 2. a **partitioner** cuts the joint graph in two: a forward graph and a backward graph. What
#    crosses the cut, the tensors the backward needs, becomes extra *outputs* of the forward graph:
#    these are the saved tensors of lab 9, now chosen by the compiler;
# 3. both graphs go to the back end (Inductor, or here the eager back end that runs them as they
#    are), and `backward()` on the compiled output runs the backward graph as one node.
#
# The cell asks for the joint graph through a private hook (`torch._functorch`, checked on torch
# 2.14.1: such names change between versions) and prints it, then the two halves.

# %%
try:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import default_partition
except ImportError as error:
    aot_autograd = None
    print(f"This torch ({torch.__version__}) lacks a private name used here: {error}")

graphs_seen = {}


def show_partition(joint, joint_inputs, **options):
    forward, backward = default_partition(joint, joint_inputs, **options)
    graphs_seen.update(joint=joint, forward=forward, backward=backward)
    return forward, backward


def run_unchanged(graph_module, example_inputs):
    return make_boxed_func(graph_module.forward)


if aot_autograd is not None:
    backend = aot_autograd(
        fw_compiler=run_unchanged, bw_compiler=run_unchanged, partition_fn=show_partition
    )
    torch.compiler.reset()
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    torch.compile(lambda x, w: torch.tanh(x @ w).sum(), backend=backend)(x, w).backward()
    for name, graph in graphs_seen.items():
        print(f"---- {name} graph")
        print(graph.graph.python_code("self").src.strip())
    outputs = next(n for n in graphs_seen["forward"].graph.nodes if n.op == "output").args[0]
    print("the forward graph returns:", [str(o) for o in outputs])

# %% [markdown]
# Read the joint graph from top to bottom: `primals` are the inputs, `tangents` the gradient of the
# output. The forward part computes `mm`, `tanh` and the sum; the backward part expands the incoming
# gradient, applies `tanh_backward` to it with the saved `tanh` output, and multiplies by the
# transpose of `x` for the gradient of `w`. `x` does not require grad, so its gradient is `None`,
# and no operation computes it. The forward graph returns, besides the sum, `x` and the `tanh`
# output: what the backward graph takes, what `tanh(x @ w)` saves in eager mode.
#
# Two consequences you can now explain. A graph break splits the joint graph too: each piece gets
# its own forward and backward graphs, and between them eager autograd takes over again. And because
# the backward is fixed at compile time, what your forward pass decided in Python (a depth, lab 8)
# is baked into both graphs, until a guard fails and it recompiles.
#
# ## What you have seen
#
# * `where(cond, f(x), 0)` differentiates `f` everywhere: make its input safe with an inner `where`.
#   At a kink autograd returns a chosen subgradient; read it before you rely on it.
# * `autocast` runs matrix products in 16 bits and losses in `float32`; `GradScaler` keeps `float16`
#   gradients from underflowing: unscale before clipping, step and update through it.
# * Log `loss.item()`; freeze with `requires_grad_(False)` and keep `.grad` at `None`; clip between
#   `backward()` and `step()`; a post-accumulate-grad hook can step during `backward()`.
# * `torch.library.custom_op` with `register_fake` and `register_autograd` gives the compiler an
#   operation it keeps whole; AOTAutograd partitions one joint graph into forward and backward, and
#   the forward graph's extra outputs are the saved tensors.
