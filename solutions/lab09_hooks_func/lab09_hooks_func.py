# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 9: Hooks, saved tensors and memory, custom Functions, checkpointing
#
# Until now autograd has been a machine you feed and read: build a graph in the forward pass,
# call `backward()`, look at `.grad`. This lab opens it in five places:
#
# 1. **hooks** on tensors and modules: the gradient of each use of a shared weight (lab 3
#    only showed you the sum) and of each sample;
# 2. **saved-tensor hooks**: what a graph keeps in memory for backward, stored differently,
#    and a trap they set for lab 4's in-place check;
# 3. your own **`torch.autograd.Function`**, with a backward you write yourself;
# 4. **activation checkpointing**: keep less, recompute the rest, choose the segments;
# 5. **anomaly detection**: the forward line behind a backward error (lab 4's in-place error).
#
# %course-include how_this_lab_works.md

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import contextlib
import math
import random
import time

import matplotlib.pyplot as plt
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

# The matrices here are small: one thread is as fast as several, and the timings steadier.
torch.set_num_threads(1)

print("torch", torch.__version__, "| grading run" if GRADING else "")


# %% [markdown]
# The model of this lab is the course's `DynamicNet` (lab 5), on made-up data: an input
# layer, **one** middle layer applied a random number of times (each use followed by a ReLU),
# an output layer and `log_softmax`. `model(x)` draws the depth from the model's own
# `random.Random`, so two models made with the same `seed` draw the same depths;
# `model(x, depth=3)` asks for a depth. `randomize(model, generator)` refills the weights from
# a `torch.Generator`, which the checks use to get the same weights on every machine.


# %% nbgrader={"locked": true, "grade_id": "dynamic_net"}
# %course-include dynamicnet.py


def randomize(model, generator):
    """Refill every parameter of `model` from `generator` (scaled like nn.Linear's default)."""
    with torch.no_grad():
        for _name, p in sorted(model.named_parameters()):
            fan_in = p.shape[-1] if p.dim() > 1 else p.shape[0]
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) / fan_in**0.5)
    return model


# %% [markdown]
# ## 1. Hooks: watching gradients go by
#
# `t.register_hook(fn)` asks autograd to call `fn(grad)` when the gradient with respect to
# `t` has been computed during a backward pass. The hook may look at it, store it, or return a
# new tensor, which autograd then uses in its place. It returns a *handle*; `handle.remove()`
# takes the hook off again. (Gradient clipping is no hook: `clip_grad_norm_` runs after
# `backward()`, because the norm it clips is that of all the gradients together.)
#
# Start with lab 3's example: one weight `W` used three times, `h = tanh(W @ h)`. A hook on `W`
# itself is called **once**, with the gradient already summed over the three uses: the engine adds
# up everything that flows into a node before it calls the node's hooks. A hook on an
# **intermediate** tensor sees the gradient of the loss with respect to that tensor; the cell puts
# one on the hidden state after each step. The hooks fire in backward order, the last step first.

# %%
W = torch.randn(3, 3, requires_grad=True)
h, seen, fired = torch.randn(3, 1), [], []
handle = W.register_hook(lambda g: seen.append(g.clone()))
for step in range(1, 4):
    h = torch.tanh(W @ h)
    h.register_hook(lambda g, step=step: fired.append(step))
h.sum().backward()
handle.remove()
print("calls of the hook on W:", len(seen), "| it saw W.grad:", torch.equal(seen[0], W.grad))
print("the hooks on the hidden states fired for the steps", fired)

# %% [markdown]
# To see the gradient of **each use** of `W`, give each use a node of its own. A view such
# as `W.view_as(W)` or `W.expand_as(W)` (or a copy, `W * 1`) is a new tensor in the graph,
# with the same numbers as `W`; if use number `i` multiplies by its own view `W_i`, the
# gradient with respect to `W_i` is exactly that use's contribution, and the views' gradients
# flow into `W` and add up there, as before.
#
# ### Exercise 1 (2 points): the gradient of each use, by hooks
#
# Write `per_use_grads(W, h0, k)`. The forward pass is `h = h0`, then `k` times
# `h = torch.tanh(W_i @ h)`, where `W_i` is a fresh view of `W` for use `i` carrying a hook
# that stores its gradient; then `loss = h.sum()` and one backward pass. Return the list of the
# `k` gradients **in the order of the uses** (the first use's first), each a tensor shaped like
# `W`. Careful: the hooks fire in backward order. For `k = 0` return an empty list.


# %% nbgrader={"solution": true, "grade_id": "per_use_grads"}
def per_use_grads(W, h0, k):
    ### BEGIN SOLUTION
    grads = [None] * k
    h = h0
    for i in range(k):
        W_i = W.view_as(W)
        W_i.register_hook(lambda g, i=i: grads.__setitem__(i, g.clone()))
        h = torch.tanh(W_i @ h)
    if k:
        h.sum().backward()
    return grads
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_per_use_grads"}
torch.manual_seed(11)
_W = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
_h0 = torch.randn(3, 1, dtype=torch.float64)
_reached_W = []  # filled when a gradient reaches W: a backward pass ran through the uses
_W.register_hook(_reached_W.append)
_grads, _err = attempt(per_use_grads, _W, _h0, 3)
check(
    isinstance(_grads, list) and len(_grads) == 3,
    "per_use_grads(W, h0, 3) should return a list of 3 gradients, one per use of W (the error it "
    f"raised, if any: {_err}); call it in a cell of your own to see what it does.",
)
_none = [_i for _i, _g in enumerate(_grads) if _g is None]
check(
    not _none or _reached_W,
    f"some entries are None (here: {_none}), and no gradient reached W: no backward pass ran, so "
    "no hook fired. Call h.sum().backward() after the k uses.",
)
check(
    not _none,
    f"some entries are None (here: {_none}), though a backward pass ran: no hook wrote them. "
    "Hooks run after the loop: a lambda reading the loop variable sees its last value (bind it: "
    "lambda g, i=i: ...), and a use without a hooked view has no hook.",
)
_kind = (_W.shape, _W.dtype)
check(
    all(isinstance(_g, torch.Tensor) and (_g.shape, _g.dtype) == _kind for _g in _grads),
    "each entry should be a tensor shaped like W, of W's dtype: the gradient a hook received for "
    "one use.",
)
# The gradient of the shared W, and lab 3's copies (one leaf per use), computed here.
_h = _hc = _h0
_copies = [_W.detach().clone().requires_grad_() for _ in range(3)]
for _c in _copies:
    _h, _hc = torch.tanh(_W @ _h), torch.tanh(_c @ _hc)
