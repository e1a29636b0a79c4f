# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 4: Names, in-place operations and `detach`
#
# Python code reads as if it changed values: `y = w2 * y` looks like "multiply `y` by `w2`",
# and `w -= lr * grad` looks like "move `w` a little". Autograd sees something else. It records
# a graph of *tensors*, not of *names*, and it has to be sure that the tensors it saved during
# the forward pass are still the same when it walks back over them.
#
# In this lab you will see, by running code:
#
# 1. that reassigning a name creates a **new node** and leaves the old one in the graph;
# 2. when an **in-place** operation is harmless, when it breaks `backward()` (the *version
#    counter* error) and how to fix it;
# 3. why parameters are updated in place under `torch.no_grad()`;
# 4. what `detach()`, `detach().clone()`, `torch.no_grad()` and `torch.inference_mode()` each
#    share with the original tensor and what each records in the graph;
# 5. and how `detach()` builds a *stop-gradient* target.
#
# %course-include how_this_lab_works.md

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import matplotlib.pyplot as plt

print("torch", torch.__version__)

# %% [markdown]
# ## 1. A name is not a node
#
# Take two weights $w_1 = w_2 = 2$ and an input $x = 4$, and write the computation the way
# one would on paper, reusing the name `y`:
#
# $$y = w_1 x,\qquad y = w_2\, y,\qquad \text{out} = y^2 .$$
#
# We ask for the gradient of the last `y` (it is not a leaf, so we call `retain_grad()`).

# %%
w1 = torch.tensor(2.0, requires_grad=True)
w2 = torch.tensor(2.0, requires_grad=True)
x = torch.tensor(4.0, requires_grad=True)

y = w1 * x
first_y = y  # a second name for the same tensor, kept only to look at it later
y = w2 * y
y.retain_grad()
out = y**2
out.backward()

print("y =", y.item(), "  d out / d y =", y.grad.item())
print("is `y` still the first tensor?", y is first_y)
print("first y:", first_y.grad_fn, "  second y:", y.grad_fn)

# %% [markdown]
# `y.grad` is **32**, not 64. The second line did not change the tensor that `y` named: it
# built a *new* node `w2 * y` and moved the label `y` onto it. The first node (value 8) is
# still in the graph, between `w1`, `x` and the new `y`, and it has a gradient of its own:
#
# $$\frac{\partial\,\text{out}}{\partial y_\text{second}} = 2\,y_\text{second} = 2 \cdot 16
#   = 32, \qquad
#   \frac{\partial\,\text{out}}{\partial y_\text{first}} = 2\,y_\text{second} \cdot w_2 = 64 .$$
#
# Whoever expects 64 is thinking of the first node, but after the reassignment the name
# only reaches the second. The picture shows two `MulBackward0` nodes, one per line of code:

# %%
draw(out, params={"w1": w1, "w2": w2, "x": x})

# %% [markdown]
# ### Exercise 1 (2 points): the gradient of every `y`
#
# Write `node_gradients(w1, w2, x)` that computes `y = w1 * x`, then `y = w2 * y`, then
# `out = y ** 2`, calls `out.backward()` once, and returns the tuple
# `(grad_first, grad_second)`: the gradient of `out` with respect to the **first** `y` node
# and with respect to the **second** one, as tensors. For $w_1 = w_2 = 2$, $x = 4$ the answer
# is `(64, 32)`.
#
# Hint: a non-leaf keeps its `.grad` only if you call `retain_grad()` on it, and you can
# only call it on a tensor you can still reach by some name.


