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
# 3. the graph is freed by `backward()`, so a second call fails unless you keep it;
# 4. gradients **accumulate** in `.grad` until you reset them;
# 5. and you will compute the gradients of $f(x, y, z) = (x^2 + y)\,z$ yourself.
#
# **How this lab works.** Cells marked *exercise* are yours: replace
# `raise NotImplementedError(...)` with your code. The cell after each exercise is a
# *check*: run it, and if something is wrong it tells you what, in words. When you submit,
# the same checks run again with extra hidden cases, so make the code right, not just the
# printed numbers. Run the notebook top to bottom (*Kernel > Restart and run all*) before
# you submit.

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
_Wh = torch.randn(3, 3, requires_grad=True)
_Wx = torch.randn(3, 2, requires_grad=True)
_x, _h = torch.randn(2, 1), torch.randn(3, 1)
_result = recurrent_step(_Wh, _Wx, _x, _h)
check(
    isinstance(_result, tuple) and len(_result) == 2,
    "recurrent_step should return a tuple (out, next_h).",
)
_out, _next_h = _result
check(_out.dim() == 0, "out should be a scalar (a 0-d tensor): did you sum next_h?")
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
for _draw, (_n_h, _n_x) in enumerate(((3, 2), (3, 2), (4, 5)), start=1):
    _Wh = torch.randn(_n_h, _n_h, requires_grad=True, generator=_gen)
    _Wx = torch.randn(_n_h, _n_x, requires_grad=True, generator=_gen)
    _x, _h = torch.randn(_n_x, 1, generator=_gen), torch.randn(_n_h, 1, generator=_gen)
    _out, _next_h = recurrent_step(_Wh, _Wx, _x, _h)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        observe(
            f"recurrent_step(Wh, Wx, x, h) on random inputs with {_n_h} hidden units and "
            f"{_n_x} inputs, draw {_draw} of 3",
            {"out": _out, "Wh.grad": _Wh.grad, "Wx.grad": _Wx.grad, "next_h.grad": _next_h.grad},
            atol=1e-6,
            hint="out is tanh(Wx @ x + Wh @ h).sum(), with one out.backward(); next_h.grad is "
            "kept only if next_h.retain_grad() runs before it.",
        )
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The graph is freed by `backward()`
#
# During `backward()` each node frees the tensors it saved for the chain rule (below,
# `y = w**2` saved `w`, because $dy/dw = 2w$ needs it). Calling `backward()` a second time
# on the same graph therefore fails.

# %%
w = torch.tensor(3.0, requires_grad=True)
y = w**2
y.backward()
try:
    y.backward()
except RuntimeError as error:
    print("RuntimeError:", str(error).split(".")[0] + ".")

# %% [markdown]
# `backward(retain_graph=True)` keeps the saved tensors, so you may go backwards again.
# And since gradients **add up** in `.grad` (section 4), the second call doubles it.
#
# ### Exercise 2 (2 points): backward twice
#
# Write `backward_twice(w)` that computes `y = w ** 3`, calls `backward` on it **twice**
# without error, and returns `w.grad`. For `w = 2` the answer is $2 \times 3w^2 = 24$.


# %% nbgrader={"solution": true, "grade_id": "backward_twice"}
def backward_twice(w):
    ### BEGIN SOLUTION
    y = w**3
    y.backward(retain_graph=True)
    y.backward()
    return w.grad
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_backward_twice"}
_w = torch.tensor(2.0, requires_grad=True)
try:
    _g = backward_twice(_w)
except NotImplementedError:
    raise
except RuntimeError as _error:
    check(
        "a second time" not in str(_error),
        "The second backward() failed because the graph was already freed: pass "
        "retain_graph=True to the first call.",
    )
    check(False, f"backward_twice(w) failed: {str(_error)[:120]}")
