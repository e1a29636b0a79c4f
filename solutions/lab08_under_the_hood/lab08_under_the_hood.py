# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 8: Under the hood, and the other side of the coin
#
# "What is truly happening when we define a dynamic graph model?" The clearest answer is to
# build one. In part A you write a small autograd engine in NumPy that works the way
# PyTorch's does: every operation **records** its inputs and a function that knows how to
# differentiate it *while the forward code runs*, and `backward()` walks that record in
# reverse. Nothing is declared in advance: that is "define-by-run". Your engine must
# reproduce PyTorch's gradients for the examples of labs 1 to 3 and for DynamicNet.
#
# Part B looks at the other side: `torch.compile` and `torch.export` want a *graph* they can
# optimise or save, which Python control flow does not give them. You will see what the
# compiler does with DynamicNet and with a data-dependent `while` loop, then rewrite such
# control flow so that it compiles into one graph.
#
# **How this lab works.** Replace `raise NotImplementedError(...)` in each *exercise* cell
# with your code; the *check* after it says in words what is wrong. On submission the checks
# run again with hidden cases (fresh random inputs, compared with PyTorch). Run everything
# top to bottom before you submit.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import contextlib
import inspect
import logging
import random
import time

import matplotlib.pyplot as plt
import numpy as np
import torch.nn.functional as F
from torch import nn

np.set_printoptions(precision=4, suppress=True)
# The compiler logs every graph break as a warning; this lab prints what it needs itself.
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
logging.getLogger("torch.fx").setLevel(logging.ERROR)
# torch._dynamo, the compiler's front end, is private and may change between versions: only
# part B's demos use it (its explain()). The checks use public APIs only.
try:
    from torch._dynamo import explain as dynamo_explain
except ImportError:
    dynamo_explain = None


def op_names(graph_module):
    """The functions a graph calls, by name."""
    found = [n.target for n in graph_module.graph.nodes if n.op == "call_function"]
    return [getattr(t, "__name__", str(t)) for t in found]


def compiled_graphs(fn, *args, **kwargs):
    """The graphs torch.compile makes of fn(*args), with public APIs only: a backend that keeps
    every graph it is handed and runs it unchanged (a graph break shows as several graphs)."""
    kept = []

    def keep(graph_module, example_inputs):
        kept.append(graph_module)
        return graph_module.forward

    torch.compiler.reset()
    torch.compile(fn, backend=keep)(*args, **kwargs)
    return kept


def _plain(value):
    """A NumPy result as nested lists of floats (the hidden tests record these)."""
    return np.asarray(value, dtype=float).tolist()


def _closure_record(got, names):
    """What a closure returned: how many gradients, and each one's shape and values."""
    record = {"number of gradients returned": len(got)}
    for who, grad in zip(names, got, strict=False):
        record[f"shape of the gradient for {who}"] = list(np.shape(grad))
        record[f"gradient for {who}"] = _plain(grad)
    return record


def attempt(fn, *args, **kwargs):
    """(fn(*args, **kwargs), None), or (None, "the error, in one line") when it raises: the
    checks use it to say in words which call failed. An exercise that still raises
    NotImplementedError is not answered yet: that stops the check."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        raise
    except Exception as error:
        text = str(error).strip().splitlines()
        return None, f"{type(error).__name__}: {text[0][:200] if text else ''}"


print("torch", torch.__version__, " numpy", np.__version__)

# %% [markdown]
# # Part A: a define-by-run autograd in NumPy
#
# ## 1. A tensor that remembers where it came from
#
# Our `Tensor` wraps a NumPy array (always `float64`) and has the fields PyTorch's tensors
# have for autograd:
#
# * `requires_grad`, and `grad`, where `backward()` leaves the gradient of a leaf;
# * `_parents`: the tensors this one was computed from. PyTorch links graph *nodes*
#   instead: `grad_fn.next_functions` holds the parents' nodes (a leaf's is an
#   `AccumulateGrad` node), not their tensors; a tensor that a backward formula needs is
#   kept on the node as a *saved tensor*;
# * `_backward`: a function, the *backward closure*, that takes the gradient of the loss
#   with respect to this tensor and returns one gradient per parent. It is `None` for a
#   leaf, like `grad_fn`.
#
# Every operation computes its result with NumPy and then calls `make_result`, which
# records the parents and the closure **only if** some input requires a gradient and
# recording is switched on. `no_grad()` switches it off, like `torch.no_grad()`.
#
# NumPy *broadcasts*: adding a bias of shape `(3,)` to a batch of shape `(5, 3)` uses the
# bias 5 times. The gradient of the bias is then the sum of those 5 uses; `unbroadcast`
# sums a gradient back down to the shape of the input it belongs to.

# %% nbgrader={"locked": true, "grade_id": "engine"}
_RECORDING = [True]  # a list, so functions can switch it without `global`


@contextlib.contextmanager
def no_grad():
    """Inside `with no_grad():` operations compute values but record no graph."""
    saved = _RECORDING[0]
    _RECORDING[0] = False
    try:
        yield
    finally:
        _RECORDING[0] = saved


class Tensor:
    def __init__(self, data, requires_grad=False):
        self.data = np.array(data, dtype=np.float64)
        self.requires_grad = requires_grad
        self.grad = None
        self._parents = ()
        self._backward = None
        self._op = None

    shape = property(lambda self: self.data.shape)
    is_leaf = property(lambda self: self._backward is None)

    def __repr__(self):
        how = f", grad_fn=<{self._op}Backward>" if self._op else ""
        how += ", requires_grad=True" if self.requires_grad and self.is_leaf else ""
        return f"Tensor({np.array2string(self.data, prefix='Tensor(')}{how})"

    # Python operators call the functions you complete in exercises 1 and 2.
    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = __mul__

    def __neg__(self):
        return mul(self, -1.0)

    def __sub__(self, other):
        return add(self, -as_tensor(other))

    def __pow__(self, exponent):
        return power(self, exponent)

    def __matmul__(self, other):
        return matmul(self, other)

    def tanh(self):
        return tanh(self)

    def relu(self):
        return relu(self)

    def sum(self):
        return total(self)

    def backward(self, retain_graph=False):
        backward(self, retain_graph=retain_graph)


def as_tensor(value):
    return value if isinstance(value, Tensor) else Tensor(value)


def make_result(data, parents, backward_fn, op):
    """The result of an operation; records parents and closure when a graph is needed."""
    out = Tensor(data)
    if _RECORDING[0] and any(p.requires_grad for p in parents):
        out.requires_grad = True
        out._parents = tuple(parents)
        out._backward = backward_fn
        out._op = op
    return out


def unbroadcast(grad, shape):
    """Sum `grad` down to `shape`, undoing NumPy broadcasting."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def graph_freed(grad):
    """What a node's closure becomes once backward() has freed the graph."""
    raise RuntimeError(
        "Trying to backward through the graph a second time: the first backward() freed it. "
        "Pass retain_graph=True to the first call if you need to go backwards twice."
    )


print(unbroadcast(np.ones((5, 3)), (3,)), "<- a (3,) bias used by 5 rows gets 5 per entry")

# %% [markdown]
# ## 2. The backward rule of each operation
#
# Each operation below is complete on the way **forward**: it computes its result and
# hands `make_result` its parents and a closure `backward(grad)`. Your job is the body of
# the closure. `grad` is $\partial L/\partial\,\text{out}$, an array with the shape of the
# output; return $\partial L/\partial$ (each parent), in the order of the parents, each
# with the shape of that parent. The closure can read anything the forward pass computed:
# that is what PyTorch calls the *saved tensors*.
#
# ### Exercise 1 (2 points): `add`, `mul` and `power`
#
# * `add(a, b)`: $\partial(a+b)/\partial a = 1$, so the gradient passes through;
# * `mul(a, b)`: each factor gets `grad` times the *other* factor;
# * `power(a, n)` for a Python number `n`: $n\,a^{n-1}$ times `grad`.
#
# `add` and `mul` broadcast, so pass each gradient through `unbroadcast(..., a.shape)` (or
# `b.shape`) before returning it.


# %% nbgrader={"solution": true, "grade_id": "elementwise_ops"}
def add(a, b):
    a, b = as_tensor(a), as_tensor(b)

    def backward(grad):
        ### BEGIN SOLUTION
        return unbroadcast(grad, a.shape), unbroadcast(grad, b.shape)
        ### END SOLUTION

    return make_result(a.data + b.data, (a, b), backward, "Add")


def mul(a, b):
    a, b = as_tensor(a), as_tensor(b)

    def backward(grad):
        ### BEGIN SOLUTION
        return unbroadcast(grad * b.data, a.shape), unbroadcast(grad * a.data, b.shape)
        ### END SOLUTION

    return make_result(a.data * b.data, (a, b), backward, "Mul")


def power(a, n):
    a = as_tensor(a)

    def backward(grad):
        ### BEGIN SOLUTION
        return (grad * n * a.data ** (n - 1),)
        ### END SOLUTION

    return make_result(a.data**n, (a,), backward, "Pow")


# %% [markdown]
# The check calls your closures directly, `out._backward(grad)`, and compares with what
# `torch.autograd.grad` says for the same operation on the same numbers.


# %% nbgrader={"grade": true, "grade_id": "test_elementwise_ops", "points": 2}
def _torch_grads(fn, arrays, grad):
    """PyTorch's gradients of fn(*arrays) given the output gradient `grad`."""
    _ts = [torch.tensor(_a, requires_grad=True) for _a in arrays]
    _out = fn(*_ts)
    return [_g.numpy() for _g in torch.autograd.grad(_out, _ts, torch.tensor(grad))]


def _same(ours, theirs):
    return np.shape(ours) == np.shape(theirs) and np.allclose(ours, theirs, rtol=1e-6, atol=1e-6)


