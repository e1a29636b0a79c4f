# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 10: Forward mode and `torch.func`
#
# Every gradient in this course so far came from **reverse mode**: the forward pass records a
# graph, and `backward()` walks it from the output back to the leaves. Autograd has a second
# mode, which runs the other way, and a second interface, which treats derivatives as
# functions instead of `.grad` fields. This lab covers both:
#
# 1. **dual numbers**: forward mode with `torch.autograd.forward_ad`, a derivative carried
#    along with the forward pass;
# 2. **`jvp` and `vjp`** side by side: forward mode gives one column of the Jacobian per
#    forward pass, reverse mode one row per backward pass (lab 2's vector-Jacobian product);
# 3. **`jacfwd` against `jacrev`**: which one is cheaper depends on the Jacobian's shape, and
#    you measure where they cross;
# 4. **`grad`, `vmap` and `functional_call`**: per-sample gradients of a `DynamicNet`;
# 5. **second derivatives**: `create_graph=True`, Hessian-vector products, and
#    forward-over-reverse;
# 6. your own **`autograd.Function` under `torch.func`**: what it needs, and what happens
#    without it.
#
# %course-include how_this_lab_works.md

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import random
import time

import matplotlib.pyplot as plt
import torch.autograd.forward_ad as fwAD
import torch.func
import torch.nn.functional as F
from torch import nn

# One thread: the timings below compare two ways of computing on the same footing.
torch.set_num_threads(1)
# The first forward-mode derivative prepares some of PyTorch's rules with torch.jit.script,
# which warns that it is deprecated (a FutureWarning since torch 2.14; with torch 2.10 a
# DeprecationWarning, which Python hides): nothing this lab can act on.
warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated")

print("torch", torch.__version__, "| grading run" if GRADING else "")

# %% [markdown]
# ## 1. Dual numbers: a derivative that rides along
#
# Forward mode rests on a small piece of algebra. Add to the real numbers a symbol
# $\varepsilon$ with $\varepsilon^2 = 0$, and compute with pairs $a + b\varepsilon$, the
# **dual numbers**. Products follow from the rule:
# $(a + b\varepsilon)(c + d\varepsilon) = ac + (ad + bc)\varepsilon$, which is the product rule.
# For any smooth $f$, a Taylor expansion stops after one term:
#
# $$f(x + v\,\varepsilon) = f(x) + f'(x)\,v\,\varepsilon .$$
#
# So if every operation knows how to act on dual numbers, running $f$ on $x + v\varepsilon$
# gives the value $f(x)$ **and** the derivative in direction $v$, in one forward pass. For a
# function of a vector, the $\varepsilon$ part is $J v$, the Jacobian times $v$: a
# **Jacobian-vector product** (jvp). The $\varepsilon$ part is called the **tangent**, the
# ordinary part the **primal**.
#
# PyTorch implements this in `torch.autograd.forward_ad` (imported here as `fwAD`):
#
# * `with fwAD.dual_level():` opens a region where dual tensors exist;
# * `fwAD.make_dual(x, v)` makes a dual tensor with primal `x` and tangent `v` (same shape);
# * every operation on a dual tensor computes its output's tangent as well;
# * `fwAD.unpack_dual(y)` returns a named tuple `(primal, tangent)`.

# %%
x = torch.tensor([0.5, 1.0, 2.0])
v = torch.tensor([1.0, 0.0, 2.0])
with fwAD.dual_level():
    dual = fwAD.make_dual(x, v)
    y = dual.sin() * dual
    primal, tangent = fwAD.unpack_dual(y)
    print("primal, sin(x) x:           ", primal)
    print("tangent, forward mode:      ", tangent)
    print("by hand, (cos(x) x + sin(x)) v:", (x.cos() * x + x.sin()) * v)
    print("a plain tensor's tangent:   ", fwAD.unpack_dual(x.sin()).tangent)
    print("does y record a graph?       requires_grad =", y.requires_grad)
print("y's tangent after the block:", fwAD.unpack_dual(y).tangent)

# %% [markdown]
# Three things to read in that output. The tangent is exactly the derivative along `v`,
# computed during the forward pass, without any graph: `y` does not require grad, and no
# `backward()` ran. A tensor computed from plain tensors only has no tangent (`None`): the
# derivative travels only where a dual tensor went. And the tangents belong to their level:
# once the `with` block ends, `unpack_dual` finds none, so read them inside.
#
# ### Exercise 1 (2 points): a Jacobian-vector product with dual numbers
#
# Write `jvp_dual(f, x, v)` that returns the pair `(f(x), J v)`, where `J` is the Jacobian of
# `f` at `x` and `v` a tensor shaped like `x`, using `fwAD`: open a dual level, make `x` dual
# with tangent `v`, run `f` on it, and unpack the result inside the level. Return plain
# tensors (the primal and the tangent), not dual ones. `f` maps a tensor to a tensor, of any
# shapes.


# %% nbgrader={"solution": true, "grade_id": "jvp_dual"}
def jvp_dual(f, x, v):
    ### BEGIN SOLUTION
    with fwAD.dual_level():
        out = fwAD.unpack_dual(f(fwAD.make_dual(x, v)))
        return out.primal, out.tangent
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_jvp_dual"}
check(
    defined("jvp_dual"),
    "jvp_dual is not defined: run the exercise cell above (it raised an error, or did not run).",
)
_x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
_v = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
_f_got_dual = []  # for each call of f: was its input a dual tensor with a tangent?


def _f(t):
    _f_got_dual.append(fwAD.unpack_dual(t).tangent is not None)
    return t.sin() * t


