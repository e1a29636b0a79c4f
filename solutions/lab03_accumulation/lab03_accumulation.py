# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 3: Gradients accumulate, and shared weights sum
#
# Lab 2 ended with a warning: `backward()` *adds* to `.grad` instead of overwriting it.
# This lab takes that one fact and follows it everywhere it matters in training:
#
# 1. why every training loop zeroes gradients, the two ways to do it, and what an optimizer
#    does with a parameter whose gradient is `None`;
# 2. why a weight used `k` times in one forward pass gets the **sum** of `k` gradients;
# 3. what happens to a parameter that a forward pass did not use at all;
# 4. how to get the gradient of a big batch from several small ones, the same up to rounding.
#
# %course-include how_this_lab_works.md

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import copy

import matplotlib.pyplot as plt
import numpy as np
import torch.nn.functional as F
from torch import nn

print("torch", torch.__version__)

# %% [markdown]
# ## 1. Accumulation, and why `zero_grad` exists
#
# Take $L(w) = w^2$ at $w = 3$, so $dL/dw = 6$. Each forward pass builds a fresh graph;
# each `backward()` walks it and **adds** 6 to `w.grad`:

# %%
w = torch.tensor(3.0, requires_grad=True)
for call in range(1, 4):
    loss = w**2
    loss.backward()
    print(f"after backward call {call}: w.grad = {w.grad.item()}")

# %% [markdown]
# That is not a bug: it is what makes shared weights (section 2) and micro-batches
# (section 4) work. But an optimizer step must see the gradient of *this* step's loss
# only, so a training loop clears gradients once per step. There are two ways to clear:
#
# * `optimizer.zero_grad()` (and `model.zero_grad()`) sets every `.grad` to **`None`**:
#   this is the default, `set_to_none=True`. No memory is kept, and the next `backward()`
#   simply *writes* a new gradient.
# * `zero_grad(set_to_none=False)` keeps the tensors and fills them with **zeros**.
#
# For most code the two behave the same. They differ for a parameter that the next
# backward pass does not reach: its gradient stays `None` in the first case, and stays a
# tensor of zeros in the second. And an optimizer treats those two very differently.

# %%
p = nn.Parameter(torch.ones(2))
optimizer = torch.optim.SGD([p], lr=0.1)
(p * 3).sum().backward()
print("after backward:                   ", p.grad)
optimizer.zero_grad(set_to_none=False)
print("after zero_grad(set_to_none=False):", p.grad)
optimizer.zero_grad()
print("after zero_grad():                 ", p.grad)

# %% [markdown]
# SGD, Adam and the other usual optimizers in `torch.optim` **skip a parameter whose
# `.grad` is `None`**: no update, and its state (such as the momentum buffer) is left
# alone. (LBFGS is the exception: it treats all parameters as one flat vector and reads a
# `None` gradient as zeros.) A zero gradient is not skipped: with momentum, the parameter
# keeps moving on the velocity it had built up.
# Two parameters, SGD with momentum 0.9, and a second step in which only `a` is used:

# %%
for set_to_none in (True, False):
    a = torch.tensor(1.0, requires_grad=True)
    b = torch.tensor(2.0, requires_grad=True)
    optimizer = torch.optim.SGD([a, b], lr=0.1, momentum=0.9)
    (a * b).backward()  # step 1 uses a and b
    optimizer.step()
    optimizer.zero_grad(set_to_none=set_to_none)
    (a**2).backward()  # step 2 uses only a
    print(f"set_to_none={set_to_none!s:5}  b.grad before step 2 = {b.grad}")
    optimizer.step()
    print(f"                   b after step 2 = {b.item():.4f}")

# %% [markdown]
# With `set_to_none=True`, `b` stays at 1.9, where step 1 left it. With zeros, momentum
# carries it on to 1.81 even though the loss of step 2 does not depend on `b` at all.
#
# ### Exercise 1 (2 points): two optimizer steps
#
# Write `two_steps(set_to_none, a0=1.0, b0=2.0)` that
#
# 1. creates `a` and `b` as float64 scalar tensors with values `a0`, `b0` that require a
#    gradient, and an SGD optimizer over `[a, b]` with `lr=0.1, momentum=0.9`;
# 2. step 1: loss $a \cdot b$, backward, optimizer step;
# 3. clears the gradients with `zero_grad(set_to_none=set_to_none)`;
# 4. step 2: loss $a^2$, backward, optimizer step;
# 5. returns the tuple of floats `(a, b)` after step 2.
#
# For the defaults, the answer is `(0.46, 1.9)` with `set_to_none=True` and `(0.46, 1.81)`
# with `set_to_none=False`. Work out `a` on paper: what is its momentum buffer in step 2?