_rng = np.random.default_rng(8)
_a, _b, _g = _rng.normal(size=(2, 3)), _rng.normal(size=(2, 3)), _rng.normal(size=(2, 3))
for _name, _ours, _torch in [("add", add, torch.add), ("mul", mul, torch.mul)]:
    _out = _ours(Tensor(_a, requires_grad=True), Tensor(_b, requires_grad=True))
    check(_out._backward is not None, f"{_name} recorded no closure: did you change make_result?")
    _got, _error = attempt(_out._backward, _g)
    check(_error is None, f"{_name}'s closure, on a (2, 3) a and b, raised {_error}.")
    check(
        isinstance(_got, (tuple, list)) and len(_got) == 2,
        f"{_name}'s closure should return a tuple of 2 arrays.",
    )
    for _mine, _ref, _who in zip(_got, _torch_grads(_torch, [_a, _b], _g), "ab", strict=True):
        if _name == "add":
            check(
                _same(_mine, _ref),
                f"add: the gradient for {_who} differs from PyTorch's. add passes grad on to "
                "both inputs unchanged (summed back to each input's shape).",
            )
        else:
            check(
                _same(_mine, _ref),
                f"mul: the gradient for {_who} differs from PyTorch's. Each factor gets grad "
                "times the OTHER factor.",
            )
_got, _error = attempt(power(Tensor(_a, requires_grad=True), 3)._backward, _g)
check(_error is None, f"power(a, 3)'s closure raised {_error}.")
check(
    isinstance(_got, (tuple, list)) and len(_got) == 1,
    "power's closure should return a tuple with one array: (gradient for a,). Mind the comma.",
)
check(
    _same(_got[0], _torch_grads(lambda t: t**3, [_a], _g)[0]),
    "power(a, 3): expected 3 * a**2 * grad.",
)
_bias = _rng.normal(size=(3,))
_got, _error = attempt(
    add(Tensor(_a, requires_grad=True), Tensor(_bias, requires_grad=True))._backward, _g
)
check(_error is None, f"add's closure, for a (2, 3) batch plus a (3,) bias, raised {_error}.")
check(
    isinstance(_got, (tuple, list)) and len(_got) == 2 and np.shape(_got[1]) == (3,),
    f"add: a (2, 3) batch plus a (3,) bias: the bias gradient should have shape (3,), got "
    f"{np.shape(_got[1])}. The bias was used by every row: unbroadcast sums the rows up.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_HINTS = {
    "add": "add passes grad on to both inputs, each summed back to its input's shape with "
    "unbroadcast(grad, a.shape) and unbroadcast(grad, b.shape).",
    "mul": "mul gives each factor grad times the OTHER factor, summed back to that factor's "
    "shape with unbroadcast.",
}
_rng = np.random.default_rng(81)
for _sa, _sb in [
    ((4, 3), (4, 3)),
    ((4, 3), (3,)),
    ((4, 1), (1, 3)),
    ((), (2, 2)),
    ((3, 1), (3, 1)),
    ((2, 1, 3), (4, 1)),  # 3-D: b is used 2 * 3 times per entry
]:
    _a, _b = _rng.normal(size=_sa), _rng.normal(size=_sb)
    _g = _rng.normal(size=np.broadcast_shapes(_sa, _sb))
    for _name, _ours in [("add", add), ("mul", mul)]:
        _got = _ours(Tensor(_a, requires_grad=True), Tensor(_b, requires_grad=True))._backward(_g)
        observe(
            f"{_name}(a, b)'s closure, a of shape {_sa} and b of shape {_sb} (random values and "
            "grad)",
            _closure_record(_got, "ab"),
            hint=_HINTS[_name],
        )
_a, _g = _rng.normal(size=(3, 4)), _rng.normal(size=(3, 4))
for _name, _ours in [("add", add), ("mul", mul)]:  # a Python number: a 0-d tensor as b
    _got = _ours(Tensor(_a, requires_grad=True), 2.5)._backward(_g)
    observe(
        f"{_name}(a, 2.5)'s closure, a of shape (3, 4) (random values and grad)",
        _closure_record(_got, "ab"),
        hint=_HINTS[_name] + " A Python number becomes a 0-d tensor: its gradient has shape ().",
    )