_result, _error = attempt(jvp_dual, _f, _x, _v)
check(
    _error is None,
    f"jvp_dual(f, x, v) for f(x) = sin(x) x raised an error (the error: {_error}); call it in a "
    "cell of your own to see the whole message.",
)
check(
    isinstance(_result, tuple) and len(_result) == 2,
    "jvp_dual(f, x, v) should return a pair (f(x), J v).",
)
_out, _jv = _result
check(
    _jv is not None or any(_f_got_dual),
    "jvp_dual(f, x, v): the tangent is None, and f was called on a plain tensor only, one "
    "without a tangent: make x dual with fwAD.make_dual(x, v) inside the dual level, and call f "
    "on that dual tensor.",
)
check(
    _jv is not None,
    "jvp_dual(f, x, v): the tangent is None, though f was called on a dual tensor: f's output "
    "had no tangent where it was unpacked. A tangent lives only inside its dual level: unpack "
    "f's output inside the with block.",
)
check(
    all(isinstance(_t, torch.Tensor) and _t.shape == _x.shape for _t in _result)
    and _out.dtype == _jv.dtype == _x.dtype,
    "jvp_dual(f, x, v) for f(x) = sin(x) x should return two tensors shaped and typed like x "
    "(f(x) and J v).",
)
check(
    torch.allclose(_out, _x.sin() * _x),
    "jvp_dual(f, x, v): the first element should be f(x), the primal of the output.",
)
_want = (_x.cos() * _x + _x.sin()) * _v
check(
    not torch.allclose(_jv, _v),
    "jvp_dual(f, x, v): the tangent returned is v itself, the input's tangent: unpack the "
    "output of f, not the dual input.",
)
check(
    not torch.allclose(_jv, _x.cos() * _x + _x.sin()),
    "jvp_dual(f, x, v): the tangent is the derivative along a vector of ones, not along v: "
    "give make_dual the tangent v.",
)
check(
    torch.allclose(_jv, _want),
    "jvp_dual(f, x, v) for f(x) = sin(x) x: the tangent should be (cos(x) x + sin(x)) v, "
    "the derivative of f along v.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(101)
_A = torch.randn(5, 3, dtype=torch.float64, generator=_gen)
_B = torch.randn(2, 4, dtype=torch.float64, generator=_gen)
_fns = {
    "tanh(A x) from 3 numbers to 5": (lambda t: torch.tanh(_A @ t), (3,)),
    "exp(x) / sum(exp(x)) on 6 numbers": (lambda t: t.exp() / t.exp().sum(), (6,)),
    "B @ X ** 2 on a 4x3 matrix X": (lambda t: _B @ t**2, (4, 3)),
    "sum(x ** 3) on 4 numbers, a scalar": (lambda t: (t**3).sum(), (4,)),
}
for _name, (_fn, _shape) in _fns.items():
    _x = torch.randn(_shape, dtype=torch.float64, generator=_gen)
    _v = torch.randn(_shape, dtype=torch.float64, generator=_gen)
    _result = jvp_dual(_fn, _x, _v)
    _out, _jv = _result if isinstance(_result, (tuple, list)) and len(_result) == 2 else (None,) * 2
    observe(
        f"jvp_dual(f, x, v) for f = {_name}, random float64 x and v",
        {"f(x)": _out, "J v": _jv},
        rtol=1e-7,
        atol=1e-10,
        hint="make x dual with tangent v inside fwAD.dual_level(), run f on the dual tensor, and "
        "return the primal and tangent of f's output, unpacked inside the level.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 2. `jvp` and `vjp`: a column or a row
#
# In lab 2, `y.backward(gradient=u)` computed $u^\top J$, a **vector-Jacobian product**
# (vjp), in one backward pass. Forward mode computes $J v$, a Jacobian-vector product, in one
# forward pass. `torch.func` offers both as functions of functions:
#
# * `torch.func.jvp(f, (x,), (v,))` returns `(f(x), J v)`: what you just built with dual
#   numbers;
# * `torch.func.vjp(f, x)` returns `(f(x), vjp_fn)`, and `vjp_fn(u)` returns the tuple
#   `(u^T J,)`, one entry per input of `f`. The forward pass runs once; `vjp_fn` can be
#   called for many `u`.
#
# Now take $v = e_j$, the $j$-th basis vector: $J e_j$ is **column** $j$ of $J$. And with
# $u = e_i$, $u^\top J$ is **row** $i$. So reverse mode gives one row of the Jacobian per
# backward pass, forward mode one column per forward pass. For $f: \mathbb{R}^3 \to
# \mathbb{R}^2$:


# %%
def f(x):
    return torch.stack([x[0] * x[1], x[1].sin() + x[2] ** 2])


x = torch.tensor([1.0, 2.0, 3.0])
out, vjp_fn = torch.func.vjp(f, x)
rows = [vjp_fn(u)[0] for u in torch.eye(2)]  # one backward pass per row
columns = [torch.func.jvp(f, (x,), (e,))[1] for e in torch.eye(3)]  # one forward pass per column
print("J by rows (vjp):\n", torch.stack(rows))
print("J by columns (jvp):\n", torch.stack(columns, dim=1))
print("torch.func.jacrev(f)(x):\n", torch.func.jacrev(f)(x))

# %% [markdown]
# (`torch.autograd.functional` has `jvp` and `vjp` too, written on top of the tape autograd of
# lab 2; its `jvp` gets $Jv$ from two reverse passes, "the double backwards trick" in its
# documentation, where `torch.func.jvp` uses forward mode.)
#
# ### Exercise 2 (2 points): the Jacobian, column by column
#
# Write `jacobian_by_columns(f, x)` for a 1-d tensor `x` of `n` numbers and a function `f`
# that returns a 1-d tensor of `m` numbers. Return the `m x n` Jacobian, built with `n`
# forward-mode products: column `j` is `J e_j`, from `torch.func.jvp` (or your `jvp_dual`)
# with the basis vector `e_j` (shaped and typed like `x`).


# %% nbgrader={"solution": true, "grade_id": "jacobian_by_columns"}
def jacobian_by_columns(f, x):
    ### BEGIN SOLUTION
    basis = torch.eye(len(x), dtype=x.dtype)
    columns = [torch.func.jvp(f, (x,), (e,))[1] for e in basis]
    return torch.stack(columns, dim=1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_jacobian_by_columns"}
check(
    defined("jacobian_by_columns"),
    "jacobian_by_columns is not defined: run the exercise cell above (it raised an error, or "
    "did not run).",
)
_gen = torch.Generator().manual_seed(7)
_W = torch.randn(4, 3, dtype=torch.float64, generator=_gen)
_x = torch.randn(3, dtype=torch.float64, generator=_gen)


def _f(t):
    return torch.tanh(_W @ t) * t.sum()


_J, _error = attempt(jacobian_by_columns, _f, _x)
check(
    _error is None,
    "jacobian_by_columns(f, x) for f from 3 numbers to 4 raised an error (the error: "
    f"{_error}); call it in a cell of your own to see the whole message.",
)
_want = torch.func.jacrev(_f)(_x)
check(
    isinstance(_J, torch.Tensor),
    "jacobian_by_columns(f, x) should return one tensor: stack the columns.",
)
check(
    tuple(_J.shape) != (3, 4),
    "jacobian_by_columns(f, x) for f from 3 numbers to 4 returned a 3x4 tensor, the transpose: "
    "each jvp is a column, so stack them along dim=1 to get m x n.",
)
check(
    tuple(_J.shape) == (4, 3) and _J.dtype == _x.dtype,
    "jacobian_by_columns(f, x) for f from 3 numbers to 4 should return a 4x3 tensor (m x n) of "
    "x's dtype: one column per number of x, each the jvp along a basis vector of x's dtype.",
)
check(
    not torch.allclose(
        _J, torch.func.jvp(_f, (_x,), (torch.ones_like(_x),))[1][:, None].expand(4, 3)
    ),
    "jacobian_by_columns(f, x): every column is J times a vector of ones. Column j needs the "
    "basis vector e_j as its tangent (a 1 at position j, zeros elsewhere).",
)
check(
    torch.allclose(_J, _want),
    "jacobian_by_columns(f, x) differs from torch.func.jacrev(f)(x). Is each tangent a fresh "
    "basis vector e_j (if you fill one tensor in a loop, clear the previous 1)?",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(102)
for _n, _m in ((1, 4), (5, 1), (4, 4), (6, 3), (2, 7)):
    _W1 = torch.randn(_m, _n, dtype=torch.float64, generator=_gen)
    _c = torch.randn(_m, dtype=torch.float64, generator=_gen)
    _x = torch.randn(_n, dtype=torch.float64, generator=_gen)
    _J = jacobian_by_columns(lambda t, W=_W1, c=_c: torch.sin(W @ t**2 + c) * t.prod(), _x)
    observe(
        f"jacobian_by_columns(f, x) for f = sin(W x^2 + c) prod(x) from {_n} numbers to {_m}, "
        "random float64 x",
        _J,
        rtol=1e-7,
        atol=1e-10,
        hint="an m x n tensor whose column j is the jvp of f at x along the basis vector e_j: "
        "torch.stack(columns, dim=1).",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 3. `jacfwd` against `jacrev`: the shape decides
#
# `torch.func.jacfwd(f)` is your function done in one batch: it `vmap`s `jvp` over the $n$
# basis vectors of the input. `torch.func.jacrev(f)` runs the forward pass once and `vmap`s
# `vjp_fn` over the $m$ basis vectors of the output. Both give the same matrix; the work
# differs. Each jvp or vjp costs a small multiple of one evaluation of `f`, so
#
# * `jacfwd` costs about $n$ evaluations: cheap for a **tall** Jacobian, few inputs and many
#   outputs ($n \ll m$);
# * `jacrev` costs about $m$: cheap for a **wide** Jacobian, many inputs and few outputs
#   ($m \ll n$).
#
# Training a network is the extreme wide case: millions of parameters in, one loss out,
# $m = 1$. That is why `backward()` is reverse mode.
#
# The cell below measures both on a three-layer network $f: \mathbb{R}^n \to \mathbb{R}^m$
# with hidden width 256, keeping $n \cdot m$ fixed, from tall to wide. It prints the best of
# a few runs for each shape and which mode won; the plot shows where the curves cross.


# %%
def make_net(n, m, generator, hidden=256):
    W1 = torch.randn(hidden, n, generator=generator) / n**0.5
    W2 = torch.randn(hidden, hidden, generator=generator) / hidden**0.5
    W3 = torch.randn(m, hidden, generator=generator) / hidden**0.5
    return lambda x: W3 @ torch.tanh(W2 @ torch.tanh(W1 @ x))


def best_ms(fn, *args, repeats=3):
    """The best of `repeats` runs of fn(*args), in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


gen = torch.Generator().manual_seed(0)
inputs = [32, 512] if GRADING else [16, 32, 64, 128, 256, 512, 1024]
fwd_ms, rev_ms = [], []
print("    n      m   jacfwd ms  jacrev ms  faster")
for n in inputs:
    m = 16384 // n
    net, x = make_net(n, m, gen), torch.randn(n, generator=gen)
    by_fwd, by_rev = torch.func.jacfwd(net), torch.func.jacrev(net)
    assert torch.allclose(by_fwd(x), by_rev(x), atol=1e-5)  # also a warm-up run of each
    fwd_ms.append(best_ms(by_fwd, x, repeats=1 if GRADING else 3))
    rev_ms.append(best_ms(by_rev, x, repeats=1 if GRADING else 3))
    faster = "jacfwd" if fwd_ms[-1] < rev_ms[-1] else "jacrev"
    print(f"{n:5d}  {m:5d}  {fwd_ms[-1]:9.2f}  {rev_ms[-1]:9.2f}  {faster}")
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.loglog(inputs, fwd_ms, "o-", label="jacfwd (a column per jvp)")
ax.loglog(inputs, rev_ms, "s-", label="jacrev (a row per vjp)")
ax.set_xlabel("n inputs (m = 16384 / n outputs)")
ax.set_ylabel("ms")
ax.legend()
show_figure(
    fig,
    "Milliseconds against n inputs (m = 16384 / n outputs), log-log: jacfwd as circles, "
    "jacrev as squares; the table above has the numbers.",
)

# %% [markdown]
# Read your own table: where `n` is small and `m` large, `jacfwd` should win, and the other
# way round for large `n`; by the count of passes, the curves cross near $n = m$. Where both
# columns show about the same time, the fixed cost of the Python calls and of `vmap` hides the
# difference: small functions do not show it.
#
# ## 4. `grad`, `vmap` and `functional_call`: per-sample gradients
#
# `torch.func.grad(f)` is a new function that returns the gradient of a scalar `f` with
# respect to its first argument: no `.grad`, no `requires_grad`, no `backward()`, and nothing
# left behind. Its first argument may be a dict of tensors; the gradient is then a dict with
# the same keys. `torch.func.vmap(g, in_dims=...)` runs `g` on every slice of a batch as **one
# batched computation** (`in_dims` says which dimension of each argument is the batch, `None`
# for an argument shared by all). Together, `vmap(grad(loss_of_one_sample))` gives the
# gradient of each sample's loss separately: **per-sample gradients**, which one `backward()`
# of the batch's loss does not give by itself (it sums over the batch, as lab 3 showed; lab 9's
# hooks had to collect the pieces, layer by layer), and which differentially private training
# needs.
#
# To use a module this way, its parameters must be an argument.
# `torch.func.functional_call(model, params, args, kwargs)` calls `model(*args, **kwargs)`,
# its hooks included, with the tensors of the dict `params` (keys as in
# `model.named_parameters()`) in place of the model's own. The model of this section is the
# course's `DynamicNet`.


# %% nbgrader={"locked": true, "grade_id": "dynamic_net"}
# %course-include dynamicnet.py


# %% [markdown]
# `vmap` runs the Python code of the function **once**, on tensors that stand for the whole
# batch. So a `DynamicNet` that draws its own depth draws it once per `vmap` call, and every
# sample of the batch gets the same depth:

# %%
model = DynamicNet(5, 8, 3, seed=1)
params = {name: p.detach() for name, p in model.named_parameters()}
xs, ys = torch.randn(6, 5), torch.randint(0, 3, (6,))


def logits_one(params, x):
    return torch.func.functional_call(model, params, (x.unsqueeze(0),))


draws = []
for _ in range(3):
    torch.func.vmap(logits_one, in_dims=(None, 0))(params, xs)
    draws.append(model.last_depth)
print("depths drawn by three vmap calls over 6 samples each:", draws)

# %% [markdown]
# That is the dynamic graph meeting `vmap`: a choice made by Python is made once per call, not
# once per sample. `vmap` refuses three more things a dynamic model does, with the messages
# below (the same on torch 2.10 to 2.15): a Python `if` or `while` on a tensor's value (each
# sample would need a branch of its own), `.item()` (a batched tensor has no one number),
# and random operations, dropout included, unless you choose `randomness="different"` (a draw
# per sample) or `"same"` (one draw for all).


# %%
def branch_on_value(x):
    return x * 2 if x.sum() > 0 else x


def uses_item(x):
    return x * x.sum().item()


def noisy(x):
    return F.dropout(x, 0.5)


for fn in (branch_on_value, uses_item, noisy):
    try:
        torch.func.vmap(fn)(xs)
        print(f"{fn.__name__}: worked")
    except RuntimeError as error:
        print(f"{fn.__name__}: {str(error).split('. ')[0]}")
print("noisy, randomness='different':", torch.func.vmap(noisy, randomness="different")(xs).shape)

# %% [markdown]
# For per-sample gradients the depth is therefore an argument, the same for the whole batch.
#
# ### Exercise 3 (2 points): per-sample gradients of a `DynamicNet`
#
# Write `per_sample_grads(model, xs, ys, depth)`. Sample `i`'s loss is
# `F.nll_loss(model(xs[i:i+1], depth=depth), ys[i:i+1])`. Return a dict with the keys of
# `model.named_parameters()`; under each key, a tensor of shape `(N, *p.shape)` whose entry
# `i` is the gradient of sample `i`'s loss with respect to that parameter (zeros for a
# parameter that this depth does not use).
#
# Use `torch.func`: a function `loss_one(params, x, y)` of **one** sample that calls
# `functional_call(model, params, (x.unsqueeze(0),), {"depth": depth})` (inside `vmap`, `x`
# has shape `(d_in,)`), its gradient `torch.func.grad(loss_one)`, and `vmap` over the samples
# only: `in_dims=(None, 0, 0)`. Take `params = {name: p.detach() for ...}`: `torch.func`
# needs no `requires_grad`, and it never writes into a parameter's `.grad`.


# %% nbgrader={"solution": true, "grade_id": "per_sample_grads"}
def per_sample_grads(model, xs, ys, depth):
    ### BEGIN SOLUTION
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss_one(p, x, y):
        log_probs = torch.func.functional_call(model, p, (x.unsqueeze(0),), {"depth": depth})
        return F.nll_loss(log_probs, y.unsqueeze(0))

    return torch.func.vmap(torch.func.grad(loss_one), in_dims=(None, 0, 0))(params, xs, ys)
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_per_sample_grads"}
check(
    defined("per_sample_grads"),
    "per_sample_grads is not defined: run the exercise cell above (it raised an error, or did "
    "not run).",
)
torch.manual_seed(13)
_model = DynamicNet(3, 5, 4, seed=0).double()
_xs = torch.randn(6, 3, dtype=torch.float64)
_ys = torch.randint(0, 4, (6,))
_got, _error = attempt(per_sample_grads, _model, _xs, _ys, 2)
check(
    _error is None or "mapped dimension" not in _error,
    "per_sample_grads(model, xs, ys, depth=2): vmap found different sizes in the mapped "
    "dimension, so it sliced something all samples share, the parameters: "
    "in_dims=(None, 0, 0).",
)
check(
    _error is None,
    "per_sample_grads(model, xs, ys, depth=2) for 6 samples raised an error (the error: "
    f"{_error}); call it in a cell of your own to see the whole message.",
)
_names = [_name for _name, _ in _model.named_parameters()]
check(
    isinstance(_got, dict) and sorted(_got) == sorted(_names),
    "per_sample_grads should return a dict keyed by the names of model.named_parameters().",
)
for _name, _p in _model.named_parameters():
    check(
        isinstance(_got[_name], torch.Tensor)
        and tuple(_got[_name].shape) == (6, *_p.shape)
        and _got[_name].dtype == _p.dtype,
        "per_sample_grads(model, xs, ys, depth=2): a gradient has the wrong shape or dtype; each "
        "should be (N, *p.shape), one per sample. A gradient of the whole batch's loss has no "
        "sample dimension: vmap the gradient of a one-sample loss over the samples.",
    )
check(
    all(_p.grad is None for _p in _model.parameters()),
    "per_sample_grads(model, xs, ys, depth=2) left gradients in the model's .grad: use "
    "torch.func.grad on detached parameters instead of backward().",
)
# The same with a Python loop: one backward pass per sample.
_loop = {_name: [] for _name in _names}
for _i in range(6):
    _loss = F.nll_loss(_model(_xs[_i : _i + 1], depth=2), _ys[_i : _i + 1])
    for _name, _g in zip(
        _names, torch.autograd.grad(_loss, list(_model.parameters())), strict=True
    ):
        _loop[_name].append(_g)
_loop = {_name: torch.stack(_gs) for _name, _gs in _loop.items()}
_ratio = (_got["output_linear.weight"].norm() / _loop["output_linear.weight"].norm()).item()
check(
    abs(_ratio * 6 - 1) > 1e-6,
    "per_sample_grads: your gradients are 1/6 of the loop's. Each sample's loss is its own "
    "nll_loss, not divided by the number of samples.",
)
check(
    all(torch.allclose(_got[_name], _loop[_name], atol=1e-10) for _name in _names),
    "per_sample_grads(model, xs, ys, depth=2) differs from a loop of one backward pass per "
    "sample at depth 2. Entry i must be sample i's gradient alone, at the depth asked for.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(103)
for _n, (_d_in, _hidden, _d_out), _depth in (
    (1, (2, 3, 2), 1),
    (5, (4, 6, 3), 0),
    (7, (3, 4, 5), 3),
):
    _model = DynamicNet(_d_in, _hidden, _d_out, seed=0).double()
    with torch.no_grad():  # weights drawn here, not from the global RNG
        for _pn, _p in sorted(_model.named_parameters()):
            _p.copy_(torch.randn(_p.shape, dtype=torch.float64, generator=_gen))
    _xs = torch.randn(_n, _d_in, dtype=torch.float64, generator=_gen)
    _ys = torch.randint(0, _d_out, (_n,), generator=_gen)
    _got = per_sample_grads(_model, _xs, _ys, _depth)
    observe(
        f"per_sample_grads(model, xs, ys, depth={_depth}) for {_n} samples, DynamicNet "
        f"{_d_in}-{_hidden}-{_d_out} in float64",
        {str(_k): _got[_k] for _k in sorted(_got, key=str)} if isinstance(_got, dict) else None,
        rtol=1e-7,
        atol=1e-10,
        hint="one gradient per sample, of that sample's own nll_loss at the given depth: "
        "vmap(grad(loss_one), in_dims=(None, 0, 0)) with functional_call on a batch of one.",
    )
### END HIDDEN TESTS

# %% [markdown]
# How much does the batched version save? The cell times a Python loop of one backward pass
# per sample against `per_sample_grads`, for a growing number of samples:

# %%
model = DynamicNet(20, 64, 10, seed=0)
sizes = [8, 64] if GRADING else [8, 32, 128, 512]
loop_ms, vmap_ms = [], []
for n in sizes:
    xs, ys = torch.randn(n, 20), torch.randint(0, 10, (n,))
    start = time.perf_counter()
    for i in range(n):
        loss = F.nll_loss(model(xs[i : i + 1], depth=2), ys[i : i + 1])
        torch.autograd.grad(loss, list(model.parameters()))
    loop_ms.append(1000 * (time.perf_counter() - start))
    start = time.perf_counter()
    with your_code("per_sample_grads"):
        per_sample_grads(model, xs, ys, 2)
    vmap_ms.append(1000 * (time.perf_counter() - start))
print("samples  loop ms  vmap ms")
for n, lt, vt in zip(sizes, loop_ms, vmap_ms, strict=True):
    print(f"{n:7d}  {lt:7.1f}  {vt:7.1f}")

# %% [markdown]
# ## 5. Second derivatives: `create_graph=True`, and forward over reverse
#
# `torch.autograd.grad(out, x)` returns the gradient as a plain tensor: the backward pass is
# not itself recorded. With `create_graph=True` it is, and the gradient is a tensor in a
# graph, with a `grad_fn`, that you can differentiate again. For $f(x) = x^3$:

# %%
x = torch.tensor(2.0, requires_grad=True)
(d1,) = torch.autograd.grad(x**3, x, create_graph=True)
(d2,) = torch.autograd.grad(d1, x)
print(f"f'(2) = {d1.item()} (3x^2, grad_fn={type(d1.grad_fn).__name__}), f''(2) = {d2.item()} (6x)")

# %% [markdown]
# For a function of a vector, the second derivatives form the Hessian $H$, an $n \times n$
# matrix: too big to build for a network. Its product with a vector costs a small multiple of
# one gradient, because $Hv = \nabla_x \left(\nabla_x f(x) \cdot v\right)$: take the gradient
# $g$ with `create_graph=True`, form the scalar $g \cdot v$, and differentiate that. This is
# **reverse over reverse**. Newton-type optimizers and measures of how sharp a minimum is are
# built on Hessian-vector products.
#
# ### Exercise 4 (2 points): a Hessian-vector product, reverse over reverse
#
# Write `hvp(f, x, v)` for a function `f` from a 1-d tensor to a scalar: make a leaf
# `xl = x.detach().requires_grad_()` (so the caller's `x` is not changed), compute
# `g = torch.autograd.grad(f(xl), xl, create_graph=True)[0]`, then the gradient of
# `(g * v).sum()` with respect to `xl`. Return $H(x)\,v$, a tensor shaped like `x`.


# %% nbgrader={"solution": true, "grade_id": "hvp"}
def hvp(f, x, v):
    ### BEGIN SOLUTION
    xl = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(f(xl), xl, create_graph=True)
    (hv,) = torch.autograd.grad((g * v).sum(), xl)
    return hv
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_hvp"}
check(
    defined("hvp"),
    "hvp is not defined: run the exercise cell above (it raised an error, or did not run).",
)
_gen = torch.Generator().manual_seed(16)
_A = torch.randn(4, 4, dtype=torch.float64, generator=_gen)


def _f(t):
    return 0.5 * t @ _A @ t + (t.sin() * t.roll(1)).sum()


_x = torch.randn(4, dtype=torch.float64, generator=_gen)
_v = torch.randn(4, dtype=torch.float64, generator=_gen)
# What hvp did, read on the way: the tensors f was called on, and the calls of
# torch.autograd.grad (create_graph or not, a graph behind the outputs or not).
_f_inputs, _grad_calls, _real_grad = [], [], torch.autograd.grad


def _f_seen(t):
    _f_inputs.append(t.requires_grad and torch.is_grad_enabled())
    return _f(t)


def _grad_seen(outputs, inputs, *args, **kwargs):
    _outs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    _made = kwargs.get("create_graph", args[2] if len(args) > 2 else False)
    _grad_calls.append((all(o.requires_grad for o in _outs), bool(_made)))
    return _real_grad(outputs, inputs, *args, **kwargs)


torch.autograd.grad = _grad_seen
try:
    _hv, _error = attempt(hvp, _f_seen, _x, _v)
finally:
    torch.autograd.grad = _real_grad
# torch's two kinds of message: a gradient OF a tensor without a graph ("element 0 of tensors
# does not require grad and does not have a grad_fn"), or WITH RESPECT TO a tensor outside the
# graph ("One of the differentiated Tensors does not require grad", or a differentiated Tensor
# that "appears to not have been used in the graph")
_no_graph = _error is not None and "does not have a grad_fn" in _error
check(
    _error is None or "differentiated Tensor" not in _error,
    "hvp(f, x, v) raised an error that one of the tensors it differentiates with respect to does "
    "not require grad or was not used: take both gradients with respect to the leaf xl that f "
    "was called on, xl = x.detach().requires_grad_().",
)
check(
    not _no_graph or all(_f_inputs),
    "hvp(f, x, v) raised an error that it asked for the gradient of a tensor without a graph, and "
    "f was called on a tensor that does not require grad (or with gradients switched off): call "
    "f on the leaf xl = x.detach().requires_grad_(), outside torch.no_grad().",
)
check(
    not _no_graph or len(_grad_calls) < 2 or _grad_calls[1][0] or _grad_calls[0][1],
    "hvp(f, x, v) raised an error that it asked for the gradient of a tensor without a graph: "
    "the first torch.autograd.grad ran without create_graph=True, so its gradient g is a "
    "constant, and (g * v).sum() has no graph for the second gradient.",
)
check(
    not _no_graph,
    "hvp(f, x, v) raised an error that it asked for the gradient of a tensor without a graph, "
    "though f was called on a tensor that requires grad. g keeps a graph only when the first "
    "gradient is taken with create_graph=True (by torch.autograd.grad or backward) and g is not "
    "detached afterwards.",
)
check(
    _error is None,
    f"hvp(f, x, v) raised an error (the error: {_error}); call it in a cell of your own to see "
    "where.",
)
check(
    isinstance(_hv, torch.Tensor) and _hv.shape == _x.shape and _hv.dtype == _x.dtype,
    "hvp(f, x, v) should return a tensor shaped and typed like x: the product H(x) v.",
)
_H = torch.func.hessian(_f)(_x)
check(
    not torch.allclose(_hv, torch.func.grad(_f)(_x)),
    "hvp returned the gradient of f, not the gradient of (g * v).sum(): differentiate a second "
    "time.",
)
check(
    not torch.allclose(_hv, _H.sum(1) * _v),
    "hvp returned (H 1) * v: the gradient of g.sum() times v. Multiply by v before the second "
    "gradient: differentiate (g * v).sum().",
)
check(
    torch.allclose(_hv.detach(), _H @ _v, atol=1e-10),
    "hvp(f, x, v) differs from torch.func.hessian(f)(x) @ v: differentiate (g * v).sum() once "
    "more, with g from create_graph=True, and check for a stray constant factor.",
)
check(
    not _x.requires_grad and _x.grad is None,
    "hvp changed the caller's x (it requires grad now): work on xl = x.detach().requires_grad_().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(104)
_A = torch.randn(5, 5, dtype=torch.float64, generator=_gen)
_M = torch.randn(3, 6, dtype=torch.float64, generator=_gen)
_fns = {
    "a quadratic form x A x / 2 on 5 numbers": (lambda t: 0.5 * t @ _A @ t, 5),
    "logsumexp(M x) on 6 numbers": (lambda t: torch.logsumexp(_M @ t, 0), 6),
    "sum(sin(x) roll(x)) + sum(x^4) / 4 on 7 numbers": (
        lambda t: (t.sin() * t.roll(1)).sum() + (t**4).sum() / 4,
        7,
    ),
}
for _name, (_fn, _n) in _fns.items():
    _x = torch.randn(_n, dtype=torch.float64, generator=_gen)
    _v = torch.randn(_n, dtype=torch.float64, generator=_gen)
    _x_before = _x.clone()
    _hv = hvp(_fn, _x, _v)
    observe(
        f"hvp(f, x, v) for {_name}, random float64 x and v",
        {
            "H v": _hv,
            "x requires grad after the call": _x.requires_grad,
            "x unchanged": torch.equal(_x.detach(), _x_before),
        },
        rtol=1e-7,
        atol=1e-10,
        hint="gradient with create_graph=True, then the gradient of (g * v).sum(), on a leaf "
        "xl = x.detach().requires_grad_(). An H v off by a constant factor (2, 1/2) has a stray "
        "factor in (g * v).sum() or after the second gradient.",
    )
### END HIDDEN TESTS

# %% [markdown]
# The same product has a second recipe. $Hv$ is the derivative of the gradient function
# $\nabla f$ along $v$: a Jacobian-vector product of $\nabla f$. So push the tangent $v$
# **forward** through a reverse-mode gradient: `torch.func.jvp(torch.func.grad(f), (x,), (v,))`.
# This is **forward over reverse**. It needs no `create_graph`: the tangent `v` rides along
# through the forward and backward passes of `grad(f)` as they run, instead of a second
# backward pass over a recorded backward graph. `torch.func.hessian(f)` builds the whole
# matrix the same way, as `jacfwd(jacrev(f))`.
#
# The cell checks that the recipes agree on a function of 2000 numbers, then times them
# (the best of several runs each). Which one wins depends on the function, its size and the
# machine: read your own two lines.

# %%
gen = torch.Generator().manual_seed(6)
n = 2000
A = torch.randn(n, n, generator=gen, dtype=torch.float64) / n**0.5


def f_big(t):
    return torch.logsumexp(A @ torch.tanh(t), 0) + (t**4).sum() / 4


x, v = (
    torch.randn(n, generator=gen, dtype=torch.float64),
    torch.randn(n, generator=gen, dtype=torch.float64),
)
ways = {
    "reverse over reverse, your hvp": lambda: hvp(f_big, x, v),
    "forward over reverse, jvp(grad(f))": lambda: torch.func.jvp(
        torch.func.grad(f_big), (x,), (v,)
    )[1],
}
with your_code("hvp"):
    results = {name: way() for name, way in ways.items()}
first, second = results.values()
print("largest difference between the two:", (first - second).abs().max().item())
for name, way in ways.items():
    print(f"{name:36} {best_ms(way, repeats=2 if GRADING else 5):7.2f} ms")

# %% [markdown]
# ## 6. Your own `autograd.Function` under `torch.func`
#
# Lab 9 wrote its Functions with a `forward(x)` and a `setup_context`, the style that
# `torch.func` supports, and mentioned the older one: a `forward(ctx, x)` that saves what the
# backward pass needs as it goes. Such a Function works with `backward()`, but `torch.func`'s
# transforms refuse it. A transform calls the pieces of your Function itself, at its own
# level, so it needs the computation (`forward`) kept apart from the saving (`setup_context`),
# and a rule for each
# thing it does: how to push a tangent through, how to batch. In the style `torch.func`
# supports:
#
# * `forward(x)` takes no `ctx` and only computes;
# * `setup_context(ctx, inputs, output)` saves what is needed: `ctx.save_for_backward(...)`
#   for `backward`, `ctx.save_for_forward(...)` for `jvp`;
# * `backward(ctx, grad_output)` as before (for `grad`, `vjp`, `jacrev`);
# * `jvp(ctx, x_tangent)` returns the output's tangent (for `jvp`, `jacfwd`, forward AD);
# * for `vmap`: the class attribute `generate_vmap_rule = True`, which lets `vmap` batch the
#   Function by running your own `forward`, `setup_context`, `backward` and `jvp` once, on
#   tensors that stand for the whole batch (so they must be written in PyTorch operations),
#   or a `vmap` staticmethod that you write.
#
# Here is what each missing piece costs, with the messages of torch 2.10 to 2.15:


# %%
class DoubleOldStyle(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


class DoubleNoVmap(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


batch = torch.ones(3, 2)
for name, run in {
    "old style under grad": lambda: torch.func.grad(lambda t: DoubleOldStyle.apply(t).sum())(
        batch[0]
    ),
    "no vmap rule under vmap": lambda: torch.func.vmap(DoubleNoVmap.apply)(batch),
    "no jvp under jvp": lambda: torch.func.jvp(DoubleNoVmap.apply, (batch,), (batch,)),
}.items():
    try:
        run()
        print(f"{name}: worked")
    except (RuntimeError, NotImplementedError) as error:
        print(f"{name}: {type(error).__name__}: {str(error).split(' For more')[0]}")
print(
    "setup_context style under grad:",
    torch.func.grad(lambda t: DoubleNoVmap.apply(t).sum())(batch[0]),
)

# %% [markdown]
# ### Exercise 5 (2 points): a softsign that `torch.func` can transform
#
# Write `class Softsign(torch.autograd.Function)` for $s(x) = x / (1 + |x|)$, elementwise,
# whose derivative is $s'(x) = 1 / (1 + |x|)^2$, such that `Softsign.apply` works under
# `backward()`, `torch.func.grad`, `vmap`, `jvp` and `jacfwd`:
#
# * `forward(x)` (no `ctx`) and `setup_context(ctx, inputs, output)`;
# * `backward(ctx, grad_output)` returns `grad_output` times $s'(x)$;
# * `jvp(ctx, x_tangent)` returns `x_tangent` times $s'(x)$. In `jvp`, `ctx.saved_tensors`
#   holds what `ctx.save_for_forward` saved, and in `backward` what `ctx.save_for_backward`
#   saved: each sees only its own, so save `x` with both;
# * `generate_vmap_rule = True`.


# %% nbgrader={"solution": true, "grade_id": "softsign"}
class Softsign(torch.autograd.Function):
    ### BEGIN SOLUTION
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x / (1 + x.abs())

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / (1 + x.abs()) ** 2

    @staticmethod
    def jvp(ctx, x_tangent):
        (x,) = ctx.saved_tensors
        return x_tangent / (1 + x.abs()) ** 2

    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_softsign"}
### BEGIN HIDDEN TESTS
def _softsign_runs(x, w, v):
    """What every transform makes of Softsign.apply at x (weights w, tangent v); a run that
    raises (NotImplementedError too: an inherited jvp) is recorded as the error's name."""
    runs = {
        "Softsign.apply(x)": lambda: Softsign.apply(x),
        "grad of sum(w * s(x)), by torch.func.grad": lambda: torch.func.grad(
            lambda t: (w * Softsign.apply(t)).sum()
        )(x),
        "vmap over rows of Softsign.apply": lambda: torch.func.vmap(Softsign.apply)(x),
        "vmap over rows of the grad of sum(w * s(row))": lambda: torch.func.vmap(
            torch.func.grad(lambda t, wr: (wr * Softsign.apply(t)).sum())
        )(x, w),
        "tangent of jvp along v": lambda: torch.func.jvp(Softsign.apply, (x,), (v,))[1],
        "jacfwd of a row": lambda: torch.func.jacfwd(Softsign.apply)(x[0]),
    }
    out = {}
    for name, run in runs.items():
        try:
            out[name] = run()
        except Exception as error:
            out[name] = f"raised {type(error).__name__}"
    return out


### END HIDDEN TESTS
def _run(fn, *args):
    """attempt(fn, *args), with a NotImplementedError (an inherited jvp) as an error too."""
    try:
        return attempt(fn, *args)
    except NotImplementedError as error:
        return None, f"NotImplementedError: {str(error)[:200]}"


check(
    defined("Softsign")
    and isinstance(Softsign, type)
    and issubclass(Softsign, torch.autograd.Function),
    "Softsign is not defined as a subclass of torch.autograd.Function: run the exercise cell "
    "above (it raised an error, or did not run).",
)
_x = torch.tensor([[-3.0, -0.5, 0.0], [0.25, 1.0, 4.0]], dtype=torch.float64)
_w = torch.tensor([[1.0, -2.0, 0.5], [3.0, 1.0, -1.0]], dtype=torch.float64)
_want_s = _x / (1 + _x.abs())
_want_d = 1 / (1 + _x.abs()) ** 2
check(
    Softsign.setup_context is not torch.autograd.Function.setup_context,
    "Softsign has no setup_context staticmethod, which torch.func needs: write forward(x) "
    "without ctx, and setup_context(ctx, inputs, output) that saves x.",
)
_s, _error = _run(Softsign.apply, _x)
check(
    _error is None or Softsign.forward.__code__.co_argcount == 1,
    f"Softsign.apply(x) raised an error (the error: {_error}), and forward takes more than one "
    "argument: with a setup_context, forward takes x alone (no ctx).",
)


class _SavesSeen:
    """A stand-in ctx for one direct call of setup_context: what it was asked to save."""

    def __init__(self):
        self.saved = []

    def save_for_backward(self, *tensors):
        self.saved += tensors

    save_for_forward = save_for_backward


_ctx = _SavesSeen()
_run(Softsign.setup_context, _ctx, (_x,), _want_s)
check(
    _error is None or all(isinstance(_t, torch.Tensor) for _t in _ctx.saved),
    "Softsign.apply(x) raised an error, and setup_context asks ctx to save something that is "
    f"not a tensor (a {', '.join(sorted({type(_t).__name__ for _t in _ctx.saved}))}): inputs is "
    "the tuple of forward's arguments, so unpack it, (x,) = inputs, and save x.",
)
check(
    _error is None,
    f"Softsign.apply(x) raised an error (the error: {_error}); call it in a cell of your own "
    "to see where.",
)
check(
    isinstance(_s, torch.Tensor) and _s.shape == _x.shape and _s.dtype == _x.dtype,
    "Softsign.apply(x) should return a tensor shaped and typed like x: x / (1 + |x|).",
)
check(
    torch.allclose(_s, _want_s),
    "Softsign.apply(x) should be x / (1 + |x|), elementwise: check the forward staticmethod.",
)
_g, _error = _run(torch.func.grad(lambda t: (_w * Softsign.apply(t)).sum()), _x)
_saved, _ = _run(lambda: len(Softsign.apply(_x.clone().requires_grad_()).grad_fn.saved_tensors))
check(
    _error is None or _saved != 0,
    f"torch.func.grad of a sum of Softsign.apply raised an error (the error: {_error}), and "
    "setup_context saved no tensor for backward: save x with ctx.save_for_backward(x) there "
    "(backward's ctx.saved_tensors holds only those).",
)
check(
    _error is None,
    f"torch.func.grad of a sum of Softsign.apply raised an error (the error: {_error}); run "
    "torch.func.grad(lambda t: Softsign.apply(t).sum())(x) in a cell of your own to see where.",
)
check(
    isinstance(_g, torch.Tensor) and _g.shape == _x.shape and _g.dtype == _x.dtype,
    "backward of Softsign should return one tensor shaped and typed like x: grad_output * s'(x).",
)
check(
    not torch.allclose(_g, _want_d),
    "the gradient of sum(w * s(x)) ignores w: backward must multiply grad_output by s'(x).",
)
check(
    torch.allclose(_g, _w * _want_d),
    "the gradient of sum(w * s(x)) should be w / (1 + |x|)^2: check the derivative in backward.",
)
_v, _error = _run(torch.func.vmap(Softsign.apply), _x)
check(
    _error is None
    or getattr(Softsign, "generate_vmap_rule", False)
    or Softsign.vmap is not torch.autograd.Function.vmap,
    "vmap(Softsign.apply) raised an error, and Softsign has no vmap rule: set the class "
    "attribute generate_vmap_rule = True (or write a vmap staticmethod).",
)
check(
    _error is None,
    f"vmap(Softsign.apply) raised an error (the error: {_error}); run it in a cell of your own "
    "to see where.",
)
check(
    isinstance(_v, torch.Tensor) and _v.shape == _x.shape and torch.allclose(_v, _want_s),
    "vmap(Softsign.apply) over the rows of x should give x / (1 + |x|), as without vmap.",
)
# without a jvp of its own, Softsign inherits one that raises NotImplementedError
check(
    Softsign.jvp is not torch.autograd.Function.jvp,
    "Softsign has no jvp staticmethod, so torch.func.jvp cannot go through it: write one, and "
    "save what it reads with ctx.save_for_forward in setup_context.",
)
_t, _error = _run(torch.func.jvp, Softsign.apply, (_x,), (_w,))
check(
    _error is None or not _error.startswith("ValueError: not enough values to unpack"),
    "torch.func.jvp(Softsign.apply, ...) raised ValueError: not enough values to unpack: "
    "ctx.saved_tensors held fewer tensors than unpacked. In jvp it holds only what "
    "setup_context saved with ctx.save_for_forward.",
)
check(
    _error is None or not _error.startswith("NotImplementedError"),
    "torch.func.jvp(Softsign.apply, ...) raised NotImplementedError, though Softsign has a jvp "
    "staticmethod of its own: that jvp, or what it calls (autograd.Function's own jvp, "
    "super().jvp, only raises this), raised it. jvp must return the tangent itself: x_tangent "
    "times s'(x).",
)
check(
    _error is None,
    f"torch.func.jvp(Softsign.apply, ...) raised an error (the error: {_error}); run it in a "
    "cell of your own to see where.",
)
_t = _t[1]
check(
    isinstance(_t, torch.Tensor) and _t.shape == _x.shape and _t.dtype == _x.dtype,
    "the jvp staticmethod of Softsign should return one tensor shaped and typed like x.",
)
check(
    torch.allclose(_t, _w * _want_d),
    "the jvp of Softsign.apply along v should be v / (1 + |x|)^2: check the jvp staticmethod.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(105)
for _shape in ((4, 3), (2, 6), (5, 1)):
    _x = 3 * torch.randn(_shape, dtype=torch.float64, generator=_gen)
    _w = torch.randn(_shape, dtype=torch.float64, generator=_gen)
    _v = torch.randn(_shape, dtype=torch.float64, generator=_gen)
    observe(
        f"Softsign.apply under plain use, grad, vmap, vmap of grad, jvp and jacfwd, on a random "
        f"{_shape[0]}x{_shape[1]} float64 x",
        _softsign_runs(_x, _w, _v),
        rtol=1e-7,
        atol=1e-10,
        hint="forward(x) = x / (1 + |x|); backward and jvp multiply by 1 / (1 + |x|)^2 (a "
        "gradient off by a constant factor: a stray factor there); setup_context saves x for "
        "both; generate_vmap_rule = True.",
    )
_xl = torch.randn(5, dtype=torch.float64, generator=_gen).requires_grad_()
_s = Softsign.apply(_xl)
if isinstance(_s, torch.Tensor) and _s.requires_grad:
    try:
        _s.pow(2).sum().backward()
    except Exception:  # NotImplementedError too; x.grad stays None, which the record shows
        pass
observe(
    "Softsign.apply under backward(): the gradient of sum(s(x)^2) on a random 5-vector",
    _xl.grad,
    rtol=1e-7,
    atol=1e-10,
    hint="backward(ctx, grad_output) returns grad_output / (1 + |x|)^2.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * Forward mode carries a tangent with every value: `fwAD.make_dual(x, v)` inside
#   `fwAD.dual_level()`, and `fwAD.unpack_dual(out).tangent` is $Jv$, without a graph.
# * A jvp is a column of the Jacobian per forward pass, a vjp (lab 2's `backward(gradient=u)`)
#   a row per backward pass. `jacfwd` wins on tall Jacobians, `jacrev` on wide ones, and a
#   loss is as wide as it gets.
# * `torch.func.grad`, `vmap` and `functional_call` compose: per-sample gradients of a model
#   in one batched call; `vmap` runs Python once, so a random depth is drawn once per call.
# * $Hv$ comes from reverse over reverse (`create_graph=True`) or forward over reverse
#   (`jvp(grad(f))`); `hessian` is `jacfwd(jacrev(f))`.
# * A custom `autograd.Function` works under `torch.func` with `forward(x)` plus
#   `setup_context`, a `jvp` for forward mode, and `generate_vmap_rule = True` (or a `vmap`
#   staticmethod) for `vmap`.