# %% nbgrader={"solution": true, "grade_id": "node_gradients"}
def node_gradients(w1, w2, x):
    ### BEGIN SOLUTION
    y = w1 * x
    y_first = y
    y_first.retain_grad()
    y = w2 * y
    y.retain_grad()
    out = y**2
    out.backward()
    return y_first.grad, y.grad
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_node_gradients"}
check(
    defined("node_gradients"),
    "node_gradients is not defined: run the exercise cell above (it raised an error, or did not "
    "run).",
)
_w1 = torch.tensor(2.0, requires_grad=True)
_w2 = torch.tensor(2.0, requires_grad=True)
_x = torch.tensor(4.0, requires_grad=True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _result, _error = attempt(node_gradients, _w1, _w2, _x)
check(
    _error is None or "retain_grad" not in _error,
    "node_gradients(w1=2, w2=2, x=4) called retain_grad() on a tensor that does not require "
    "grad: retain_grad() works only on a tensor in the graph, not on a detach()ed one.",
)
check(
    _error is None,
    f"node_gradients(w1=2, w2=2, x=4) raised an error (the error: {_error}); call it in a cell "
    "to see the whole message.",
)
check(
    isinstance(_result, tuple) and len(_result) == 2,
    "node_gradients(w1=2, w2=2, x=4) should return a tuple of two gradients "
    "(grad_first, grad_second).",
)
_g1, _g2 = _result
check(
    _g1 is not None and _g2 is not None,
    "node_gradients(w1=2, w2=2, x=4): one of the gradients is None. Call retain_grad() on each "
    "y node before out.backward(), and keep a second name on the first y (the tensor itself, "
    "not a clone) before you reassign y, or you cannot reach it any more.",
)
check(
    _x.grad is not None,
    "node_gradients(w1=2, w2=2, x=4): x.grad is None afterwards. Did you call out.backward() "
    "inside the function (torch.autograd.grad does not fill .grad)?",
)
check(
    isinstance(_g1, torch.Tensor)
    and isinstance(_g2, torch.Tensor)
    and _g1.numel() == _g2.numel() == 1,
    "node_gradients(w1=2, w2=2, x=4) should return the two .grad tensors themselves, one number "
    "each here, not Python numbers nor other tensors.",
)
check(
    not (abs(_g2.item() - 64) < 1e-6 and abs(_x.grad.item() - 256) < 1e-6),
    "node_gradients(w1=2, w2=2, x=4): every gradient is twice too large, as if out.backward() "
    "ran twice (each call adds): call it exactly once.",
)
check(
    abs(_g2.item() - 32) < 1e-6,
    "node_gradients(w1=2, w2=2, x=4): the gradient of the second y should be 2 * y = 32, and "
    f"yours is not (yours: {_g2.item()}): return the .grad of the node that out = y ** 2 used.",
)
check(
    abs(_g1.item() - 32) > 1e-6,
    "node_gradients(w1=2, w2=2, x=4): your first gradient is 32, the second node's (2 * y): the "
    "tensor you return it from is the node that out = y ** 2 used, not the first y. After "
    "`y = w2 * y` the name y points to the new node (and `y *= w2` would turn the first node "
    "into it): keep a second name on the first y before that line, and return its .grad.",
)
check(
    abs(_g1.item() - 64) < 1e-6,
    "node_gradients(w1=2, w2=2, x=4): the gradient of the first y should be 2 * y * w2 = 64, "
    f"and yours is not (yours: {_g1.item()}).",
)
check(
    abs(_x.grad.item() - 128) < 1e-6,
    "node_gradients(w1=2, w2=2, x=4): x.grad should be 2 * y * w2 * w1 = 128 afterwards, and "
    f"it is not (yours: {_x.grad.item()}): compute y = w1 * x, then y = w2 * y, then "
    "out = y ** 2, and call out.backward() once.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(4)
for _case in range(1, 5):
    _a, _b, _c = (torch.randn((), dtype=torch.float64, generator=_gen) for _ in range(3))
    _w1, _w2, _x = (t.clone().requires_grad_() for t in (_a, _b, _c))
    if _case == 4:  # x a constant input: the gradients reach only w1 and w2
        _x = _c.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _result = node_gradients(_w1, _w2, _x)
    _g1, _g2 = _result if isinstance(_result, tuple) and len(_result) == 2 else ("not a pair",) * 2
    _input = "x a constant" if _case == 4 else "all three require grad"
    observe(
        f"node_gradients(w1, w2, x) on random float64 scalars, {_input} (case {_case} of 4): "
        "its two gradients, and the gradients it left in w1, w2 and x",
        {
            "grad_first": _g1,
            "grad_second": _g2,
            "w1.grad": _w1.grad,
            "w2.grad": _w2.grad,
            "x.grad": _x.grad,
        },
        hint="After y = w2 * y the name y labels the new node: keep a second name on the first "
        "y, call retain_grad() on both nodes, and call out.backward() exactly once.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 2. In-place operations and the version counter
#
# An *in-place* operation writes its result into the memory of an existing tensor instead of
# making a new one: `t.add_(1)`, `t.mul_(3)`, `t += 1`, `t[0] = 5`, `torch.relu_(t)`. No new
# tensor: the same tensor now holds other numbers (when it is in the graph, autograd records
# the operation too, as the tensor's new `grad_fn`).
#
# That is a problem only if autograd **saved** the old numbers for the backward pass. Every
# tensor carries a *version counter*, `t._version`, which each in-place operation bumps.
# A backward node remembers the version of every tensor it saved, and checks it again when
# `backward()` reaches it.
#
# **Allowed.** `b = a * 2` saves the constant 2 and nothing of `b` (the derivative of `2a` with
# respect to `a` does not depend on the result), so changing `b` afterwards is harmless:

# %%
a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
b = a * 2
print("version of b before:", b._version)
b.add_(1)
print("version of b after: ", b._version, "  b =", b)
b.sum().backward()
print("a.grad =", a.grad, "(correct: d(2a + 1)/da = 2)")

# %% [markdown]
# **Not allowed.** The derivative of $e^a$ is $e^a$ itself, so `torch.exp` saves its
# **output**. Adding 1 to that output in place destroys the number the backward pass needs:

# %%
a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
e = a.exp()
e.add_(1)  # same as `e += 1`
try:
    e.sum().backward()
except RuntimeError as error:
    print("RuntimeError:", str(error).split(" Hint")[0])

# %% [markdown]
# Read the message from left to right: *one of the variables needed for gradient computation
# has been modified by an inplace operation*; it is a float tensor of shape `[3]`, the
# *output 0 of Exp* (the result of `exp`; torch 2.10 writes the node's class name,
# *ExpBackward0*), it *is at version 1* and autograd *expected version 0*. That names the culprit here because `exp` saved its *output*: the message names
# the operation that made the tensor. For a saved *input* it names the in-place operation that
# last wrote it (*output 0 of Add* after an `add_`), and nothing for a tensor that needs no
# gradient; the shape and the versions still point at it.
#
# There are two fixes, both of which give autograd its own copy of the numbers it saved:
#
# * write it **out of place**, `e = a.exp() + 1`: a new tensor, the saved one is untouched;
# * or **clone** before changing, `e = a.exp().clone(); e.add_(1)`: the in-place op now hits
#   the copy.
#
# Which operations save what is not something to memorise: try it, and if the error appears,
# the message tells you that a saved tensor was overwritten, its shape, and how many times it
# was written since. (Functions whose backward needs their
# output: `exp`, `tanh`, `sigmoid`, `relu`, `sqrt`, among others; functions that need their
# *input*, such as `pow`, `sin` or `a * b` of two tensors, break when the input is changed.)

# %%
a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
e = a.exp() + 1
e.sum().backward()
print("out of place: a.grad =", a.grad, " (= exp(a))")

# %% [markdown]
# ### Exercise 2 (3 points): break it, then fix it
#
# Both functions below compute the same number,
#
# $$\text{out}(x) = \sum_i 3 \tanh(x_i),$$
#
# and return it as a scalar tensor.
#
# * `broken(x)` must compute it with an **in-place** operation on the output of `torch.tanh`,
#   so that `broken(x).backward()` raises the version counter error. (Remember which value the
#   derivative of `tanh` needs: $\frac{d}{dx}\tanh x = 1 - \tanh^2 x$.)
# * `fixed(x)` must compute the same value so that `fixed(x).backward()` works and fills
#   `x.grad` with the right gradient, $3\,(1 - \tanh^2 x)$.
#
# Neither function may change `x` itself.


# %% nbgrader={"solution": true, "grade_id": "broken"}
def broken(x):
    ### BEGIN SOLUTION
    t = torch.tanh(x)
    t.mul_(3)
    return t.sum()
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_broken"}
check(
    defined("broken"),
    "broken is not defined: run the exercise cell above (it raised an error, or did not run).",
)
_x = torch.tensor([-1.0, 0.0, 0.5, 2.0], requires_grad=True)
_x_before = _x.detach().clone()
_out, _error = attempt(broken, _x)
check(
    _error is None,
    "broken(x) on a vector x that requires grad failed before backward(): it must run forward "
    "and fail only in backward(), so change the output of torch.tanh in place, not the leaf x "
    f"(PyTorch said: {_error}).",
)
check(
    isinstance(_out, torch.Tensor) and _out.dim() == 0,
    "broken(x) on a vector of 4 should return a scalar tensor: did you sum?",
)
check(
    torch.equal(_x.detach(), _x_before),
    "broken(x) changed x itself: leave the input alone.",
)
check(
    torch.allclose(_out.detach().double(), (3 * torch.tanh(_x_before)).sum().double()),
    "broken(x) on a vector of 4 should still compute sum(3 * tanh(x)), and its value is "
    f"another (yours: {_out.item():.4f}; the right sum: "
    f"{(3 * torch.tanh(_x_before)).sum():.4f}).",
)
check(
    _out.requires_grad,
    "broken(x) returns a tensor that is not in the graph (requires_grad is False), so its "
    "backward() cannot reach tanh at all: compute with recording on (no torch.no_grad(), no "
    "detach()), and change the output of torch.tanh in place.",
)
_, _raised = attempt(_out.backward)
check(
    _raised is not None,
    "broken(x).backward() ran without error. The in-place change must hit a tensor that "
    "autograd saved, through autograd: tanh saves its *output*, so change the result of "
    "torch.tanh in place (for example with mul_), not a copy of it and not its .data (which "
    "autograd does not see).",
)
check(
    "modified by an inplace operation" in _raised,
    "broken(x).backward() failed, but not with the version counter error: run it in a cell "
    f"to see the whole message (PyTorch said: {_raised}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(41)
for _case, _shape in enumerate(((7,), (3, 4), (1,)), start=1):
    _x = torch.randn(_shape, dtype=torch.float64, requires_grad=True, generator=_gen)
    _out = broken(_x)
    if not isinstance(_out, torch.Tensor):
        _out = torch.tensor(float("nan"))  # the judge reports a difference, not a crash here
    _requires_grad = _out.requires_grad
    _raised = None
    try:
        _out.backward()
    except Exception as _error:
        _raised = str(_error)
    _what = "no error"
    if _raised is not None:
        _inplace = "modified by an inplace operation" in _raised
        _what = "the version counter error" if _inplace else "another error"
    observe(
        f"broken(x) on a random float64 tensor of shape {_shape} (case {_case} of 3), then "
        "backward()",
        {
            "out": _out.detach(),
            "out.requires_grad": _requires_grad,
            "x after the call": _x.detach(),
            "what backward() raised": _what,
        },
        hint="Compute sum(3 * tanh(x)) over every element and change the output of torch.tanh "
        "in place (mul_), neither x nor a new tensor, so that backward() finds a saved tensor "
        "modified.",
    )
### END HIDDEN TESTS


# %% nbgrader={"solution": true, "grade_id": "fixed"}
def fixed(x):
    ### BEGIN SOLUTION
    t = torch.tanh(x) * 3
    return t.sum()
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_fixed"}
check(
    defined("fixed"),
    "fixed is not defined: run the exercise cell above (it raised an error, or did not run).",
)
_x = torch.tensor([-1.0, 0.0, 0.5, 2.0], requires_grad=True)
_x_before = _x.detach().clone()
_out, _error = attempt(fixed, _x)
check(
    _error is None,
    "fixed(x) on a vector x that requires grad raised an error in the forward pass: call it "
    f"in a cell to see the whole message (PyTorch said: {_error}).",
)
check(
    isinstance(_out, torch.Tensor) and _out.dim() == 0,
    "fixed(x) on a vector of 4 should return a scalar tensor: did you sum?",
)
check(torch.equal(_x.detach(), _x_before), "fixed(x) changed x itself: leave the input alone.")
check(
    torch.allclose(_out.detach().double(), (3 * torch.tanh(_x_before)).sum().double()),
    "fixed(x) on a vector of 4 should compute sum(3 * tanh(x)), and its value is another "
    f"(yours: {_out.item():.4f}; the right sum: {(3 * torch.tanh(_x_before)).sum():.4f}).",
)
check(
    _out.requires_grad,
    "fixed(x) returns a tensor that is not part of the graph (requires_grad is False): "
    "torch.no_grad() or detach() hides the error by recording nothing, so there is no "
    "gradient at all. Make a new tensor instead of changing the saved one.",
)
_, _raised = attempt(_out.backward)
check(
    _raised is None,
    "fixed(x).backward() still fails: run it in a cell to see the whole message, and give "
    f"autograd a tensor nobody changes in place (PyTorch said: {_raised}).",
)
_expected = 3 * (1 - torch.tanh(_x_before) ** 2)
check(
    _x.grad is not None,
    "after fixed(x).backward(), x.grad is None: the result is not connected to x through tanh "
    "(a detach(), .item() or torch.tensor(...) somewhere, followed by requires_grad_() or "
    "requires_grad=True?).",
)
check(
    torch.allclose(_x.grad, _expected, atol=1e-6),
    "after fixed(x).backward(), x.grad should be 3 * (1 - tanh(x)**2), and it is not (yours: "
    f"{_x.grad}; the right gradient: {_expected}). The value is right, so part of the "
    "computation is hidden from autograd: a change made through .data, or a detach(), is not "
    "recorded.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(42)
for _case, _shape in enumerate(((2, 5), (9,), (2, 3, 2)), start=1):
    _x = torch.randn(_shape, dtype=torch.float64, requires_grad=True, generator=_gen)
    _out = fixed(_x)
    if not isinstance(_out, torch.Tensor):
        _out = torch.tensor(float("nan"))  # the judge reports a difference, not a crash here
    observe(
        f"fixed(x) on a random float64 tensor of shape {_shape} (case {_case} of 3)",
        {"out": _out.detach(), "out.requires_grad": _out.requires_grad},
        hint="Compute sum(3 * tanh(x)) over every element, out of place (torch.tanh(x) * 3), "
        "with recording on: no torch.no_grad() and no detach().",
    )
    _raised = False
    try:
        _out.backward()
    except Exception:
        _raised = True
    observe(
        f"fixed(x).backward() in case {_case}: what it left in x",
        {"backward() raised": _raised, "x.grad": _x.grad, "x": _x.detach()},
        hint="backward() must run and reach x through tanh, and x itself must stay unchanged.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 3. In place on a leaf: updating parameters
#
# A leaf that requires a gradient (a parameter) is where the gradient ends up, so autograd
# refuses any in-place change to it while it is recording: the change itself would have to be
# part of the graph, and the leaf would stop being a leaf.

# %%
w = torch.ones(3, requires_grad=True)
try:
    w += 1
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# Yet a training step must change the parameters, and in place: the optimizer, the model and
# any other code hold references to *this* tensor, and `w = w - lr * w.grad` would only move
# the name `w` to a new, non-leaf tensor (section 1 again). The answer is to switch the
# recording off: inside `with torch.no_grad():` nothing is recorded, so in-place changes to a
# leaf are allowed, and the leaf stays a leaf that requires a gradient.

# %%
w.grad = torch.tensor([0.5, -1.0, 2.0])
storage = w.data_ptr()
with torch.no_grad():
    w -= 0.1 * w.grad
print("w =", w)
print("same memory:", w.data_ptr() == storage, "  is_leaf:", w.is_leaf, "  version:", w._version)

# %% [markdown]
# ### Exercise 3 (3 points): a gradient-descent step by hand
#
# Write `sgd_step(params, lr)` that takes a list of leaf tensors whose `.grad` has been filled
# by `backward()`, and for each parameter `p`
#
# 1. updates it **in place**, $p \leftarrow p - \text{lr}\cdot\nabla_p$, so that whoever holds
#    `p` sees the new values, and it is still a leaf that requires a gradient;
# 2. then resets its gradient to zero (`p.grad.zero_()`; setting `p.grad = None` is fine
#    too), so the next `backward()` starts afresh (lab 2).
#
# It returns nothing. This is what `torch.optim.SGD(params, lr).step()` followed by
# `zero_grad(set_to_none=False)` does; its default, `zero_grad()`, sets each `.grad` to `None`
# instead, which the next `backward()` fills afresh just the same.


# %% nbgrader={"solution": true, "grade_id": "sgd_step"}
def sgd_step(params, lr):
    ### BEGIN SOLUTION
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad.zero_()
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_sgd_update"}
check(
    defined("sgd_step"),
    "sgd_step is not defined: run the exercise cell above (it raised an error, or did not run).",
)
_w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
_b = torch.tensor(0.5, requires_grad=True)
(_w * torch.tensor([1.0, -1.0, 2.0])).sum().add(_b * 4).backward()
_ids, _ptrs = (id(_w), id(_b)), (_w.data_ptr(), _b.data_ptr())
_, _error = attempt(sgd_step, [_w, _b], 0.1)
check(
    _error is None or "leaf Variable that requires grad" not in _error,
    "sgd_step([w, b], lr=0.1) changed a leaf that requires a gradient in place while autograd "
    "was recording, which PyTorch refuses: do the update inside `with torch.no_grad():`.",
)
check(
    _error is None or "'NoneType'" not in _error,
    "sgd_step([w, b], lr=0.1) used a `.grad` that was None, though w and b both had gradients: "
    "the tensor it read was not a parameter of the list. `p = p - lr * p.grad` makes p a new "
    "tensor, with no .grad: update the parameter itself, in place.",
)
check(
    _error is None,
    f"sgd_step([w, b], lr=0.1) raised an error (the error: {_error}): call it in a cell of "
    "your own to see the whole message.",
)
check(
    torch.allclose(_w.detach(), torch.tensor([0.9, 2.1, 2.8])) and abs(_b.item() - 0.1) < 1e-6,
    "sgd_step([w, b], lr=0.1): expected w = [0.9, 2.1, 2.8] and b = 0.1 after the step, and "
    f"they are not (yours: w = {_w.detach()}, b = {_b.item():.4f}). Update every parameter of "
    "the list in place, p -= lr * p.grad or p.sub_(...): `p = p - lr * p.grad` only rebinds "
    "the loop variable, and the update must use the gradient before it is reset.",
)
check(
    _w.is_leaf and _w.requires_grad and _b.is_leaf and _b.requires_grad,
    "sgd_step([w, b], lr=0.1): afterwards the parameters should still be leaves that require a "
    "gradient (update them under torch.no_grad(), and do not detach them).",
)
check(
    (id(_w), id(_b)) == _ids and (_w.data_ptr(), _b.data_ptr()) == _ptrs,
    "sgd_step([w, b], lr=0.1): the parameters moved to new memory (p.data = ... swaps it): "
    "update them in place so every holder sees the change.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(43)
_params = [
    torch.randn(4, 3, generator=_gen).requires_grad_(),
    torch.randn(3, generator=_gen).requires_grad_(),
    torch.randn((), generator=_gen).requires_grad_(),
]
_target = torch.randn(5, 3, generator=_gen)
_inp = torch.randn(5, 4, generator=_gen)
((_inp @ _params[0] + _params[1] * _params[2] - _target) ** 2).mean().backward()
_ptrs = [_p.data_ptr() for _p in _params]
_holders = [_p.detach() for _p in _params]  # other views of the same memory
sgd_step(_params, 0.05)
_names = ("W", "b", "s")
_record = {_name: _p.detach() for _name, _p in zip(_names, _params, strict=True)}
_record.update(
    {f"{_name} seen by an earlier view": _h for _name, _h in zip(_names, _holders, strict=True)}
)
observe(
    "sgd_step([W, b, s], lr=0.05) after backward() of a random least-squares loss: W (4x3), "
    "b (3) and the scalar s afterwards, and as seen through views taken before the step",
    _record,
    atol=1e-6,
    hint="Subtract lr * p.grad from every p of the list in place (p -= ..., under "
    "torch.no_grad()), before resetting the gradient; p = p - ... only rebinds the loop "
    "variable, and p.data = ... puts p in new memory.",
)
observe(
    "sgd_step([W, b, s], lr=0.05): is each parameter still a leaf that requires grad, in its "
    "memory",
    {
        f"{_name} {_fact}": _value
        for _name, _p, _ptr in zip(_names, _params, _ptrs, strict=True)
        for _fact, _value in (
            ("is_leaf", _p.is_leaf),
            ("requires_grad", _p.requires_grad),
            ("in the same memory", _p.data_ptr() == _ptr),
        )
    },
    hint="Update the parameters in place inside `with torch.no_grad():`, so they stay leaves "
    "that require a gradient, in the same memory.",
)
_p2 = [torch.randn(2, 2, generator=_gen).requires_grad_(), torch.randn(2, generator=_gen)]
_p2[1].requires_grad_()
_grads = [torch.randn(2, 2, generator=_gen), torch.randn(2, generator=_gen)]
for _p, _g in zip(_p2, _grads, strict=True):
    _p.grad = _g.clone()
sgd_step(_p2, 0.3)
observe(
    "sgd_step([A, c], lr=0.3) with random gradients set by hand: A (2x2) and c (2) afterwards",
    {"A": _p2[0].detach(), "c": _p2[1].detach()},
    atol=1e-6,
    hint="p -= lr * p.grad for every parameter, with the lr that is passed in.",
)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_sgd_zero"}
# The loss here is linear in the parameters, so its gradient does not depend on where the
# update put them: this check is about resetting the gradients only.
check(
    defined("sgd_step"),
    "sgd_step is not defined: run the exercise cell above (it raised an error, or did not run).",
)
_w = torch.tensor([1.0, 2.0], requires_grad=True)
_b = torch.tensor(-0.5, requires_grad=True)
((_w * torch.tensor([3.0, -1.0])).sum() + _b * 2).backward()
_, _error = attempt(sgd_step, [_w, _b], 0.1)
check(
    _error is None,
    "sgd_step([w, b], lr=0.1) raised an error: call it in a cell to see the whole message, "
    f"and see the check above (PyTorch said: {_error}).",
)
check(
    _w.grad is None or torch.count_nonzero(_w.grad).item() == 0,
    "sgd_step([w, b], lr=0.1): afterwards w.grad should be zeros or None, and it is not (yours: "
    f"{_w.grad}). Reset the gradient of every parameter of the list, inside the loop "
    "(p.grad.zero_(), with the parentheses), so the next backward() does not add to it.",
)
check(
    _b.grad is None or _b.grad.item() == 0,
    "sgd_step([w, b], lr=0.1): afterwards b.grad, the last parameter's, should be zero or None, "
    f"and it is not (yours: {_b.grad}). Reset the gradient of every parameter of the list, "
    "inside the loop.",
)
((_w * torch.tensor([-2.0, 0.5])).sum() + _b * 3).backward()
check(
    torch.equal(_w.grad, torch.tensor([-2.0, 0.5])) and _b.grad.item() == 3.0,
    "after sgd_step and one more backward(), w.grad and b.grad should be the new loss's "
    f"gradients [-2.0, 0.5] and 3.0, and they are not (yours: {_w.grad} and {_b.grad}): "
    "print them after each call to see where the old gradient stays.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

# Linear losses: each backward() gives its coefficients as the gradient, wherever the
# parameters are, so these records depend on the resets only.
_gen = torch.Generator().manual_seed(45)
_params = [
    torch.randn(3, generator=_gen).requires_grad_(),
    torch.randn(2, 2, generator=_gen).requires_grad_(),
    torch.randn((), generator=_gen).requires_grad_(),
]
_names = ("u", "M", "s")
for _step in range(1, 4):
    _coefs = [torch.randn(_p.shape, generator=_gen) for _p in _params]
    sum((_p * _c).sum() for _p, _c in zip(_params, _coefs, strict=True)).backward()
    sgd_step(_params, 0.2)
    _after_step = {
        f"{_name}.grad right after the step (None counts as zeros)": torch.zeros_like(_p)
        if _p.grad is None
        else _p.grad.detach().clone()
        for _name, _p in zip(_names, _params, strict=True)
    }
    _coefs = [torch.randn(_p.shape, generator=_gen) for _p in _params]
    sum((_p * _c).sum() for _p, _c in zip(_params, _coefs, strict=True)).backward()
    _after_backward = {
        f"{_name}.grad after the next backward()": _p.grad
        for _name, _p in zip(_names, _params, strict=True)
    }
    observe(
        f"sgd_step([u, M, s], lr=0.2), step {_step}, with linear losses of random "
        "coefficients: the gradients right after the step, and after the next backward()",
        {**_after_step, **_after_backward},
        atol=1e-6,
        hint="Reset the gradient of every parameter of the list after its update "
        "(p.grad.zero_(), or p.grad = None), or the next backward() adds the new gradient to "
        "the old one.",
    )
    for _p in _params:
        _p.grad = None  # each step starts from its own backward()
### END HIDDEN TESTS

# %% [markdown]
# With `sgd_step` you can train. Here is a straight line, $y = 3x - 1$, fitted from noisy
# points: the forward pass builds a fresh graph at every step, `backward()` fills the
# gradients, and your step moves the two parameters in place. On the left, the line after a
# few of the steps; on the right, the loss at every step, which levels off near the
# variance of the noise in the data, $0.1^2$ (the cell prints the last loss).

# %%
gen = torch.Generator().manual_seed(4)
xs = torch.linspace(-1, 1, 64)
ys = 3 * xs - 1 + 0.1 * torch.randn(64, generator=gen)
slope = torch.zeros((), requires_grad=True)
intercept = torch.zeros((), requires_grad=True)
losses, snapshots = [], {}
for step in range(1, 201):
    loss = ((slope * xs + intercept - ys) ** 2).mean()
    loss.backward()
    sgd_step([slope, intercept], 0.1)
    losses.append(loss.item())
    if step in (1, 5, 20, 200):
        snapshots[step] = (slope.item(), intercept.item())
print(
    f"after 200 steps: slope {slope.item():.3f}, intercept {intercept.item():.3f}, "
    f"loss {losses[-1]:.4f}"
)

fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
left.scatter(xs, ys, s=8, color="gray", label="data")
for (n, (a, b)), color in zip(snapshots.items(), ["C3", "C1", "C2", "C0"], strict=True):
    left.plot(xs, a * xs + b, color=color, label=f"after {n} step{'s' * (n > 1)}")
left.set_xlabel("x")
left.set_ylabel("y")
left.set_title("y = slope * x + intercept")
left.legend(fontsize=8)
right.plot(range(1, 201), losses)
right.set_yscale("log")
right.set_xlabel("step")
right.set_ylabel("mean squared error (log scale)")
right.set_title("Loss")
plt.tight_layout()
show_figure(
    fig,
    f"Left: the data and the line slope * x + intercept after {', '.join(map(str, snapshots))} "
    f"steps of sgd_step. Right: the loss against the step, on a log scale, down to {losses[-1]:.4f}.",
)

# %% [markdown]
# ## 4. Four ways to step outside the graph
#
# Four tools keep autograd from recording. They are easy to mix up, so let us put each one to
# the same questions: does the result **share memory** with the original, is it **in the
# graph** (`requires_grad`, `grad_fn`), and can a computation that autograd records **use it
# later**, saving it for its backward pass (`t * x`, whose gradient for `x` needs `t`)?

# %%
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
base = x * 2  # a tensor in the graph

results = {}
results["base.detach()"] = base.detach()
results["base.detach().clone()"] = base.detach().clone()
with torch.no_grad():
    results["no_grad: base * 1"] = base * 1
with torch.inference_mode():
    results["inference_mode: base * 1"] = base * 1


def usable_later(t):
    """Can a new recorded computation save `t` and use it in its backward pass?"""
    try:
        (t * x).sum().backward()
        return True
    except RuntimeError:
        return False


print(
    f"{'':26}{'same memory':>12}{'requires_grad':>15}{'grad_fn':>9}{'inference':>11}{'usable':>8}"
)
for name, t in results.items():
    same = t.data_ptr() == base.data_ptr()
    print(
        f"{name:26}{same!s:>12}{t.requires_grad!s:>15}{t.grad_fn is not None!s:>9}"
        f"{t.is_inference()!s:>11}{usable_later(t)!s:>8}"
    )

# %% [markdown]
# What the table says:
#
# * `detach()` makes a new tensor object over the **same memory**, outside the graph. It is
#   cheap, but it is a window onto the original numbers (next cell).
# * `detach().clone()` also copies the memory: a snapshot that nothing else can change.
# * `torch.no_grad()` is not about one tensor: it turns recording off for everything computed
#   inside the block. Results are ordinary tensors with no `grad_fn`, in new memory as usual
#   (`base * 1` computes new numbers), and they can feed a recorded computation later.
# * `torch.inference_mode()` is `no_grad` taken further: it also skips the version counter
#   and view tracking (which the PyTorch documentation gives as why it can be faster), and marks
#   its results as *inference tensors* that autograd refuses to save later (`t + x` may still
#   use one: its backward needs neither). Use it for pure evaluation, `no_grad` when the results may feed a
#   recorded computation later.
#
# The window of `detach()` also carries the version counter. Change the detached tensor in
# place and the original changes too, and autograd notices:

# %%
a = torch.tensor([0.5, 1.0], requires_grad=True)
e = a.exp()
view = e.detach()
view.zero_()
print("e after zeroing the detached view:", e, "  version:", e._version)
try:
    e.sum().backward()
except RuntimeError as error:
    print("RuntimeError:", str(error).split(" Hint")[0])

# %% [markdown]
# And here is what a detached branch does to the graph: with `y = x.detach() ** 2`, the
# branch through `y` is cut off, so only $z = x^3$ sends a gradient back to `x`.

# %%
x = torch.ones(3, requires_grad=True)
y = x.detach() ** 2
z = x**3
out = (y + z).sum()
out.backward()
print("x.grad =", x.grad, " (only d(x**3)/dx = 3; the y branch contributes nothing)")
draw(out, params={"x": x})

# %% [markdown]
# ## 5. Exercise 4 (2 points): a stop-gradient target
#
# Sometimes a model is trained toward a target that it computes itself. In temporal-difference
# learning (the idea behind DQN), a linear value estimate $v(s) = w \cdot s$ is pulled toward
#
# $$\text{target} = r + \gamma\, v(s') = r + \gamma\, w \cdot s' ,$$
#
# using the loss $(v(s) - \text{target})^2$. The target is built from the same weights, but it
# is meant as a *fixed* goal for this step: we want to move the prediction toward the target,
# not the target toward the prediction. So the gradient must flow through $v(s)$ only:
#
# $$\nabla_w = 2\,\big(v(s) - \text{target}\big)\, s .$$
#
# Write `bootstrap_loss(w, s, r, s_next, gamma)` that returns this loss as a scalar tensor,
# such that `loss.backward()` gives exactly that gradient. `w`, `s` and `s_next` are 1-d
# tensors of the same length; `r` and `gamma` are numbers.


# %% nbgrader={"solution": true, "grade_id": "bootstrap_loss"}
def bootstrap_loss(w, s, r, s_next, gamma):
    ### BEGIN SOLUTION
    prediction = (w * s).sum()
    target = r + gamma * (w.detach() * s_next).sum()
    return (prediction - target) ** 2
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_bootstrap_loss"}
check(
    defined("bootstrap_loss"),
    "bootstrap_loss is not defined: run the exercise cell above (it raised an error, or did not "
    "run).",
)
_w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
_s = torch.tensor([1.0, 2.0, 0.5])
_s_next = torch.tensor([0.0, 1.0, 2.0])
_w_before = _w.detach().clone()
_loss, _error = attempt(bootstrap_loss, _w, _s, 1.0, _s_next, 0.5)
check(
    _error is None,
    "bootstrap_loss(w, s, r=1.0, s_next, gamma=0.5) on the 3-vectors above raised an error "
    f"(the error: {_error}); call it in a cell to see the whole message.",
)
_pred, _target = -0.5, 1.0 + 0.5 * 3.0
check(
    isinstance(_loss, torch.Tensor) and _loss.dim() == 0,
    "bootstrap_loss(w, s, r=1.0, s_next, gamma=0.5) should return a scalar tensor (0-d: sum the "
    "products, or use torch.dot).",
)
check(
    abs(_loss.item() - (_pred - _target) ** 2) < 1e-5,
    "bootstrap_loss(w, s, r=1.0, s_next, gamma=0.5): the loss should be (v(s) - target)**2, "
    "with v(s) = w . s and target = r + gamma * w . s_next, and its value is another (yours: "
    f"{_loss.item():.4f}; the right loss: {(_pred - _target) ** 2}, v of s: {_pred}, target: "
    f"{_target}).",
)
check(
    _w.requires_grad and torch.equal(_w.detach(), _w_before),
    "bootstrap_loss changed w itself (its values, or its requires_grad: w.detach_() and "
    "w.requires_grad_(False) detach the parameter in place). Use w.detach(), which makes a new "
    "tensor and leaves w alone.",
)
check(
    _loss.requires_grad,
    "bootstrap_loss(...) does not require a gradient: detach only the target, not the "
    "prediction or the whole loss.",
)
_, _error = attempt(_loss.backward)
check(
    _error is None,
    "bootstrap_loss(...).backward() raised an error: call it in a cell to see the whole "
    f"message (the error: {_error}).",
)
check(
    _w.grad is not None,
    "after bootstrap_loss(...).backward(), w.grad is None: the prediction w . s must be "
    "computed from w itself, so that the gradient reaches it.",
)
_only_pred = 2 * (_pred - _target) * _s
_through_both = 2 * (_pred - _target) * (_s - 0.5 * _s_next)
_only_target = 2 * (_pred - _target) * (-0.5 * _s_next)
check(
    not torch.allclose(_w.grad, _through_both),
    "after bootstrap_loss(...).backward(), w.grad also contains the gradient through the "
    f"target, gamma * w . s_next (yours: {_w.grad}). Detach the target's use of w so the "
    "target is a constant for this step.",
)
check(
    not torch.allclose(_w.grad, _only_target),
    "after bootstrap_loss(...).backward(), w.grad flows through the target only: you detached "
    f"the prediction instead of the target (yours: {_w.grad}).",
)
check(
    torch.allclose(_w.grad, _only_pred),
    "after bootstrap_loss(...).backward(), w.grad should be 2 * (v(s) - target) * s, and it is "
    f"not (yours: {_w.grad}; the right gradient: {_only_pred}): print both gradients "
    "with the cell below this exercise.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(44)
for _case, (_gamma, _n) in enumerate(((0.9, 5), (0.5, 1), (0.99, 9), (0.0, 4), (1.0, 6)), 1):
    _w = torch.randn(_n, dtype=torch.float64, requires_grad=True, generator=_gen)
    _s = torch.randn(_n, dtype=torch.float64, generator=_gen)
    _s_next = torch.randn(_n, dtype=torch.float64, generator=_gen)
    _r = torch.randn((), generator=_gen).item()
    _loss = bootstrap_loss(_w, _s, _r, _s_next, _gamma)
    if not isinstance(_loss, torch.Tensor):
        _loss = torch.tensor(float("nan"))  # the judge reports a difference, not a crash here
    observe(
        f"bootstrap_loss(w, s, r, s_next, gamma={_gamma}) on random float64 vectors of {_n} "
        f"(case {_case} of 5)",
        {"loss": _loss.detach(), "loss.requires_grad": _loss.requires_grad},
        hint="Return (w . s - (r + gamma * w . s_next)) ** 2 as a scalar tensor; detach only "
        "the target, so that the loss still requires a gradient.",
    )
    if _loss.requires_grad:
        _loss.backward()
    observe(
        f"bootstrap_loss(...).backward() in case {_case}: what it left in w",
        {"w.grad": _w.grad, "w": _w.detach(), "w.requires_grad": _w.requires_grad},
        hint="The gradient must flow through the prediction w . s only: use w.detach() in the "
        "target (not in the prediction, and not w.detach_(), which detaches w itself), and "
        "leave w unchanged.",
    )
### END HIDDEN TESTS

# %% [markdown]
# To see what the `detach()` changed, compare the two gradients on the same numbers: with the
# full gradient, part of every step would go into moving the target away from the prediction.
# In the picture, look at `w[2]`: the two gradients push it in opposite directions.

# %%
w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
s, s_next = torch.tensor([1.0, 2.0, 0.5]), torch.tensor([0.0, 1.0, 2.0])
full = ((w * s).sum() - (1.0 + 0.5 * (w * s_next).sum())) ** 2
(full_grad,) = torch.autograd.grad(full, w)
bootstrap_loss(w, s, 1.0, s_next, 0.5).backward()
print("gradient through both sides:  ", full_grad)
print("stop-gradient target (yours): ", w.grad)

fig, ax = plt.subplots(figsize=(5, 3))
ax.bar([-0.2, 0.8, 1.8], full_grad.tolist(), width=0.4, color="C1", label="through both sides")
ax.bar([0.2, 1.2, 2.2], w.grad.tolist(), width=0.4, color="C0", label="stop-gradient target")
ax.axhline(0, color="gray", linewidth=0.8)
ax.set_xticks([0, 1, 2], ["w[0]", "w[1]", "w[2]"])
ax.set_ylabel("d loss / d w")
ax.set_title("The gradient with and without detach()")
ax.legend(fontsize=8)
show_figure(
    fig,
    f"Bars of d loss / d w for w[0], w[1], w[2]: through both sides {full_grad.tolist()}, "
    f"with the stop-gradient target {w.grad.tolist()}.",
)

# %% [markdown]
# ## What you have seen
#
# * Reassigning a name makes a new node; the old one stays in the graph with its own
#   gradient. Names are labels, the graph holds tensors.
# * An in-place operation is fine unless autograd saved the tensor it overwrites; then the
#   version counter catches it at `backward()`. Fix it by computing out of place or cloning.
# * Parameters are updated in place under `torch.no_grad()`, and their gradients reset.
# * `detach()` shares memory (and the version counter), `detach().clone()` copies,
#   `no_grad()` records nothing inside its block, `inference_mode()` records nothing and makes
#   inference tensors, which autograd refuses to save for a later backward pass.
# * `detach()` turns part of a loss into a constant: a stop-gradient target.