for _n in (2, 3, 0.5, -1, 1, 0):
    _a = np.abs(_rng.normal(size=(3, 2))) + 0.5
    _g = _rng.normal(size=(3, 2))
    _got = power(Tensor(_a, requires_grad=True), _n)._backward(_g)
    observe(
        f"power(a, {_n})'s closure, a of shape (3, 2) (random positive values and grad)",
        _closure_record(_got, "a"),
        hint="power(a, n) returns (grad * n * a ** (n - 1),): a tuple of one array.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2 (2 points): `matmul`, `tanh`, `relu` and `total`
#
# * `matmul(a, b)` for 2-D arrays: $\partial L/\partial a = G\,b^\top$ and
#   $\partial L/\partial b = a^\top G$ (check the shapes: they must match `a` and `b`);
# * `tanh(a)`: $1 - \tanh^2(a)$ times `grad`; the forward pass already computed
#   $\tanh(a)$ as `out_data`, so reuse it;
# * `relu(a)`: `grad` where `a > 0`, zero elsewhere;
# * `total(a)`, the sum of all entries (the `.sum()` method): `grad` is a 0-d array;
#   every entry of `a` gets it (`np.ones_like` or `np.broadcast_to` help).


# %% nbgrader={"solution": true, "grade_id": "matrix_ops"}
def matmul(a, b):
    a, b = as_tensor(a), as_tensor(b)

    def backward(grad):
        ### BEGIN SOLUTION
        return grad @ b.data.T, a.data.T @ grad
        ### END SOLUTION

    return make_result(a.data @ b.data, (a, b), backward, "MatMul")


def tanh(a):
    a = as_tensor(a)
    out_data = np.tanh(a.data)

    def backward(grad):
        ### BEGIN SOLUTION
        return (grad * (1 - out_data**2),)
        ### END SOLUTION

    return make_result(out_data, (a,), backward, "Tanh")


def relu(a):
    a = as_tensor(a)

    def backward(grad):
        ### BEGIN SOLUTION
        return (grad * (a.data > 0),)
        ### END SOLUTION

    return make_result(np.maximum(a.data, 0), (a,), backward, "Relu")


def total(a):
    a = as_tensor(a)

    def backward(grad):
        ### BEGIN SOLUTION
        return (np.ones_like(a.data) * grad,)
        ### END SOLUTION

    return make_result(a.data.sum(), (a,), backward, "Sum")


# %% nbgrader={"grade": true, "grade_id": "test_matrix_ops", "points": 2}
_rng = np.random.default_rng(80)
_a, _b, _g = _rng.normal(size=(3, 2)), _rng.normal(size=(2, 4)), _rng.normal(size=(3, 4))
_got, _error = attempt(
    matmul(Tensor(_a, requires_grad=True), Tensor(_b, requires_grad=True))._backward, _g
)
check(_error is None, f"matmul's closure, for a (3, 2) times a (2, 4), raised {_error}.")
check(
    isinstance(_got, (tuple, list)) and len(_got) == 2,
    "matmul's closure should return a tuple of 2 arrays.",
)
check(
    np.shape(_got[0]) == (3, 2) and np.shape(_got[1]) == (2, 4),
    f"matmul of (3, 2) and (2, 4): the gradients should have shapes (3, 2) and (2, 4), got "
    f"{np.shape(_got[0])} and {np.shape(_got[1])}. Which side does the transpose go on?",
)
for _mine, _ref, _who in zip(_got, _torch_grads(torch.matmul, [_a, _b], _g), "ab", strict=True):
    check(
        _same(_mine, _ref),
        f"matmul: the gradient for {_who} differs from PyTorch's: grad @ b.T for a, a.T @ grad "
        "for b.",
    )
for _name, _ours, _torch in [("tanh", tanh, torch.tanh), ("relu", relu, torch.relu)]:
    _got, _error = attempt(_ours(Tensor(_a, requires_grad=True))._backward, _g[:, :2])
    check(_error is None, f"{_name}'s closure, on a (3, 2) a, raised {_error}.")
    check(
        isinstance(_got, (tuple, list)) and len(_got) == 1,
        f"{_name}'s closure should return (gradient,).",
    )
    if _name == "tanh":
        check(
            _same(_got[0], _torch_grads(_torch, [_a], _g[:, :2])[0]),
            "tanh: the gradient differs from PyTorch's: grad * (1 - out_data**2), with out_data "
            "the tanh the forward pass computed (not the input a).",
        )
    else:
        check(
            _same(_got[0], _torch_grads(_torch, [_a], _g[:, :2])[0]),
            "relu: the gradient differs from PyTorch's: grad where a > 0, zero elsewhere.",
        )
_got, _error = attempt(total(Tensor(_a, requires_grad=True))._backward, np.array(2.5))
check(_error is None, f"total's closure, on a (3, 2) a and a 0-d grad, raised {_error}.")
check(
    isinstance(_got, (tuple, list)) and len(_got) == 1, "total's closure should return (gradient,)."
)
check(
    np.shape(_got[0]) == (3, 2) and np.allclose(_got[0], 2.5),
    "total (sum of all entries): every entry should get the incoming gradient 2.5, in the shape of a.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_HINTS = {
    "matmul": "matmul: grad @ b.T for a and a.T @ grad for b, each with its input's shape.",
    "tanh": "tanh: grad * (1 - out_data ** 2), where out_data is the forward's tanh(a).",
    "relu": "relu: grad where a > 0, zero elsewhere.",
    "total": "total: every entry of a gets the 0-d grad, in an array of a's shape.",
}
_rng = np.random.default_rng(82)
for _n, _k, _m in [(1, 1, 1), (4, 3, 2), (2, 5, 1), (1, 3, 3), (3, 1, 4)]:
    _a, _b, _g = _rng.normal(size=(_n, _k)), _rng.normal(size=(_k, _m)), _rng.normal(size=(_n, _m))
    _got = matmul(Tensor(_a, requires_grad=True), Tensor(_b, requires_grad=True))._backward(_g)
    observe(
        f"matmul(a, b)'s closure, a of shape ({_n}, {_k}) and b of shape ({_k}, {_m}) (random "
        "values and grad)",
        _closure_record(_got, "ab"),
        hint=_HINTS["matmul"],
    )
    for _name, _ours in [("tanh", tanh), ("relu", relu), ("total", total)]:
        _gg = _g[:, :1] if _ours is not total else np.array(_rng.normal())
        _aa = _a[:, :1] if _ours is not total else _a
        _got = _ours(Tensor(_aa, requires_grad=True))._backward(_gg)
        _grad_kind = "a random 0-d grad" if _ours is total else "random grad"
        observe(
            f"{_name}(a)'s closure, a of shape {_aa.shape} (random values, {_grad_kind})",
            _closure_record(_got, "a"),
            hint=_HINTS[_name],
        )
# relu exactly at 0 (PyTorch's gradient there is 0), and total on other shapes
_a = _rng.normal(size=(4, 3))
_a[::2, 1] = 0.0
_g = _rng.normal(size=(4, 3))
observe(
    "relu(a)'s closure, a of shape (4, 3) with some entries exactly 0 (random grad)",
    _closure_record(relu(Tensor(_a, requires_grad=True))._backward(_g), "a"),
    hint="relu: grad where a > 0 (strictly), zero elsewhere, as PyTorch does at 0.",
)
for _shape in [(5,), (2, 3, 2), ()]:
    _a, _gg = _rng.normal(size=_shape), np.array(_rng.normal())
    observe(
        f"total(a)'s closure, a of shape {_shape} (random values, a random 0-d grad)",
        _closure_record(total(Tensor(_a, requires_grad=True))._backward(_gg), "a"),
        hint=_HINTS["total"],
    )
### END HIDDEN TESTS

# %% [markdown]
# Forward passes work already (they did before the exercises too): build lab 1's recurrent
# cell with your tensors and look at what was recorded. Each result knows its operation and
# its parents, and nothing else: there is no graph object anywhere, only these links, made
# as the lines ran.

# %%
rng = np.random.default_rng(0)
Wh = Tensor(rng.normal(size=(3, 3)), requires_grad=True)
Wx = Tensor(rng.normal(size=(3, 2)), requires_grad=True)
x = Tensor(rng.normal(size=(2, 1)))
h = Tensor(rng.normal(size=(3, 1)))
i2h = Wx @ x
h2h = Wh @ h
next_h = (i2h + h2h).tanh()
out = next_h.sum()
for name, t in [("out", out), ("next_h", next_h), ("i2h", i2h), ("Wx", Wx), ("x", x)]:
    parents = [p._op or ("leaf, requires_grad" if p.requires_grad else "leaf") for p in t._parents]
    print(f"{name:>6}: op={t._op!s:6} requires_grad={t.requires_grad!s:5} parents={parents}")
with no_grad():
    frozen = (Wx @ x).tanh()
print("under no_grad():", frozen._op, frozen.requires_grad, "(a value, no graph)")

# %% [markdown]
# ## 3. In which order to walk backwards
#
# `backward()` must call each node's closure once, and only when the node's gradient is
# **complete**, that is, after every node that *consumed* it has passed its share back.
# Any order in which each node comes after all its parents (a *topological order*) does
# it, walked in reverse.
#
# The standard way is a depth-first search that appends a node **after** visiting all its
# parents (post-order). Appending it *before* its parents looks almost the same and works
# on a chain, but on a diamond, where one tensor feeds two operations, it calls a node's
# closure before its second consumer has contributed.
#
# ### Exercise 3 (2 points): `topo_order(root)`
#
# Return a list of every tensor reachable from `root` through `_parents` (root and leaves
# included), each exactly **once**, and each **after all of its parents**. Recursion is
# fine for the graphs of this lab. Use a set of `id(tensor)` to remember what you visited
# (tensors are not hashable by value).


# %% nbgrader={"solution": true, "grade_id": "topo_order"}
def topo_order(root):
    ### BEGIN SOLUTION
    order, seen = [], set()

    def visit(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        for parent in node._parents:
            visit(parent)
        order.append(node)

    visit(root)
    return order
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_topo_order", "points": 2}
def _node(*parents):
    """A bare graph node: only the structure matters to topo_order."""
    return make_result(np.zeros(()), parents, None, "Node")


def _is_topological(order, root):
    _pos = {id(_n): _i for _i, _n in enumerate(order)}
    _stack, _reach = [root], {}
    while _stack:
        _n = _stack.pop()
        if id(_n) not in _reach:
            _reach[id(_n)] = _n
            _stack.extend(_n._parents)
    if len(order) != len(_pos) or set(_pos) != set(_reach):
        return False
    return all(_pos[id(_p)] < _pos[id(_n)] for _n in _reach.values() for _p in _n._parents)


_leaf = Tensor(1.0, requires_grad=True)
_chain = _node(_node(_node(_leaf)))
_order, _error = attempt(topo_order, _chain)
check(_error is None, f"topo_order on a chain of 3 operations raised {_error}.")
check(isinstance(_order, list), "topo_order should return a list of tensors.")
check(
    len(_order) == 4,
    f"A chain of 3 operations on one leaf has 4 tensors; your list has {len(_order)}.",
)
check(
    _is_topological(_order, _chain),
    "On a chain, every tensor must come after its parent (leaf first, root last).",
)
_t = _node(_leaf)
_diamond = _node(_t, _node(_t, Tensor(2.0, requires_grad=True)))
_order, _error = attempt(topo_order, _diamond)
check(_error is None, f"topo_order on a diamond raised {_error}.")
check(
    len(_order) == 5,
    f"A diamond (t feeds two operations) has 5 distinct tensors; you listed {len(_order)}. "
    "Visit each tensor once: remember id(tensor) in a set.",
)
check(
    _is_topological(_order, _diamond),
    "In the diamond, some tensor comes before one of its parents. Append a node to the list "
    "only after visiting all of its parents (post-order).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_prng = random.Random(83)
_graphs = []
for _trial in range(5):  # random graphs: 3 leaves, 25 nodes of 1 to 3 parents, a root of 6
    _pool = [Tensor(0.0, requires_grad=True) for _ in range(3)]
    for _k in range(25):
        _pool.append(_node(*_prng.sample(_pool, _prng.randint(1, 3))))
    _pool.append(_node(*_pool[-6:]))
    _graphs.append(_pool)
_graphs.append([Tensor(0.0, requires_grad=True)])  # a lone leaf
_pool = [Tensor(0.0, requires_grad=True), Tensor(0.0, requires_grad=True)]  # a parent used twice
_pool.append(_node(_pool[0], _pool[0]))
_pool.append(_node(_pool[2], _pool[1], _pool[2]))
_pool.append(_node(_pool[3], _pool[3]))
_graphs.append(_pool)
_pool = [Tensor(0.0, requires_grad=True)]  # a chain of 200 operations
for _k in range(200):
    _pool.append(_node(_pool[-1]))
_graphs.append(_pool)
_listed, _before = [], []
for _pool in _graphs:
    for _label, _t in enumerate(_pool):  # label each tensor: the records name no ids
        _t.data = np.array(float(_label))
    _order = topo_order(_pool[-1])
    _first = {}
    for _i, _t in enumerate(_order):
        _first.setdefault(int(_t.data), _i)
    # a topological order is not unique: record which tensors it lists (with repeats), and
    # for each listed tensor which of its parents it lists before it
    _listed.append(sorted(int(_t.data) for _t in _order))
    _before.append(
        [
            sorted(
                int(_p.data) for _p in _pool[_label]._parents if _first.get(int(_p.data), _i) < _i
            )
            for _label, _i in sorted(_first.items())
        ]
    )
observe(
    "topo_order(root) on 5 random graphs (3 leaves, 25 nodes of 1 to 3 parents, a root of 6 "
    "parents), a lone leaf, a graph where operations take the same parent twice, and a chain "
    "of 200 operations",
    {
        "tensors listed (labels, sorted, with repeats)": _listed,
        "for each listed tensor, its parents listed before it": _before,
    },
    hint="List every tensor reachable from root through _parents exactly once (remember "
    "id(tensor) in a set), root and leaves included, and append each one only after visiting "
    "all its parents (post-order).",
)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The backward pass
#
# Now the engine itself, which is short:
#
# 1. Seed: the gradient of `root` with respect to itself is ones (`root` is a scalar loss).
# 2. Walk `reversed(topo_order(root))`. Keep the gradients found so far in a dict keyed by
#    `id(tensor)`. For a node with a closure, call it with the node's gradient and hand each
#    parent its share: **add** it to what the parent already has, because a tensor used
#    twice gets a gradient from each use (the shared weight of lab 3, `W_mid` of
#    DynamicNet).
# 3. At a leaf that requires a gradient, **add** the gradient into `.grad` (start from
#    `None`): like PyTorch, two backward passes accumulate.
# 4. Unless `retain_graph=True`, free the graph: set the `_backward` of every non-leaf
#    node you walked to `graph_freed` (defined in the engine cell), which raises the same
#    error PyTorch raises when you go backwards twice.
#
# Gradients of intermediate tensors stay in your dict and are dropped, as in PyTorch
# (where `retain_grad()` would keep them).
#
# ### Exercise 4 (4 points): `backward(root, retain_graph=False)`
#
# It uses your closures (exercises 1 and 2) and your `topo_order` (exercise 3). Two checks
# follow: the gradients (2 points), then accumulation and freeing (2 points). They run your
# `backward` with stand-ins for exercises 1 to 3 (see below the next demo), so that a mistake
# there costs points only there.


# %% nbgrader={"solution": true, "grade_id": "backward"}
def backward(root, retain_graph=False):
    ### BEGIN SOLUTION
    order = topo_order(root)
    grads = {id(root): np.ones_like(root.data)}
    for node in reversed(order):
        grad = grads.pop(id(node), None)
        if grad is None or not node.requires_grad:
            continue
        if node.is_leaf:
            node.grad = grad if node.grad is None else node.grad + grad
            continue
        for parent, share in zip(node._parents, node._backward(grad), strict=True):
            if parent.requires_grad:
                grads[id(parent)] = grads[id(parent)] + share if id(parent) in grads else share
    if not retain_graph:
        for node in order:
            if not node.is_leaf:
                node._backward = graph_freed
    ### END SOLUTION


# %% [markdown]
# Lab 2's function $f(x, y, z) = (x^2 + y)\,z$ at $(-2, 2, 3)$ should give
# $(-12, 3, 6)$. And the recurrent cell from section 2, next to PyTorch:

# %%
fx, fy, fz = (Tensor(v, requires_grad=True) for v in (-2.0, 2.0, 3.0))
f = (fx**2 + fy) * fz
f.backward()
print("f =", f.data, " df/dx, df/dy, df/dz =", fx.grad, fy.grad, fz.grad)

out.backward()
torch_Wh = torch.tensor(Wh.data, requires_grad=True)
torch_Wx = torch.tensor(Wx.data, requires_grad=True)
torch.tanh(torch_Wx @ torch.tensor(x.data) + torch_Wh @ torch.tensor(h.data)).sum().backward()
print("ours  d out/d Wx:\n", Wx.grad)
print("torch d out/d Wx:\n", torch_Wx.grad.numpy())

# %% [markdown]
# The checks of exercises 4 and 5 run your code **with stand-ins** for exercises 1 to 3:
# inside `with stand_in_ops():` the operations compute with PyTorch and their closures ask
# `torch.autograd.grad` for the gradients, and `topo_order` lists the tensors in the order
# they were made. So a mistake in exercises 1 to 3 costs points there only;
# `stand_in_gradients(root, leaves)` gives exercise 5's check PyTorch's gradients.


# %% nbgrader={"locked": true, "grade_id": "stand_ins"}
_MADE = [0]  # how many results the stand-ins made so far


def _mirror(t):
    """The PyTorch tensor behind one of our tensors (for a leaf, a new torch leaf)."""
    if getattr(t, "_torch", None) is None:
        t._torch = torch.tensor(t.data, requires_grad=True)
    return t._torch


def _stand_in(op, fn, *inputs):
    parents = tuple(as_tensor(a) for a in inputs)
    with torch.enable_grad():  # one view per argument: x * x gets a share for each side
        views = [_mirror(p).view_as(_mirror(p)) for p in parents]
        out_t = fn(*views)

    def backward_fn(grad):
        seed = torch.as_tensor(np.asarray(grad, dtype=np.float64))
        found = torch.autograd.grad(out_t, views, seed, retain_graph=True, allow_unused=True)
        return tuple(
            np.zeros(p.shape) if g is None else g.numpy()
            for g, p in zip(found, parents, strict=True)
        )

    out = make_result(out_t.detach().numpy(), parents, backward_fn, op)
    _MADE[0] += 1
    out._made = _MADE[0]
    if out._backward is not None:  # recorded: keep PyTorch's graph behind it
        out._torch = out_t
    return out


def _in_made_order(root):
    """Every tensor reachable from root, in the order it was made (leaves first)."""
    found, todo = {}, [root]
    while todo:
        t = todo.pop()
        if id(t) not in found:
            found[id(t)] = t
            todo.extend(t._parents)
    return sorted(found.values(), key=lambda t: getattr(t, "_made", 0))


STAND_INS = {
    "add": lambda a, b: _stand_in("Add", torch.add, a, b),
    "mul": lambda a, b: _stand_in("Mul", torch.mul, a, b),
    "power": lambda a, n: _stand_in("Pow", lambda t: t**n, a),
    "matmul": lambda a, b: _stand_in("MatMul", torch.matmul, a, b),
    "tanh": lambda a: _stand_in("Tanh", torch.tanh, a),
    "relu": lambda a: _stand_in("Relu", torch.relu, a),
    "total": lambda a: _stand_in("Sum", torch.sum, a),
    "topo_order": _in_made_order,
}


@contextlib.contextmanager
def stand_in_ops():
    """Inside the block, exercises 1 to 3 are replaced by the stand-ins; yours come back after."""
    saved = {name: globals().get(name) for name in STAND_INS}
    globals().update(STAND_INS)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                globals().pop(name, None)
            else:
                globals()[name] = value


def stand_in_gradients(root, leaves):
    """PyTorch's gradient of a scalar root made by the stand-ins with respect to each leaf
    (zeros where root does not depend on it), as NumPy arrays."""
    found = torch.autograd.grad(
        _mirror(root), [_mirror(t) for t in leaves], retain_graph=True, allow_unused=True
    )
    return [
        np.zeros(t.shape) if g is None else g.numpy() for g, t in zip(found, leaves, strict=True)
    ]


# %% nbgrader={"grade": true, "grade_id": "test_backward_grads", "points": 2}
with stand_in_ops():
    _x, _y, _z = (Tensor(_v, requires_grad=True) for _v in (-2.0, 2.0, 3.0))
    _, _error = attempt(backward, (_x**2 + _y) * _z)
    check(_error is None, f"backward((x**2 + y) * z) raised {_error}.")
    check(
        _x.grad is not None,
        "x.grad is None after backward: add the gradient into .grad at each leaf.",
    )
    check(
        np.allclose([_x.grad, _y.grad, _z.grad], [-12, 3, 6]),
        f"f(x, y, z) = (x**2 + y) * z at (-2, 2, 3): expected grads (-12, 3, 6), got "
        f"({_x.grad}, {_y.grad}, {_z.grad}).",
    )
    _w = Tensor(1.5, requires_grad=True)
    _, _error = attempt(backward, _w * _w * _w)
    check(_error is None, f"backward(w * w * w) raised {_error}.")
    check(
        _w.grad is not None and np.isclose(_w.grad, 3 * 1.5**2),
        f"w * w * w at w = 1.5: expected 3 w**2 = 6.75, got {_w.grad}. A tensor used several "
        "times must receive the SUM of its shares: add into the dict, do not overwrite.",
    )
    _x = Tensor(0.7, requires_grad=True)
    _t = _x * _x
    _, _error = attempt(backward, _t + _t * Tensor(3.0))
    check(_error is None, f"backward(t + 3 t) raised {_error}.")
    check(
        _x.grad is not None and np.isclose(_x.grad, 4 * 2 * 0.7),
        f"t = x * x; t + 3 t at x = 0.7: expected d/dx = 4 * 2x = 5.6, got {_x.grad}. When t "
        "feeds two operations, t's closure must run only after both passed their share back: "
        "walk reversed(topo_order(root)).",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_SHARED = (
    "A tensor used several times must receive the SUM of its shares: add into the dict, do not "
    "overwrite; and a tensor's closure runs only once every consumer has passed its share back."
)
_rng = np.random.default_rng(84)
with stand_in_ops():
    for _trial in range(3):
        # lab 1: the recurrent cell
        _wh, _wx, _xx, _hh = (_rng.normal(size=_s) for _s in [(3, 3), (3, 2), (2, 1), (3, 1)])
        _Wh, _Wx = Tensor(_wh, requires_grad=True), Tensor(_wx, requires_grad=True)
        backward(((_Wx @ Tensor(_xx)) + (_Wh @ Tensor(_hh))).tanh().sum())
        observe(
            "backward() of lab 1's recurrent cell, tanh(Wx @ x + Wh @ h).sum(), random values",
            {"Wh.grad": _plain(_Wh.grad), "Wx.grad": _plain(_Wx.grad)},
            hint="Seed the root's gradient with ones, walk reversed(topo_order(root)) calling "
            "each node's closure, and at each leaf that requires a gradient add it into .grad.",
        )
        # lab 2: f(x, y, z) = (x**2 + y) z
        _ours = [Tensor(_a, requires_grad=True) for _a in _rng.normal(size=3)]
        backward((_ours[0] ** 2 + _ours[1]) * _ours[2])
        observe(
            "backward() of f(x, y, z) = (x**2 + y) * z at random x, y, z",
            {f"{_who}.grad": _plain(_o.grad) for _who, _o in zip("xyz", _ours, strict=True)},
            hint="Every leaf that requires a gradient gets it in .grad after backward().",
        )
        # lab 3: one weight shared k times, as a scalar and as an unrolled recurrent matrix
        for _k in (1, 2, 5):
            _W = Tensor(_rng.normal(size=(3, 3)) * 0.5, requires_grad=True)
            _hcur = Tensor(_rng.normal(size=(3, 1)))
            for _ in range(_k):
                _hcur = (_W @ _hcur).tanh()
            backward(_hcur.sum())
            observe(
                f"backward() of tanh(W @ ... tanh(W @ x)).sum(), a random (3, 3) W used {_k} "
                "time(s)",
                _plain(_W.grad),
                hint=_SHARED,
            )
        # a diamond with broadcasting
        _A = Tensor(_rng.normal(size=(4, 3)), requires_grad=True)
        _T = _A.tanh()
        backward(((_T * _T) + _T @ Tensor(np.ones((3, 1)))).sum())
        observe(
            "backward() of (T * T + T @ ones(3, 1)).sum() with T = tanh(A), A a random (4, 3): "
            "A.grad",
            _plain(_A.grad),
            hint=_SHARED,
        )
    # the smallest graphs: the root is itself a leaf; one operation; a leaf that needs no
    # gradient beside one that does
    _r = Tensor(_rng.normal(), requires_grad=True)
    backward(_r)
    _u, _c = Tensor(_rng.normal(size=(2,)), requires_grad=True), Tensor(_rng.normal(size=(2,)))
    backward((_u * _c).sum())
    observe(
        "backward(r) of a leaf r itself; backward() of (u * c).sum(), u needing a gradient and "
        "c not",
        {"r.grad": _plain(_r.grad), "u.grad": _plain(_u.grad), "c.grad is None": _c.grad is None},
        hint="Seed the root with ones, even when the root is a leaf; only tensors with "
        "requires_grad=True get a .grad.",
    )
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_backward_state", "points": 2}
def _raises_runtime_error(root):
    """backward(root) raised RuntimeError (True), or not (False)."""
    try:
        backward(root)
    except NotImplementedError:
        raise
    except RuntimeError:
        return True
    except Exception:
        return False
    return False


with stand_in_ops():
    _w = Tensor(2.0, requires_grad=True)
    _y = _w**3
    _, _error = attempt(backward, _y, retain_graph=True)
    check(_error is None, f"backward(w**3, retain_graph=True) raised {_error}.")
    _, _error = attempt(backward, _y)
    check(
        _error is None,
        f"A second backward(w**3), after one with retain_graph=True, raised {_error}: with "
        "retain_graph=True the graph must stay usable.",
    )
    check(
        _w.grad is not None and np.isclose(_w.grad, 24.0),
        f"Two backward passes of w**3 at w = 2 should leave w.grad = 12 + 12 = 24, got "
        f"{_w.grad}. At a leaf, add the new gradient to .grad instead of replacing it.",
    )
    check(
        _raises_runtime_error(_y),
        "A third backward() on the same graph, after a call without retain_graph=True, should "
        "raise RuntimeError: set the _backward of every non-leaf node to graph_freed at the end.",
    )
    check(_w.is_leaf and np.isclose(_w.grad, 24.0), "A failed backward() must not change w.grad.")
    _v = Tensor(1.0, requires_grad=True)
    _kept = _v * 3.0
    _, _error = attempt(backward, _kept, retain_graph=True)
    if _error is None:
        _, _error = attempt(backward, _kept, retain_graph=True)
    check(
        _error is None and np.isclose(_v.grad, 6.0),
        "With retain_graph=True every time, the graph must stay usable and the gradients add up.",
    )
    _u = Tensor(2.0, requires_grad=True)
    _mid = _u * 3.0
    _, _error = attempt(backward, _mid * _mid)
    check(_error is None, f"backward((u * 3) * (u * 3)) raised {_error}.")
    check(
        _mid.grad is None,
        "After backward(), an intermediate tensor (here u * 3.0) has a .grad: only leaves get "
        ".grad. Keep the gradients of intermediate tensors in your dict and let them go at the "
        "end, as PyTorch does (unless retain_grad() is called).",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_rng = np.random.default_rng(85)
with stand_in_ops():
    _w = Tensor(_rng.uniform(0.5, 2.0), requires_grad=True)
    _y = _w**3
    backward(_y, retain_graph=True)
    backward(_y)
    _after_two = _plain(_w.grad)
    _raised = _raises_runtime_error(_y)
    _v = Tensor(_rng.normal(), requires_grad=True)
    _kept = _v * _rng.normal()
    backward(_kept, retain_graph=True)
    backward(_kept, retain_graph=True)
    observe(
        "w**3 at a random w: backward(retain_graph=True), backward(), then a third backward(); "
        "v * k at random v, k: backward(retain_graph=True) twice",
        {
            "w.grad after two calls": _after_two,
            "third call raised RuntimeError": _raised,
            "w.grad after the third call": _plain(_w.grad),
            "v.grad after two calls with retain_graph=True": _plain(_v.grad),
        },
        hint="At a leaf, add the new gradient to .grad; without retain_graph=True, set the "
        "_backward of every non-leaf node to graph_freed at the end (with retain_graph=True, "
        "leave the graph as it is).",
    )
    _A = Tensor(_rng.normal(size=(3, 2)), requires_grad=True)
    _B = Tensor(_rng.normal(size=(2, 2)))
    _loss = ((_A @ _B).tanh() * Tensor(_rng.normal(size=(3, 2)))).sum()
    backward(_loss, retain_graph=True)
    _first = _plain(_A.grad)
    backward(_loss)
    _stack, _seen, _not_freed = [_loss], set(), 0  # walk the graph here, not with student code
    while _stack:
        _t = _stack.pop()
        if id(_t) not in _seen:
            _seen.add(id(_t))
            _not_freed += not (_t.is_leaf or _t._backward is graph_freed)
            _stack.extend(_t._parents)
    observe(
        "((A @ B).tanh() * R).sum() with random A (3, 2): backward(retain_graph=True), then "
        "backward()",
        {
            "A.grad after the first call": _first,
            "A.grad after the second call": _plain(_A.grad),
            "non-leaf tensors not freed after the second call": _not_freed,
        },
        hint="Two backward() calls add up in A.grad; the call without retain_graph=True frees "
        "every non-leaf tensor it walked (its _backward becomes graph_freed).",
    )
    with no_grad():
        _c = _A * 2.0
    backward((_c * _A).sum())
    observe(
        "c = A * 2.0 under no_grad(), then backward() of (c * A).sum()",
        {"c.requires_grad": _c.requires_grad, "c.is_leaf": _c.is_leaf, "A.grad": _plain(_A.grad)},
        hint="A tensor made under no_grad() has no graph: backward() treats it as a constant.",
    )
    _intermediate = _A * 1.0
    backward((_intermediate * 2.0).sum())
    observe(
        "m = A * 1.0, then backward() of (m * 2.0).sum()",
        {"m.grad is None": _intermediate.grad is None, "A.grad": _plain(_A.grad)},
        hint="Only leaves get .grad: keep the gradients of intermediate tensors in your dict and "
        "let them go at the end.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 5. DynamicNet on your engine
#
# The course's DynamicNet draws a depth from 0 to 3 on every forward pass and applies its
# middle layer that many times. On your engine, as on PyTorch's, nothing special is needed:
# every pass through the loop adds nodes, and the shared weight collects one gradient per use.
#
# ### Exercise 5 (2 points): `dynamic_net(x, params, depth)`
#
# With the tensors in `params` (`W_in`, `b_in`, `W_mid`, `b_mid`, `W_out`, `b_out`; a
# weight has shape `(in, out)`, a bias `(out,)`) and a batch `x` of shape `(batch, in)`,
# compute
#
# $$h = \text{relu}(x W_{in} + b_{in}),\quad
#   h \leftarrow \text{relu}(h\,W_{mid} + b_{mid}) \text{ (depth times)},\quad
#   \text{out} = h\,W_{out} + b_{out}$$
#
# and return `out`: DynamicNet's forward pass at a given depth, without its final
# `log_softmax` (our engine has no `exp` or `log`).


# %% nbgrader={"solution": true, "grade_id": "dynamic_net"}
def dynamic_net(x, params, depth):
    ### BEGIN SOLUTION
    h = (x @ params["W_in"] + params["b_in"]).relu()
    for _ in range(depth):
        h = (h @ params["W_mid"] + params["b_mid"]).relu()
    return h @ params["W_out"] + params["b_out"]
    ### END SOLUTION


# %% [markdown]
# Five "training steps" with the dice throws 2, 0, 3, 1, 3 and the loss
# $\sum \text{out}^2$, calling `backward` after each one **without** zeroing in between: the
# gradients accumulate over the five graphs, which all had different shapes.

# %%
sizes = {
    "W_in": (4, 6),
    "b_in": (6,),
    "W_mid": (6, 6),
    "b_mid": (6,),
    "W_out": (6, 3),
    "b_out": (3,),
}
start = {name: rng.normal(size=shape) * 0.5 for name, shape in sizes.items()}
params = {name: Tensor(value, requires_grad=True) for name, value in start.items()}
batch = rng.normal(size=(5, 4))
for depth in [2, 0, 3, 1, 3]:
    (dynamic_net(Tensor(batch), params, depth) ** 2).sum().backward()
print("our  grad of b_mid:", params["b_mid"].grad)

torch_params = {name: torch.tensor(value, requires_grad=True) for name, value in start.items()}
for depth in [2, 0, 3, 1, 3]:
    hidden = torch.relu(torch.tensor(batch) @ torch_params["W_in"] + torch_params["b_in"])
    for _ in range(depth):
        hidden = torch.relu(hidden @ torch_params["W_mid"] + torch_params["b_mid"])
    ((hidden @ torch_params["W_out"] + torch_params["b_out"]) ** 2).sum().backward()
print("torch grad of b_mid:", torch_params["b_mid"].grad.numpy())
gaps = [np.abs(params[n].grad - torch_params[n].grad.numpy()).max() for n in sizes]
print(f"largest difference over all six gradients: {max(gaps):.1e}")


# %% nbgrader={"grade": true, "grade_id": "test_dynamic_net", "points": 2}
def _replay(depths, start, batch):
    """dynamic_net run on the stand-ins for each depth in turn: its outputs, and the gradients
    of (out**2).sum() added up over the depths, by PyTorch through the stand-ins."""
    _ours = {_n: Tensor(_v, requires_grad=True) for _n, _v in start.items()}
    _outs, _grads = [], {_n: np.zeros(np.shape(_v)) for _n, _v in start.items()}
    with stand_in_ops():
        for _d in depths:
            _o = dynamic_net(Tensor(batch), _ours, _d)
            _outs.append(np.array(_o.data))
            _found = stand_in_gradients((_o**2).sum(), list(_ours.values()))
            for _n, _g in zip(_ours, _found, strict=True):
                _grads[_n] = _grads[_n] + _g
    return _outs, _grads


def _replay_in_torch(depths, start, batch):
    """The same with PyTorch alone."""
    _ref = {_n: torch.tensor(_v, requires_grad=True) for _n, _v in start.items()}
    _touts = []
    for _d in depths:
        _hid = torch.relu(torch.tensor(batch) @ _ref["W_in"] + _ref["b_in"])
        for _ in range(_d):
            _hid = torch.relu(_hid @ _ref["W_mid"] + _ref["b_mid"])
        _o = _hid @ _ref["W_out"] + _ref["b_out"]
        _touts.append(_o.detach().numpy())
        (_o**2).sum().backward()
    return _touts, {_n: _t.grad.numpy() for _n, _t in _ref.items()}


_rng = np.random.default_rng(4)
_start = {_n: _rng.normal(size=_s) * 0.5 for _n, _s in sizes.items()}
_batch = _rng.normal(size=(5, 4))
with stand_in_ops():
    _o, _error = attempt(
        dynamic_net, Tensor(_batch), {_n: Tensor(_v) for _n, _v in _start.items()}, 2
    )
check(_error is None, f"dynamic_net(x, params, 2) on a batch of 5 raised {_error}.")
check(
    isinstance(_o, Tensor) and _o.shape == (5, 3),
    "dynamic_net should return a Tensor of shape (batch, 3).",
)
_result, _error = attempt(_replay, [2, 0, 3], _start, _batch)
check(_error is None, f"dynamic_net with the dice throws 2, 0, 3 raised {_error}.")
_outs, _grads = _result
_touts, _tgrads = _replay_in_torch([2, 0, 3], _start, _batch)
check(
    all(np.allclose(_a, _b) for _a, _b in zip(_outs, _touts, strict=True)),
    "dynamic_net's output differs from the formula: relu after the input and every middle layer, "
    "none after the output layer.",
)
for _n in sizes:
    check(
        _same(_grads[_n], _tgrads[_n]),
        f"The gradient of {_n}, added up over the dice throws 2, 0, 3, differs from PyTorch's: "
        f"is {_n} used as in the formula, and kept in the graph (no .data, no Tensor(...) "
        "around a result)?",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_rng = np.random.default_rng(86)
_cases = [
    (int(_rng.integers(1, 8)), [int(_d) for _d in _rng.integers(0, 4, size=6)]) for _ in range(3)
]
_cases += [(1, [0]), (3, [6, 0, 1])]  # a batch of one at depth 0; a depth beyond the die's 3
for _size, _depths in _cases:
    _start = {_n: _rng.normal(size=_s) * 0.5 for _n, _s in sizes.items()}
    _batch = _rng.normal(size=(_size, 4))
    _outs, _grads = _replay(_depths, _start, _batch)
    _what = f"dynamic_net(x, params, depth) on a random batch of {_size}, depths {_depths}"
    observe(
        f"{_what}: outputs",
        [_plain(_o) for _o in _outs],
        hint="relu after the input layer and after each of the depth middle layers (all with "
        "W_mid and b_mid), none after the output layer.",
    )
    observe(
        f"{_what}: the gradients of (out**2).sum(), added up over the depths (by PyTorch, "
        "through the stand-ins)",
        {f"{_n}.grad": _plain(_grads[_n]) for _n in sorted(sizes)},
        hint="Use every parameter as in the formula, and keep every result in the graph: no "
        ".data, no new Tensor(...) around a result.",
    )
### END HIDDEN TESTS
# %% [markdown]
# That is the whole secret of "dynamic graphs": the graph is a by-product of running the
# forward code. Each call built a different one; each was walked once and freed; the
# parameters, the only thing that lives on, collected their gradients from all of them.
#
# # Part B: static versus dynamic in today's PyTorch
#
# ## 6. What the compiler sees
#
# `torch.compile` does the opposite of what you just built: before running a function, its
# front end, TorchDynamo, reads the function's Python bytecode and tries to extract one
# graph of tensor operations to optimise. Where it meets something it cannot put in a
# graph, it makes a **graph break**: the graph so far ends, that bit runs as ordinary
# Python, and a new graph starts after it. `explain(fn, *args)` below prints the graphs and
# the breaks, with the private `torch._dynamo.explain` (it only captures graphs, so it is
# quick on a CPU; where it is missing, it counts the graphs with public APIs only). Here is
# the course's DynamicNet, with lab 8's sizes.


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


def explain(fn, *args, **kwargs):
    """Print what TorchDynamo makes of fn(*args): graphs, breaks and why."""
    if dynamo_explain is None:
        graphs = compiled_graphs(fn, *args, **kwargs)
        print(f"torch {torch.__version__} has no torch._dynamo.explain: {len(graphs)} graph(s)")
        return None
    torch.compiler.reset()
    report = dynamo_explain(fn)(*args, **kwargs)
    print(f"graphs: {report.graph_count}, graph breaks: {report.graph_break_count}")
    for number, graph in enumerate(report.graphs, 1):
        ops = [n for n in graph.graph.nodes if n.op.startswith("call_")]
        print(f"  graph {number}: {len(ops)} operations")
    for reason in {
        (r.user_stack[-1].line if r.user_stack else "?", r.reason.strip().splitlines()[0])
        for r in report.break_reasons  # the same break can be reported more than once
    }:
        print(f"  break at: {reason[0]}\n    because: {reason[1]}")
    return report


net = DynamicNet(4, 6, 3, seed=0)
batch = torch.randn(5, 4)
report = explain(net, batch)

# %% [markdown]
# The graph stops at the `for` line: to know how many times the loop runs, Python needs
# `depth` as a plain `int`, and the compiler ends the first graph there (the reason it
# prints is its own: read it). A second graph holds the rest, unrolled for the depth that
# was drawn. So does a compiled DynamicNet keep its first throw forever? Do not guess:
# count. The backend below hands each graph back unchanged, but numbers it and notes every
# time it runs; for each call we find the depth by comparing with the eager network at each
# fixed depth, `net(batch, depth=d)`.


# %%
graphs_compiled, ran = [], []  # ran: the graphs that ran during the current call


def counting_backend(graph_module, example_inputs):
    number = len(graphs_compiled) + 1
    graphs_compiled.append(graph_module)

    def run_and_note(*args):
        ran.append(number)
        return graph_module.forward(*args)

    return run_and_note


def count_depths(compiled, depths=None, calls=20):
    """{depth that ran: {graphs that ran: how many calls}} over `calls` calls."""
    seen = {}
    with torch.no_grad():
        for k in range(calls):
            ran.clear()
            y = compiled(batch) if depths is None else compiled(batch, depth=depths[k])
            depth = next(d for d in range(4) if torch.allclose(y, net(batch, depth=d)))
            seen.setdefault(depth, {}).setdefault(tuple(ran), 0)
            seen[depth][tuple(ran)] += 1
    return seen


def show(seen):
    for depth, graphs in sorted(seen.items()):
        for numbers, count in graphs.items():
            print(f"  depth {depth}: {count:2d} calls ran compiled graphs {list(numbers)}")


eager_depths = []
for _ in range(12):
    net(batch)
    eager_depths.append(net.last_depth)
print("eager net(batch), 12 calls, depths:", eager_depths)
torch.compiler.reset()
print("torch.compile(net)(batch), 20 calls:")
show(count_depths(torch.compile(net, backend=counting_backend)))

# %% [markdown]
# With torch 2.14.1, the version this lab was written with, it does: every compiled call
# runs the depth of the first throw, and nothing warns. TorchDynamo made the draw
# `self.rng.randint(0, 3)` once, while tracing the first call, and kept the number; the
# model's `rng` is not called again. It treats the functions of the `random` module
# differently: `random.randint(0, 3)` is drawn anew on every call, and
# `x * random.randint(0, 3)` compiles into one graph. What does your version print? Either
# way, the safe habit is to draw outside the compiled code and pass the depth in:


# %%
draws = random.Random(1)
graphs_compiled.clear()
torch.compiler.reset()
print("torch.compile(net)(batch, depth=d), d drawn outside, 20 calls:")
show(
    count_depths(
        torch.compile(net, backend=counting_backend), [draws.randint(0, 3) for _ in range(20)]
    )
)
for number, graph_module in enumerate(graphs_compiled, 1):
    print(f"  graph {number}: {op_names(graph_module)}")

# %% [markdown]
# One graph per depth, and no break: the compiler specialises a graph on the value of a
# Python `int` argument, guards on it, and compiles again (a *recompilation*) when a call
# brings a value it has no graph for; after that each depth reuses its own graph. (To watch
# these decisions, run a script with the environment variable
# `TORCH_LOGS=graph_breaks,recompiles`.)
#
# Lab 5's `NormLoopNet` is harder for a compiler: its loop runs *while a property of the
# data* holds. Here is such a loop in a few lines; its condition is a tensor, known only
# when the data is there.


# %%
def grow(x, w):
    while x.norm() < 10:
        x = x + torch.relu(x @ w) + 0.5
    return x


w_grow = torch.randn(4, 4) * 0.3
report = explain(grow, batch[:1], w_grow)

# %% [markdown]
# `fullgraph=True` turns every graph break into an error: that is what `torch.export` and
# friends need, a single graph that can be saved and run without Python. The same holds for
# an `if` on a tensor's value:


# %%
def branchy(x, w1, w2):
    if x.sum() > 0:
        return torch.tanh(x @ w1)
    return torch.relu(x @ w2)


w1, w2 = torch.randn(4, 2), torch.randn(4, 2)
report = explain(branchy, batch, w1, w2)
torch.compiler.reset()
try:
    torch.compile(branchy, backend="eager", fullgraph=True)(batch, w1, w2)
    print("fullgraph=True compiled it")
except Exception as error:  # the exception class has moved between versions
    print(type(error).__name__, "with fullgraph=True:", str(error).strip().splitlines()[0])

# %% [markdown]
# ## 7. Control flow the compiler can keep
#
# To stay in one graph, the decision itself must become a graph operation.
#
# * `torch.cond(pred, true_fn, false_fn, operands)` takes a boolean tensor of one element
#   and two functions of the same operands that return tensors of the **same shape and
#   dtype**. Both branches are traced into the graph; which one runs is decided at run
#   time. Its documentation calls it a *prototype* feature, with limited support for input
#   and output types.
# * A loop whose trip count depends on data can be **bounded**: run a fixed number of
#   steps, and let each step do nothing once the condition fails, with
#   `torch.where(condition, new_value, old_value)`. It matches the eager loop as long as that
#   loop stops within the bound, with plain tensor operations only.
#
# ### Exercise 6 (2 points): `branchy_cond(x, w1, w2)`
#
# Same result as `branchy`, written with `torch.cond`, so that it compiles with
# `fullgraph=True`. No Python `if` on a tensor.


# %% nbgrader={"solution": true, "grade_id": "branchy_cond"}
def branchy_cond(x, w1, w2):
    ### BEGIN SOLUTION
    def positive(x, w1, w2):
        return torch.tanh(x @ w1)

    def negative(x, w1, w2):
        return torch.relu(x @ w2)

    return torch.cond(x.sum() > 0, positive, negative, (x, w1, w2))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_branchy_cond", "points": 2}
_x = torch.randn(5, 4)
_w1, _w2 = torch.randn(4, 2), torch.randn(4, 2)
for _sign in (1.0, -1.0):
    _xs = _sign * _x.abs()
    _got, _error = attempt(branchy_cond, _xs, _w1, _w2)
    check(_error is None, f"branchy_cond(x, w1, w2) on a (5, 4) x raised {_error}.")
    check(
        isinstance(_got, torch.Tensor) and torch.allclose(_got, branchy(_xs, _w1, _w2)),
        f"branchy_cond differs from branchy when x.sum() is {'positive' if _sign > 0 else 'negative'}: "
        "tanh(x @ w1) when the sum is positive, relu(x @ w2) otherwise.",
    )
_graphs, _error = attempt(compiled_graphs, branchy_cond, _x, _w1, _w2)
check(_error is None, f"torch.compile(branchy_cond) failed: {_error}.")
check(
    len(_graphs) > 0,
    "branchy_cond could not be compiled into one graph: the compiler gave up on it and made no "
    "graph at all. Use torch.cond instead of a Python if on a tensor.",
)
check(
    len(_graphs) == 1,
    f"branchy_cond compiles into {len(_graphs)} graphs, with graph breaks between them. Use "
    "torch.cond instead of a Python if on a tensor.",
)
check(
    any("cond" in _call for _call in op_names(_graphs[0])),
    "branchy_cond compiles into one graph, but without torch.cond (torch.where?), so it "
    "computes both branches and keeps one. This exercise asks for torch.cond: its graph holds "
    "both branches and runs only the one chosen (the next cells look for that cond node).",
)
torch.compiler.reset()
_got, _error = attempt(torch.compile(branchy_cond, backend="eager", fullgraph=True), _x, _w1, _w2)
check(_error is None, f"torch.compile(branchy_cond, fullgraph=True) failed: {_error}.")
check(
    torch.allclose(_got, branchy(_x, _w1, _w2)),
    "The compiled branchy_cond differs from eager branchy.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_noted = []  # the graphs TorchDynamo hands to the backend


def _noting_backend(graph_module, example_inputs):
    _noted.append(op_names(graph_module))
    return graph_module.forward


torch.compiler.reset()
_compiled = torch.compile(branchy_cond, backend=_noting_backend, fullgraph=True)
_gen = torch.Generator().manual_seed(87)
_outs, _grads_w1, _grads_w2 = [], [], []
for _trial in range(2):
    _x = torch.randn(3, 4, dtype=torch.float64, generator=_gen) + (1.0 if _trial % 2 else -1.0)
    _w1 = torch.randn(4, 2, dtype=torch.float64, generator=_gen, requires_grad=True)
    _w2 = torch.randn(4, 2, dtype=torch.float64, generator=_gen, requires_grad=True)
    _y = _compiled(_x, _w1, _w2)
    _g1, _g2 = torch.autograd.grad(_y.sum(), [_w1, _w2], allow_unused=True)
    _outs.append(_y)
    # torch.cond gives the weight of the branch not taken zeros; count None as zeros
    _grads_w1.append(torch.zeros_like(_w1) if _g1 is None else _g1)
    _grads_w2.append(torch.zeros_like(_w2) if _g2 is None else _g2)
observe(
    "branchy_cond compiled with fullgraph=True, on 2 random float64 x of shape (3, 4) (sum "
    "negative, then positive)",
    {
        "graphs compiled": len(_noted),
        "cond operations in them": sum("cond" in _t for _targets in _noted for _t in _targets),
        "outputs": _outs,
        "gradients of w1": _grads_w1,
        "gradients of w2": _grads_w2,
    },
    hint="One torch.cond(x.sum() > 0, true_fn, false_fn, (x, w1, w2)): tanh(x @ w1) when the "
    "sum is positive, relu(x @ w2) otherwise, and no Python if on a tensor.",
)
# Eager, at the boundary (x.sum() exactly 0: relu(x @ w2)) and on random x, one other shape
# only: torch.cond compiles its branches even in eager mode, once per new shape.
_zero_sum = torch.tensor([[1.0, -2.0, 0.5, 0.5], [3.0, -1.0, -2.0, 0.0]])
_w1, _w2 = torch.randn(4, 3, generator=_gen), torch.randn(4, 3, generator=_gen)
_record = {"x.sum() exactly 0": branchy_cond(_zero_sum, _w1, _w2)}
for _trial, _sign in enumerate((1.0, -1.0, 1.0, -1.0)):
    _x = _sign * torch.rand(2, 4, generator=_gen)
    _w1, _w2 = torch.randn(4, 3, generator=_gen), torch.randn(4, 3, generator=_gen)
    _record[f"trial {_trial + 1}, sum {'> 0' if _sign > 0 else '< 0'}"] = branchy_cond(_x, _w1, _w2)
observe(
    "branchy_cond(x, w1, w2) in eager mode on x (2, 4) and w (4, 3): at the boundary (x.sum() "
    "exactly 0), and on random x of either sign",
    _record,
    hint="The condition is x.sum() > 0, strictly: a sum of exactly 0 takes relu(x @ w2).",
)
### END HIDDEN TESTS

# %% [markdown]
# A single graph can be exported. `torch.export.export` traces **non-strict** by default
# (its `strict` argument, printed below): it runs your Python code once, as in eager mode,
# recording what the tensors do; `strict=True` traces with TorchDynamo instead. Look for the
# `cond` node in the program below: both branches live in it as subgraphs.


# %%
class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(4, 2))
        self.w2 = nn.Parameter(torch.randn(4, 2))

    def forward(self, x):
        return branchy_cond(x, self.w1, self.w2)


strict_default = inspect.signature(torch.export.export).parameters["strict"].default
print(f"torch.export.export(..., strict={strict_default}) by default")
print(torch.export.export(Branchy(), (batch,)).graph_module.code.strip())

# %% [markdown]
# A Python `if` on a tensor's value cannot be decided while tracing, so exporting `branchy`
# stops with an error, in both modes. Python control flow on plain Python values, though, is
# decided once, at export time, and baked into the program. Export DynamicNet without
# `strict`: its die is thrown once, and no error says so (with `strict=True`, export refuses
# it).

# %%
exported_net = torch.export.export(net, (batch,))
layers = [n for n in exported_net.graph.nodes if n.target is torch.ops.aten.linear.default]
print(f"the exported program: {len(layers)} linear layers, depth {len(layers) - 2}")
runs = [exported_net.module()(batch) for _ in range(5)]
print("5 calls of the exported program, one output:", all(torch.equal(runs[0], r) for r in runs))

# %% [markdown]
# And PyTorch's gradients through `cond`: the branch that did not run gives its weight a
# gradient of zeros, where eager `branchy` gives `None`: that weight was not in the call's
# graph at all, like the middle layer of DynamicNet at depth 0.

# %%
w1g, w2g = torch.randn(4, 2, requires_grad=True), torch.randn(4, 2, requires_grad=True)
positive_x = batch.abs()
grad_cond = torch.autograd.grad(branchy_cond(positive_x, w1g, w2g).sum(), [w2g])[0]
print("cond:  grad of w2 =", grad_cond.flatten())
grad_eager = torch.autograd.grad(branchy(positive_x, w1g, w2g).sum(), [w2g], allow_unused=True)
print("eager: grad of w2 =", grad_eager[0])

# %% [markdown]
# ### Exercise 7 (2 points): `grow_bounded(x, w, max_steps=30)`
#
# Same result as `grow` for every input whose loop stops within `max_steps` steps, as a
# `for` loop of exactly `max_steps` steps with no Python `if` or `while` on a tensor.
# `torch.where` takes a 0-d boolean tensor as its condition.


# %% nbgrader={"solution": true, "grade_id": "grow_bounded"}
def grow_bounded(x, w, max_steps=30):
    ### BEGIN SOLUTION
    for _ in range(max_steps):
        x = torch.where(x.norm() < 10, x + torch.relu(x @ w) + 0.5, x)
    return x
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_grow_bounded", "points": 2}
# entries >= -2: every step adds at least 0.5 to each, so grow stops within 12 steps
_x = torch.randn(1, 4, generator=torch.Generator().manual_seed(7)).clamp(-2, 2)
_got, _error = attempt(grow_bounded, _x, w_grow)
check(_error is None, f"grow_bounded(x, w) on a (1, 4) x raised {_error}.")
check(
    isinstance(_got, torch.Tensor) and torch.allclose(_got, grow(_x, w_grow)),
    "grow_bounded differs from grow: once x.norm() >= 10, the remaining steps must leave x unchanged.",
)
_done = grow(_x, w_grow)
_got, _error = attempt(grow_bounded, _done, w_grow)
check(
    _error is None and torch.allclose(_got, _done),
    "An input that is already large (norm >= 10) must come back unchanged.",
)
_got0, _ = attempt(grow_bounded, _x, w_grow, max_steps=0)
_got1, _ = attempt(grow_bounded, _x, w_grow, max_steps=1)
check(
    isinstance(_got0, torch.Tensor)
    and torch.allclose(_got0, _x)
    and isinstance(_got1, torch.Tensor)
    and torch.allclose(_got1, _x + torch.relu(_x @ w_grow) + 0.5),
    "grow_bounded(x, w, max_steps=0) should return x unchanged, and max_steps=1 take exactly one "
    "step: loop over range(max_steps), the argument.",
)
_graphs, _error = attempt(compiled_graphs, grow_bounded, _x, w_grow)
check(_error is None, f"torch.compile(grow_bounded) failed: {_error}.")
check(
    len(_graphs) > 0,
    "grow_bounded could not be compiled into one graph: the compiler gave up on it and made no "
    "graph at all. No Python if or while on a tensor: use torch.where.",
)
check(
    len(_graphs) == 1,
    f"grow_bounded compiles into {len(_graphs)} graphs, with graph breaks between them. No "
    "Python if or while on a tensor: use torch.where.",
)
torch.compiler.reset()
_compiled = torch.compile(grow_bounded, backend="eager", fullgraph=True)
_got, _error = attempt(_compiled, _x, w_grow)
check(_error is None, f"torch.compile(grow_bounded, fullgraph=True) failed: {_error}.")
check(torch.allclose(_got, grow(_x, w_grow)), "The compiled grow_bounded differs from eager grow.")
### BEGIN HIDDEN TESTS
from grader_observe import observe

_noted = []  # the graphs TorchDynamo hands to the backend


def _noting_backend(graph_module, example_inputs):
    _noted.append(op_names(graph_module))
    return graph_module.forward


def _grow_12(x, w):
    return grow_bounded(x, w, max_steps=12)


torch.compiler.reset()
# A bound of 12 steps, not 30: the compiler unrolls every step. Each step adds at least 0.5
# to each entry, so from entries >= -2 grow stops within 12 steps.
_compiled = torch.compile(_grow_12, backend=_noting_backend, fullgraph=True)
_gen = torch.Generator().manual_seed(88)
_inputs = [
    (
        (torch.randn(2, 4, generator=_gen) * 0.5).clamp(-2, 2),
        torch.randn(4, 4, generator=_gen) * 0.3,
    )
    for _trial in range(5)
]
_compiled_outs = [_compiled(_x, _w) for _x, _w in _inputs]
observe(
    "grow_bounded(x, w) on 5 random x (2, 4) and w (4, 4): with max_steps=12, compiled with "
    "fullgraph=True, and eager with the default max_steps",
    {
        "graphs compiled": len(_noted),
        "compiled outputs (max_steps=12)": _compiled_outs,
        "eager outputs": [grow_bounded(_x, _w) for _x, _w in _inputs],
    },
    atol=1e-5,
    hint="Each of the max_steps steps computes x + relu(x @ w) + 0.5 and keeps it only while "
    "x.norm() < 10, with torch.where: no Python if or while on a tensor.",
)
# At and beside the bounds. With a (1, 1) x = c and w = 0, each step adds exactly 0.5:
# c = -4.75 needs exactly 30 steps (the default bound), c = -5.25 needs 31 (one beyond it),
# and c = -4 reaches a norm of exactly 10 after 28 steps, where the loop must stop.
_w0 = torch.zeros(1, 1)
observe(
    "grow_bounded(x, w) with the default max_steps, from a (1, 1) x = c and w = 0, for c = "
    "-4.75 (30 steps to go), -5.25 (31 steps) and -4 (norm exactly 10 after 28 steps)",
    {f"c = {_c}": grow_bounded(torch.full((1, 1), _c), _w0) for _c in (-4.75, -5.25, -4.0)},
    hint="The default max_steps is 30; a step changes x only while x.norm() < 10 (strictly).",
)
observe(
    "grow_bounded(x, w, max_steps=k) from a (1, 1) x = -4.75 and w = 0 (30 steps to go), for "
    "k = 0, 1, 29, 30, 31 and 45",
    [grow_bounded(torch.full((1, 1), -4.75), _w0, max_steps=_k) for _k in (0, 1, 29, 30, 31, 45)],
    hint="The loop runs exactly max_steps steps, the argument; a step changes x only while "
    "x.norm() < 10.",
)
### END HIDDEN TESTS

# %% [markdown]
# The compiler's view of the bounded loop: one graph, no breaks, but count its operations:
# the compiler unrolled all `max_steps` steps, and every call runs them all. In the plot,
# every step in the shaded part computes a new `x` and throws it away.

# %%
report = explain(grow_bounded, batch[:1], w_grow)
norms_while, value = [batch[:1].norm().item()], batch[:1]
while value.norm() < 10:
    value = value + torch.relu(value @ w_grow) + 0.5
    norms_while.append(value.norm().item())
print(f"the while loop stopped after {len(norms_while) - 1} steps; the bounded loop always does 30")
print("same result:", torch.allclose(grow_bounded(batch[:1], w_grow), grow(batch[:1], w_grow)))
norms_bounded = [grow_bounded(batch[:1], w_grow, max_steps=k).norm().item() for k in range(31)]
fig, ax = plt.subplots(figsize=(6, 3))
ax.axvspan(len(norms_while) - 1, 30, color="C1", alpha=0.12, label="steps that change nothing")
ax.plot(norms_bounded, "o-", color="C1", markersize=3, label="grow_bounded (30 steps)")
ax.plot(norms_while, "o-", color="C0", markersize=5, label="while loop (grow)")
ax.axhline(10, color="gray", linestyle=":", linewidth=1)
ax.set_xlabel("loop step")
ax.set_ylabel("x.norm()")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 8. `torch.while_loop`: the loop as one operation
#
# `torch.while_loop(cond_fn, body_fn, carried_inputs)` runs `body_fn` as long as `cond_fn`
# says so, and the compiler keeps the whole loop as **one** operation of the graph, with the
# condition and the body as subgraphs. Its documentation calls it a *prototype* feature
# that does not support training yet. The state `carried_inputs` is a tuple of tensors that
# `body_fn` must return with the **same shapes and dtypes**; `cond_fn` returns a **boolean**
# tensor of one element. Outside `torch.compile`, it compiles its functions itself on the
# first call: time two calls.


# %%
def grow_while(x, w):
    (x,) = torch.while_loop(lambda x: x.norm() < 10, lambda x: (x + torch.relu(x @ w) + 0.5,), (x,))
    return x


start_x = batch[:1]
for call in ("first", "second"):
    started = time.perf_counter()
    result = grow_while(start_x, w_grow)
    print(f"{call} call of grow_while: {time.perf_counter() - started:.3f} s")
print("same result as grow:", torch.allclose(result, grow(start_x, w_grow)))
for name, fn in [("grow_bounded", grow_bounded), ("grow_while", grow_while)]:
    for graph_module in compiled_graphs(fn, start_x, w_grow):
        ops = op_names(graph_module)
        print(f"{name}: one graph of {len(ops)} operations: {', '.join(ops[:6])}, ...")
        for sub_name, sub in graph_module.named_children():
            print(f"    subgraph {sub_name}: {', '.join(op_names(sub))}")

# %% [markdown]
# The bounded loop's graph holds all 30 copies of the step; `while_loop`'s holds the step
# once, in a subgraph, and runs it as many times as the data needs. Break its rules and it
# refuses:


# %%
def grow_rows(x, w):  # the state gains rows at every step
    (x,) = torch.while_loop(lambda x: x.norm() < 10, lambda x: (torch.cat([x, x + 0.5]),), (x,))
    return x


def grow_float_condition(x, w):  # the condition is a float tensor, not a boolean
    step = lambda x: (x + torch.relu(x @ w) + 0.5,)  # noqa: E731
    (x,) = torch.while_loop(lambda x: 10 - x.norm(), step, (x,))
    return x


for what, fn in [
    ("a state that changes shape", grow_rows),
    ("a float condition", grow_float_condition),
]:
    _, error = attempt(fn, start_x, w_grow)
    print(f"{what}: {error or 'ran'}"[:160])

# %% [markdown]
# And training? In eager mode it returns a tensor with a `grad_fn` all the same. Compare
# the gradients with respect to `w` (read by the body from outside; the carried `x` needs
# no gradient) with the Python loop's:

# %%
w_train = w_grow.clone().requires_grad_()
grad_python = torch.autograd.grad(grow(start_x, w_train).sum(), w_train)[0]
for name, fn in [("grow_bounded", grow_bounded), ("grow_while", grow_while)]:
    grad, error = attempt(lambda f=fn: torch.autograd.grad(f(start_x, w_train).sum(), w_train)[0])
    gap = error or f"{(grad - grad_python).abs().max().item():.2e}"
    print(f"{name:12s}: largest difference from the Python loop's gradient of w: {gap}")

# %% [markdown]
# With torch 2.14.1 the last line shows a large difference: `while_loop`'s gradient of `w`
# is wrong here, and nothing warns (it comes out right when the carried `x` requires a
# gradient too). What does your version print? Until the prototype supports training, the
# bounded loop is the one to train through: its steps are ordinary operations, at the price
# of always running all of them.
#
# ## What you have seen
#
# * A define-by-run graph is nothing more than links recorded while the forward code runs:
#   each result remembers its parents and a closure for its local derivative.
# * `backward()` is a reverse topological walk that **adds** each share into its parent;
#   leaves accumulate across calls, and the graph is freed unless you retain it.
# * Dynamic models cost nothing extra in eager mode: DynamicNet's gradients on your engine
#   matched PyTorch's over a sequence of differently shaped graphs.
# * A compiler needs a graph. Python control flow on data splits it (graph breaks) or, with
#   `fullgraph=True`, stops it; a draw from a `random.Random` object was frozen by
#   torch 2.14.1's compiler, and a depth passed in costs one graph per value. Writing the
#   decision as a graph operation (`torch.cond`, a bounded loop with `torch.where`) gives one
#   graph that compiles and exports, at a price: both branches must return the same shape,
#   and the bounded loop always does all its steps.
# * `torch.export` traces non-strict by default: Python decisions on plain values
#   (DynamicNet's die) are made once and baked in, silently.
# * `torch.while_loop` keeps a data-dependent loop in one graph and runs only the steps it
#   needs, if its state keeps a fixed shape and its condition is a boolean tensor; it is a
#   prototype, and its gradients are not to be trusted yet: check them, as you did here.