# %% nbgrader={"solution": true, "grade_id": "two_steps"}
def two_steps(set_to_none, a0=1.0, b0=2.0):
    ### BEGIN SOLUTION
    a = torch.tensor(a0, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(b0, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.SGD([a, b], lr=0.1, momentum=0.9)
    (a * b).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=set_to_none)
    (a**2).backward()
    optimizer.step()
    return a.item(), b.item()
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_two_steps"}
check(
    defined("two_steps"),
    "two_steps is not defined: run the exercise cell above (it raised an error, or did not run).",
)
for _flag, _b_want in ((True, 1.9), (False, 1.81)):
    _result, _error = attempt(two_steps, _flag)
    check(
        _error is None,
        f"two_steps(set_to_none={_flag}) raised an error instead of returning (a, b) (the "
        f"error: {_error}); call it in a cell to see the whole message.",
    )
    check(
        isinstance(_result, tuple)
        and len(_result) == 2
        and all(
            isinstance(v, float | int) or getattr(v, "numel", lambda: 0)() == 1 for v in _result
        ),
        f"two_steps(set_to_none={_flag}) should return a tuple of two floats (a, b), and it "
        f"returned something else: return a.item(), b.item() (it returned: "
        f"{type(_result).__name__}).",
    )
    _a, _b = (float(v) for v in _result)
    check(
        abs(_a - 0.26) > 1e-6,
        f"two_steps(set_to_none={_flag}): a = 0.26, which means step 2 also used step 1's "
        "gradient of a (2 + 1.6 instead of 1.6): call optimizer.zero_grad(...) between the steps.",
    )
    check(
        abs(_a - 0.64) > 1e-6,
        f"two_steps(set_to_none={_flag}): a = 0.64, which is a plain SGD step from 0.8: step 2 "
        "lost the momentum buffer of step 1. Use one optimizer for both steps.",
    )
    check(
        not 1e-9 <= abs(_a - 0.46) < 1e-5 and not 1e-9 <= abs(_b - _b_want) < 1e-5,
        f"two_steps(set_to_none={_flag}): a and b are right only up to float32 rounding "
        f"(a = {_a!r}, b = {_b!r}): create a and b with dtype=torch.float64.",
    )
    check(
        abs(_a - 0.46) < 1e-9,
        f"two_steps(set_to_none={_flag}): a should be 0.46 after step 2, and it is not (yours: "
        f"{_a:.4f}). Step 1 takes a to 0.8; in step 2 the momentum buffer is 0.9 * 2 + 1.6 = 3.4.",
    )
    if _flag:
        check(
            abs(_b - 1.9) < 1e-9,
            "two_steps(set_to_none=True): b should stay at 1.9 after step 2, and it moved "
            f"(yours: {_b:.4f}). Its grad is None after zero_grad(set_to_none=True), and SGD skips "
            "parameters whose grad is None: clear the gradients of both a and b, with the "
            "optimizer's zero_grad.",
        )
    else:
        check(
            abs(_b - 1.81) < 1e-9,
            "two_steps(set_to_none=False): b should be 1.81 after step 2, and it is not (yours: "
            f"{_b:.4f}). Its grad is a tensor of zeros, so SGD does update it: momentum 0.9 * 1 "
            "moves it by 0.09. Did you pass set_to_none=set_to_none to zero_grad?",
        )
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _pair(result):
    """two_steps' (a, b) as floats, or what kind of thing came back instead."""
    if isinstance(result, tuple | list) and len(result) == 2:
        try:
            return {"a": float(result[0]), "b": float(result[1])}
        except (TypeError, ValueError, RuntimeError):
            pass
    return {"returned": type(result).__name__}


_hints = {
    True: "After zero_grad(set_to_none=True) the grad of b is None, so SGD leaves b where step 1 "
    "put it; a must keep its momentum buffer from step 1. Use float64 and the given a0, b0.",
    False: "zero_grad(set_to_none=False) leaves b a zero gradient, which SGD does not skip: "
    "momentum moves b in step 2. Pass set_to_none=set_to_none to zero_grad, use float64.",
}
for _a0, _b0 in ((1.0, 2.0), (0.5, -1.5), (-2.0, 3.0), (1.25, 0.75), (3, -2)):
    for _flag in (True, False):
        observe(
            f"two_steps(set_to_none={_flag}, a0={_a0}, b0={_b0}): a and b after step 2",
            _pair(two_steps(_flag, _a0, _b0)),
            rtol=0,
            atol=1e-9,
            hint=_hints[_flag],
        )
# a0, b0 as keywords, in the other order
observe(
    "two_steps(set_to_none=False, b0=-0.5, a0=2.5), by keyword: a and b after step 2",
    _pair(two_steps(set_to_none=False, b0=-0.5, a0=2.5)),
    rtol=0,
    atol=1e-9,
    hint=_hints[False],
)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. A weight used k times gets the sum of k gradients
#
# A forward pass may use the same parameter several times: a recurrent network applies
# one weight matrix at every time step, and the course's `DynamicNet` (lab 5) reuses one
# `nn.Linear` a random number of times. Backpropagation treats every use as if it were a
# separate copy of the weight, computes each copy's gradient, and **adds** them: the
# contributions meet at the weight's one `AccumulateGrad` node, which runs once and adds
# their sum into `.grad`. (Nothing is updated by `backward()` itself: the optimizer later moves the
# weight by the summed gradient.)
#
# In the graph this is visible: the weight has one `AccumulateGrad` node, with one edge
# into it per use. Here `W` is applied three times:

# %%
W = torch.randn(3, 3, requires_grad=True)
h = torch.randn(3, 1)
for _ in range(3):
    h = torch.tanh(W @ h)
loss = h.sum()

acc = None
edges_into_acc = 0
node = loss.grad_fn
while node is not None:  # this graph is a chain: follow it down
    parent, node = node, None
    for child, _index in parent.next_functions:
        if child is None:
            continue
        if hasattr(child, "variable"):
            acc = child
            edges_into_acc += 1
        else:
            node = child
print("one AccumulateGrad for W:", acc.variable is W, "| edges into it:", edges_into_acc)
draw(loss, params={"W": W})

# %% [markdown]
# ### Exercise 2 (2 points): one shared weight versus k copies
#
# Write `unrolled_grads(W, h0, k)`. The forward pass is `h = h0`, then `k` times
# `h = torch.tanh(W @ h)`, then `loss = h.sum()`. Return `(shared, copies)`:
#
# * `shared`: the gradient of `loss` with respect to `W` (a tensor shaped like `W`) when the
#   same `W` is used at every step;
# * `copies`: a list of `k` tensors, the gradients of the same loss with respect to `k`
#   separate copies `W_1, ..., W_k` of `W` (same values; step `i` uses `W_i`). Make each copy a
#   new leaf with `W.detach().clone().requires_grad_()`.
#
# `W` may already hold a gradient from earlier calls: `shared` must be the gradient of this
# loss only (clear `W.grad` first), and a tensor of its own, which a later `backward()` into
# `W` does not change (a clone of `W.grad`). The check compares `sum(copies)` with `shared`.


# %% nbgrader={"solution": true, "grade_id": "unrolled_grads"}
def unrolled_grads(W, h0, k):
    ### BEGIN SOLUTION
    W.grad = None
    h = h0
    for _ in range(k):
        h = torch.tanh(W @ h)
    h.sum().backward()
    shared = W.grad.clone()

    copies = [W.detach().clone().requires_grad_() for _ in range(k)]
    h = h0
    for W_i in copies:
        h = torch.tanh(W_i @ h)
    h.sum().backward()
    return shared, [W_i.grad for W_i in copies]
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_unrolled_grads"}
check(
    defined("unrolled_grads"),
    "unrolled_grads is not defined: run the exercise cell above (it raised an error, or did "
    "not run).",
)
_W = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
_h0 = torch.randn(3, 1, dtype=torch.float64)
_result, _error = attempt(unrolled_grads, _W, _h0, 3)
check(
    _error is None or "'NoneType'" not in _error,
    "unrolled_grads(W, h0, k=3) on a random 3x3 W whose .grad is None raised an error about "
    "None: W.grad is None before W's first backward(), so clear it with W.grad = None rather "
    "than W.grad.zero_().",
)
check(
    _error is None,
    "unrolled_grads(W, h0, k=3) on a random 3x3 W whose .grad is None raised an error (the "
    f"error: {_error}); call it in a cell to see the whole message.",
)
check(
    isinstance(_result, tuple) and len(_result) == 2,
    "unrolled_grads(W, h0, k=3) should return a tuple (shared, copies).",
)
_shared, _copies = _result
check(
    isinstance(_shared, torch.Tensor) and _shared.shape == _W.shape,
    "unrolled_grads(W, h0, k=3): shared should be a tensor shaped like W, the gradient of the "
    "loss with respect to W.",
)
check(
    isinstance(_copies, list) and len(_copies) == 3,
    "unrolled_grads(W, h0, k=3): copies should be a list of k = 3 gradients, one per copy "
    "(check how many times your loops run).",
)
check(
    all(isinstance(g, torch.Tensor) and g.shape == _W.shape for g in _copies),
    "unrolled_grads(W, h0, k=3): each entry of copies should be a gradient tensor shaped like "
    "W (is one of them None? each copy must be a leaf that requires grad, made with "
    "W.detach().clone().requires_grad_(), and used in the second forward pass).",
)
check(
    not all(torch.allclose(g, _copies[0]) for g in _copies),
    "unrolled_grads(W, h0, k=3): all copies got the same gradient: step i must use its own copy "
    "W_i (k separate leaves, not one leaf k times), so that each copy sees its own step.",
)
check(
    torch.allclose(sum(_copies), _shared, atol=1e-10),
    "unrolled_grads(W, h0, k=3): sum(copies) should equal shared, since a weight used k times "
    "gets the sum of the k gradients. Check that both forward passes start from h0, do the "
    "same k steps, and that shared holds the gradient of this loss only.",
)
_kept = _shared.detach().clone()
(_W * 2.0).sum().backward()  # later code adds into W.grad
check(
    torch.equal(_shared, _kept),
    "the shared gradient returned by unrolled_grads changed when a later backward() added "
    "into W.grad: return a copy (W.grad.clone()), not the .grad tensor itself.",
)
_again, _error = attempt(unrolled_grads, _W, _h0, 3)
check(
    _error is None,
    "unrolled_grads(W, h0, k=3), called a second time on a W that already holds a gradient, "
    f"raised an error (the error: {_error}); call it twice in a cell to see the whole message.",
)
_again = _again[0] if isinstance(_again, tuple) and len(_again) == 2 else None
check(
    isinstance(_again, torch.Tensor) and torch.allclose(_again, _kept, atol=1e-10),
    "calling unrolled_grads(W, h0, k=3) again, on a W that already holds a gradient, gave a "
    "different shared gradient: W.grad accumulates across backward calls, so clear it "
    "(W.grad = None) before backward().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_hint = (
    "Both forward passes start from h0 and run k steps, for the k passed in; shared is the "
    "gradient of this loss only (clear W.grad before backward()) and a copy (W.grad.clone()); "
    "copies has k entries, and step i of the second pass uses copy W_i."
)
_gen = torch.Generator().manual_seed(31)
for _k, _n, _cols in ((1, 4, 1), (2, 4, 1), (5, 4, 1), (4, 2, 3), (7, 5, 2)):
    _W = torch.randn(_n, _n, dtype=torch.float64, requires_grad=True, generator=_gen)
    _W.grad = torch.full_like(_W, 7.0)  # a stale gradient from an earlier loss
    _h0 = torch.randn(_n, _cols, dtype=torch.float64, generator=_gen)
    _result = unrolled_grads(_W, _h0, _k)
    if not (isinstance(_result, tuple | list) and len(_result) == 2):
        _result = (f"not a pair: {type(_result).__name__}", [])
    _shared, _copies = _result
    _kept = _shared.detach().clone() if isinstance(_shared, torch.Tensor) else repr(type(_shared))
    _copies = list(_copies) if isinstance(_copies, list | tuple) else repr(type(_copies))
    _record = {"shared": _kept, "copies": _copies}
    (_W * 3.0).sum().backward()  # a later backward() adds into W.grad
    _record["shared, after a later backward() into W"] = _shared
    observe(
        f"unrolled_grads(W, h0, k={_k}) on a random {_n}x{_n} W that already holds a gradient, "
        f"h0 of {_cols} column(s)",
        _record,
        rtol=0,
        atol=1e-10,
        hint=_hint,
    )
### END HIDDEN TESTS

# %% [markdown]
# The sum in a picture, for a 3x3 `W` used 3 times. Above each entry of `W`, the three
# coloured bars are the gradients of the three copies, each starting where the one before it
# ended; the black line is the gradient of the shared `W`. The last bar ends on the line.

# %%
gen = torch.Generator().manual_seed(5)
W3 = torch.randn(3, 3, dtype=torch.float64, generator=gen, requires_grad=True)
shared, copies = unrolled_grads(W3, torch.randn(3, 1, dtype=torch.float64, generator=gen), 3)
ends = np.cumsum([g.detach().numpy().ravel() for g in copies], axis=0)  # running sums
starts = np.vstack([np.zeros(9), ends[:-1]])
entries = np.arange(9)
fig, ax = plt.subplots(figsize=(8, 3.2))
for i in range(3):
    ax.bar(
        entries + (i - 1) * 0.27,
        ends[i] - starts[i],
        bottom=starts[i],
        width=0.27,
        label=f"use {i + 1} (copy W_{i + 1})",
    )
total_grad = shared.detach().numpy().ravel()
ax.hlines(total_grad, entries - 0.45, entries + 0.45, color="black", label="shared W.grad")
ax.axhline(0, color="gray", linewidth=0.8)
ax.set_xticks(entries, [f"[{r},{c}]" for r in range(3) for c in range(3)])
ax.set_xlabel("entry of W")
ax.set_ylabel("gradient")
ax.set_title("A weight used 3 times: its gradient is the sum of 3 contributions")
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
plt.tight_layout()
show_figure(
    fig,
    "Bars for the 9 entries of W: the gradient contributions of its 3 uses, each bar "
    "starting where the previous one ended, and a black line at the shared W.grad.",
)

# %% [markdown]
# ### Exercise 3 (2 points): count the uses in the graph
#
# The number of uses can be read off the graph. Write `count_uses(loss, W)` that returns the
# number of edges into `W`'s `AccumulateGrad` node in the graph behind `loss`: walk the
# graph from `loss.grad_fn` through `next_functions`, visiting **each node once** (lab 1),
# and count the entries `(child, index)` whose `child` is the `AccumulateGrad` of `W`
# (`child.variable is W`). Return 0 if `W` is not in the graph.
#
# Careful: an intermediate result used twice is not two uses of `W`. For
# `u = W @ x; loss = u.sin().sum() + u.cos().sum()`, the answer is 1. Keep the nodes
# themselves in your set of visited nodes, not their `id()`: a node's Python object may be
# freed once nothing holds it and its `id` given to the next one (on torch 2.10, for one, it
# is: a walk that keeps only ids finds fewer than the 4 uses of W in the loss of 4 steps).


# %% nbgrader={"solution": true, "grade_id": "count_uses"}
def count_uses(loss, W):
    ### BEGIN SOLUTION
    count, seen, stack = 0, set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _index in node.next_functions:
            if child is None:
                continue
            if getattr(child, "variable", None) is W:
                count += 1
            stack.append(child)
    return count
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_count_uses"}
check(
    defined("count_uses"),
    "count_uses is not defined: run the exercise cell above (it raised an error, or did not run).",
)
_W = torch.randn(3, 3, requires_grad=True)
_h = torch.randn(3, 1)
for _ in range(4):
    _h = torch.tanh(_W @ _h)
_n, _error = attempt(count_uses, _h.sum(), _W)
check(
    _error is None or "is ambiguous" not in _error,
    "count_uses(loss, W) raised an error that the truth value of a tensor is ambiguous: a "
    "tensor was compared with ==, which compares values, element by element. Compare nodes "
    "with `is`: child.variable is W.",
)
check(
    _error is None,
    "count_uses(loss, W) on the loss of 4 steps h = tanh(W @ h) raised an error (the error: "
    f"{_error}); call it in a cell to see the whole message.",
)
check(
    _n == 4,
    "count_uses(loss, W) on 4 steps h = tanh(W @ h) should say 4, since W is used 4 times, "
    f"and it does not (yours: {_n}).",
)
_x = torch.randn(3, 1)
_u = _W @ _x
_n, _error = attempt(count_uses, _u.sin().sum() + _u.cos().sum(), _W)
check(
    _n == 1,
    "count_uses(loss, W) on u = W @ x; loss = u.sin().sum() + u.cos().sum() should say 1: u is "
    "used twice, but W only once. Visit each node once (keep a set of visited nodes), so the "
    f"edge from u's node into W is counted once (yours: {_n}; the error: {_error}).",
)
_a = torch.randn(3, requires_grad=True)
_n, _error = attempt(count_uses, (_a * _a).sum(), _a)
check(
    _n == 2,
    f"count_uses(loss, a) on loss = (a * a).sum() should say 2 (yours: {_n}; the error: "
    f"{_error}): one node uses a twice. Count the edges (child, index) into a's AccumulateGrad "
    "node, not the nodes that use it: a * a has two.",
)
_other = torch.randn(3, 3, requires_grad=True)
_n, _error = attempt(count_uses, (_other @ _x).sum(), _W)
check(
    _n == 0,
    "count_uses(loss, W) on a loss made from another tensor should return 0, since W is not in "
    f"it (yours: {_n}; the error: {_error}). Count only edges into the AccumulateGrad of W "
    "itself (child.variable is W).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_hint = (
    "Count edges (child, index) into W's AccumulateGrad node, and visit each node once (keep a "
    "set of visited nodes): a result used twice is not two uses of W, but one node using W twice "
    "(a * a) is."
)
_gen = torch.Generator().manual_seed(32)


def _number(count):
    """A count as a float, or what kind of thing came back instead."""
    if isinstance(count, int | float) or (isinstance(count, torch.Tensor) and count.numel() == 1):
        return float(count)
    return repr(type(count))


_counts = {}
for _k in torch.randint(2, 9, (3,), generator=_gen).tolist():
    _W = torch.randn(4, 4, requires_grad=True, generator=_gen)
    _t = torch.randn(4, 1, generator=_gen)
    for _ in range(_k):
        _t = torch.tanh(_W @ _t)
        _t = _t + _t  # every step's result is used twice
    _counts[f"chain of {_k} steps"] = _number(count_uses(_t.sum(), _W))
observe(
    "count_uses(loss, W) on random chains of tanh(W @ h) whose every result is used twice",
    _counts,
    rtol=0,
    atol=0,
    hint=_hint,
)
_W = torch.randn(3, 3, requires_grad=True, generator=_gen)
_x = torch.randn(3, 1, generator=_gen)
_m, _k = torch.randint(2, 6, (2,), generator=_gen).tolist()
_u = _W @ _x
_loss = sum((_u * _i).sin().sum() for _i in range(1, _m + 1))  # u feeds m branches
_loss = _loss + sum((_W * _i).sum() for _i in range(1, _k + 1))  # and W is used k more times
_other = torch.randn(3, 3, requires_grad=True, generator=_gen)
observe(
    f"count_uses(loss, W) where u = W @ x feeds {_m} branches and W is used {_k} more times, "
    "and on a loss without W",
    {
        "u in branches, W used again": _number(count_uses(_loss, _W)),
        "W not in the loss": _number(count_uses((_other @ _x).sum(), _W)),
    },
    rtol=0,
    atol=0,
    hint=_hint,
)
_counts = {}
for _m in torch.randint(2, 7, (2,), generator=_gen).tolist():
    _a = torch.randn(3, requires_grad=True, generator=_gen)
    _p = _a * _a  # one node with two edges into a's AccumulateGrad
    for _ in range(_m - 2):
        _p = _p * _a
    _counts[f"a multiplied {_m} times"] = _number(count_uses(_p.sum(), _a))
observe(
    "count_uses(loss, a) on loss = (a * a * ... * a).sum()", _counts, rtol=0, atol=0, hint=_hint
)
_r = torch.randint(2, 6, (), generator=_gen).item()
_middle = nn.Linear(4, 4)
_z = torch.randn(2, 4, generator=_gen)
for _ in range(_r):
    _z = _middle(_z).clamp(min=0)
_z = _z + _z  # a shared intermediate again
_t = _W @ _x
for _ in range(12):  # a long ladder of shared intermediates
    _t = _t.sin() + _t.cos()
observe(
    f"count_uses on a Linear layer applied {_r} times, and on a ladder of 12 shared intermediates",
    {
        "Linear weight": _number(count_uses(_z.sum(), _middle.weight)),
        "Linear bias": _number(count_uses(_z.sum(), _middle.bias)),
        "W under the ladder": _number(count_uses(_t.sum(), _W)),
    },
    rtol=0,
    atol=0,
    hint=_hint,
)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. A parameter that a forward pass did not use
#
# A dynamic graph is whatever the forward pass did *this time*. Here is a model with two
# layers of which each forward pass uses only one, chosen by the caller (in a real model
# the choice could be random, or depend on the input):


# %% nbgrader={"locked": true, "grade_id": "two_branch"}
class TwoBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc_1 = nn.Linear(4, 1)
        self.fc_2 = nn.Linear(4, 1)

    def forward(self, x, branch):
        return self.fc_1(x) if branch == 1 else self.fc_2(x)


def grad_summary(net):
    """One line per parameter: None, or the first entry of its gradient."""
    for name, param in net.named_parameters():
        shown = "None" if param.grad is None else f"{param.grad.flatten()[0].item():+.4f} ..."
        print(f"  {name:<11} grad = {shown}")


# %% [markdown]
# After one pass through branch 1, `fc_2` was not part of the graph, so `backward()` never
# reached it: its gradients are `None` (not zero: *nothing* was computed). Then a pass
# through branch 2 **without zeroing**: `fc_2` gets a gradient, and `fc_1` keeps the one
# from the first pass, untouched, because `backward()` did not reach it this time either.

# %%
torch.manual_seed(1)
net = TwoBranch()
data = torch.rand(32, 4)
net(data, branch=1).pow(2).mean().backward()
print("after a pass through branch 1:")
grad_summary(net)
net(data, branch=2).pow(2).mean().backward()
print("after a pass through branch 2, without zeroing:")
grad_summary(net)

# %% [markdown]
# That stale gradient of `fc_1` is a trap. An optimizer step now would move `fc_1` again,
# by the gradient of a loss from an earlier step. Clearing gradients at the start of every
# step avoids it, and with `set_to_none=True` (the default) the optimizer even knows to
# leave `fc_1` alone: its `.grad` is `None`.
#
# ### Exercise 4 (2 points): train a model whose graph changes
#
# Write `sgd_train(net, x, branches, lr)` that, for each `branch` in the list `branches`,
# does one step of plain gradient descent on the loss `net(x, branch).pow(2).mean()`:
# clear the gradients, forward, backward, then `p -= lr * p.grad` for every parameter `p`
# that has a gradient (you may use `torch.optim.SGD(net.parameters(), lr=lr)` instead of
# updating by hand). It changes `net` in place and returns nothing (with an empty
# `branches`, `net` stays as it is).
#
# A layer must move only in the steps that use it.


# %% nbgrader={"solution": true, "grade_id": "sgd_train"}
def sgd_train(net, x, branches, lr):
    ### BEGIN SOLUTION
    for branch in branches:
        net.zero_grad()
        net(x, branch).pow(2).mean().backward()
        with torch.no_grad():
            for p in net.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_sgd_train"}
def _same(_layer, _values, _exact=False):
    """Do the layer's parameters hold these values (exactly, or up to rounding)?"""
    _close = torch.equal if _exact else lambda a, b: torch.allclose(a, b, atol=1e-6)
    return all(_close(_p.detach(), _v) for _p, _v in zip(_layer.parameters(), _values, strict=True))


check(
    defined("sgd_train"),
    "sgd_train is not defined: run the exercise cell above (it raised an error, or did not run).",
)
torch.manual_seed(2)
_start = TwoBranch()
_x = torch.rand(8, 4)
# by hand: one step of plain gradient descent on branch 1
_one = copy.deepcopy(_start)
_one(_x, 1).pow(2).mean().backward()
_after_one = [(_p - 0.1 * _p.grad).detach() for _p in _one.fc_1.parameters()]
_runs = {}
for _branches in ([1], [1, 2, 2]):
    _net = copy.deepcopy(_start)
    _, _error = attempt(sgd_train, _net, _x, _branches, lr=0.1)
    check(
        _error is None or "'NoneType'" not in _error,
        f"sgd_train(net, x, branches, lr=0.1) on a new TwoBranch net raised an error about None "
        f"(branches: {_branches}): a layer a step does not use has .grad None there: skip it "
        "(if p.grad is not None).",
    )
    check(
        _error is None,
        f"sgd_train(net, x, branches, lr=0.1) on a new TwoBranch net raised an error (branches: "
        f"{_branches}; the error: {_error}); call it in a cell to see the whole message.",
    )
    _runs[len(_branches)] = _net


_net = _runs[1]
check(
    not _same(_net.fc_1, [_p.detach() for _p in _start.fc_1.parameters()], _exact=True),
    "sgd_train(net, x, [1], lr=0.1): fc_1 did not move, but the one step uses branch 1. Does "
    "the loop take one step per entry of branches, and is the update applied, in place, to "
    "the parameters of the net that was passed in?",
)
check(
    _same(_net.fc_1, _after_one),
    "sgd_train(net, x, [1], lr=0.1): after one step on branch 1, fc_1's weight and bias should "
    "be p - lr * p.grad, for the gradient of net(x, 1).pow(2).mean(); they are not. Update "
    "every parameter (weights and biases) by lr times its gradient, with the mean loss.",
)
check(
    _same(_net.fc_2, [_p.detach() for _p in _start.fc_2.parameters()], _exact=True),
    "sgd_train(net, x, [1], lr=0.1): fc_2 moved, in a step that does not use it. Only a "
    "parameter's own gradient may move it: plain gradient descent, no momentum, no weight decay.",
)
_net = _runs[3]
check(
    _same(_net.fc_1, _after_one),
    "sgd_train(net, x, [1, 2, 2], lr=0.1): fc_1 should move in step 1 only (as with branches "
    "[1]), but it moved again in the steps that use branch 2. Its .grad still held the gradient "
    "of step 1: clear gradients at the start of every step (net.zero_grad()).",
)
check(
    not _same(_net.fc_2, [_p.detach() for _p in _start.fc_2.parameters()], _exact=True),
    "sgd_train(net, x, [1, 2, 2], lr=0.1): fc_2 did not move, but steps 2 and 3 use branch 2. "
    "Does the loop run over every entry of branches?",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(33)
for _branches, _lr, _rows in (
    ([2, 1, 1, 2, 1], 0.05, 16),
    ([1, 1, 1], 0.2, 5),
    ([2, 2, 1, 1, 2, 2], 0.05, 16),
    ([2], 0.3, 7),
    ([], 0.05, 16),
):
    _net = TwoBranch()
    with torch.no_grad():  # start from values drawn here, not from the global RNG
        for _p in _net.parameters():
            _p.copy_(torch.randn(_p.shape, generator=_gen))
    _x = torch.rand(_rows, 4, generator=_gen)
    sgd_train(_net, _x, _branches, lr=_lr)
    observe(
        f"sgd_train(net, x, {_branches}, lr={_lr}) on a TwoBranch net with random weights and "
        f"x of {_rows} rows: its parameters afterwards",
        {_name: _p.detach() for _name, _p in _net.named_parameters()},
        atol=1e-6,
        hint="One step per entry of branches (none for an empty list): clear the gradients at "
        "the start of every step (net.zero_grad()), then p -= lr * p.grad for every parameter, "
        "weights and biases, whose .grad is not None; a layer moves only in the steps that use it.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Gradient accumulation: a big batch from small ones
#
# When a batch of $N$ examples does not fit in memory, split it into micro-batches, call
# `backward()` on each, and let `.grad` do the adding; step the optimizer once at the end.
# For this to give *the same* gradient as the big batch, remember what the big batch's
# loss is: the **mean** over all $N$ examples. A micro-batch $B_j$ of $n_j$ examples has
# loss $L_j$, the mean over its own $n_j$ examples, so
#
# $$L = \frac{1}{N}\sum_{i=1}^{N} \ell_i = \sum_j \frac{n_j}{N}\,L_j .$$
#
# Scale each micro-batch's loss by $n_j / N$ before `backward()`, and the accumulated
# gradient is the big batch's gradient, up to rounding. In float64 the rounding is far
# below $10^{-10}$:

# %%
torch.manual_seed(3)
model = nn.Linear(5, 1).double()
X = torch.randn(12, 5, dtype=torch.float64)
y = torch.randn(12, 1, dtype=torch.float64)

model.zero_grad()
F.mse_loss(model(X), y).backward()
big = model.weight.grad.clone()

model.zero_grad()
for chunk in range(0, 12, 3):
    Xc, yc = X[chunk : chunk + 3], y[chunk : chunk + 3]
    (F.mse_loss(model(Xc), yc) * len(Xc) / len(X)).backward()
print("largest difference to the big batch:", (model.weight.grad - big).abs().max().item())

# %% [markdown]
# ### Exercise 5 (2 points): accumulate over micro-batches
#
# Write `accumulated_grads(model, X, y, micro)` that clears the model's gradients, then
# splits `X` and `y` into consecutive micro-batches of `micro` rows (the last one may be
# smaller), and for each calls `backward()` on its `F.mse_loss`, scaled so that the result
# equals the gradient of `F.mse_loss(model(X), y)`. Return a list with a copy of each
# parameter's `.grad`, in the order of `model.parameters()`.


# %% nbgrader={"solution": true, "grade_id": "accumulated_grads"}
def accumulated_grads(model, X, y, micro):
    ### BEGIN SOLUTION
    model.zero_grad()
    for start in range(0, len(X), micro):
        Xc, yc = X[start : start + micro], y[start : start + micro]
        (F.mse_loss(model(Xc), yc) * len(Xc) / len(X)).backward()
    return [p.grad.clone() for p in model.parameters()]
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_accumulated_grads"}
def _grads_of(model, loss):
    """The gradient of `loss` for each parameter of `model`, leaving .grad alone."""
    return list(torch.autograd.grad(loss, list(model.parameters())))


def _grad_list(got):
    """Is `got` a list of tensors shaped like the parameters of nn.Linear(3, 2)?"""
    return isinstance(got, list) and [
        tuple(_g.shape) if isinstance(_g, torch.Tensor) else None for _g in got
    ] == [(2, 3), (2,)]


def _close_all(got, want):
    return all(torch.allclose(g, w, rtol=0, atol=1e-10) for g, w in zip(got, want, strict=True))


check(
    defined("accumulated_grads"),
    "accumulated_grads is not defined: run the exercise cell above (it raised an error, or did "
    "not run).",
)
torch.manual_seed(4)
_model = nn.Linear(3, 2).double()
_shapes = [_p.shape for _p in _model.parameters()]
for _n, _micro in ((8, 2), (10, 4)):
    _X = torch.randn(_n, 3, dtype=torch.float64)
    _y = torch.randn(_n, 2, dtype=torch.float64)
    _want = _grads_of(_model, F.mse_loss(_model(_X), _y))
    _model.zero_grad()
    _got, _error = attempt(accumulated_grads, _model, _X, _y, _micro)
    check(
        _error is None,
        f"accumulated_grads(model, X, y, micro) on an nn.Linear(3, 2) (micro={_micro}, N={_n} "
        f"rows) raised an error (the error: {_error}); call it in a cell to see the whole message.",
    )
    check(
        _grad_list(_got),
        f"accumulated_grads(model, X, y, micro={_micro}) on an nn.Linear(3, 2) should return a "
        "list with one gradient tensor per parameter, shaped like it: [weight's, bias's].",
    )
    _kept = [_g.detach().clone() for _g in _got]
    _model(_X).sum().backward()  # later code adds into every p.grad
    check(
        all(torch.equal(_g, _k) for _g, _k in zip(_got, _kept, strict=True)),
        f"accumulated_grads(model, X, y, micro={_micro}): the list it returned changed when a "
        "later backward() added into the model's .grad: return copies (p.grad.clone()), not the "
        ".grad tensors themselves (nor p.grad.detach(), which shares their memory).",
    )
    _ratio = (_got[0].norm() / _want[0].norm()).item()
    _chunks = -(-_n // _micro)
    check(
        abs(_ratio - _chunks) > 1e-6,
        f"accumulated_grads(model, X, y, micro) (micro={_micro}, N={_n} rows): the gradients "
        f"are too large by the number of micro-batches (the factor: {_chunks}), one big-batch "
        "gradient per micro-batch. Each micro-batch loss is a mean over its own rows: scale it "
        "by len(chunk) / len(X) before backward().",
    )
    check(
        abs(_ratio - _y.shape[1]) > 1e-6,
        f"accumulated_grads(model, X, y, micro) (micro={_micro}, N={_n} rows): the gradients "
        f"are too large by the number of columns of y (the factor: {_y.shape[1]}). F.mse_loss "
        "averages over every element of y, rows times columns, so a sum divided by the number "
        "of rows is too big: scale each micro-batch's mean loss by len(chunk) / len(X).",
    )
    if _n % _micro:
        _model.zero_grad()
        for _start in range(0, _n, _micro):
            _Xc, _yc = _X[_start : _start + _micro], _y[_start : _start + _micro]
            (F.mse_loss(_model(_Xc), _yc) / _chunks).backward()
        _by_count = [_p.grad.clone() for _p in _model.parameters()]
        check(
            not _close_all(_got, _by_count),
            f"accumulated_grads(model, X, y, micro) (micro={_micro}, N={_n} rows): the last "
            "micro-batch is smaller here, and its loss got the same weight as the others. Scale "
            "each loss by len(chunk) / len(X), not by 1 / (number of micro-batches).",
        )
    _X_changed = _X.clone()
    _X_changed[-1] += 1.0  # the last row belongs to the last micro-batch
    _model.zero_grad()
    _got_changed, _error = attempt(accumulated_grads, _model, _X_changed, _y, _micro)
    check(
        _error is None and _grad_list(_got_changed),
        f"accumulated_grads(model, X, y, micro) (micro={_micro}, N={_n} rows), called again on "
        "an X whose last row changed, raised an error or returned no list of two gradients: "
        f"call it twice in a cell to see why (the error: {_error}).",
    )
    check(
        not _close_all(_got_changed, _got),
        f"accumulated_grads(model, X, y, micro) (micro={_micro}, N={_n} rows): changing the "
        "last row of X did not change the gradients, so the last micro-batch never reached "
        "backward(). Loop over range(0, len(X), micro): it covers every row, the last chunk "
        "may be smaller.",
    )
    check(
        _close_all(_got, _want),
        f"accumulated_grads(model, X, y, micro) (micro={_micro}, N={_n} rows): the accumulated "
        "gradients differ from the gradient of F.mse_loss(model(X), y). Call backward() once per "
        "micro-batch of consecutive rows, on its F.mse_loss scaled by len(chunk) / len(X).",
    )
    _model(_X).sum().backward()  # .grad is not empty now
    _again, _error = attempt(accumulated_grads, _model, _X, _y, _micro)
    check(
        _error is None and _grad_list(_again),
        f"accumulated_grads(model, X, y, micro={_micro}), called on a model whose .grad already "
        "holds a gradient, raised an error or returned no list of two gradients: call it on "
        f"such a model in a cell to see why (the error: {_error}).",
    )
    check(
        _close_all(_again, _want),
        f"accumulated_grads(model, X, y, micro={_micro}) on a model whose .grad already holds "
        "a gradient gave other gradients than on a clean one: clear the gradients first "
        "(model.zero_grad()), or the old .grad is added in.",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(34)
for _n, _micro, _outputs in (
    (7, 1, 1),
    (9, 9, 1),
    (9, 8, 3),
    (9, 10, 1),
    (13, 5, 1),
    (11, 10, 2),
    (16, 20, 1),
    (12, 4, 3),
):
    _model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, _outputs)).double()
    with torch.no_grad():  # start from values drawn here, not from the global RNG
        for _p in _model.parameters():
            _p.copy_(torch.randn(_p.shape, dtype=torch.float64, generator=_gen))
    _X = torch.randn(_n, 4, dtype=torch.float64, generator=_gen)
    _y = torch.randn(_n, _outputs, dtype=torch.float64, generator=_gen)
    for _p in _model.parameters():
        _p.grad = torch.full_like(_p, 3.0)  # stale gradients must be cleared
    _got = accumulated_grads(_model, _X, _y, _micro)
    if not isinstance(_got, list | tuple):
        _got = [f"not a list: {type(_got).__name__}"]
    _got = [_g if isinstance(_g, torch.Tensor) else repr(type(_g)) for _g in _got]
    _names = [_name for _name, _ in _model.named_parameters()]
    _record = {
        f"grad of {_pn}": _g.detach().clone() if isinstance(_g, torch.Tensor) else _g
        for _pn, _g in zip(_names, _got, strict=False)
    }
    _record["number of gradients"] = len(_got)
    _model(_X).sum().backward()  # a later backward() adds into every p.grad
    for _pn, _g in zip(_names, _got, strict=False):
        _record[f"grad of {_pn}, read again after a later backward()"] = _g
    observe(
        f"accumulated_grads(model, X, y, micro={_micro}) with N={_n} rows and {_outputs} "
        "output(s), on a 2-layer float64 model that holds stale gradients",
        _record,
        rtol=0,
        atol=1e-10,
        hint="Clear the gradients first, call backward() on every micro-batch of consecutive "
        "rows (the last may be smaller) with its mean loss scaled by len(chunk) / len(X), and "
        "return copies (p.grad.clone()).",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * `backward()` adds into `.grad`; training loops clear it once per step. `zero_grad()`
#   sets gradients to `None` by default, and the usual optimizers (all but LBFGS) skip
#   parameters whose gradient is `None`, momentum included; zeros are not skipped.
# * A weight used `k` times in one pass gets the sum of `k` gradients: one `AccumulateGrad`
#   node with `k` edges into it.
# * A parameter the pass did not use gets no gradient: `None` the first time, and its old
#   value afterwards unless you clear it.
# * Micro-batch losses scaled by $n_j/N$ accumulate to the big batch's gradient: exactly in
#   arithmetic, up to rounding in floating point.
