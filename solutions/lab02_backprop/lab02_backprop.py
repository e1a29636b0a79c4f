# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 2: Backpropagation walks the graph backwards
#
# In lab 1 you watched the forward pass *build* a graph: every operation on a tensor that
# requires a gradient adds a node, and the node remembers how to differentiate itself.
# This lab is about what happens when you call `backward()` on the result.
#
# You will see, by running code rather than by taking our word for it:
#
# 1. `requires_grad` spreads from inputs to everything computed from them;
# 2. `backward()` fills `.grad` on the **leaves** only, unless you ask for more;
# 3. `backward()` frees the tensors the graph saved, so a second call through a node that
#    saved one fails unless you keep them;
# 4. gradients **accumulate** in `.grad` until you reset them, in place;
# 5. you will compute the gradients of $f(x, y, z) = (x^2 + y)\,z$ yourself;
# 6. and, for an output that is not a single number, `backward()` computes a
#    *vector-Jacobian product*: one row of the Jacobian at a time, if you ask for rows.
#
# %course-include how_this_lab_works.md

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import matplotlib.pyplot as plt

print("torch", torch.__version__)

# %% [markdown]
# ## 1. The running example: one step of a recurrent cell
#
# We reuse lab 1's cell. Two weight matrices are parameters, so they require gradients;
# the input `x` and the previous hidden state `h` are data, so they do not.
#
# $$\text{i2h} = W_x x,\quad \text{h2h} = W_h h,\quad
#   \text{next\_h} = \tanh(\text{i2h} + \text{h2h}),\quad \text{out} = \sum_i \text{next\_h}_i$$

# %%
Wh = torch.randn(3, 3, requires_grad=True)
Wx = torch.randn(3, 2, requires_grad=True)
x = torch.randn(2, 1)
h = torch.randn(3, 1)

i2h = Wx @ x
h2h = Wh @ h
next_h = torch.tanh(i2h + h2h)
out = next_h.sum()

for name, t in [("Wh", Wh), ("Wx", Wx), ("x", x), ("h", h), ("i2h", i2h), ("out", out)]:
    print(
        f"{name:>4}: requires_grad={t.requires_grad!s:5}  is_leaf={t.is_leaf!s:5}  grad_fn={t.grad_fn}"
    )

# %% [markdown]
# `requires_grad` is *contagious*: `i2h` needs a gradient because `Wx` does, and so does
# everything computed from it. `x` and `h` were created by you and do not need one: they
# are leaves with no gradient. `Wh` and `Wx` are the leaves that matter.
#
# `draw(out)` shows the graph (blue boxes are the leaves that will receive `.grad`).

# %%
draw(out)

# %% [markdown]
# ## 2. `backward()` fills `.grad` on the leaves
#
# `out` is a scalar, so `out.backward()` needs no argument: it computes
# $\partial\,\text{out} / \partial W$ for every leaf $W$ that requires a gradient, and
# stores it in `W.grad`, which has the same shape as `W`.

# %%
out.backward()
print("d out / d Wx =\n", Wx.grad)
print("d out / d Wh =\n", Wh.grad)
print("x.grad =", x.grad, "(x does not require a gradient)")

# %% [markdown]
# What about `i2h`, an intermediate (non-leaf) tensor? Its gradient was computed on the way
# (the chain rule needs it) but then thrown away to save memory. Reading `i2h.grad` gives
# `None`, and PyTorch warns you that you probably meant something else.

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("i2h.grad =", i2h.grad)
print("warning:", caught[0].message if caught else "(none)")

# %% [markdown]
# To keep a non-leaf gradient, call `.retain_grad()` on it **before** `backward()`.
#
# ### Exercise 1 (2 points): keep the gradient of an intermediate tensor
#
# Write `recurrent_step(Wh, Wx, x, h)` that computes `out` as above, calls
# `out.backward()`, and returns the tuple `(out, next_h)` where `next_h.grad` holds
# $\partial\,\text{out}/\partial\,\text{next\_h}$ after the call. (Since `out` is a sum,
# that gradient is all ones: a good sanity check.)


