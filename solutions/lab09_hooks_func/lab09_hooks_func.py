# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 9: Hooks, memory, `torch.func` and your own backward
#
# Until now autograd has been a machine you feed and read: build a graph in the forward pass,
# call `backward()`, look at `.grad`. This lab opens it in seven places:
#
# 1. **hooks** on tensors and modules, to watch the gradient of each use of a shared weight
#    as it flows past (lab 3 only showed you the sum);
# 2. **saved-tensor hooks**, to see and measure what a graph keeps in memory for the
#    backward pass, and to store it differently (in half precision);
# 3. **activation checkpointing**, which keeps less and recomputes the rest;
# 4. **anomaly detection**, which finds the forward line behind a backward error (lab 4's
#    in-place error);
# 5. **`torch.func`**: gradients as functions, per-sample gradients with `vmap`, and why
#    `vmap` will not follow a Python `if` on a tensor;
# 6. **`create_graph=True`**: differentiating a gradient, for Hessian-vector products;
# 7. your own **`torch.autograd.Function`**, with a backward you write yourself.
#
# **How this lab works.** Cells marked *exercise* are yours: replace
# `raise NotImplementedError(...)` with your code. The cell after each exercise is a
# *check*: run it, and if something is wrong it tells you what, in words. When you submit,
# the same checks run again with extra hidden cases, so make the code right, not just the
# printed numbers. Run the notebook top to bottom (*Kernel > Restart and run all*) before
# you submit.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import random
import time

import matplotlib.pyplot as plt
import numpy as np
import torch.func
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# The matrices here are small: one thread is as fast as several, and the timings steadier.
torch.set_num_threads(1)
# nbgrader sets NBGRADER_EXECUTION while grading: then the measurements are smaller.
GRADING = "NBGRADER_EXECUTION" in os.environ

print("torch", torch.__version__, "| grading run" if GRADING else "")


# %% [markdown]
# The model of this lab is lab 5's `DynamicNet`, on made-up data: an input layer, **one**
# middle layer applied a random number of times (each use followed by a ReLU), an output
# layer and `log_softmax`. `model(x)` draws the depth from the model's own `random.Random`,
# so two models made with the same `seed` draw the same depths; `model(x, depth=3)` asks for a
# depth. `randomize(model, generator)` refills the weights from a `torch.Generator`, which the
# checks use to get the same weights on every machine.


# %% nbgrader={"locked": true, "grade_id": "dynamic_net"}
class DynamicNet(nn.Module):
    def __init__(self, d_in=32, hidden=64, d_out=10, max_depth=3, seed=0):
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
        h = F.relu(self.input_linear(x))
        for _ in range(depth):
            h = F.relu(self.middle_linear(h))
        return F.log_softmax(self.output_linear(h), dim=1)


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
# new tensor to use instead (gradient clipping is often written that way). It returns a
# *handle*; `handle.remove()` takes the hook off again.
#
# Start with lab 3's example: one weight `W` used three times, `h = tanh(W @ h)`. A hook on
# `W` itself is called **once**, with the gradient already summed over the three uses: the
# engine adds up everything that flows into a node before it calls the node's hooks.

# %%
W = torch.randn(3, 3, requires_grad=True)
h0 = torch.randn(3, 1)
seen = []
handle = W.register_hook(lambda g: seen.append(g.clone()))
h = h0
for _ in range(3):
    h = torch.tanh(W @ h)
h.sum().backward()
handle.remove()
print("calls of the hook on W:", len(seen))
print("what it saw equals W.grad:", torch.equal(seen[0], W.grad))

# %% [markdown]
# A hook on an **intermediate** tensor sees the gradient of the loss with respect to that
# tensor. Here, ten steps of the same chain with a smallish `W`, and a hook on the hidden state
# after each step. The hooks fire in backward order, the last step first, and the table shows
# the gradient's size on its way back: it mostly shrinks, step after step (the *vanishing
# gradient* of recurrent networks, seen from inside).

# %%
torch.manual_seed(1)
W10 = (0.5 * torch.randn(4, 4)).requires_grad_()
h = torch.randn(4, 1)
fired = []
for step in range(1, 11):
    h = torch.tanh(W10 @ h)
    h.register_hook(lambda g, step=step: fired.append((step, g.norm().item())))
h.sum().backward()
print(" order  step  |dloss/dh|")
for order, (step, norm) in enumerate(fired, start=1):
    print(f"{order:6d} {step:5d}  {norm:9.5f}")

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
#
# The check adds your `k` gradients up and compares the sum with the gradient of the shared
# `W`, and compares each one with lab 3's copies.


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
_grads = per_use_grads(_W, _h0, 3)
check(
    isinstance(_grads, list) and len(_grads) == 3,
    "per_use_grads(W, h0, 3) should return a list of 3 gradients, one per use of W.",
)
check(
    all(isinstance(_g, torch.Tensor) and _g.shape == _W.shape for _g in _grads),
    "each entry should be a tensor shaped like W: the gradient a hook received for one use "
    "(is an entry None? then its hook never fired: did you call backward()?).",
)
# The gradient of the shared W, and lab 3's copies (one leaf per use), computed here.
_h = _h0
for _ in range(3):
    _h = torch.tanh(_W @ _h)
(_shared,) = torch.autograd.grad(_h.sum(), _W)
_copies = [_W.detach().clone().requires_grad_() for _ in range(3)]
_h = _h0
for _c in _copies:
    _h = torch.tanh(_c @ _h)