(_shared,) = torch.autograd.grad(_h.sum(), _W)
_copy_grads = torch.autograd.grad(_hc.sum(), _copies)
check(
    not all(torch.allclose(_g, _shared) for _g in _grads),
    "every entry equals the gradient of the shared W, summed over all uses: a hook on W itself "
    "fires with the sum. Hook a fresh view W.view_as(W) per use, and multiply by that view.",
)
check(
    torch.allclose(sum(_grads), _shared, atol=1e-10),
    "your gradients do not add up to the gradient of the shared W. Same forward as described: "
    "k steps h = tanh(W_i @ h) from h0, then loss = h.sum()?",
)
check(
    not all(torch.allclose(_g, _c) for _g, _c in zip(reversed(_grads), _copy_grads, strict=True)),
    "your list is in backward order: the hook of the last use fires first. Store each "
    "gradient at the index of its use (or reverse the list).",
)
check(
    all(torch.allclose(_g, _c, atol=1e-10) for _g, _c in zip(_grads, _copy_grads, strict=True)),
    "the gradients add up, but entry i is not the gradient of use i (compared with one "
    "separate copy of W per use, as in lab 3).",
)
check(
    attempt(per_use_grads, _W, _h0, 0) == ([], None),
    "with k = 0 there is no use of W, so per_use_grads should return an empty list.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(91)
for _k, _n in ((1, 4), (2, 4), (4, 5), (6, 3)):
    _W = torch.randn(_n, _n, dtype=torch.float64, generator=_gen, requires_grad=True)
    _h0 = torch.randn(_n, 1, dtype=torch.float64, generator=_gen)
    _grads = per_use_grads(_W, _h0, _k)
    _grads = list(_grads) if isinstance(_grads, (list, tuple)) else None
    observe(
        f"per_use_grads(W, h0, k={_k}) on a random {_n}x{_n} float64 W",
        {"number of gradients": _grads and len(_grads), "gradients in order of use": _grads},
        rtol=0,
        atol=1e-10,
        hint="one fresh view of W per use, each with a hook; k steps h = tanh(W_i @ h) from h0; "
        "the list in the order of the uses, although the hooks fire last use first.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Modules have hooks too: `register_forward_hook(fn)` calls `fn(module, inputs, output)` after
# every call of the module's forward, and `register_full_backward_hook(fn)` calls
# `fn(module, grad_input, grad_output)` once per call during the backward pass, with the
# gradients with respect to that call's inputs and outputs (not its parameters). For a linear
# layer, the weight's gradient from one call is `grad_output.T @ input`, a sum over the batch;
# keep the sample index (`torch.einsum("ni,nj->nij", grad_output, input)`) and you have each
# **sample's** share. So one ordinary `backward()` can give per-sample gradients, if hooks
# collect the pieces, as the Opacus library does for differentially private training (lab 10
# uses `torch.func.vmap`). Remove hooks when done: a forgotten hook fires in every later pass.

# %%
torch.manual_seed(2)
net = DynamicNet(32, 64, 10, seed=2)
x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
inputs, grad_outputs = [], []
handles = [
    net.middle_linear.register_forward_hook(lambda m, inp, out: inputs.append(inp[0].detach())),
    net.middle_linear.register_full_backward_hook(
        lambda m, g_in, g_out: grad_outputs.append(g_out[0])
    ),
]
F.nll_loss(net(x, depth=3), y).backward()
for handle in handles:
    handle.remove()
grad_outputs.reverse()  # backward hooks fired last use first
pairs = list(zip(grad_outputs, inputs, strict=True))
per_use = [g.T @ inp for g, inp in pairs]
print("norms of the weight gradient of each use:", [round(dW.norm().item(), 5) for dW in per_use])
total = net.middle_linear.weight.grad.clone()
print("the uses add up to middle_linear.weight.grad:", torch.allclose(sum(per_use), total))
per_sample = sum(torch.einsum("ni,nj->nij", g, inp) for g, inp in pairs)  # (16, 64, 64)
net.zero_grad()  # sample 0 alone, its loss divided by 16 as in the batch's mean
(F.nll_loss(net(x[:1], depth=3), y[:1]) / 16).backward()
print(
    "per-sample gradient of sample 0 equals a backward pass of sample 0 alone:",
    torch.allclose(per_sample[0], net.middle_linear.weight.grad, atol=1e-6),
)

# %% [markdown]
# ## 2. What a graph keeps for the backward pass
#
# Labs 2 and 4 showed that a graph holds on to tensors until `backward()` frees them: `exp` keeps
# its output, `a * b` keeps both factors. With `torch.autograd.graph.saved_tensors_hooks(pack,
# unpack)` you can watch that happen. Inside the `with` block, a tensor an operation saves for
# backward goes through `pack(t)`, and what `pack` returns is stored instead; when backward needs
# the tensor, it calls `unpack(stored)`, which should give back the tensor that was saved: same
# shape, dtype and values. Autograd does not check it (a float64 tensor for a float32 one goes
# through unnoticed), and gradients are only as exact as what `unpack` returns.
#
# One kind of saved tensor never reaches `pack`: a Python number. `a * 2` keeps the 2 (its
# node reads it as a zero-dimensional tensor, `grad_fn._saved_other`), but as a *wrapped
# number*, which autograd stores as it is, outside the hooks. Multiply by
# `torch.tensor(2.0)` instead, and that tensor goes through `pack` like any other.


# %%
def show_saved(label, fn):
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = fn()
    names = {id(a): "a", id(b): "b"}
    names = [names.get(id(t)) or ("the output" if torch.equal(t, out.detach()) else
             f"another tensor, shape {tuple(t.shape)}") for t in saved]  # fmt: skip
    print(f"{label:22} pack sees {len(saved)}: {', '.join(names) or '-'}")


a = torch.randn(4, requires_grad=True)
b = torch.randn(4, requires_grad=True)
show_saved("a * 2", lambda: a * 2)
show_saved("a * torch.tensor(2.0)", lambda: a * torch.tensor(2.0))
show_saved("a * b", lambda: a * b)
show_saved("a.exp()", lambda: a.exp())
show_saved("a.sin()", lambda: a.sin())
show_saved("a.relu()", lambda: a.relu())
show_saved("a.sum()", lambda: a.sum())
print("what a * 2 keeps all the same:", repr((a * 2).grad_fn._saved_other))

# %% [markdown]
# ### Exercise 2 (2 points): count the bytes
#
# Write `saved_bytes(model, x)` that runs `model(x)` **once** inside
# `saved_tensors_hooks`, with a `pack` that adds `t.numel() * t.element_size()` of every
# tensor it is handed to a running total and returns `t` unchanged (and an `unpack` that
# returns what it is given). Return the total as an `int`.
#
# Count a tensor every time it is packed, even if the same tensor was packed before: the
# number is the sum over all the places the graph saved a tensor. (Two of those places may
# share memory; the table after the check shows how much.) `model` may be any function of
# one tensor, not only a module.


# %% nbgrader={"solution": true, "grade_id": "saved_bytes"}
def saved_bytes(model, x):
    ### BEGIN SOLUTION
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_saved_bytes"}
_x = torch.randn(10, requires_grad=True)
_n, _err = attempt(saved_bytes, lambda t: t.exp(), _x)
check(
    isinstance(_n, int),
    f"saved_bytes should return an int, a number of bytes (it returned a {type(_n).__name__}; "
    f"the error it raised, if any: {_err}): count with Python ints, or convert with int(...).",
)
check(
    _n != 10,
    "exp(x) of 10 float32 numbers saved 10 elements, which is 40 bytes: multiply numel() "
    "by element_size(), the bytes of one element.",
)
check(
    _n == 40,
    f"exp(x) of 10 float32 numbers saves its output, 10 x 4 = 40 bytes, but saved_bytes counts "
    f"another number (it says {_n}). Is model(x) run inside the with block?",
)
_n = saved_bytes(lambda t: t.exp(), _x.double())
check(
    _n == 80,
    f"in float64 an element has 8 bytes, so exp of 10 numbers saves 80 bytes (saved_bytes says "
    f"{_n}). Use t.element_size() rather than a fixed 4.",
)
_n = saved_bytes(lambda t: t * t, _x)
check(
    _n == 80,
    f"t * t saves t twice (once as each factor), 2 x 40 = 80 bytes (saved_bytes says {_n}). "
    "Count every tensor pack is handed, also when it was packed before.",
)
check(
    saved_bytes(lambda t: t * 2.0, _x) == 0,
    "t * 2.0 hands pack no tensor (the 2.0 is kept as a wrapped number, outside the hooks): "
    "expected 0 bytes.",
)
_n = saved_bytes(lambda t: t[:5].sin(), _x)
check(
    _n != 40,
    "x[:5].sin() saves the view x[:5], 5 x 4 = 20 bytes, but saved_bytes says 40: the bytes of "
    "the whole storage the view shares with x. Count the tensor's own elements, "
    "numel() * element_size(), not its storage.",
)
check(
    _n == 20,
    f"x[:5].sin() saves the view x[:5], 5 x 4 = 20 bytes (saved_bytes says {_n}).",
)
_net = DynamicNet(32, 64, 10, seed=5)
_draws = random.Random(5)
for _ in range(4):
    _n = saved_bytes(_net, torch.randn(8, 32))
    _depth = _draws.randint(0, 3)
    check(
        _net.last_depth == _depth,
        "DynamicNet drew another depth than one call of the model would: run model(x) exactly "
        "once in saved_bytes (each call draws a depth).",
    )
print("bytes of one DynamicNet pass at the depth it drew:", _n, "(depth", _net.last_depth, ")")
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(92)
for _seed, _batch, _hidden, _dtype in ((3, 7, 20, torch.float32), (8, 5, 12, torch.float64)):
    _net = DynamicNet(d_in=6, hidden=_hidden, d_out=3, max_depth=5, seed=_seed).to(_dtype)
    _record = {}
    for _draw in range(1, 5):
        _x = torch.randn(_batch, 6, dtype=_dtype, generator=_gen)
        _record[f"draw {_draw}"] = {"bytes": saved_bytes(_net, _x), "depth": _net.last_depth}
    observe(
        f"saved_bytes(model, x) on a {str(_dtype)[6:]} DynamicNet (hidden {_hidden}, batch "
        f"{_batch}), four passes at the depths it draws",
        _record,
        rtol=0,
        atol=0,
        hint="count numel() * element_size() of every tensor pack is handed, each time it is "
        "handed; call model(x) exactly once, inside the with block.",
    )
_fns = {
    "sin(x) * exp(x)": lambda t: t.sin() * t.exp(),
    "tanh(x) @ x.T (2-d)": lambda t: (
        torch.tanh(t.reshape(t.shape[0], -1)) @ t.reshape(t.shape[0], -1).T
    ),
    "x.sigmoid().sum() * 3": lambda t: t.sigmoid().sum() * 3,
    "x[1:].sin() (a view)": lambda t: t[1:].sin(),
}
_record = {}
for _shape in ((3,), (4, 5), (2, 3, 2)):
    for _fn_name, _fn in _fns.items():
        _x = torch.randn(_shape, dtype=torch.float64, generator=_gen, requires_grad=True)
        _record[f"{_fn_name} on float64 {_shape}"] = saved_bytes(_fn, _x)
observe(
    "saved_bytes(fn, x) for three functions on float64 tensors of three shapes",
    _record,
    rtol=0,
    atol=0,
    hint="every tensor handed to pack counts, each time; bytes are numel() * element_size().",
)
### END HIDDEN TESTS

# %% [markdown]
# Now the numbers, for one pass of `DynamicNet` at each depth from 0 up: the bytes your
# `saved_bytes` counts, and the memory those saved tensors really occupy,
# `distinct_saved_bytes`: each block of memory (a tensor's *storage*) once, parameters left out
# (they exist whether or not a graph saves them). The two differ because one tensor is often
# saved in two places (the output of a ReLU is saved by the ReLU and again by the next layer,
# as its input) and because the middle layer saves its **weight** once per use.


# %% nbgrader={"locked": true, "grade_id": "distinct_saved_bytes"}
def distinct_saved_bytes(fn, *args, leave_out=()):
    """Run fn(*args) once. Return its output and the bytes of the distinct storages behind the
    tensors it saved for backward, leaving out the storages of the tensors in `leave_out`."""
    apart = {t.untyped_storage().data_ptr() for t in leave_out}
    blocks = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in apart:
            blocks[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, sum(blocks.values())


# %%
BATCH, HIDDEN, DEPTHS = (128, 128, range(7)) if GRADING else (512, 256, range(9))
torch.manual_seed(3)
big = DynamicNet(64, HIDDEN, 10, max_depth=max(DEPTHS), seed=3)
params = list(big.parameters())
xb, yb = torch.randn(BATCH, 64), torch.randint(0, 10, (BATCH,))
counted = [saved_bytes(lambda t, d=d: big(t, depth=d), xb) / 2**20 for d in DEPTHS]
distinct = [distinct_saved_bytes(big, xb, d, leave_out=params)[1] / 2**20 for d in DEPTHS]
print(f"one {BATCH} x {HIDDEN} float32 activation: {BATCH * HIDDEN * 4 / 2**20:.4f} MiB")
print("depth  every slot MiB  distinct MiB  distinct step")
for d in DEPTHS:
    step = distinct[d] - distinct[d - 1] if d else float("nan")
    print(f"{d:5d}  {counted[d]:14.4f}  {distinct[d]:12.4f}  {step:13.4f}")

# %% [markdown]
# Memory for backward grows **linearly with the depth the forward pass happened to take**: a
# dynamic graph costs what it did, not what it might have done. Each extra use fills three
# slots: the ReLU saves its output, the next layer saves the same tensor as its input, and the
# middle layer saves its weight. Of those, only the ReLU's output is new memory: the distinct
# line steps up by one activation per use (the last column).
#
# ### Packing saved tensors differently
#
# `pack` may return **anything**, as long as `unpack` turns it back into a tensor. Storing the
# saved tensors in half precision halves what they take, at the price of rounding them:
# float16 keeps 11 significant bits, about three decimal digits, and the rounding passes into
# the gradients (the cell prints by how much), the bargain mixed-precision training makes.


# %%
def half_pack(t):
    return (t.dtype, t.to(torch.float16)) if t.is_floating_point() else (None, t)


def half_unpack(packed):
    return packed[1] if packed[0] is None else packed[1].to(packed[0])


def middle_grad(pack, unpack):
    big.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = F.nll_loss(big(xb, depth=max(DEPTHS)), yb)
    loss.backward()
    return big.middle_linear.weight.grad.clone()


exact, rounded = middle_grad(lambda t: t, lambda t: t), middle_grad(half_pack, half_unpack)
change = ((rounded - exact).norm() / exact.norm()).item()
print(f"saved in float16: the middle weight's gradient changes by {change:.1e} (relative)")

# %% [markdown]
# The other classic `pack`, `torch.autograd.graph.save_on_cpu()`, moves saved tensors **to the
# CPU** and `unpack` brings them back to the GPU, freeing GPU memory at the cost of copies.
# For a tensor that is on the CPU already it saves nothing at all: `t.cpu()` returns `t`
# itself, and so `save_on_cpu`'s pack hands back the very tensor it was given (printed below).
#
# ### A trap: saved-tensor hooks switch off lab 4's check
#
# Lab 4's error, *a variable needed for gradient computation has been modified by an inplace
# operation*, comes from a version counter: a saved tensor remembers its version, and backward
# compares. But a tensor saved **while a saved-tensor hook is active** is not checked at all:
# autograd leaves it to `pack` to store something safe. A `pack` that returns `t` itself, like
# every `pack` so far, makes nothing safe: an in-place change goes into the gradient silently.
# Below, `e = a.exp()` saves its output, `e.add_(1)` changes it; the gradient should be $e^a$:


# %%
def exp_then_add_one(hooks):
    a = torch.tensor(1.0, requires_grad=True)
    with hooks:
        e = a.exp()  # exp saves its output e ...
    e.add_(1)  # ... which this changes in place
    try:
        e.sum().backward()
    except RuntimeError as error:
        return "RuntimeError: " + str(error)[:58] + "..."
    return f"no error, gradient {a.grad.item():.4f}"


t = torch.randn(3)
print(
    "save_on_cpu's pack returns a CPU tensor itself:",
    torch.autograd.graph.save_on_cpu().pack_hook(t)[1] is t,
)
same = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
copy = torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)
print(f"the true gradient, e^1:          {math.e:.4f}")
print("no hooks:                       ", exp_then_add_one(contextlib.nullcontext()))
print("pack returns t itself:          ", exp_then_add_one(same))
print("save_on_cpu, on a CPU tensor:   ", exp_then_add_one(torch.autograd.graph.save_on_cpu()))
print("pack returns a copy, t.clone(): ", exp_then_add_one(copy))

# %% [markdown]
# With `pack` returning `t` itself, or with `save_on_cpu` on a CPU tensor, the gradient comes
# out as $e + 1$ instead of $e$, and nothing warns. So whenever hooks are on, either `pack`
# stores a copy (then an in-place change cannot reach it, and the last line is right), or
# nothing may change a saved tensor in place.
#
# ## 3. Your own backward: `torch.autograd.Function`
#
# Sometimes you know a better backward than autograd would derive: more stable, cheaper, or
# simply different on purpose (a straight-through estimator). A subclass of
# `torch.autograd.Function` has three static methods:
#
# * `forward(x, ...)` computes the output. It runs with recording switched off: the operations
#   inside it leave no nodes, and `MyFunction.apply(x, ...)` puts one node,
#   `MyFunctionBackward`, in the graph instead.
# * `setup_context(ctx, inputs, output)` stores on `ctx` what backward will need; tensors go
#   through `ctx.save_for_backward(...)`.
# * `backward(ctx, grad_output)` returns one gradient per input of `forward` (`None` for an
#   input that needs none; `ctx.needs_input_grad` says which ones do).
#
# This is the current style. The older, combined style, a `forward(ctx, x, ...)` that takes
# `ctx` first and saves as it goes, still works, but `torch.func`'s transforms (lab 10) accept
# only a Function with a `setup_context`.
#
# What does backward return? Lab 2's answer: the engine hands it $v = \partial L / \partial y$,
# and it returns $\partial L / \partial x = v^\top J$, the **vector-Jacobian product** with the
# Jacobian $J = \partial y / \partial x$ of its forward. It never builds $J$. For
# `y = x @ W.T`, $v^\top J$ is `grad_output @ W` for `x` and `grad_output.T @ x` for `W`:


# %%
class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(x, W):
        return x @ W.T

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, W = inputs
        ctx.save_for_backward(x, W)

    @staticmethod
    def backward(ctx, grad_output):
        x, W = ctx.saved_tensors
        print("backward: ctx.needs_input_grad (x, W) =", ctx.needs_input_grad)
        grad_x = grad_output @ W if ctx.needs_input_grad[0] else None
        grad_W = grad_output.T @ x if ctx.needs_input_grad[1] else None
        return grad_x, grad_W


torch.manual_seed(4)
W, x, v = torch.randn(3, 4, requires_grad=True), torch.randn(5, 4), torch.randn(5, 3)
y = LinearFn.apply(x, W)
print("the node in the graph:", type(y.grad_fn).__name__)
y.backward(v)
print("W.grad equals v.T @ x:", torch.allclose(W.grad, v.T @ x))
J = torch.autograd.functional.jacobian(lambda W: x @ W.T, W.detach())  # shape (5, 3, 3, 4)
print("and v^T J, J built whole:", torch.allclose(W.grad, torch.einsum("ab,abcd->cd", v, J)))

# %% [markdown]
# Why `ctx.save_for_backward(x)` and not `ctx.x = x`? A tensor saved through it is a saved tensor
# like those of section 2: the saved-tensor hooks see it (so packing and checkpointing work on
# it), and, when no hook is active, lab 4's version check guards it. A tensor stuck on `ctx` as an
# attribute gets neither: change it in place, and backward computes with the new values without a
# word. One more tool of `ctx`: `ctx.mark_non_differentiable(t)`, in `setup_context`, declares an
# output that has no gradient (a mask, say; it comes out with `requires_grad=False`, and backward
# receives zeros for it), and integer outputs are non-differentiable anyway.
#
# The example of the exercise is softplus, $\log(1 + e^x)$, a smooth ReLU. Written as it
# reads, it overflows: in float32, $e^x$ is infinite from some $x$ on (the cell prints where).

# %%
xs = torch.linspace(-100, 100, 401)
naive = torch.log(1 + torch.exp(xs))
print("log(1 + exp(x)) in float32 is infinite from x =", xs[torch.isinf(naive)][0].item())
stable = xs.clamp(min=0) + torch.log1p(torch.exp(-xs.abs()))
print("max(x, 0) + log1p(exp(-|x|)) is finite everywhere:", bool(torch.isfinite(stable).all()))

# %% [markdown]
# The stable form uses $\log(1 + e^x) = \max(x, 0) + \log(1 + e^{-|x|})$, where the
# exponential never exceeds 1. The derivative is the sigmoid, $\sigma(x) = 1/(1 + e^{-x})$,
# which `torch.sigmoid` computes without overflow; $e^x / (1 + e^x)$ would give `inf / inf`,
# which is `nan`, for large `x`.
#
# ### Exercise 3 (3 points): a stable softplus with its own backward
#
# Complete `StableSoftplus`: `forward(x)` returns the stable softplus of `x` (same shape and
# dtype); `setup_context(ctx, inputs, output)` saves what backward needs with
# `ctx.save_for_backward`; `backward(ctx, grad_output)` returns `grad_output` times the
# derivative, the vector-Jacobian product (the Jacobian is diagonal here). It must give finite
# values and gradients for every float32 input, and pass `torch.autograd.gradcheck` in
# float64. (Saving the output `y` instead of `x` works too: $\sigma(x) = 1 - e^{-y}$, which
# `-torch.expm1(-y)` computes accurately.)


# %% nbgrader={"solution": true, "grade_id": "stable_softplus"}
class StableSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(x):
        ### BEGIN SOLUTION
        return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))
        ### END SOLUTION

    @staticmethod
    def setup_context(ctx, inputs, output):
        ### BEGIN SOLUTION
        (x,) = inputs
        ctx.save_for_backward(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_output):
        ### BEGIN SOLUTION
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)
        ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_stable_softplus"}