check(_g is not None, "backward_twice returned None: return w.grad after the two calls.")
check(
    isinstance(_g, torch.Tensor),
    f"backward_twice should return the tensor w.grad, not {type(_g).__name__} {_g!r}.",
)
check(
    abs(_g.item() - 24.0) < 1e-6,
    f"For w = 2 expected w.grad = 24 (two backward calls of 3*w**2 = 12 each), got {_g.item()}.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

for _v in (-1.5, 0.5, 3.0):
    _w = torch.tensor(_v, requires_grad=True, dtype=torch.float64)
    observe(
        f"backward_twice(w) on w = {_v} (float64)",
        backward_twice(_w),
        hint="y = w ** 3, then y.backward(retain_graph=True) and y.backward(): the two "
        "gradients add up in w.grad, which is what to return.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Gradients accumulate
#
# `backward()` does not *overwrite* `.grad`: it *adds* to it. To watch this, fix the
# inputs so every pass has the same gradient: with `Wh` all ones, `h` all ones and `x` all
# zeros, each hidden unit is $\tanh(3)$ and every entry of
# $\partial\,\text{out}/\partial W_h$ is $1 - \tanh^2(3) \approx 0.0099$.

# %%
Wh = torch.ones(3, 3, requires_grad=True)
Wx = torch.ones(3, 2)
x = torch.zeros(2, 1)
h = torch.ones(3, 1)


def forward():
    return torch.tanh(Wx @ x + Wh @ h).sum()


for i in range(3):
    forward().backward()
    print(f"Iter {i}:", Wh.grad.flatten()[:3], "...")

# %% [markdown]
# 0.0099, then 0.0197, then 0.0296: each pass added its gradient to the last. This is why
# every training loop calls `optimizer.zero_grad()` (or `W.grad.zero_()`) before
# `backward()`; lab 3 shows when accumulating on purpose is useful.
#
# ### Exercise 3 (2 points): one fresh gradient per pass
#
# Write `fresh_gradients(n)` that runs `forward()` and `backward()` `n` times on the
# tensors above and returns a list of `n` floats: `Wh.grad[0, 0]` after each pass, with the
# gradient **reset before each pass** so all `n` values are equal (about 0.0099).


# %% nbgrader={"solution": true, "grade_id": "fresh_gradients"}
def fresh_gradients(n):
    ### BEGIN SOLUTION
    values = []
    for _ in range(n):
        if Wh.grad is not None:
            Wh.grad.zero_()
        forward().backward()
        values.append(Wh.grad[0, 0].item())
    return values
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_fresh_gradients"}
_expected = 1 - torch.tanh(torch.tensor(3.0)).item() ** 2
_values = fresh_gradients(3)
check(
    isinstance(_values, list) and len(_values) == 3,
    "fresh_gradients(3) should return a list of 3 floats.",
)
check(
    all(isinstance(v, float) for v in _values),
    "fresh_gradients(3) should return plain Python floats: append Wh.grad[0, 0].item(),"
    f" not {type(_values[0]).__name__} values.",
)
check(
    all(abs(v - _expected) < 1e-6 for v in _values),
    f"Expected three equal values of about {_expected:.4f}, got {[round(v, 4) for v in _values]}. "
    "If they grow, the gradient is accumulating: reset Wh.grad (Wh.grad.zero_()) before each backward().",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

# new random values in the tensors forward() reads (in place, and put back afterwards), and a
# stale gradient from an earlier pass that must not leak in
_gen = torch.Generator().manual_seed(3)
_saved, _saved_grad = [_t.detach().clone() for _t in (Wh, Wx, x, h)], Wh.grad
try:
    for _n in (5, 2):
        with torch.no_grad():
            for _t in (Wh, Wx, x, h):
                _t.copy_(torch.randn(_t.shape, generator=_gen))
        Wh.grad = torch.randn(3, 3, generator=_gen)
        observe(
            f"fresh_gradients({_n}) after new random values were put in Wh, Wx, x and h, "
            "with a stale Wh.grad left from before the call",
            fresh_gradients(_n),
            atol=1e-6,
            hint="Values that grow from pass to pass, or that start off wrong, mean the "
            "gradient accumulates: reset Wh.grad before each backward(), including the first.",
        )
finally:
    with torch.no_grad():
        for _t, _value in zip((Wh, Wx, x, h), _saved, strict=True):
            _t.copy_(_value)
    Wh.grad = _saved_grad
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Exercise 4 (4 points): the gradients of $f(x, y, z) = (x^2 + y)\,z$
#
# Break $f$ into named steps, $p = x^2$, $q = p + y$, $f = q\,z$, and compute every
# gradient with one call to `backward()`. Choose the point $(x, y, z)$ yourself so that
#
# | gradient | value |
# |---|---|
# | df/dx | -12 |
# | df/dy | 3 |
# | df/dz | 6 |
# | df/dp | 3 |
# | df/dq | 3 |
#
# Work it out on paper first: $\partial f/\partial y = z$ and $\partial f/\partial z =
# x^2 + y$, and $\partial f/\partial x = 2xz$. Create `x`, `y`, `z` as float tensors that
# require gradients, compute `p`, `q` and `f` from them, make sure `p.grad` and `q.grad`
# will be kept, and call `f.backward()`.

# %% nbgrader={"solution": true, "grade_id": "f_xyz"}
### BEGIN SOLUTION
x = torch.tensor(-2.0, requires_grad=True)
y = torch.tensor(2.0, requires_grad=True)
z = torch.tensor(3.0, requires_grad=True)
p = x**2
q = p + y
f = q * z
p.retain_grad()
q.retain_grad()
f.backward()
### END SOLUTION

# %% nbgrader={"locked": true, "grade_id": "f_xyz_print"}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for _name, _t in [("x", x), ("y", y), ("z", z), ("p", p), ("q", q)]:
        print(f"df/d{_name} =", None if _t.grad is None else _t.grad.item())

# %% [markdown]
# The same gradients in a picture, next to an estimate that needs no chain rule: nudge one
# value by $\pm h$, recompute $f$ from that value on, and take the slope
# $\big(f(v + h) - f(v - h)\big) / 2h$. Each dot (the nudge) should sit on top of its bar
# (`backward()`); a missing bar is a `.grad` that is `None`.


# %%
def f_nudged(dx=0.0, dy=0.0, dz=0.0, dp=0.0, dq=0.0):
    """f at your point, with x, y, z, p or q moved a little (what comes after follows)."""
    p_ = (x.item() + dx) ** 2 + dp
    q_ = p_ + y.item() + dy + dq
    return q_ * (z.item() + dz)


h_step = 1e-3
names = ["x", "y", "z", "p", "q"]
nudged = [
    (f_nudged(**{"d" + n: h_step}) - f_nudged(**{"d" + n: -h_step})) / (2 * h_step) for n in names
]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from_backward = [float("nan") if t.grad is None else t.grad.item() for t in (x, y, z, p, q)]
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(names, from_backward, color="C0", label="backward()")
ax.scatter(names, nudged, color="black", zorder=3, label="nudge by ±h")
ax.axhline(0, color="gray", linewidth=0.8)
ax.set_xlabel("value v")
ax.set_ylabel("df/dv")
ax.set_title(f"f = (x² + y)·z at (x, y, z) = ({x.item():g}, {y.item():g}, {z.item():g})")
ax.legend()
plt.show()

# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_f_leaves"}
_undefined = [_name for _name in ("x", "y", "z", "f") if _name not in globals()]
check(
    not _undefined,
    f"{', '.join(_undefined)} not defined yet: your exercise 4 cell should create x, y and z,"
    " compute p, q and f from them, and call f.backward().",
)
for _name, _t in [("x", x), ("y", y), ("z", z)]:
    check(
        _t.is_leaf and _t.requires_grad,
        f"{_name} should be a leaf tensor created with requires_grad=True.",
    )
    check(_t.grad is not None, f"{_name}.grad is None: did you call f.backward()?")
check(abs(y.grad.item() - 3) < 1e-6, f"df/dy = z should be 3, got {y.grad.item()}: choose z = 3.")
check(abs(z.grad.item() - 6) < 1e-6, f"df/dz = x**2 + y should be 6, got {z.grad.item()}.")
check(
    abs(x.grad.item() + 12) < 1e-6,
    f"df/dx = 2*x*z should be -12, got {x.grad.item()}: with z = 3, x must be -2.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

# as numbers: a float64 or one-element tensor is as right as a float32 scalar
observe(
    "f, x, y, z and the gradients df/dx, df/dy, df/dz at the point you chose",
    {
        "f": f.item(),
        "x": x.item(),
        "y": y.item(),
        "z": z.item(),
        "df/dx": x.grad.item(),
        "df/dy": y.grad.item(),
        "df/dz": z.grad.item(),
    },
    hint="df/dy = z, df/dz = x**2 + y and df/dx = 2*x*z: choose z first, then x, then y.",
)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_f_intermediates"}
_undefined = [_name for _name in ("x", "y", "z", "p", "q", "f") if _name not in globals()]
check(
    not _undefined,
    f"{', '.join(_undefined)} not defined yet: your exercise 4 cell should compute p = x**2,"
    " q = p + y and f = q * z.",
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    check(
        p.grad is not None and q.grad is not None,
        "p.grad or q.grad is None: call p.retain_grad() and q.retain_grad() before f.backward().",
    )
check(
    not p.is_leaf and not q.is_leaf,
    "p and q should be computed from x and y (p = x**2, q = p + y), not created directly.",
)
check(
    abs(p.grad.item() - 3) < 1e-6,
    f"df/dp should be 3 (df/dp = df/dq * dq/dp = z), got {p.grad.item()}.",
)
check(abs(q.grad.item() - 3) < 1e-6, f"df/dq = z should be 3, got {q.grad.item()}.")
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _inputs(t):
    """The names of the tensors t was computed from, read off t.grad_fn (sorted, once each)."""
    made = [(p.grad_fn, "p"), (q.grad_fn, "q")]  # the nodes that made p and q
    given = [("x", x), ("y", y), ("z", z)]  # the leaves, found through their AccumulateGrad
    found = set()
    for node, _index in t.grad_fn.next_functions if t.grad_fn is not None else ():
        if node is None:
            found.add("a tensor that needs no gradient")
        elif hasattr(node, "variable"):
            found.add(next((k for k, v in given if node.variable is v), "another leaf"))
        else:
            found.add(next((k for n, k in made if n is node), f"another {type(node).__name__}"))
    return sorted(found)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    # p may be x**2, x * x or torch.square(x): only its value and where it comes from count
    observe(
        "p, q and f: df/dp, df/dq, p's value, what each was computed from, q's and f's nodes",
        {
            "df/dp": p.grad.item(),
            "df/dq": q.grad.item(),
            "p": p.item(),
            "p computed from": _inputs(p),
            "q computed from": _inputs(q),
            "f computed from": _inputs(f),
            "q's node": type(q.grad_fn).__name__.rstrip("0123456789"),
            "f's node": type(f.grad_fn).__name__.rstrip("0123456789"),
        },
        hint="Build f in steps from x, y and z: p = x**2, q = p + y, f = q * z, and call "
        "p.retain_grad() and q.retain_grad() before f.backward().",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * `backward()` applies the chain rule from the output back to every leaf that requires a
#   gradient, and leaves the result in `.grad`.
# * Intermediate gradients are dropped unless you call `retain_grad()`.
# * The graph is freed after one backward pass; `retain_graph=True` keeps it.
# * `.grad` accumulates across passes: reset it between optimisation steps.
#
# Next, lab 3 turns accumulation from a trap into a tool.