_copy_grads = torch.autograd.grad(_h.sum(), _copies)
check(
    not all(torch.allclose(_g, _shared) for _g in _grads),
    "every entry equals the gradient of the shared W, summed over all uses: a hook on W "
    "itself (or on W under another name) fires with the sum. Hook a fresh view W.view_as(W) "
    "per use, and multiply by that view.",
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
check(per_use_grads(_W, _h0, 0) == [], "with k = 0 there is no use: return an empty list.")
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(91)
for _k, _n in ((1, 4), (2, 4), (4, 5), (6, 3)):
    _W = torch.randn(_n, _n, dtype=torch.float64, generator=_gen, requires_grad=True)
    _h0 = torch.randn(_n, 1, dtype=torch.float64, generator=_gen)
    _grads = per_use_grads(_W, _h0, _k)
    observe(
        f"per_use_grads(W, h0, k={_k}) on a random {_n}x{_n} float64 W",
        {"number of gradients": len(_grads), "gradients in order of use": list(_grads)},
        rtol=0,
        atol=1e-10,
        hint="one fresh view of W per use, each with a hook; k steps h = tanh(W_i @ h) from h0; "
        "the list in the order of the uses, although the hooks fire last use first.",
    )
### END HIDDEN TESTS

# %% [markdown]
# The same question can be put to a **module**. `register_forward_hook(fn)` calls
# `fn(module, inputs, output)` after every call of the module's forward, and
# `register_full_backward_hook(fn)` calls `fn(module, grad_input, grad_output)` once per call
# during the backward pass, with the gradients with respect to that call's inputs and outputs
# (not its parameters). For a linear layer, the weight's gradient from one call is
# `grad_output.T @ input`, so the two hooks together give each use's weight gradient of
# `DynamicNet`'s middle layer. Remove the hooks when you are done: a forgotten hook fires in
# every later pass.

# %%
torch.manual_seed(2)
net = DynamicNet()
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
per_use = [g.T @ inp for g, inp in zip(grad_outputs, inputs, strict=True)]
print(" use  |grad_output|  |weight grad of this use|")
for i, (g, dW) in enumerate(zip(grad_outputs, per_use, strict=True), start=1):
    print(f"{i:4d}  {g.norm():12.5f}  {dW.norm():12.5f}")
total = net.middle_linear.weight.grad
print(
    f" sum of the uses: {sum(per_use).norm():.5f}   middle_linear.weight.grad: {total.norm():.5f}"
)
print(" they agree:", torch.allclose(sum(per_use), total, atol=1e-6))

# %% [markdown]
# ## 2. What a graph keeps for the backward pass
#
# Labs 2 and 4 showed that a graph holds on to tensors until `backward()` frees them: `exp`
# keeps its output, `a * b` keeps both factors, `x * 2` keeps nothing but the number 2. With
# `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` you can watch that happen. Inside
# the `with` block, every tensor an operation saves for backward goes through `pack(t)`, and
# what `pack` returns is stored instead; when backward needs the tensor, it calls
# `unpack(stored)`, which must give back a tensor of the same shape and dtype (and the same
# values, if the gradients are to stay exact).


# %%
def show_saved(label, fn):
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    names = []
    for t in saved:
        if t is a:
            names.append("a")
        elif t is b:
            names.append("b")
        elif torch.equal(t, out.detach()):
            names.append("the output")
        else:
            names.append(f"another tensor {tuple(t.shape)}")
    print(f"{label:22} saves {len(saved)}: {', '.join(names) or '-'}")


a = torch.randn(4, requires_grad=True)
b = torch.randn(4, requires_grad=True)
show_saved("a * 2", lambda: a * 2)
show_saved("a * b", lambda: a * b)
show_saved("a.exp()", lambda: a.exp())
show_saved("a.sin()", lambda: a.sin())
show_saved("a.relu()", lambda: a.relu())
show_saved("a.sum()", lambda: a.sum())

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
# share memory; the picture after the check shows how much.) `model` may be any function of
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
_n = saved_bytes(lambda t: t.exp(), _x)
check(
    isinstance(_n, int),
    f"saved_bytes should return an int (a number of bytes), got {type(_n).__name__}.",
)
check(
    _n != 10,
    "exp(x) of 10 float32 numbers saved 10 elements, which is 40 bytes: multiply numel() "
    "by element_size(), the bytes of one element.",
)
check(
    _n == 40,
    f"exp(x) of 10 float32 numbers saves its output, 10 x 4 = 40 bytes; saved_bytes says {_n}. "
    "Is model(x) run inside the with block?",
)
_n = saved_bytes(lambda t: t.exp(), _x.double())
check(
    _n == 80,
    f"in float64 an element has 8 bytes, so exp of 10 numbers saves 80 bytes; saved_bytes says "
    f"{_n}. Use t.element_size() rather than a fixed 4.",
)
_n = saved_bytes(lambda t: t * t, _x)
check(
    _n == 80,
    f"t * t saves t twice (once as each factor), 2 x 40 = 80 bytes; saved_bytes says {_n}. "
    "Count every tensor pack is handed, also when it was packed before.",
)
check(saved_bytes(lambda t: t * 2.0, _x) == 0, "t * 2.0 saves no tensor: expected 0 bytes.")
_net = DynamicNet(seed=5)
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
_shapes = {"3": (3,), "4x5": (4, 5), "2x3x2": (2, 3, 2)}
_fns = {
    "sin(x) * exp(x)": lambda t: t.sin() * t.exp(),
    "tanh(x) @ x.T (2-d)": lambda t: (
        torch.tanh(t.reshape(t.shape[0], -1)) @ t.reshape(t.shape[0], -1).T
    ),
    "x.sigmoid().sum() * 3": lambda t: t.sigmoid().sum() * 3,
}
_record = {}
for _shape_name, _shape in _shapes.items():
    for _fn_name, _fn in _fns.items():
        _x = torch.randn(_shape, dtype=torch.float64, generator=_gen, requires_grad=True)
        _record[f"{_fn_name} on float64 {_shape_name}"] = saved_bytes(_fn, _x)
observe(
    "saved_bytes(fn, x) for three functions on float64 tensors of three shapes",
    _record,
    rtol=0,
    atol=0,
    hint="every tensor handed to pack counts, each time; bytes are numel() * element_size().",
)
### END HIDDEN TESTS

# %% [markdown]
# Now the picture. For a batch of inputs, one pass of `DynamicNet` at each depth from 0 up:
# the bytes your `saved_bytes` counts, and below them the memory those saved tensors really
# occupy, each distinct block of memory counted once. They differ because one tensor is often
# saved in two places (the output of a ReLU is saved by the ReLU and again by the next layer,
# as its input) and because the middle layer's **weight** is saved once per use although it is
# one tensor that exists anyway.

# %%
BATCH, HIDDEN, DEPTHS = (128, 128, range(7)) if GRADING else (512, 256, range(9))
torch.manual_seed(3)
big = DynamicNet(d_in=64, hidden=HIDDEN, max_depth=max(DEPTHS))
xb = torch.randn(BATCH, 64)


def distinct_bytes(fn, x):
    """Bytes of the distinct memory blocks (storages) behind the tensors a pass saves."""
    blocks = {}

    def pack(t):
        storage = t.untyped_storage()
        blocks[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(blocks.values())


counted = [saved_bytes(lambda t, d=d: big(t, depth=d), xb) / 2**20 for d in DEPTHS]
distinct = [distinct_bytes(lambda t, d=d: big(t, depth=d), xb) / 2**20 for d in DEPTHS]
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(list(DEPTHS), counted, "o-", label="saved_bytes: every saved slot")
ax.plot(list(DEPTHS), distinct, "s--", label="distinct memory blocks")
ax.set_xlabel("depth (uses of the middle layer)")
ax.set_ylabel("MiB kept for backward")
ax.set_title(f"DynamicNet, batch {BATCH}, hidden {HIDDEN}: memory grows with depth")
ax.legend()
plt.show()
print(
    f"from depth 1 to 2: {counted[2] - counted[1]:.4f} MiB more in saved slots, "
    f"{distinct[2] - distinct[1]:.4f} MiB more of distinct memory "
    f"(one {BATCH} x {HIDDEN} float32 activation is {BATCH * HIDDEN * 4 / 2**20:.4f} MiB)"
)
print("depths DynamicNet draws on its own, and what each pass saves:")
for _ in range(5):
    n = saved_bytes(big, xb)
    print(f"  depth {big.last_depth}: {n / 2**20:7.3f} MiB")

# %% [markdown]
# Memory for backward grows **linearly with the depth the forward pass happened to take**: a
# dynamic graph costs what it did, not what it might have done. Each extra use fills three
# slots: the ReLU saves its output, the next layer saves the same tensor as its input, and the
# middle layer saves its weight. Of those, only the ReLU's output is new memory, one
# `BATCH x HIDDEN` activation per use: the weight is the parameter itself, counted once in the
# distinct line (at depth 1, which is why that step is larger).
#
# ### Packing saved tensors differently
#
# `pack` may return **anything**, as long as `unpack` turns it back into a tensor. Storing the
# saved tensors in half precision halves what they take, at the price of rounding them: the
# backward pass then computes with slightly wrong numbers. Here are the bytes that `pack`
# returns, and how far the gradients move.


# %%
def half_pack(t):
    if t.is_floating_point():
        return (t.dtype, t.to(torch.float16))
    return (None, t)


def half_unpack(packed):
    dtype, t = packed
    return t if dtype is None else t.to(dtype)


def grads_and_packed_bytes(model, x, target, depth, pack, unpack):
    """Gradients of one pass, with saved tensors stored by pack; and the bytes pack returned."""
    stored = [0]

    def counting_pack(t):
        packed = pack(t)
        stored[0] += sum(p.numel() * p.element_size() for p in packed if torch.is_tensor(p))
        return packed

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(counting_pack, unpack):
        loss = F.nll_loss(model(x, depth=depth), target)
    loss.backward()
    return [
        torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()
    ], stored[0]


yb = torch.randint(0, 10, (BATCH,))
rows = []
for d in DEPTHS:
    exact, full = grads_and_packed_bytes(big, xb, yb, d, lambda t: (None, t), half_unpack)
    rounded, half = grads_and_packed_bytes(big, xb, yb, d, half_pack, half_unpack)
    error = max(
        ((r - e).norm() / e.norm()).item()
        for r, e in zip(rounded, exact, strict=True)
        if e.norm() > 0  # at depth 0 the middle layer gets no gradient
    )
    rows.append((d, full / 2**20, half / 2**20, error))
print("depth  float32 MiB  float16 MiB  largest relative change of a gradient")
for d, full, half, error in rows:
    print(f"{d:5d}  {full:11.3f}  {half:11.3f}  {error:.1e}")
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.bar(np.array(list(DEPTHS)) - 0.2, [r[1] for r in rows], width=0.4, label="saved as float32")
ax.bar(np.array(list(DEPTHS)) + 0.2, [r[2] for r in rows], width=0.4, label="packed to float16")
ax.set_xlabel("depth")
ax.set_ylabel("MiB stored for backward")
ax.legend()
plt.show()

# %% [markdown]
# Half the bytes. The gradients move too, by the relative amounts in the last column (from a
# few parts in ten thousand up to about a percent, depending on the depth and the sizes):
# float16 keeps 11 significant bits, about three decimal digits, and the rounding of every
# saved tensor passes into the gradients. Whether that is acceptable depends on the model;
# mixed-precision training makes the same kind of bargain on purpose.
#
# The other classic `pack` moves saved tensors **to the CPU** and `unpack` brings them back to
# the GPU: PyTorch ships it as `torch.autograd.graph.save_on_cpu()`. It frees GPU memory at the
# cost of copies. On a machine without a GPU, which is where this notebook may well run, it
# saves nothing at all: the tensors are on the CPU already, `t.cpu()` returns `t` itself, and so
# `save_on_cpu`'s pack hands back the very tensor it was given.

# %%
t = torch.randn(3)
device, packed = torch.autograd.graph.save_on_cpu().pack_hook(t)
print("a GPU here:", torch.cuda.is_available())
print("t.cpu() is t:", t.cpu() is t, "| save_on_cpu packs a CPU tensor as itself:", packed is t)

# %% [markdown]
# ## 3. Activation checkpointing
#
# The other way to save memory is to not keep activations at all.
# `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)` runs `fn(*args)` and
# keeps only its inputs; whatever `fn` would have saved is thrown away, and during the backward
# pass `fn` runs **again** to recompute it. Memory for compute: each checkpointed segment costs
# a second forward pass. (`use_reentrant=False` is the implementation PyTorch recommends; the
# older one has restrictions, and recent versions warn if you do not choose.)
#
# For a `DynamicNet` that draws its depth at random, checkpoint each use of the middle layer:
# the pass then keeps one activation per use instead of several.
#
# ### Exercise 3 (2 points): a checkpointed forward pass
#
# Write `checkpointed_forward(model, x, depth)` that computes exactly what
# `model(x, depth=depth)` computes (a `DynamicNet`: input layer and ReLU, `depth` uses of the
# middle layer each with its ReLU, output layer, `log_softmax`), but runs **each use of the
# middle layer with its ReLU**, `F.relu(model.middle_linear(h))`, in its own
# `checkpoint(..., use_reentrant=False)` call. The input and output layers stay outside.
# Return the log-probabilities; the gradients of every parameter must be those of the plain
# forward. (The first call of `checkpoint` in a session takes a few seconds: it imports a large
# part of PyTorch's compiler machinery. Later calls are quick.)


# %% nbgrader={"solution": true, "grade_id": "checkpointed_forward"}
def checkpointed_forward(model, x, depth):
    ### BEGIN SOLUTION
    def middle(t):
        return F.relu(model.middle_linear(t))

    h = F.relu(model.input_linear(x))
    for _ in range(depth):
        h = checkpoint(middle, h, use_reentrant=False)
    return F.log_softmax(model.output_linear(h), dim=1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_checkpointed_forward"}
torch.manual_seed(12)
_net = DynamicNet()
_x, _y = torch.randn(8, 32), torch.randint(0, 10, (8,))
_calls = []
_handle = _net.middle_linear.register_forward_hook(lambda m, i, o: _calls.append(1))
for _depth in (1, 3):
    _net.zero_grad()
    _want = _net(_x, depth=_depth)
    F.nll_loss(_want, _y).backward()
    _plain = [p.grad.clone() for p in _net.parameters()]
    _net.zero_grad()
    _calls.clear()
    _out = checkpointed_forward(_net, _x, _depth)
    check(
        isinstance(_out, torch.Tensor) and torch.allclose(_out, _want, atol=1e-6),
        f"depth {_depth}: the output differs from model(x, depth={_depth}): input layer and "
        "ReLU, depth x (middle layer and ReLU), output layer, log_softmax.",
    )
    _forward_calls = len(_calls)
    F.nll_loss(_out, _y).backward()
    check(
        _net.middle_linear.weight.grad is not None,
        f"depth {_depth}: the middle layer got no gradient: is it run under torch.no_grad() "
        "or on detached tensors? checkpoint records nothing itself, but backward must reach it.",
    )
    check(
        all(
            torch.allclose(_p.grad, _g, atol=1e-6)
            for _p, _g in zip(_net.parameters(), _plain, strict=True)
        ),
        f"depth {_depth}: the gradients differ from the plain forward's. If the checkpointed "
        "function reads h from the loop instead of taking it as an argument, the recomputation "
        "in backward sees the last h, not the one of its own use: pass h to checkpoint.",
    )
    check(
        len(_calls) == 2 * _forward_calls == 2 * _depth,
        f"depth {_depth}: the middle layer ran {_forward_calls} times in the forward pass and "
        f"{len(_calls) - _forward_calls} times in backward. With one checkpoint per use around "
        f"F.relu(model.middle_linear(h)) it runs {_depth} times in each: backward reruns every "
        "checkpointed use to recompute what it did not keep. (Around the layer alone, with the "
        "ReLU outside, the rerun has what it needs inside the layer and stops before the call "
        "completes.)",
    )
_handle.remove()
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _bytes_kept(fn, *args):
    _total = [0]

    def _pack(t):
        _total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(_pack, lambda t: t):
        _out = fn(*args)
    return _out, _total[0]


def _call_counter(module):
    _calls = []
    return _calls, module.register_forward_hook(lambda m, i, o: _calls.append(1))


_gen = torch.Generator().manual_seed(93)
for _depth, _batch, _hidden in ((0, 5, 16), (2, 6, 24), (5, 4, 20)):
    _net = randomize(DynamicNet(d_in=7, hidden=_hidden, d_out=4, max_depth=5), _gen)
    _x = torch.randn(_batch, 7, generator=_gen)
    _y = torch.randint(0, 4, (_batch,), generator=_gen)
    _calls, _handle = _call_counter(_net.middle_linear)
    _out, _kept = _bytes_kept(checkpointed_forward, _net, _x, _depth)
    _forward_calls = len(_calls)
    F.nll_loss(_out, _y).backward()
    _handle.remove()
    observe(
        f"checkpointed_forward(model, x, depth={_depth}) on a random DynamicNet (hidden "
        f"{_hidden}, batch {_batch}), then backward",
        {
            "output": _out.detach(),
            "gradients": {_n: _p.grad for _n, _p in sorted(_net.named_parameters())},
            "bytes saved for backward": _kept,
            "middle layer calls in forward": _forward_calls,
            "middle layer calls in backward": len(_calls) - _forward_calls,
        },
        atol=1e-6,
        hint="one checkpoint(..., use_reentrant=False) per use, around F.relu(middle_linear(h)) "
        "with h passed as an argument; input and output layers outside.",
    )
### END HIDDEN TESTS

# %% [markdown]
# What checkpointing buys and costs, at each depth: the bytes saved for backward (measured
# with your `saved_bytes`) and the time of one forward and backward pass (the median of a few
# runs). Timings depend on your machine and on what else it is doing, so read their shape, not
# their digits.

# %%
REPEATS = 3 if GRADING else 7


def pass_time(forward, x, target):
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        F.nll_loss(forward(x), target).backward()
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


plain_mib, ckpt_mib, plain_ms, ckpt_ms = [], [], [], []
for d in DEPTHS:
    plain_mib.append(saved_bytes(lambda t, d=d: big(t, depth=d), xb) / 2**20)
    ckpt_mib.append(saved_bytes(lambda t, d=d: checkpointed_forward(big, t, d), xb) / 2**20)
    plain_ms.append(pass_time(lambda t, d=d: big(t, depth=d), xb, yb))
    ckpt_ms.append(pass_time(lambda t, d=d: checkpointed_forward(big, t, d), xb, yb))
fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 3.6))
ax1.plot(list(DEPTHS), plain_mib, "o-", label="plain")
ax1.plot(list(DEPTHS), ckpt_mib, "s-", label="checkpointed")
ax1.set_xlabel("depth")
ax1.set_ylabel("MiB saved for backward")
ax1.legend()
ax2.plot(list(DEPTHS), plain_ms, "o-", label="plain")
ax2.plot(list(DEPTHS), ckpt_ms, "s-", label="checkpointed")
ax2.set_xlabel("depth")
ax2.set_ylabel("ms per forward + backward")
ax2.legend()
ax3.plot(plain_ms, plain_mib, "o-", label="plain")
ax3.plot(ckpt_ms, ckpt_mib, "s-", label="checkpointed")
for d, ms, mib in zip(DEPTHS, ckpt_ms, ckpt_mib, strict=True):
    ax3.annotate(str(d), (ms, mib), textcoords="offset points", xytext=(4, -10), fontsize=8)
ax3.set_xlabel("ms per forward + backward")
ax3.set_ylabel("MiB saved for backward")
ax3.set_title("the trade, one point per depth", fontsize=10)
ax3.legend()
fig.suptitle(f"Checkpointing DynamicNet's middle layer (batch {BATCH}, hidden {HIDDEN})")
plt.tight_layout()
plt.show()
print("depth  plain MiB  ckpt MiB  plain ms  ckpt ms")
for row in zip(DEPTHS, plain_mib, ckpt_mib, plain_ms, ckpt_ms, strict=True):
    print("{:5d}  {:9.3f}  {:8.3f}  {:8.2f}  {:7.2f}".format(*row))
draws = [big.rng.randint(0, big.max_depth) for _ in range(8)]
print(
    "depths the model draws next:",
    draws,
    "-> checkpointed MiB:",
    [round(ckpt_mib[d], 2) for d in draws],
)

# %% [markdown]
# Both memory lines still grow with depth, but the checkpointed one more slowly: each use now
# keeps only its input (one activation), where the plain pass keeps the ReLU's output in two
# slots and the weight in a third. The time grows faster instead: every checkpointed use runs
# its forward twice. With a depth drawn at random, each pass pays for the depth it drew, in
# both columns. For a deep network whose activations do not fit in memory, that trade is what
# makes training possible at all.
#
# ## 4. Which forward line broke the backward pass?
#
# Lab 4's version-counter error says *what* went wrong, but not *where*: the error is raised in
# `backward()`, long after the forward line that caused it ran. Here is lab 4's broken
# function, hidden in a small helper as it would be in a real model:


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
# Anomaly mode makes every operation slower, so it is for debugging only.

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
# ### Exercise 4 (1 point): name the culprit
#
# Write `find_culprit(fn, x)` that runs `fn(x).backward()` under
# `torch.autograd.detect_anomaly()`, catching the warnings (`record=True`, with
# `warnings.simplefilter("always")` so none is swallowed) and a `RuntimeError` from backward.
#
# * If backward raised, find the warning whose text starts with `"Error detected in"` and return
#   the tuple `(node, line)`: `node` is the name of the backward node, the word after
#   `"Error detected in "` without the full stop (`"TanhBackward0"` above), and `line` is the
#   source line of the **innermost** frame of the forward traceback, stripped of surrounding
#   spaces (`"t = torch.tanh(x)"` above). In the warning's text that is the last line of code,
#   before the line that starts with `"(Triggered internally"` (some builds of PyTorch leave
#   that line out; and should a line of `^` or `~` markers follow the code, it is not code).
# * If backward ran without error, return `None`.


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
_found = find_culprit(model_step, torch.randn(4, requires_grad=True))
check(
    isinstance(_found, tuple) and len(_found) == 2,
    f"find_culprit(model_step, x) should return a tuple (node, line), got {_found!r}. Did "
    "backward run under torch.autograd.detect_anomaly(), with its warnings recorded?",
)
check(
    _found[0] == "TanhBackward0",
    f"the node should be 'TanhBackward0' (the word after 'Error detected in', without the full "
    f"stop), got {_found[0]!r}.",
)
check(
    _found[1] != "model_step(x).backward()" and not _found[1].startswith("return"),
    f"{_found[1]!r} is an outer frame of the traceback: the innermost frame, the last line of "
    "code, is the line that created the node.",
)
check(
    _found[1] == "t = torch.tanh(x)",
    f"the line should be 't = torch.tanh(x)', got {_found[1]!r}. Take the last line of code in "
    "the warning, stripped of spaces.",
)


def _fine(x):
    return (x.exp() * 3).sum()


check(
    find_culprit(_fine, torch.randn(3, requires_grad=True)) is None,
    "backward of a correct function raises nothing: find_culprit should return None.",
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


def _pow_input(x):
    u = x + 1
    v = u.pow(3)
    u.add_(2)
    return v.sum()


def _clean(x):
    return torch.tanh(x).sum() * x.sum()


_gen = torch.Generator().manual_seed(94)
_record = {}
for _name, _fn in (
    ("sigmoid, then s[0] = 0", _sigmoid_then_fill),
    ("exp, then e += 1", _exp_plus),
    ("pow(3), then its input changed", _pow_input),
    ("no in-place change", _clean),
):
    _found = find_culprit(_fn, torch.randn(6, generator=_gen, requires_grad=True))
    _record[_name] = None if _found is None else list(_found)
observe(
    "find_culprit(fn, x) on three functions with an in-place error and one without",
    _record,
    hint="(node after 'Error detected in', without the full stop; the last line of code of the "
    "forward traceback, stripped), or None when backward raises nothing.",
)
### END HIDDEN TESTS

# %% [markdown]
# Two more broken functions, and `model_step`, as a table: the node whose saved tensor was
# overwritten, and the forward line that made it.


# %%
def clipped_relu(x):
    h = torch.relu(x * 3)
    h.clamp_(max=1.0)  # relu saved its output
    return h.sum()


def sine_of_changed_input(x):
    w = x + 0
    y = w.sin()
    w.zero_()  # sin saved its input
    return y.sum()


print(f"{'function':<22} {'node':<16} forward line")
for fn in (model_step, clipped_relu, sine_of_changed_input):
    found = find_culprit(fn, torch.randn(4, requires_grad=True))
    print(f"{fn.__name__:<22} {found[0]:<16} {found[1]}" if found else f"{fn.__name__:<22} -")


# %% [markdown]
# ## 5. `torch.func`: gradients as functions
#
# `torch.func` (once the separate library *functorch*) treats differentiation as an operation
# on **functions**: `torch.func.grad(f)` is a new function that returns the gradient of `f`
# with respect to its first argument. No `.grad`, no `requires_grad`, no `backward()`: the
# function is traced as it runs, like everything else in PyTorch, and nothing is left behind.


# %%
def f(x):
    return (x.sin() * x).sum()


x = torch.tensor([0.5, 1.0, 2.0])
df = torch.func.grad(f)
print("torch.func.grad(f)(x):        ", df(x))
xr = x.clone().requires_grad_()
f(xr).backward()
print("autograd, backward(), .grad:  ", xr.grad)
print("by hand, sin(x) + x cos(x):   ", x.sin() + x * x.cos())

# %% [markdown]
# The point of gradients as functions is that they compose with other transforms. The most
# useful is `torch.func.vmap(g)`: a function that runs `g` on every slice of a batch along a
# dimension, as **one batched computation** rather than a Python loop. Composed with `grad`, it
# gives the gradient of each sample's loss separately: **per-sample gradients**, which
# differential privacy and some optimizers need, and which `backward()` cannot give you (it sums
# over the batch, as lab 3 showed).
#
# The model is a two-layer network written as a plain function of a dict of parameters, which
# is the form `torch.func` wants (for an `nn.Module`, `torch.func.functional_call(model, params,
# (x,))` does the same).


# %% nbgrader={"locked": true, "grade_id": "mlp"}
def mlp(params, x):
    """A two-layer network as a function of its parameters: x (batch, d_in) -> (batch, d_out)."""
    h = torch.tanh(x @ params["W1"].T + params["b1"])
    return h @ params["W2"].T + params["b2"]


def make_params(d_in, hidden, d_out, generator, dtype=torch.float32):
    """Random parameters for mlp, from a torch.Generator."""
    shapes = {"W1": (hidden, d_in), "b1": (hidden,), "W2": (d_out, hidden), "b2": (d_out,)}
    return {
        name: torch.randn(shape, generator=generator, dtype=dtype) / shape[-1] ** 0.5
        for name, shape in shapes.items()
    }


# %% [markdown]
# ### Exercise 5 (2 points): per-sample gradients
#
# Write `per_sample_grads(params, xs, ys)` for `mlp`. Sample `i`'s loss is
# `F.cross_entropy(mlp(params, xs[i:i+1]), ys[i:i+1])`. Return a dict with the keys of
# `params`; under each key, a tensor of shape `(N, *params[key].shape)` whose entry `i` is the
# gradient of sample `i`'s loss with respect to that parameter.
#
# Use `torch.func`: a function `loss_one(params, x, y)` of **one** sample (inside `vmap` it
# sees `x` of shape `(d_in,)`: `x.unsqueeze(0)` makes a batch of one), its gradient
# `torch.func.grad(loss_one)` (with respect to the first argument, the dict), and `vmap` over
# the samples only: `in_dims=(None, 0, 0)` (the parameters are shared, not batched).


# %% nbgrader={"solution": true, "grade_id": "per_sample_grads"}
def per_sample_grads(params, xs, ys):
    ### BEGIN SOLUTION
    def loss_one(p, x, y):
        return F.cross_entropy(mlp(p, x.unsqueeze(0)), y.unsqueeze(0))

    return torch.func.vmap(torch.func.grad(loss_one), in_dims=(None, 0, 0))(params, xs, ys)
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_per_sample_grads"}
_params = make_params(3, 5, 4, torch.Generator().manual_seed(13), dtype=torch.float64)
_xs = torch.randn(6, 3, dtype=torch.float64)
_ys = torch.randint(0, 4, (6,))
_got = per_sample_grads(_params, _xs, _ys)
check(
    isinstance(_got, dict) and set(_got) == set(_params),
    f"per_sample_grads should return a dict with the keys {sorted(_params)}.",
)
for _name, _p in _params.items():
    check(
        isinstance(_got[_name], torch.Tensor) and tuple(_got[_name].shape) == (6, *_p.shape),
        f"{_name}: expected shape {(6, *_p.shape)} (one gradient per sample), got "
        f"{tuple(getattr(_got[_name], 'shape', ()))}. A gradient of the whole batch's loss has no "
        "sample dimension: vmap the gradient of a one-sample loss over the samples.",
    )
# The same with a Python loop: one backward pass per sample.
_leaves = {k: v.clone().requires_grad_() for k, v in _params.items()}
_loop = {k: [] for k in _params}
for _i in range(6):
    _loss = F.cross_entropy(mlp(_leaves, _xs[_i : _i + 1]), _ys[_i : _i + 1])
    for _k, _g in zip(_leaves, torch.autograd.grad(_loss, list(_leaves.values())), strict=True):
        _loop[_k].append(_g)
_loop = {k: torch.stack(v) for k, v in _loop.items()}
_ratio = (_got["W2"].norm() / _loop["W2"].norm()).item()
check(
    abs(_ratio * 6 - 1) > 1e-6,
    "your gradients are 1/6 of the loop's: each sample's loss is its own cross-entropy, not "
    "divided by the number of samples.",
)
for _name in _params:
    check(
        torch.allclose(_got[_name], _loop[_name], atol=1e-10),
        f"{_name}: your per-sample gradients differ from a loop of one backward pass per sample "
        f"(ratio of norms for W2: {_ratio:.4f}). Entry i must be sample i's gradient alone.",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(95)
for _n, (_d_in, _hidden, _d_out) in ((1, (2, 3, 2)), (5, (4, 7, 3)), (9, (6, 2, 5))):
    _params = make_params(_d_in, _hidden, _d_out, _gen, dtype=torch.float64)
    _xs = torch.randn(_n, _d_in, dtype=torch.float64, generator=_gen)
    _ys = torch.randint(0, _d_out, (_n,), generator=_gen)
    _got = per_sample_grads(_params, _xs, _ys)
    observe(
        f"per_sample_grads(params, xs, ys) for {_n} samples, mlp {_d_in}-{_hidden}-{_d_out} in float64",
        {_k: _got[_k] for _k in sorted(_params)},
        rtol=1e-7,
        atol=1e-10,
        hint="one gradient per sample, of that sample's own cross-entropy: vmap(grad(loss_one), "
        "in_dims=(None, 0, 0)) with loss_one on a batch of one.",
    )
### END HIDDEN TESTS

# %% [markdown]
# How much does the batched version save? The time of the loop (one backward pass per sample)
# and of `vmap(grad(...))`, for a growing number of samples:

# %%
gen = torch.Generator().manual_seed(4)
params = make_params(20, 64, 10, gen)
sizes = [8, 32, 128] if GRADING else [8, 32, 128, 512]
loop_ms, vmap_ms = [], []
for n in sizes:
    xs = torch.randn(n, 20, generator=gen)
    ys = torch.randint(0, 10, (n,), generator=gen)
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    start = time.perf_counter()
    for i in range(n):
        loss = F.cross_entropy(mlp(leaves, xs[i : i + 1]), ys[i : i + 1])
        torch.autograd.grad(loss, list(leaves.values()))
    loop_ms.append(1000 * (time.perf_counter() - start))
    start = time.perf_counter()
    per_sample_grads(params, xs, ys)
    vmap_ms.append(1000 * (time.perf_counter() - start))
print("samples  loop ms  vmap ms")
for n, lt, vt in zip(sizes, loop_ms, vmap_ms, strict=True):
    print(f"{n:7d}  {lt:7.1f}  {vt:7.1f}")
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.loglog(sizes, loop_ms, "o-", label="Python loop of backward passes")
ax.loglog(sizes, vmap_ms, "s-", label="vmap(grad(loss_one))")
ax.set_xlabel("number of samples")
ax.set_ylabel("ms")
ax.legend()
plt.show()

# %% [markdown]
# ### `vmap` and a Python `if`
#
# `vmap` runs your function **once**, on a tensor that stands for the whole batch. That is why
# it is fast, and it is also its limit. A dynamic graph in the sense of this course, a Python
# `if` on a value the data decides, asks a question that has one answer per sample; the one
# Python run of the function can take only one branch. So `vmap` refuses, rather than guess:


# %%
def flip_if_negative(x):
    if x.sum() > 0:
        return x * 2
    return -x


batch = torch.tensor([[1.0, 2.0], [-3.0, 1.0], [0.5, -0.1]])
try:
    torch.func.vmap(flip_if_negative)(batch)
except RuntimeError as error:
    print("RuntimeError:", str(error).split(" We don't")[0][:160])
print("sample by sample:", torch.stack([flip_if_negative(row) for row in batch]))

# %% [markdown]
# The cure is to compute both branches and pick per sample, with `torch.where`: a tensor
# operation, which `vmap` knows how to batch. (`torch.cond(pred, true_fn, false_fn, operands)`,
# lab 8's choice for the compiler, also works under `vmap`, which turns it into a `where` of
# both branches as well.) The price is that both branches are computed for every sample.


# %%
def flip_if_negative_where(x):
    return torch.where(x.sum() > 0, x * 2, -x)


print("vmap with torch.where:", torch.func.vmap(flip_if_negative_where)(batch))

# %% [markdown]
# ## 6. Differentiating a gradient: `create_graph=True`
#
# `torch.autograd.grad(out, x)` returns the gradient as a plain tensor: the backward pass is
# not itself recorded. With `create_graph=True` it is, and the gradient becomes a tensor in a
# graph, with a `grad_fn`, that you can differentiate again. For $f(x) = x^3$:

# %%
x = torch.tensor(2.0, requires_grad=True)
(d1,) = torch.autograd.grad(x**3, x, create_graph=True)
(d2,) = torch.autograd.grad(d1, x)
print(
    f"f'(2) = {d1.item()} (3x^2, grad_fn={type(d1.grad_fn).__name__}),  f''(2) = {d2.item()} (6x)"
)

# %% [markdown]
# For a function of a vector, the second derivatives form the Hessian matrix $H$, which is
# $n \times n$: too big to build for a network. But its product with a vector, $Hv$, costs a
# small multiple of one gradient, because
# $Hv = \nabla_x \left(\nabla_x f(x) \cdot v\right)$: take the gradient $g$ with
# `create_graph=True`, form the scalar $g \cdot v$, and differentiate that.
# Optimizers that use curvature, and checks of a minimum's sharpness, are built on it.
#
# ### Exercise 6 (2 points): a Hessian-vector product
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
torch.manual_seed(16)
_A = torch.randn(4, 4, dtype=torch.float64)


def _f(x):
    return 0.5 * x @ _A @ x + (x.sin() * x.roll(1)).sum()


_x = torch.randn(4, dtype=torch.float64)
_v = torch.randn(4, dtype=torch.float64)
try:
    _hv = hvp(_f, _x, _v)
except NotImplementedError:
    raise
except RuntimeError as _error:
    _hv = None
    check(
        False,
        f"hvp raised: {str(_error)[:100]}. If it says the tensor does not require grad, the "
        "first gradient was computed without create_graph=True, so it is a constant that "
        "cannot be differentiated again.",
    )
check(
    isinstance(_hv, torch.Tensor) and _hv.shape == _x.shape,
    "hvp should return a tensor shaped like x: the product H(x) v.",
)
with warnings.catch_warnings():  # torch.func's first use may warn about torch.jit
    warnings.simplefilter("ignore", FutureWarning)
    _H = torch.func.hessian(_f)(_x)
    _g = torch.func.grad(_f)(_x)
check(
    not torch.allclose(_hv, _g),
    "hvp returned the gradient of f, not the gradient of (g * v).sum(): differentiate a second "
    "time.",
)
check(
    not torch.allclose(_hv, (_H @ torch.ones(4, dtype=torch.float64)) * _v),
    "hvp returned (H 1) * v: the gradient of g.sum() times v. Multiply by v before the second "
    "gradient: differentiate (g * v).sum().",
)
check(
    torch.allclose(_hv.detach(), _H @ _v, atol=1e-10),
    "hvp(f, x, v) differs from torch.func.hessian(f)(x) @ v.",
)
check(
    not _x.requires_grad and _x.grad is None,
    "hvp changed the caller's x (it requires grad now): work on xl = x.detach().requires_grad_().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(96)
_A = torch.randn(5, 5, dtype=torch.float64, generator=_gen)
_M = torch.randn(3, 6, dtype=torch.float64, generator=_gen)
_fns = {
    "a quadratic form x A x / 2 on 5 numbers": (lambda x: 0.5 * x @ _A @ x, 5),
    "logsumexp(M x) on 6 numbers": (lambda x: torch.logsumexp(_M @ x, 0), 6),
    "sum(sin(x) roll(x)) + sum(x^4) / 4 on 7 numbers": (
        lambda x: (x.sin() * x.roll(1)).sum() + (x**4).sum() / 4,
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
            "H v": _hv.detach(),
            "x requires grad after the call": _x.requires_grad,
            "x unchanged": torch.equal(_x.detach(), _x_before),
        },
        rtol=1e-7,
        atol=1e-10,
        hint="gradient with create_graph=True, then the gradient of (g * v).sum(), on a leaf "
        "xl = x.detach().requires_grad_().",
    )
### END HIDDEN TESTS

# %% [markdown]
# `torch.func` gets the same product from its transforms: `jvp(grad(f), (x,), (v,))` pushes the
# direction `v` forward through the gradient function (forward-over-reverse, usually the
# fastest), and `hessian(f)(x) @ v` builds the whole matrix first. Here are all three for a
# function of 8 numbers, and its Hessian as a picture.

# %%
torch.manual_seed(6)
A8 = torch.randn(8, 8, dtype=torch.float64)


def f8(x):
    return 0.5 * x @ A8 @ x + (x.sin() * x.roll(1)).sum()


x8, v8 = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
H8 = torch.func.hessian(f8)(x8)
ways = {
    "double backward (yours)": hvp(f8, x8, v8),
    "jvp(grad(f), (x,), (v,))": torch.func.jvp(torch.func.grad(f8), (x8,), (v8,))[1],
    "hessian(f)(x) @ v": H8 @ v8,
}
for name, hv in ways.items():
    print(f"{name:26}", np.array2string(hv.detach().numpy(), precision=3, suppress_small=True))
fig, ax = plt.subplots(figsize=(4, 3.5))
image = ax.imshow(H8.numpy(), cmap="coolwarm")
fig.colorbar(image)
ax.set_title("H of f at x: symmetric")
plt.show()

# %% [markdown]
# ## 7. Your own backward: `torch.autograd.Function`
#
# Sometimes you know a better backward than autograd would derive: more stable, cheaper, or
# simply different on purpose (a straight-through estimator). A subclass of
# `torch.autograd.Function` pairs a `forward(ctx, ...)` with a `backward(ctx, grad_output)`
# that you write; `MyFunction.apply(x)` runs it and puts one node, `MyFunctionBackward`, in the
# graph. The forward runs with recording switched off, and it keeps what backward needs with
# `ctx.save_for_backward(...)`; backward reads it back from `ctx.saved_tensors` and returns the
# gradient with respect to each input, **times** `grad_output` (the chain rule: backward
# receives $\partial L / \partial y$ and returns $\partial L / \partial x$).
#
# Why `save_for_backward` and not `ctx.x = x`? Tensors saved through it get what every saved
# tensor of section 2 gets: the version counter check of lab 4, and the saved-tensor hooks (so
# packing and checkpointing work). A tensor stuck on `ctx` as an attribute gets neither.
#
# The example is softplus, $\log(1 + e^x)$, a smooth ReLU. Written as it reads, it overflows:
# in float32 $e^{89}$ is already infinite.

# %%
xs = torch.linspace(-100, 100, 401)
naive = torch.log(1 + torch.exp(xs))
stable = xs.clamp(min=0) + torch.log1p(torch.exp(-xs.abs()))
print("naive softplus is infinite from x =", xs[torch.isinf(naive)][0].item())
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(xs, stable, label="max(x, 0) + log1p(exp(-|x|))", linewidth=3)
ax.plot(xs, torch.where(torch.isinf(naive), torch.nan, naive), "--", label="log(1 + exp(x))")
ax.set_xlabel("x")
ax.set_ylabel("softplus(x), float32")
ax.legend()
plt.show()

# %% [markdown]
# The stable form uses $\log(1 + e^x) = \max(x, 0) + \log(1 + e^{-|x|})$, where the
# exponential never exceeds 1. The derivative is the sigmoid, $\sigma(x) = 1/(1 + e^{-x})$,
# which `torch.sigmoid` computes without overflow; $e^x / (1 + e^x)$ would give `inf / inf`,
# which is `nan`, for large `x`.
#
# ### Exercise 7 (3 points): a stable softplus with its own backward
#
# Complete `StableSoftplus`: `forward(ctx, x)` returns the stable softplus of `x` (same shape
# and dtype) and saves what backward needs with `ctx.save_for_backward`; `backward(ctx,
# grad_output)` returns `grad_output` times the derivative. It must give finite values and
# gradients for every float32 input, and pass `torch.autograd.gradcheck` in float64. (Saving
# the output `y` instead of `x` works too: $\sigma(x) = 1 - e^{-y}$, which `-torch.expm1(-y)`
# computes accurately.)


# %% nbgrader={"solution": true, "grade_id": "stable_softplus"}
class StableSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ### BEGIN SOLUTION
        ctx.save_for_backward(x)
        return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_output):
        ### BEGIN SOLUTION
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)
        ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_stable_softplus"}
_x = torch.tensor([-200.0, -20.0, -1.0, 0.0, 1.0, 20.0, 200.0], requires_grad=True)
_y = StableSoftplus.apply(_x)
check(
    isinstance(_y, torch.Tensor) and _y.shape == _x.shape and _y.dtype == _x.dtype,
    "StableSoftplus.apply(x) should return a tensor of x's shape and dtype.",
)
check(
    bool(torch.isfinite(_y).all()),
    f"softplus of {_x.tolist()} gave {_y.tolist()}: use max(x, 0) + log1p(exp(-|x|)), which never "
    "overflows.",
)
check(
    torch.allclose(_y, F.softplus(_x), rtol=1e-5, atol=1e-6),
    "StableSoftplus differs from F.softplus: log(1 + e^x) = max(x, 0) + log1p(exp(-|x|)).",
)
_g = torch.arange(1.0, 8.0)
_y.backward(_g)
check(
    _x.grad is not None and bool(torch.isfinite(_x.grad).all()),
    f"the gradients are {_x.grad}: not all finite. exp(x) / (1 + exp(x)) is inf / inf = nan for "
    "large x; torch.sigmoid(x) is the same function without overflow.",
)
check(
    not torch.allclose(_x.grad, torch.sigmoid(_x.detach())),
    "backward returned the derivative alone: multiply it by grad_output (the chain rule).",
)
check(
    torch.allclose(_x.grad, _g * torch.sigmoid(_x.detach()), rtol=1e-5, atol=1e-6),
    "backward should return grad_output * sigmoid(x).",
)
_x64 = torch.randn(6, dtype=torch.float64, requires_grad=True)
check(
    torch.autograd.gradcheck(StableSoftplus.apply, (_x64,), raise_exception=False),
    "gradcheck (float64, finite differences) disagrees with your backward.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(97)
for _dtype, _scale in ((torch.float32, 5.0), (torch.float32, 150.0), (torch.float64, 800.0)):
    _x = (torch.randn(3, 4, generator=_gen) * _scale).to(_dtype).requires_grad_()
    _g = torch.randn(3, 4, generator=_gen).to(_dtype)
    _y = StableSoftplus.apply(_x)
    _y.backward(_g)
    observe(
        f"StableSoftplus on a random {str(_dtype)[6:]} 3x4 input of scale {_scale:g}, backward "
        "with a random grad_output",
        {"output": _y.detach(), "dtype": str(_y.dtype), "x.grad": _x.grad},
        rtol=1e-5,
        atol=1e-6,
        hint="max(x, 0) + log1p(exp(-|x|)) forward; backward grad_output * sigmoid(x), both "
        "finite for large |x|.",
    )
_x64 = torch.randn(2, 5, dtype=torch.float64, generator=_gen, requires_grad=True)
observe(
    "torch.autograd.gradcheck(StableSoftplus.apply, (x,)) on a random float64 2x5 input",
    {
        "passes": torch.autograd.gradcheck(StableSoftplus.apply, (_x64,), raise_exception=False),
        "output": StableSoftplus.apply(_x64).detach(),
    },
    hint="the backward must be grad_output times the derivative of the forward.",
)
### END HIDDEN TESTS

# %% [markdown]
# One more check on the same exercise: is what backward needs kept through
# `ctx.save_for_backward`? The check packs each saved tensor as a **copy** (a pack hook of
# section 2), then changes `x` in place before backward. A tensor saved through
# `save_for_backward` was copied, so backward still sees the old values; a tensor kept as
# `ctx.x` is the changed one, and the gradient comes out wrong, without any error.

# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_softplus_saves"}
_base = torch.tensor([-2.0, -0.5, 0.0, 1.5, 3.0], dtype=torch.float64, requires_grad=True)
_x = _base * 1.0  # not a leaf, so it may be changed in place
_packed = []
with torch.autograd.graph.saved_tensors_hooks(
    lambda t: _packed.append(1) or t.clone(), lambda t: t
):
    _y = StableSoftplus.apply(_x)
check(
    len(_packed) >= 1,
    "StableSoftplus saved nothing through ctx.save_for_backward: the saved-tensor hooks never "
    "saw a tensor. Keep what backward needs with ctx.save_for_backward(...), not as ctx.x.",
)
with torch.no_grad():
    _x.add_(10.0)
_y.backward(torch.ones(5, dtype=torch.float64))
check(
    torch.allclose(_base.grad, torch.sigmoid(_base.detach()), atol=1e-10),
    "after x was changed in place, backward used the changed values: it read a tensor kept "
    "outside ctx.save_for_backward (the saved copy was ignored).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _apply_with_copies(x):
    """StableSoftplus.apply(x), every saved tensor packed as a copy; and how many were."""
    _packed = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: _packed.append(1) or t.clone(), lambda t: t
    ):
        return StableSoftplus.apply(x), _packed


_gen = torch.Generator().manual_seed(98)
for _case in (1, 2):
    _base = torch.randn(2, 3, dtype=torch.float64, generator=_gen, requires_grad=True)
    _x = _base * 1.0
    _y, _packed = _apply_with_copies(_x)
    with torch.no_grad():
        _x.mul_(-3.0)
    _y.sum().backward()  # grad_output of ones: this check is about what was saved
    observe(
        f"StableSoftplus with saved tensors packed as copies, x changed in place before "
        f"backward of the sum (case {_case} of 2)",
        {"saved through save_for_backward": len(_packed) >= 1, "gradient": _base.grad},
        atol=1e-10,
        hint="keep what backward needs with ctx.save_for_backward and read it from "
        "ctx.saved_tensors.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Your function next to PyTorch's own softplus: values, gradients, and the result of
# `gradcheck` on a few random float64 inputs.

# %%
xs = torch.linspace(-30, 30, 7, requires_grad=True)
mine = StableSoftplus.apply(xs)
(mine_grad,) = torch.autograd.grad(mine.sum(), xs)
xt = xs.detach().clone().requires_grad_()
theirs = F.softplus(xt)
(theirs_grad,) = torch.autograd.grad(theirs.sum(), xt)
print("     x   StableSoftplus   F.softplus    your grad  their grad")
for row in zip(
    xs.tolist(),
    mine.tolist(),
    theirs.tolist(),
    mine_grad.tolist(),
    theirs_grad.tolist(),
    strict=True,
):
    print("{:6.1f}  {:15.6g}  {:11.6g}  {:11.6g}  {:10.6g}".format(*row))
gen = torch.Generator().manual_seed(7)
passed = [
    torch.autograd.gradcheck(
        StableSoftplus.apply,
        (torch.randn(5, dtype=torch.float64, generator=gen).mul(4).requires_grad_(),),
        raise_exception=False,
    )
    for _ in range(5)
]
print("gradcheck on 5 random float64 inputs:", passed)

# %% [markdown]
# ## What you have seen
#
# * A hook on a tensor sees the gradient with respect to that tensor, once it is complete: on
#   a shared leaf, the sum over its uses; on a per-use view, that use's share. Hooks fire in
#   backward order. Module hooks fire once per call, and stay until you remove them.
# * `saved_tensors_hooks` shows every tensor the graph keeps for backward, and lets you store it
#   differently. A dynamic graph keeps memory in proportion to the path the forward pass took:
#   for `DynamicNet`, one activation per use of the middle layer, and more.
# * Checkpointing keeps only each segment's input and recomputes the rest in backward: less
#   memory, more time. The recomputation runs the function again, so give it its input as an
#   argument.
# * `detect_anomaly()` turns a backward error into a forward line, through a warning.
# * `torch.func.grad` and `vmap` compose: per-sample gradients in one batched computation. A
#   Python `if` on a batched value has no single answer, so `vmap` refuses it; `torch.where`
#   (or `torch.cond`) computes both branches and picks per sample.
# * `create_graph=True` records the backward pass, so a gradient can be differentiated again:
#   $Hv$ for the price of two backward passes.
# * A custom `autograd.Function` writes its own backward, times `grad_output`, with what it
#   saved through `ctx.save_for_backward`; `gradcheck` in float64 tests it.