# %% nbgrader={"solution": true, "grade_id": "recurrent_step"}
def recurrent_step(Wh, Wx, x, h):
    ### BEGIN SOLUTION
    next_h = torch.tanh(Wx @ x + Wh @ h)
    next_h.retain_grad()
    out = next_h.sum()
    out.backward()
    return out, next_h
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_recurrent_step"}
check(
    defined("recurrent_step") and callable(recurrent_step),
    "recurrent_step is not defined: run the exercise 1 cell above (did it stop with an error?).",
)
_Wh = torch.randn(3, 3, requires_grad=True)
_Wx = torch.randn(3, 2, requires_grad=True)
_x, _h = torch.randn(2, 1), torch.randn(3, 1)
_result, _error = attempt(recurrent_step, _Wh, _Wx, _x, _h)
check(
    _error is None,
    "recurrent_step(Wh, Wx, x, h) raised an error, so it could not be checked (the error: "
    f"{_error}); call it in a cell on small tensors to see the whole message.",
)
check(
    isinstance(_result, tuple) and len(_result) == 2,
    "recurrent_step should return a tuple of two tensors, (out, next_h), and it returned "
    f"something else (it returned: {type(_result).__name__}).",
)
_out, _next_h = _result
check(
    isinstance(_out, torch.Tensor) and _out.dim() == 0,
    "out should be a scalar tensor (0-d): the sum of next_h, as a tensor (not .item()).",
)
check(
    isinstance(_next_h, torch.Tensor) and tuple(_next_h.shape) == (3, 1),
    "next_h should be the 3 x 1 tensor tanh(Wx @ x + Wh @ h).",
)
check(_Wh.grad is not None, "Wh.grad is None: did you call out.backward() inside the function?")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _g = _next_h.grad
check(
    _g is not None,
    "next_h.grad is None: call next_h.retain_grad() before out.backward(), "
    "otherwise PyTorch frees the gradient of a non-leaf tensor.",
)
check(
    torch.allclose(_g, torch.ones(3, 1)),
    "d out / d next_h should be all ones, since out = next_h.sum().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(2)
# other sizes, and a batch of 3 inputs side by side (x and h with 3 columns)
for _draw, (_n_h, _n_x, _cols) in enumerate(((3, 2, 1), (4, 5, 1), (2, 6, 1), (5, 2, 3)), 1):
    _Wh = torch.randn(_n_h, _n_h, requires_grad=True, generator=_gen)
    _Wx = torch.randn(_n_h, _n_x, requires_grad=True, generator=_gen)
    _x = torch.randn(_n_x, _cols, generator=_gen)
    _h = torch.randn(_n_h, _cols, generator=_gen)
    _result = recurrent_step(_Wh, _Wx, _x, _h)
    _out, _next_h = _result if isinstance(_result, tuple) and len(_result) == 2 else (None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        observe(
            f"recurrent_step(Wh, Wx, x, h) on random inputs with {_n_h} hidden units, "
            f"{_n_x} inputs and {_cols} column(s), draw {_draw} of 4",
            {
                "out": _out,
                "Wh.grad": _Wh.grad,
                "Wx.grad": _Wx.grad,
                "next_h.grad": getattr(_next_h, "grad", "not a tensor"),
            },
            atol=1e-6,
            hint="out is tanh(Wx @ x + Wh @ h).sum(), with one out.backward(); next_h.grad is "
            "kept only if next_h.retain_grad() runs before it.",
        )
### END HIDDEN TESTS


# %% [markdown]
# ## 3. `backward()` frees what the graph saved
#
# During the forward pass, a node keeps the tensors its derivative will need: `y = w ** 2`
# keeps `w` (as `_saved_self`, next to the exponent), because $dy/dw = 2w$ needs it.
# `backward()` uses the saved tensors once and then frees them, to save memory. A second
# `backward()` through that node finds nothing to work with, and stops:

# %%
w = torch.tensor(3.0, requires_grad=True)
y = w**2
print("y = w ** 2 saved w:", y.grad_fn._saved_self)
y.backward()
try:
    y.backward()
except RuntimeError as error:
    print("RuntimeError:", str(error).split(".")[0] + ".")

# %% [markdown]
# Not every node saves a tensor. The derivative of `w + 1` is 1, whatever `w` is, so its
# `AddBackward0` keeps only a number (`alpha`, the factor `torch.add` puts on its second
# input) and no tensor at all. Then nothing is freed, and a second `backward()` works, and
# adds a second gradient of 1:

# %%
w = torch.tensor(3.0, requires_grad=True)
y = w + 1
print("y = w + 1 saved only alpha:", y.grad_fn._saved_alpha)
y.backward()
y.backward()  # no error: the add node saved no tensor, so nothing was freed
print("w.grad after two backward() calls:", w.grad)

# %% [markdown]
# So the error is about the *saved tensors*, not about the graph as such: PyTorch complains
# only when a node needs a tensor it has already freed. Do not build on the exception: even
# `w * 3` saves a tensor, the 3 (for $dy/dw = 3$): PyTorch wraps the Python number in a
# 0-dimensional tensor and keeps it as `y.grad_fn._saved_other`, so a second `backward()`
# through `w * 3` fails too (checked on torch 2.10 to 2.15, where this wrapped number is also kept
# away from saved-tensor hooks: they see only real tensors). And nearly every real graph has
# nodes that save something. (The engine you will write in lab 8 keeps it simple and frees every
# node after a pass, whether it saved a tensor or not, so it refuses even the second pass
# through `w + 1`: a simplification.)
#
# `backward(retain_graph=True)` keeps the saved tensors, so you may go backwards again. And
# since gradients **add up** in `.grad` (section 4), the second call doubles it.
#
# ### Exercise 2 (2 points): backward twice
#
# Write `backward_twice(y, w)`. `y` is a scalar already computed from the leaf `w` (the
# check builds it; do not compute it again: the hidden checks use graphs you do not know).
# Go backwards through `y` **twice**, without error, and return `w.grad`, which then holds
# the sum of the two passes. For `y = w ** 3` at `w = 2` that is $2 \times 3w^2 = 24$.


# %% nbgrader={"solution": true, "grade_id": "backward_twice"}
def backward_twice(y, w):
    ### BEGIN SOLUTION
    y.backward(retain_graph=True)
    y.backward()
    return w.grad
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_backward_twice"}
check(
    defined("backward_twice") and callable(backward_twice),
    "backward_twice is not defined: run the exercise 2 cell above (did it stop with an error?).",
)
_w = torch.tensor(2.0, requires_grad=True)
_y = _w**3
_passes = []
_y.register_hook(lambda _grad: _passes.append(1))  # counts the passes through _y
_g, _error = attempt(backward_twice, _y, _w)
check(
    _error is None or "a second time" not in _error,
    "The second backward() failed because the first one freed the saved tensors: pass "
    "retain_graph=True to the first call.",
)
check(
    _error is None,
    f"backward_twice(y, w) raised an error, so it could not be checked (the error: {_error}); "
    "call it in a cell on y = w ** 3 to see the whole message.",
)
check(
    len(_passes) == 2,
    "backward_twice(y, w) did not go backwards through the y it was given exactly twice: call "
    f"backward on that y itself, two times, and compute no new y (passes: {len(_passes)}).",
)
check(_g is not None, "backward_twice returned None: return w.grad after the two calls.")
check(
    isinstance(_g, torch.Tensor) and _g.numel() == 1,
    "backward_twice should return the tensor w.grad, one number here, and it returned "
    f"something else (it returned: {type(_g).__name__}).",
)
check(
    abs(_g.item() - 24.0) < 1e-6,
    "For y = w ** 3 at w = 2, w.grad after two passes should be 24, 12 from each pass: both "
    f"passes must add into w.grad, so print w.grad after each one (yours: {_g.item()}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(21)
# graphs the student does not know: scalars and other shapes, float64, and one whose
# nodes save no tensor (where a second pass works even without retain_graph)
_cases = [
    ("y = w ** 3 at w = -1.5 (float64)", torch.tensor(-1.5, dtype=torch.float64), lambda w: w**3),
    ("y = (w.exp() * w).sum() for a random w of 4 numbers", torch.randn(4, generator=_gen),
     lambda w: (w.exp() * w).sum()),
    ("y = torch.tanh(w).pow(2).mean() for a random 2 x 3 w", torch.randn(2, 3, generator=_gen),
     lambda w: torch.tanh(w).pow(2).mean()),
    ("y = (w + 1).sum(), which saves no tensor, for a random w of 3 numbers",
     torch.randn(3, generator=_gen), lambda w: (w + 1).sum()),
]  # fmt: skip
for _words, _value, _make in _cases:
    _w = _value.clone().requires_grad_()
    _y = _make(_w)
    _passes = []
    _y.register_hook(lambda _grad, _passes=_passes: _passes.append(1))
    _g = backward_twice(_y, _w)
    observe(
        f"backward_twice(y, w) on {_words}",
        {"returned": _g, "passes through y": len(_passes)},
        atol=1e-6,
        hint="Two passes through the given y, the first with retain_graph=True; both add into "
        "w.grad, which is what to return.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Gradients accumulate, in place
#
# `backward()` does not *overwrite* `.grad`: it *adds* to it. To watch this, fix the
# inputs so every pass has the same gradient: with `Wh` all ones, `h` all ones and the
# input `x` all zeros, each hidden unit is $\tanh(3)$ and every entry of
# $\partial\,\text{out}/\partial W_h$ is $1 - \tanh^2(3) \approx 0.0099$.

# %%
Wh = torch.ones(3, 3, requires_grad=True)
Wx = torch.ones(3, 2)
h = torch.ones(3, 1)


def forward(x):
    """The recurrent cell's out for the input x, with the Wh, Wx and h above."""
    return torch.tanh(Wx @ x + Wh @ h).sum()


x_zero = torch.zeros(2, 1)
for i in range(3):
    forward(x_zero).backward()
    print(f"Iter {i}:", Wh.grad.flatten()[:3], "...")

# %% [markdown]
# Every entry went from 0.0099 to 0.0197 to 0.0296, one, two, then three times
# $1 - \tanh^2(3)$: each pass added its gradient to the last. This is why
# every training loop calls `optimizer.zero_grad()` (or `W.grad.zero_()`) before
# `backward()`; lab 3 shows when accumulating on purpose is useful.
#
# One more trap, for when you keep gradients to look at later (to plot them, say).
# `Wh.grad` is one tensor that PyTorch changes **in place**: `Wh.grad.zero_()` zeroes it in
# place, and the next `backward()` adds into it in place (also into the fresh one that the
# first pass after `Wh.grad = None` creates; this is for the default `create_graph=False`). A name bound to `Wh.grad` moves with it; a
# copy made with `.clone()` does not. (`.detach()` is no copy: it shares the data.)

# %%
Wh.grad = None
forward(x_zero).backward()
kept = Wh.grad  # the same tensor as Wh.grad, not a copy
copied = Wh.grad.clone()  # a copy
forward(x_zero).backward()  # adds into Wh.grad, in place
print("kept:  ", kept[0, 0].item(), "(moved with Wh.grad)")
print("copied:", copied[0, 0].item())

# %% [markdown]
# ### Exercise 3 (2 points): one fresh gradient per pass
#
# Write `fresh_gradients(xs)`. For each input `x` of the list `xs`, in order, it computes
# `forward(x)` and goes backwards, and keeps the gradient of `Wh` **of that pass alone**:
# nothing from an earlier pass, nor anything `Wh.grad` held before the call, may leak in.
# It returns the list of these gradients, one tensor of `Wh`'s shape per input, each a copy
# that later passes do not change (an empty `xs` gives an empty list).


# %% nbgrader={"solution": true, "grade_id": "fresh_gradients"}
def fresh_gradients(xs):
    ### BEGIN SOLUTION
    grads = []
    for x in xs:
        if Wh.grad is not None:
            Wh.grad.zero_()
        forward(x).backward()
        grads.append(Wh.grad.clone())
    return grads
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_fresh_gradients"}
check(
    defined("fresh_gradients") and callable(fresh_gradients),
    "fresh_gradients is not defined: run the exercise 3 cell above (did it stop with an error?).",
)
_xs = [torch.zeros(2, 1), torch.ones(2, 1), torch.tensor([[0.5], [-2.0]])]
_want = [torch.autograd.grad(forward(_x), Wh)[0] for _x in _xs]  # each pass alone
Wh.grad = torch.full((3, 3), 5.0)  # a stale gradient, left from before the call
_got, _error = attempt(fresh_gradients, _xs)
check(
    _error is None,
    f"fresh_gradients(xs) raised an error, so it could not be checked (the error: {_error}); "
    "call it in a cell on a list of inputs to see the whole message.",
)
check(
    isinstance(_got, list) and len(_got) == len(_xs),
    "fresh_gradients(xs) should return a list with one gradient per input, 3 for these 3 "
    "inputs, and it did not (it returned: "
    f"{len(_got) if isinstance(_got, list) else type(_got).__name__}).",
)
check(
    all(isinstance(_g, torch.Tensor) and _g.shape == Wh.shape for _g in _got),
    "Each gradient should be a tensor of Wh's shape (3 x 3): a copy of Wh.grad after its pass.",
)
_right = [
    torch.allclose(_g.to(_w.dtype), _w, atol=1e-6) for _g, _w in zip(_got, _want, strict=True)
]
check(
    not all(torch.equal(_g, _got[-1]) for _g in _got) or all(_right),
    "All the gradients you returned are equal: they are all Wh.grad itself (or views of it), "
    "which the later passes changed in place. Keep a copy of each: Wh.grad.clone().",
)
check(
    _right[0] or not all(_right[1:]),
    "The first gradient is off, the others are right: Wh.grad held something before the call. "
    "Reset it before every pass, the first one included.",
)
check(
    all(_right),
    "The gradients are not those of each pass alone: if they grow from pass to pass, the "
    "passes add up in Wh.grad. Reset Wh.grad (Wh.grad.zero_(), or Wh.grad = None) before each "
    "backward().",
)
_before = [_g.clone() for _g in _got]
forward(_xs[0]).backward()  # one more pass after the call
check(
    all(torch.equal(_g, _b) for _g, _b in zip(_got, _before, strict=True)),
    "A gradient you returned changed when a later pass added into Wh.grad: it is Wh.grad itself "
    "(or shares its data, as detach() does). Return copies: Wh.grad.clone().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

# other sizes: Wh, Wx and h are replaced (forward reads them by name) and put back afterwards;
# new random inputs; a stale Wh.grad before each call; then one more pass after the call
_gen = torch.Generator().manual_seed(3)
_saved = (Wh, Wx, h)
try:
    for _n_h, _n_x, _n in ((4, 3, 4), (2, 5, 1), (3, 2, 0)):
        Wh = torch.randn(_n_h, _n_h, generator=_gen).requires_grad_()
        Wx = torch.randn(_n_h, _n_x, generator=_gen)
        h = torch.randn(_n_h, 1, generator=_gen)
        _xs = [torch.randn(_n_x, 1, generator=_gen) for _ in range(_n)]
        Wh.grad = torch.randn(_n_h, _n_h, generator=_gen)
        _got = fresh_gradients(_xs)
        if not isinstance(_got, list | tuple):
            _got = f"not a list: {type(_got).__name__}"
        _first = [_g.clone() if isinstance(_g, torch.Tensor) else _g for _g in _got]
        forward(torch.randn(_n_x, 1, generator=_gen)).backward()
        observe(
            f"fresh_gradients(xs) for {_n} random input(s), with a {_n_h} x {_n_h} Wh and a "
            "stale Wh.grad left from before the call; then again after one more pass",
            {"returned": _first, "returned, after one more pass": _got},
            atol=1e-6,
            hint="Reset Wh.grad before every pass, the first included, and keep a copy of each "
            "gradient (Wh.grad.clone()): Wh.grad itself changes in place with later passes.",
        )
finally:
    Wh, Wx, h = _saved
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Exercise 4 (4 points): the gradients of $f(x, y, z) = (x^2 + y)\,z$
#
# Break $f$ into named steps, $p = x^2$, $q = p + y$, $f = q\,z$, and let one `backward()`
# compute every gradient.
#
# Write `f_gradients(x, y, z)`. `x`, `y` and `z` are scalar tensors that require
# gradients (leaves whose `.grad` is still `None`). Compute `p`, `q` and `f` from them,
# make sure the gradients of `p` and `q` will be kept, call `f.backward()` once, and return
# the five gradients `(df/dx, df/dy, df/dz, df/dp, df/dq)`, read from the `.grad` of `x`,
# `y`, `z`, `p` and `q`.
#
# The checks call it at points of their own (the hidden ones at points you cannot know),
# and look at `x.grad`, `y.grad` and `z.grad` after the call: the gradients must come from
# `backward()`, not from derivatives worked out by hand.


# %% nbgrader={"solution": true, "grade_id": "f_gradients"}
def f_gradients(x, y, z):
    ### BEGIN SOLUTION
    p = x**2
    q = p + y
    f = q * z
    p.retain_grad()
    q.retain_grad()
    f.backward()
    return x.grad, y.grad, z.grad, p.grad, q.grad
    ### END SOLUTION


# %% nbgrader={"locked": true, "grade_id": "f_helpers"}
def f_nudged(point, dx=0.0, dy=0.0, dz=0.0, dp=0.0, dq=0.0):
    """f at `point` = (x, y, z), with x, y, z, p or q moved a little (what comes after
    follows the move)."""
    x, y, z = (float(v) for v in point)
    p = (x + dx) ** 2 + dp
    q = p + y + dy + dq
    return q * (z + dz)


def slopes(point, step=1e-4):
    """df/dv for v = x, y, z, p, q, measured without the chain rule: move v by a small step
    up and down and take (f(v + step) - f(v - step)) / (2 step)."""
    return [
        (f_nudged(point, **{"d" + v: step}) - f_nudged(point, **{"d" + v: -step})) / (2 * step)
        for v in "xyzpq"
    ]


def leaves_at(point, dtype=torch.float64):
    """x, y, z at `point`, as new scalar leaves that require gradients."""
    return [torch.tensor(float(v), dtype=dtype, requires_grad=True) for v in point]


def as_number(value):
    """A gradient as a float, whether it came as a one-number tensor or a number (None stays)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    if isinstance(value, int | float):
        return float(value)
    return None if value is None else repr(type(value))


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_f_leaves"}
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _gradients_record(point, dtype):
    """f_gradients at a point: what it returned, the .grad of x, y and z, and how many
    backward passes reached each of them (a hook counts them; a hand-set .grad is no pass)."""
    x, y, z = leaves_at(point, dtype)
    passes = {"x": 0, "y": 0, "z": 0}
    for name, t in (("x", x), ("y", y), ("z", z)):
        t.register_hook(lambda grad, name=name: passes.__setitem__(name, passes[name] + 1))
    got = f_gradients(x, y, z)
    got = list(got) + [None] * 5 if isinstance(got, tuple | list) else [None] * 5
    record = {f"df/d{v}": as_number(g) for v, g in zip("xyzpq", got, strict=False)}
    record |= {f"{v}.grad": as_number(t.grad) for v, t in (("x", x), ("y", y), ("z", z))}
    record["backward passes that reached x, y, z"] = [passes["x"], passes["y"], passes["z"]]
    return record


### END HIDDEN TESTS
check(
    defined("f_gradients") and callable(f_gradients),
    "f_gradients is not defined: run the exercise 4 cell above (did it stop with an error?).",
)
_point = (0.5, -1.25, 2.0)
_x, _y, _z = leaves_at(_point)
_got, _error = attempt(f_gradients, _x, _y, _z)
check(
    _error is None,
    f"f_gradients(x, y, z) raised an error, so it could not be checked (the error: {_error}); "
    "call it in a cell on three scalar leaves to see the whole message.",
)
check(
    isinstance(_got, tuple | list) and len(_got) == 5,
    "f_gradients should return five gradients: (df/dx, df/dy, df/dz, df/dp, df/dq).",
)
for _name, _t in (("x", _x), ("y", _y), ("z", _z)):
    check(
        _t.grad is not None,
        "x.grad, y.grad and z.grad should all be filled after the call, and one is None: "
        "f_gradients should call f.backward(), which fills the .grad of every leaf f was "
        f"computed from (the one that is None: {_name}.grad).",
    )
for _name, _t, _value, _slope in zip("xyz", (_x, _y, _z), _got, slopes(_point), strict=False):
    check(
        as_number(_value) is not None and abs(as_number(_value) - _t.grad.item()) < 1e-9,
        "The first three gradients returned should be x.grad, y.grad and z.grad as backward() "
        f"left them, and one is not (df/d{_name}): return what backward() put in .grad.",
    )
    check(
        abs(_t.grad.item() - _slope) < 1e-6,
        f"A gradient with respect to x, y or z (df/d{_name}) disagrees with the slope of f "
        "measured by nudging that value (see slopes() above): is f computed as "
        "(x**2 + y) * z, through p and q, with one backward()?",
    )
### BEGIN HIDDEN TESTS
_gen = torch.Generator().manual_seed(41)
_hidden_points = [
    (torch.randn(3, generator=_gen, dtype=torch.float64) * 3).tolist(),
    (torch.randn(3, generator=_gen, dtype=torch.float64) * 3).tolist(),
    [0.0] + torch.randn(2, generator=_gen, dtype=torch.float64).tolist(),
]
for _k, _point in enumerate(_hidden_points, 1):
    for _dtype in (torch.float64, torch.float32):
        _record = _gradients_record(_point, _dtype)
        observe(
            f"f_gradients(x, y, z) at hidden point {_k} of 3 ({_dtype}): df/dx, df/dy, df/dz, "
            "x.grad, y.grad, z.grad and the backward passes that reached x, y, z",
            {_key: _record[_key] for _key in _record if _key not in ("df/dp", "df/dq")},
            rtol=1e-5,
            atol=1e-5,
            hint="Build p, q and f from the given x, y and z, call f.backward() once, and return "
            "what it left in x.grad, y.grad and z.grad.",
        )
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_f_intermediates"}
check(
    defined("f_gradients") and callable(f_gradients),
    "f_gradients is not defined: run the exercise 4 cell above (did it stop with an error?).",
)
_point = (-1.5, 0.75, -0.5)
_x, _y, _z = leaves_at(_point)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _got, _error = attempt(f_gradients, _x, _y, _z)
check(
    _error is None,
    f"f_gradients(x, y, z) raised an error, so it could not be checked (the error: {_error}); "
    "call it in a cell on three scalar leaves to see the whole message.",
)
check(
    isinstance(_got, tuple | list) and len(_got) == 5,
    "f_gradients should return five gradients: (df/dx, df/dy, df/dz, df/dp, df/dq).",
)
check(
    _x.grad is not None,
    "x.grad is None after the call: f_gradients should call f.backward().",
)
for _name, _value, _slope in zip(("p", "q"), _got[3:], slopes(_point)[3:], strict=True):
    check(
        _value is not None,
        f"df/dp or df/dq (df/d{_name}) is None: p and q are not leaves, so backward() drops "
        "their gradients unless p.retain_grad() and q.retain_grad() run before f.backward().",
    )
    check(
        as_number(_value) is not None and abs(as_number(_value) - _slope) < 1e-6,
        f"df/dp or df/dq (df/d{_name}) disagrees with the slope of f measured by nudging that "
        "value (see slopes() above): is it the .grad of the p = x**2 and q = p + y that f was "
        "computed from, after one f.backward()?",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(42)
for _k in (1, 2, 3):
    _point = (torch.randn(3, generator=_gen, dtype=torch.float64) * 3).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _record = _gradients_record(_point, torch.float64)
    observe(
        f"f_gradients(x, y, z) at hidden point {_k} of 3: df/dp, df/dq and the backward passes "
        "that reached x, y, z",
        {
            _key: _record[_key]
            for _key in ("df/dp", "df/dq", "backward passes that reached x, y, z")
        },
        rtol=1e-6,
        atol=1e-9,
        hint="p = x**2 and q = p + y are not leaves: call p.retain_grad() and q.retain_grad() "
        "before f.backward(), then return p.grad and q.grad.",
    )
### END HIDDEN TESTS

# %% [markdown]
# The same gradients in a picture, next to an estimate that needs no chain rule: nudge one
# value by a small step up and down, recompute $f$ from that value on, and take the slope
# (`slopes()` above). Each dot (the nudge) should sit on top of its bar (`backward()`); a
# missing bar is a gradient that is `None`.

# %%
picture_point = (1.0, -0.5, 2.0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from_backward = [as_number(g) for g in f_gradients(*leaves_at(picture_point))]
names = ["x", "y", "z", "p", "q"]
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(names, [float("nan") if g is None else g for g in from_backward], label="backward()")
ax.scatter(names, slopes(picture_point), color="black", zorder=3, label="nudge")
ax.axhline(0, color="gray", linewidth=0.8)
ax.set_xlabel("value v")
ax.set_ylabel("df/dv")
ax.set_title(f"f = (x² + y)·z at (x, y, z) = {picture_point}")
ax.legend()
show_figure(
    fig,
    f"Bar chart of df/dv for v = x, y, z, p, q at (x, y, z) = {picture_point}: bars for "
    "the gradients backward() gives, black dots for the slopes measured by nudging each v.",
)

# %% [markdown]
# ### A puzzle (not graded): choose the point
#
# Find a point $(x, y, z)$ where the gradients of $f$ are
#
# | gradient | value |
# |---|---|
# | df/dx | -12 |
# | df/dy | 3 |
# | df/dz | 6 |
# | df/dp | 3 |
# | df/dq | 3 |
#
# Work it out on paper first: which input is $\partial f/\partial y$ equal to? And
# $\partial f/\partial z$? Then put your point in the next cell and run the one after it,
# which asks your `f_gradients` (not graded, and nothing is handed in here).

# %%
point = None  # your (x, y, z), for instance (1.0, 2.0, 3.0)

# %%
TARGET = {"x": -12.0, "y": 3.0, "z": 6.0, "p": 3.0, "q": 3.0}
if point is None:
    print("Put your (x, y, z) in `point` above, then run this cell again.")
else:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _found = [as_number(g) for g in f_gradients(*leaves_at(point))]
    except NotImplementedError:
        print("Finish exercise 4 first: this self-check asks your f_gradients.")
    else:
        for (_v, _target), _g in zip(TARGET.items(), _found, strict=True):
            _verdict = (
                "as in the table" if _g is not None and abs(_g - _target) < 1e-9 else "not yet"
            )
            print(f"df/d{_v} = {_g}: {_verdict}")

# %% [markdown]
# ## 6. Outputs that are not one number: vector-Jacobian products
#
# Every `backward()` so far started from a scalar. Try a vector:

# %%
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x**2  # three numbers
try:
    y.backward()
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# *grad can be implicitly created only for scalar outputs.* `backward()` works its way
# from the output to the leaves, and it has to start from the gradient of something with
# respect to the output itself. When the output is a scalar `s`, that something is `s`
# and the start is $ds/ds = 1$, which PyTorch creates for you: *implicitly*. When the
# output is a vector, PyTorch cannot guess which number you want the gradient of. You
# say it with a tensor `v` of `y`'s shape, the `gradient` argument: `y.backward(gradient=v)`
# computes the gradient of `(v * y).sum()`. Into `x.grad` goes
#
# $$v^\top J = \sum_i v_i \,\frac{\partial y_i}{\partial x},
#   \qquad J_{ij} = \frac{\partial y_i}{\partial x_j} \text{ (the Jacobian)},$$
#
# a **vector-Jacobian product**. PyTorch never builds $J$: each backward pass computes one
# such product, which is why it is cheap. `y.sum().backward()` is the case `v = ones`.

# %%
v = torch.tensor([1.0, 0.0, 0.5])
y.backward(gradient=v)  # the failed call above freed nothing, so y can still go backwards
J = torch.func.jacrev(lambda t: t**2)(x.detach())  # the whole Jacobian, for comparison
print("x.grad      =", x.grad)
print("v @ J       =", v @ J)

# %% [markdown]
# `torch.autograd.grad(outputs, inputs, grad_outputs=v)` computes the same product and
# *returns* it, as a tuple with one gradient per input, instead of adding it into `.grad`.
# Like `backward()`, it frees what the graph saved unless you pass `retain_graph=True`.

# %%
x.grad = None
y = x**2
(vjp,) = torch.autograd.grad(y, x, grad_outputs=v)
print("vjp =", vjp, " and x.grad is still", x.grad)

# %% [markdown]
# With a *one-hot* `v`, 1 at position `i` and 0 elsewhere, $v^\top J$ is row `i` of $J$:
# the gradient of `y[i]` alone. One backward pass per element of `y` therefore builds the
# whole Jacobian, row by row. (`torch.func.jacrev` gets the same matrix with the passes
# batched together.)
#
# ### Exercise 5 (2 points): the Jacobian, row by row
#
# Write `jacobian_rows(f, x)`. `x` is a 1-D tensor of `n` numbers and `f` a function that
# maps it to a 1-D tensor `y` of `m` numbers. Return the `m` x `n` Jacobian `J`, with
# `J[i, j]` $= \partial y_i / \partial x_j$, built row by row from vector-Jacobian
# products: one `torch.autograd.grad` call for each element of `y`, with a one-hot
# `grad_outputs`. Three things to mind:
#
# * work on a leaf of your own, `x.detach().requires_grad_()`, and call `f` on it: the `x`
#   you were given must come out as it went in (no `requires_grad` switched on, no `.grad`);
# * `y` serves several passes, so every pass but the last must keep the graph;
# * if you use `y.backward(v)` and `.grad` instead, each row must be that pass's alone, and
#   a copy.


# %% nbgrader={"solution": true, "grade_id": "jacobian_rows"}
def jacobian_rows(f, x):
    ### BEGIN SOLUTION
    leaf = x.detach().requires_grad_()
    y = f(leaf)
    rows = []
    for i in range(y.numel()):
        one_hot = torch.zeros_like(y)
        one_hot[i] = 1.0
        (row,) = torch.autograd.grad(y, leaf, grad_outputs=one_hot, retain_graph=True)
        rows.append(row)
    return torch.stack(rows)
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_jacobian_rows"}
def _counted(f, passes):
    """f, with a hook on its output that counts the backward passes through it."""

    def counted_f(t):
        out = f(t)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda _grad: passes.append(1))
        return out

    return counted_f


check(
    defined("jacobian_rows") and callable(jacobian_rows),
    "jacobian_rows is not defined: run the exercise 5 cell above (did it stop with an error?).",
)


def _f(t):
    """From 3 numbers to 2."""
    return torch.stack([t[0] * t[1] + t[2], torch.sin(t[0]) * t[2] ** 2])


_x = torch.tensor([0.5, -1.0, 2.0])
_passes = []
_J, _error = attempt(jacobian_rows, _counted(_f, _passes), _x)
check(
    _error is None or "a second time" not in _error,
    "The second row's pass failed because the first one freed what y's graph saved: pass "
    "retain_graph=True (to all the passes but the last, or to all of them).",
)
check(
    _error is None or "does not require grad" not in _error,
    "f(x) does not require a gradient, so there is nothing to go backwards through: call "
    "f on a leaf of your own, x.detach().requires_grad_().",
)
check(
    _error is None,
    f"jacobian_rows(f, x) raised an error, so it could not be checked (the error: {_error}); "
    "call it in a cell to see the whole message.",
)
check(
    isinstance(_J, torch.Tensor),
    "jacobian_rows should return one tensor, the Jacobian, and it returned something else: "
    f"torch.stack the rows (it returned: {type(_J).__name__}).",
)
check(
    tuple(_J.shape) == (2, 3),
    "For f from 3 numbers to 2, J should have 2 rows (one per output) and 3 columns (one per "
    f"input), the shape (2, 3), and yours has another shape (yours: {tuple(_J.shape)}).",
)
check(
    torch.allclose(_J.detach().double(), torch.func.jacrev(_f)(_x).double(), atol=1e-6),
    "J differs from torch.func.jacrev(f)(x): row i should be the gradient of y[i] alone, "
    "from a grad_outputs that is 1 at position i and 0 elsewhere, and no row may add into "
    "another.",
)
check(
    len(_passes) == 2,
    "jacobian_rows should go backwards through f's output once per element of y, 2 times "
    f"here, each with a one-hot grad_outputs (yours went: {len(_passes)}).",
)
check(
    not _x.requires_grad and _x.grad is None,
    "jacobian_rows changed the x it was given (it now requires a gradient, or has a .grad): "
    "work on a leaf of your own, x.detach().requires_grad_().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(51)
_W = torch.randn(3, 4, generator=_gen)
_hidden_functions = [
    ("from 4 numbers to 3, y = W @ tanh(x) + x[:3] * x[1:]", 4,
     lambda t: _W @ torch.tanh(t) + t[:3] * t[1:]),
    ("from 1 number to 3", 1, lambda t: torch.cat([t**2, t.exp(), 3 * t])),
    ("from 3 numbers to 1, y = (x ** 2).sum(), as a 1-element tensor", 3,
     lambda t: (t**2).sum().reshape(1)),
    ("from 5 numbers to 5, the running sums of x[:4] and a last output that ignores x", 5,
     lambda t: torch.cat([t[:4].cumsum(0), torch.ones(1) + 0 * t[0]])),
]  # fmt: skip
_hint = (
    "One pass per element of y = f(leaf), with a one-hot grad_outputs and retain_graph=True; "
    "row i of J is the gradient of y[i] alone, and the x you were given must not change."
)


def _jacobian_record(f, x):
    """jacobian_rows(f, x): the Jacobian (as float64: the dtype is free), the passes through
    f's output, and x after the call."""
    passes = []
    got = jacobian_rows(_counted(f, passes), x)
    return {
        "J": got.double() if isinstance(got, torch.Tensor) else got,
        "passes through f's output": len(passes),
        "x.requires_grad after the call": x.requires_grad,
        "x.grad after the call": x.grad,
    }


for _words, _n, _fn in _hidden_functions:
    observe(
        f"jacobian_rows(f, x) for f {_words}, at a random x",
        _jacobian_record(_fn, torch.randn(_n, generator=_gen)),
        rtol=1e-4,
        atol=1e-5,
        hint=_hint,
    )
# an x that already requires a gradient (a float64 leaf of the caller's): its .grad stays None
_caller_leaf = torch.randn(4, generator=_gen, dtype=torch.float64).requires_grad_()
observe(
    "jacobian_rows(f, x) for f from 4 numbers to 3, at a float64 x that already requires a "
    "gradient",
    _jacobian_record(lambda t: torch.stack([t.prod(), t[0] / (1 + t[3] ** 2), t.norm()]),
                     _caller_leaf),
    rtol=1e-6,
    atol=1e-9,
    hint=_hint,
)  # fmt: skip
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * `backward()` applies the chain rule from the output back to every leaf that requires a
#   gradient, and leaves the result in `.grad`.
# * Intermediate gradients are dropped unless you call `retain_grad()`.
# * `backward()` frees what the nodes saved; a second pass needs `retain_graph=True` as soon
#   as one node saved a tensor, which nearly every graph has.
# * For an output that is not a scalar, `backward(gradient=v)` and
#   `torch.autograd.grad(..., grad_outputs=v)` compute the vector-Jacobian product
#   $v^\top J$; one-hot `v`s give the Jacobian row by row.
# * `.grad` accumulates across passes, in place: reset it between optimisation steps, and
#   copy it (`clone()`) to keep it.
#
# Next, lab 3 turns accumulation from a trap into a tool.