check(
    "setup_context" in vars(StableSoftplus),
    "StableSoftplus should define setup_context(ctx, inputs, output), with a forward that takes "
    "no ctx: the style this exercise asks for.",
)
_x = torch.tensor([-200.0, -20.0, -1.0, 0.0, 1.0, 20.0, 200.0], requires_grad=True)
_y, _err = attempt(StableSoftplus.apply, _x)
check(
    isinstance(_y, torch.Tensor) and _y.shape == _x.shape and _y.dtype == _x.dtype,
    "StableSoftplus.apply(x) should return a tensor of x's shape and dtype (the error it raised, "
    f"if any: {_err}); call it in a cell of your own to see what it does.",
)
check(
    bool(torch.isfinite(_y).all()),
    "StableSoftplus gave an infinite or nan value for x from -200 to 200 (it gave "
    f"{_y.tolist()}): use max(x, 0) + log1p(exp(-|x|)), which never overflows.",
)
check(
    torch.allclose(_y, F.softplus(_x), rtol=1e-5, atol=1e-6),
    "StableSoftplus differs from F.softplus: log(1 + e^x) = max(x, 0) + log1p(exp(-|x|)).",
)
_g = torch.arange(1.0, 8.0)
_, _err = attempt(_y.backward, _g)
check(
    isinstance(_x.grad, torch.Tensor) and _x.grad.shape == _x.shape,
    "backward through StableSoftplus gave x no gradient of x's shape (the error it raised, if "
    f"any: {_err}): return grad_output times the derivative, one tensor shaped like x.",
)
check(
    bool(torch.isfinite(_x.grad).all()),
    "the gradients of StableSoftplus are not all finite: exp(x) / (1 + exp(x)) is inf / inf = "
    "nan for large x; torch.sigmoid(x) is the same function without overflow.",
)
check(
    not torch.allclose(_x.grad, torch.sigmoid(_x.detach())),
    "backward returned the derivative alone: multiply it by grad_output (the chain rule).",
)
check(
    torch.allclose(_x.grad, _g * torch.sigmoid(_x.detach()), rtol=1e-5, atol=1e-6),
    "backward returned a wrong gradient: softplus's derivative is sigmoid(x), times grad_output.",
)
_x64 = torch.randn(6, dtype=torch.float64, requires_grad=True)
_ok, _err = attempt(torch.autograd.gradcheck, StableSoftplus.apply, (_x64,), raise_exception=False)
check(
    _ok is True,
    f"gradcheck (float64, finite differences) disagrees with your backward (error: {_err}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(97)
for _dtype, _scale in ((torch.float32, 5.0), (torch.float32, 150.0), (torch.float64, 800.0)):
    _x = (torch.randn(3, 4, generator=_gen) * _scale).to(_dtype).requires_grad_()
    _g = torch.randn(3, 4, generator=_gen).to(_dtype)
    _y = StableSoftplus.apply(_x)
    if isinstance(_y, torch.Tensor) and _y.shape == _x.shape and _y.requires_grad:
        attempt(_y.backward, _g)  # an error leaves x.grad None, which the record shows
    observe(
        f"StableSoftplus on a random {str(_dtype)[6:]} 3x4 input of scale {_scale:g}, backward "
        "with a random grad_output",
        {"output": _y, "dtype": str(getattr(_y, "dtype", None)), "x.grad": _x.grad},
        rtol=1e-5,
        atol=1e-6,
        hint="max(x, 0) + log1p(exp(-|x|)) forward; backward grad_output * sigmoid(x), both "
        "finite for large |x| (x.grad off by a constant factor: a stray factor in backward).",
    )
_x64 = torch.randn(2, 5, dtype=torch.float64, generator=_gen, requires_grad=True)
observe(
    "torch.autograd.gradcheck(StableSoftplus.apply, (x,)) on a random float64 2x5 input",
    {
        "passes": attempt(torch.autograd.gradcheck, StableSoftplus.apply, (_x64,))[0],
        "output": StableSoftplus.apply(_x64.detach()),
    },
    hint="the backward must be grad_output times the derivative of the forward.",
)
### END HIDDEN TESTS

# %% [markdown]
# One more check on the same exercise: is what backward needs kept through
# `ctx.save_for_backward`? The check packs each saved tensor as a **copy**, then changes `x`
# in place before backward (under the hook, section 2's trap: no version error). A copy still
# holds the old values; a tensor kept as `ctx.x` is the changed one, and the gradient is wrong.


# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_softplus_saves"}
def _saved_and_grads(base, change):
    grads, packed = [], []
    for changed in (False, True):
        x = base * 1.0  # not a leaf, so it may be changed in place
        with torch.autograd.graph.saved_tensors_hooks(
            lambda t: packed.append(1) or t.clone(), lambda t: t
        ):
            y, err = attempt(StableSoftplus.apply, x)
        with torch.no_grad():
            x.add_(change * changed)
        if err or not isinstance(y, torch.Tensor) or not y.requires_grad:
            return None
        g, err = attempt(torch.autograd.grad, y.sum(), base)
        grads.append(None if err else g[0])
    return len(packed), grads


_base = torch.tensor([-2.0, -0.5, 0.0, 1.5, 3.0], dtype=torch.float64, requires_grad=True)
_got = _saved_and_grads(_base, 10.0)
check(_got and None not in _got[1], "StableSoftplus fails the check above: fix it there first.")
check(
    _got[0] >= 1,
    "StableSoftplus saved nothing through ctx.save_for_backward: the saved-tensor hooks never "
    "saw a tensor. Keep what backward needs with ctx.save_for_backward(...), not as ctx.x.",
)
check(
    torch.allclose(_got[1][0], _got[1][1], atol=1e-10),
    "after x was changed in place, backward used the changed values: it read a tensor kept "
    "outside ctx.save_for_backward (the saved copy was ignored).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(98)
for _case in (1, 2):
    _base = torch.randn(2, 3, dtype=torch.float64, generator=_gen, requires_grad=True)
    _n, _gs = _saved_and_grads(_base, -3.0 * _base.detach()) or (0, [None])
    observe(
        f"StableSoftplus with saved tensors packed as copies, x changed in place before "
        f"backward of the sum (case {_case} of 2)",
        {"saved": _n >= 1, "gradient change by the edit": None if None in _gs else _gs[1] - _gs[0]},
        atol=1e-10,
        hint="keep what backward needs with ctx.save_for_backward and read it from "
        "ctx.saved_tensors (the derivative itself is graded in the check above).",
    )
### END HIDDEN TESTS

# %% [markdown]
# Your function next to PyTorch's own softplus: values and gradients. Then the two tests
# PyTorch ships for a hand-written backward. `torch.autograd.gradcheck(fn, inputs)` compares
# backward with finite differences of forward (in float64: in float32 the differences are too
# coarse). `torch.autograd.gradgradcheck` does the same one level up: it differentiates your
# backward itself, which `create_graph=True` (lab 10) needs. Your backward is made of
# differentiable tensor operations, so it passes. A backward that cannot be differentiated
# (it calls numpy, say) should be decorated with `@once_differentiable`: it then runs without
# recording, and a second differentiation raises an error instead of giving a wrong answer.

# %%
xs = torch.linspace(-30, 30, 7, dtype=torch.float64, requires_grad=True)
with your_code("StableSoftplus"):
    (mine,) = torch.autograd.grad(StableSoftplus.apply(xs).sum(), xs)
    (theirs,) = torch.autograd.grad(F.softplus(xs).sum(), xs)
    same = torch.allclose(StableSoftplus.apply(xs), F.softplus(xs)) and torch.allclose(mine, theirs)
print("values and gradients equal F.softplus's on", xs.tolist(), ":", same)


class OnceSoftplus(StableSoftplus):
    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        return StableSoftplus.backward(ctx, grad_output)


x64 = (4 * torch.randn(5, dtype=torch.float64)).requires_grad_()
with your_code("StableSoftplus"):
    for fn in (StableSoftplus, OnceSoftplus):
        print(
            f"{fn.__name__:15} gradcheck: {torch.autograd.gradcheck(fn.apply, (x64,))}",
            f"gradgradcheck: {torch.autograd.gradgradcheck(fn.apply, (x64,), raise_exception=False)}",
        )
    (g,) = torch.autograd.grad(
        OnceSoftplus.apply(x64), x64, torch.ones_like(x64, requires_grad=True), create_graph=True
    )
try:
    g.sum().backward()  # differentiates OnceSoftplus's backward
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ## 4. Activation checkpointing
#
# The other way to save memory is to not keep activations at all.
# `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)` runs `fn(*args)` and
# keeps only its inputs (torch 2.10 also keeps an empty tensor of its own: no memory); whatever
# `fn` would have saved is thrown away, and during the backward pass `fn` runs **again** to
# recompute it, just before its part of the backward needs it. Memory for compute.
# (`use_reentrant=False` is the implementation PyTorch recommends; the older one has
# restrictions. Torch 2.10 to 2.15 warn if you do not choose, and still run.)
#
# Where to cut? Checkpointing each use of `DynamicNet`'s middle layer on its own is the
# obvious idea, and it saves nothing: the input of use `i` is the output of use `i - 1`, which
# the plain pass keeps anyway, so the checkpoints keep exactly what the plain pass kept, and
# every use still runs twice. Memory drops only when a checkpoint spans **several** uses: it
# keeps its first input and forgets the activations in between. So the depth uses are cut
# into a few **segments**, one checkpoint each.
#
# ### Exercise 4 (2 points): a forward pass in checkpointed segments
#
# Write `segmented_forward(model, x, depth, segments)`: exactly `model(x, depth=depth)` (input
# layer on `x.flatten(1)` and ReLU, `depth` uses of the middle layer each with its ReLU, output
# layer, `log_softmax`), but with the `depth` uses in `segments` consecutive groups as equal as
# possible (group `i`: uses `i * depth // segments` up to `(i + 1) * depth // segments`), each
# in **one** `checkpoint(run, h, ..., use_reentrant=False)` call, `run` applying the group's
# uses to the `h` it is given; the input and output layers stay outside. For `depth = 0` there
# is nothing to checkpoint; otherwise `1 <= segments <= depth`. Pass `h` as an argument:
# backward's recomputation calls `run` again, and must get its own segment's `h`.
# (`torch.utils.checkpoint.checkpoint_sequential` does something similar for an
# `nn.Sequential`, but runs its last segment without a checkpoint.)


# %% nbgrader={"solution": true, "grade_id": "segmented_forward"}
def segmented_forward(model, x, depth, segments):
    ### BEGIN SOLUTION
    def run(h, uses):
        for _ in range(uses):
            h = F.relu(model.middle_linear(h))
        return h

    h = F.relu(model.input_linear(x.flatten(1)))
    if depth > 0:
        bounds = [i * depth // segments for i in range(segments + 1)]
        for start, stop in zip(bounds, bounds[1:], strict=False):
            h = checkpoint(run, h, stop - start, use_reentrant=False)
    return F.log_softmax(model.output_linear(h), dim=1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_segmented_forward"}
torch.manual_seed(12)
_net = DynamicNet(32, 64, 10, max_depth=4, seed=0)
_params = list(_net.parameters())
_x, _y = torch.randn(8, 32), torch.randint(0, 10, (8,))
_want, _plain_kept = distinct_saved_bytes(_net, _x, 4, leave_out=_params)
F.nll_loss(_want, _y).backward()
_plain = [p.grad.clone() for p in _params]
_net.zero_grad()
_calls = []
_handle = _net.middle_linear.register_forward_hook(lambda m, i, o: _calls.append(1))
_got, _err = attempt(distinct_saved_bytes, segmented_forward, _net, _x, 4, 2, leave_out=_params)
_forward_calls = len(_calls)
_out = _got and _got[0]
check(
    isinstance(_out, torch.Tensor)
    and (_out.shape, _out.dtype) == (_want.shape, _want.dtype)
    and _out.grad_fn is not None,
    "segmented_forward(model, x, 4, 2) should return log-probabilities shaped like model(x, "
    f"depth=4), not detached (the error it raised, if any: {_err}); run it in a cell of yours.",
)
check(
    torch.allclose(_out, _want, atol=1e-6),
    "segmented_forward(model, x, 4, 2) differs from model(x, depth=4): input layer and ReLU, "
    "depth x (middle layer and ReLU), output layer, log_softmax.",
)
_, _err = attempt(F.nll_loss(_out, _y).backward)
_handle.remove()
check(
    _err is None,
    f"backward from the output of segmented_forward raised an error (the error: {_err}); call "
    "it in a cell of your own to see where.",
)
_named = list(zip([_n for _n, _ in _net.named_parameters()], _params, _plain, strict=True))
_missing = [_n for _n, _p, _ in _named if _p.grad is None]
check(
    not _missing,
    f"after backward some parameters have no gradient (here: {', '.join(_missing)}): the graph "
    "is cut between them and the output (a detach(), .data or torch.no_grad() in "
    "segmented_forward cuts it).",
)
_differ = [_n for _n, _p, _g in _named if not torch.allclose(_p.grad, _g, atol=1e-6)]
check(
    not _differ,
    "the gradients of some parameters differ from the plain forward's (here: "
    f"{', '.join(_differ)}), though the output is the same: backward recomputed other "
    "activations than the forward pass had. A checkpointed function must compute from its "
    "argument alone (one that reads h from the loop recomputes with the last h).",
)
check(
    _forward_calls == 4 and len(_calls) - _forward_calls == 4,
    "with depth 4 the middle layer should run 4 times in the forward pass and 4 times in "
    f"backward (it ran {_forward_calls} and {len(_calls) - _forward_calls} times): backward "
    "reruns each checkpointed segment once. No rerun at all means no checkpoint.",
)
_activation = 8 * 64 * 4  # bytes of one 8 x 64 float32 activation
_kept_by = {
    _k: attempt(distinct_saved_bytes, segmented_forward, _net, _x, 4, _k, leave_out=_params)
    for _k in (1, 2, 4)
}
check(
    [(_kept_by[_k][0] or [0, 0])[1] for _k in (1, 2, 4)]
    == [_plain_kept - _n * _activation for _n in (3, 2, 0)],
    "the storage kept for backward is not that of one checkpoint per segment: with depth 4, one "
    "segment should keep three activations fewer than the plain pass, two segments two fewer, "
    "and four segments (each segment keeps only its input) as much as the plain pass.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(93)
_cases = (0, 1, 5, 16), (5, 2, 6, 24), (7, 3, 4, 20), (6, 6, 3, 9)
for _depth, _segments, _batch, _hidden in _cases:
    _net = randomize(DynamicNet(7, _hidden, 4, max_depth=7), _gen)
    _x = torch.randn(_batch, 7, generator=_gen)
    _y = torch.randint(0, 4, (_batch,), generator=_gen)
    _calls = []
    _handle = _net.middle_linear.register_forward_hook(
        lambda m, i, o, _calls=_calls: _calls.append(1)
    )
    _out, _kept = distinct_saved_bytes(
        segmented_forward, _net, _x, _depth, _segments, leave_out=list(_net.parameters())
    )
    _forward_calls = len(_calls)
    if isinstance(_out, torch.Tensor) and _out.shape == (_batch, 4) and _out.requires_grad:
        attempt(F.nll_loss(_out, _y).backward)  # an error leaves the gradients None: recorded
    _handle.remove()
    observe(
        f"segmented_forward(model, x, depth={_depth}, segments={_segments}) on a random "
        f"DynamicNet (hidden {_hidden}, batch {_batch}), then backward",
        {
            "output": _out,
            "gradients": {_n: _p.grad for _n, _p in sorted(_net.named_parameters())},
            "distinct bytes saved for backward": _kept,
            "middle layer calls in forward": _forward_calls,
            "middle layer calls in backward": len(_calls) - _forward_calls,
        },
        atol=1e-6,
        hint="the depth uses cut into `segments` groups, all of them, one "
        "checkpoint(..., use_reentrant=False) per group with h passed as an argument; input and "
        "output layers outside.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Now the trade, on section 2's big `DynamicNet` at the largest depth of its table, for every
# segment count and the plain pass, measured with `distinct_saved_bytes`: **kept**, the storage
# the forward pass leaves for backward; **one segment**, what the largest segment saves without
# a checkpoint, which its recomputation holds while its backward runs. Backward recomputes one
# segment at a time, the last first, so the most saved storage alive at once is about kept +
# one segment (the **high-water mark**). **reruns** counts calls of the middle layer during
# backward; the last column is the median time of a pass (read its shape, not its digits).

# %%
DEPTH = max(DEPTHS)
REPEATS = 3 if GRADING else 7


def pass_time(forward):
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        F.nll_loss(forward(), yb).backward()
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


def uses_plain(h, uses):
    for _ in range(uses):
        h = F.relu(big.middle_linear(h))
    return h


calls = []
hook = big.middle_linear.register_forward_hook(lambda m, i, o: calls.append(1))
rows = []  # (segments, kept MiB, one segment MiB, reruns, ms); segments 0 is the plain pass
for k in range(DEPTH + 1):
    if k == 0:
        forward = lambda: big(xb, depth=DEPTH)  # noqa: E731
    else:
        forward = lambda k=k: segmented_forward(big, xb, DEPTH, k)  # noqa: E731
    calls.clear()
    out, kept = distinct_saved_bytes(forward, leave_out=params)
    forward_calls = len(calls)
    F.nll_loss(out, yb).backward()
    reruns = len(calls) - forward_calls
    h_in = torch.randn(BATCH, HIDDEN, requires_grad=True)
    largest = max(i * DEPTH // k - (i - 1) * DEPTH // k for i in range(1, k + 1)) if k else 0
    _, segment = distinct_saved_bytes(uses_plain, h_in, largest, leave_out=[*params, h_in])
    rows.append((k, kept / 2**20, segment / 2**20, reruns, pass_time(forward)))
hook.remove()
print(f"DynamicNet, batch {BATCH}, hidden {HIDDEN}, depth {DEPTH}")
print("segments  kept MiB  one segment MiB  high-water MiB  reruns  ms per pass")
for k, kept, segment, reruns, ms in rows:
    name = "plain" if k == 0 else str(k)
    print(
        f"{name:>8}  {kept:8.3f}  {segment:15.3f}  {kept + segment:14.3f}  {reruns:6d}  {ms:11.2f}"
    )
high = {k: kept + segment for k, kept, segment, _, _ in rows[1:]}
print(
    "lowest high-water mark at segments =",
    [k for k, mib in high.items() if mib == min(high.values())],
    f"| sqrt(depth) = {math.sqrt(DEPTH):.2f}",
)
print(
    f"one checkpoint per use keeps {rows[DEPTH][1]:.3f} MiB, the plain pass {rows[0][1]:.3f} MiB,",
    f"and takes {rows[DEPTH][4] - rows[0][4]:.2f} ms more per pass",
)
extra = [r[4] - rows[0][4] for r in rows[1:]]
fig, ax = plt.subplots(figsize=(6, 3.6))
ax.plot(extra, list(high.values()), "s")
for k, ms, mib in zip(high, extra, high.values(), strict=True):
    ax.annotate(str(k), (ms, mib), xytext=(4, 2), textcoords="offset points")
ax.axhline(rows[0][1], color="gray", linestyle="--", label="plain pass (kept = high-water)")
ax.set(xlabel="extra ms per pass (recomputation)", ylabel="high-water MiB")
ax.set_title("memory against recomputation, one point per segment count", fontsize=10)
ax.legend()
show_figure(
    fig,
    "The high-water MiB against the extra ms per pass, one point per segment count, "
    "and a dashed line at the plain pass.",
)

# %% [markdown]
# Read the table. Every segment count reruns each use of the middle layer once (the reruns column
# equals the depth), so all of them pay about one extra forward pass; what the count changes is
# memory. The forward keeps one activation per segment (its input) and the last segment's output,
# and the backward holds one segment's activations on top while it recomputes it: with $k$
# segments of a depth $n$, about $k + n/k$ activations, smallest near $k = \sqrt{n}$: the
# square-root rule of checkpointing (the line under the table gives your minimum). One checkpoint
# per use ($k = n$) keeps what the plain pass keeps and pays the second forward for nothing.
#
# ### Checkpointing a dynamic graph
#
# A checkpointed segment runs twice, and so does every draw inside it. `checkpoint` saves torch's
# random state and restores it for the recomputation (dropout draws the same mask again), but not
# Python's `random`, which `DynamicNet` draws its depth from. A depth or a scale drawn inside the
# segment is drawn anew when backward recomputes it: where the recomputation saves other tensors,
# backward raises a `CheckpointError`; where it saves tensors of the same shapes, the gradient is
# computed from activations the forward pass never had, without a word. (Some draws still come out
# right: the recomputation only refills saved tensors; the graph is the forward's own.) So draw
# outside the segment and pass the draw in, as exercise 4 passes the depth. Twenty seeds each way:

# %%
layer, x8 = nn.Linear(8, 8), torch.randn(4, 8)


def drawn_outside(h, depth, scale):
    for _ in range(depth):
        h = torch.tanh(layer(h)) * scale
    return h


def drawn_inside(h, rng):  # Python's random decides inside the segment
    return drawn_outside(h, rng.randint(1, 3), rng.uniform(0.5, 1.5))


weight_grad = lambda out: torch.autograd.grad(out.sum(), layer.weight)[0]  # noqa: E731
for name, run in {
    "drawn inside the checkpoint": lambda h, rng: checkpoint(
        drawn_inside, h, rng, use_reentrant=False
    ),
    "drawn outside, passed in": lambda h, rng: checkpoint(
        drawn_outside, h, rng.randint(1, 3), rng.uniform(0.5, 1.5), use_reentrant=False
    ),
}.items():
    outcomes = dict.fromkeys(["right gradient", "WRONG gradient, no error", "CheckpointError"], 0)
    for seed in range(20):
        plain = weight_grad(drawn_inside(x8, random.Random(seed)))
        try:
            right = torch.allclose(weight_grad(run(x8, random.Random(seed))), plain)
            outcomes["right gradient" if right else "WRONG gradient, no error"] += 1
        except torch.utils.checkpoint.CheckpointError:
            outcomes["CheckpointError"] += 1
    print(f"{name}: {outcomes}")

# %% [markdown]
# ## 5. Which forward line broke the backward pass?
#
# Lab 4's version-counter error says *what* went wrong, and even names the operation whose saved
# output was changed (`Tanh` below; `TanhBackward0` on torch 2.10), but not *where* in your code:
# the error is raised in `backward()`, long after the forward line that caused it ran. Here is lab
# 4's broken function, hidden in a small helper as it would be in a real model:


# %%
def scaled_activation(x):
    t = torch.tanh(x)
    t.mul_(3)  # in place on the output that tanh saved
    return t


def model_step(x):
    h = x * 2
    return scaled_activation(h).sum()


x = torch.randn(5, requires_grad=True)
try:
    model_step(x).backward()
except RuntimeError as error:
    print("RuntimeError:", str(error).split(" Hint")[0])

# %% [markdown]
# Under `torch.autograd.detect_anomaly()`, autograd records, for every node, the Python stack
# of the forward call that created it. When backward fails, it issues a **warning** with that
# stack before raising the error: "Error detected in TanhBackward0. Traceback of forward call
# that caused the error:", then the frames, the innermost (the line that created the node)
# last. Warnings go to stderr; `warnings.catch_warnings(record=True)` catches them as objects.
# Anomaly mode stores a stack for every node, and checks every gradient that backward computes
# for `nan`, which slows everything down: it is for debugging only.

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        with torch.autograd.detect_anomaly():
            model_step(x).backward()
    except RuntimeError as error:
        print("RuntimeError:", str(error).split(" Hint")[0][:90], "...")
for w in caught:
    text = str(w.message)
    if text.startswith("Error detected in"):
        lines = text.splitlines()
        print(lines[0])
        print("\n".join(lines[-5:]))

# %% [markdown]
# ### Exercise 5 (1 point): name the culprit
#
# Write `find_culprit(fn, x)` that runs `fn(x).backward()` under
# `torch.autograd.detect_anomaly()`, catching the warnings (`record=True`, with
# `warnings.simplefilter("always")`) and a `RuntimeError` from backward. If backward raised,
# return `(node, line)` from the warning that starts with `"Error detected in"`: `node`, the
# word after `"Error detected in "` without the full stop (`"TanhBackward0"` above); `line`,
# the source line of the **innermost** frame, stripped of spaces (`"t = torch.tanh(x)"`): the
# last line of code before the one that starts with `"(Triggered internally"` (some builds
# leave that out; a line of `^` or `~` markers is not code). If backward ran, return `None`.


# %% nbgrader={"solution": true, "grade_id": "find_culprit"}
def find_culprit(fn, x):
    ### BEGIN SOLUTION
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly():
                fn(x).backward()
        except RuntimeError:
            pass
        else:
            return None
    for w in caught:
        text = str(w.message)
        if text.startswith("Error detected in"):
            node = text.split()[3].rstrip(".")
            code = [
                line.strip()
                for line in text.splitlines()[1:]
                if line.strip()
                and not line.strip().startswith(("File ", "(Triggered"))
                and set(line.strip()) - set("^~ ")
            ]
            return node, code[-1]
    return None
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_find_culprit"}
_found, _err = attempt(find_culprit, model_step, torch.randn(4, requires_grad=True))
check(
    isinstance(_found, tuple) and len(_found) == 2 and all(isinstance(_s, str) for _s in _found),
    "find_culprit(model_step, x) should return a tuple of two strings (node, line): is "
    f"backward run under detect_anomaly(), its warnings recorded (the error, if any: {_err})?",
)
check(
    _found[0] == "TanhBackward0",
    "the node should be 'TanhBackward0', the word after 'Error detected in' without the full "
    f"stop (your node: {_found[0]!r}).",
)
check(
    _found[1] != "model_step(x).backward()" and not _found[1].startswith("return"),
    f"the line your find_culprit returned ({_found[1]!r}) is an outer frame of the traceback: "
    "the innermost frame, the last line of code, is the line that created the node.",
)
check(
    _found[1] == "t = torch.tanh(x)",
    "the line should be 't = torch.tanh(x)': take the last line of code in the warning, stripped "
    f"of spaces (your line: {_found[1]!r}).",
)
check(
    attempt(find_culprit, lambda t: (t.exp() * 3).sum(), torch.randn(3, requires_grad=True))
    == (None, None),
    "backward of a correct function raises nothing: find_culprit should return None, not raise.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _sigmoid_then_fill(x):
    s = torch.sigmoid(x)
    s[0] = 0.0
    return (s * x).sum()


def _exp_plus(x):
    y = x * 1.5
    e = y.exp()
    e += 1
    return e.mean()


def _clean(x):
    return torch.tanh(x).sum() * x.sum()


_gen = torch.Generator().manual_seed(94)
_record = {}
for _name, _fn in (
    ("sigmoid, then s[0] = 0", _sigmoid_then_fill),
    ("exp, then e += 1", _exp_plus),
    ("no in-place change", _clean),
):
    _found = find_culprit(_fn, torch.randn(6, generator=_gen, requires_grad=True))
    _record[_name] = list(_found) if isinstance(_found, (tuple, list)) else _found
observe(
    "find_culprit(fn, x) on two functions with an in-place error and one without",
    _record,
    hint="(node after 'Error detected in', without the full stop; the last line of code of the "
    "forward traceback, stripped), or None when backward raises nothing.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * A tensor hook sees the complete gradient: on a shared leaf the sum over its uses, on a
#   per-use view that use's share. Module hooks fire once per call and stay until removed.
# * `saved_tensors_hooks` show what a graph keeps for backward: memory in proportion to the
#   path the forward pass took. A tensor saved under such a hook skips lab 4's version check.
# * A custom `autograd.Function`: `forward`, `setup_context` with `ctx.save_for_backward`, a
#   `backward` that returns a vector-Jacobian product per input; `gradcheck` tests it.
# * Checkpointing each layer alone saves nothing; about the square root of the depth in
#   segments saves the most, for one extra forward pass. Draw a depth outside the segment.
# * `detect_anomaly()` turns a backward error into a forward line, through a warning. Next, lab
#   10: forward mode and `torch.func` (gradients as functions, `vmap`, Hessian products).
