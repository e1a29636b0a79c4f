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
# "What is truly happening when we define a dynamic graph model?" Build one to see. In part
# A you write a small autograd engine in NumPy that works the way PyTorch's does: every
# operation **records** its inputs and a function that knows how to differentiate it
# *while the forward code runs*, and `backward()` walks that record in reverse
# ("define-by-run"); it must reproduce PyTorch's gradients for labs 1 to 3 and DynamicNet.
# Part B looks at the other side: `torch.compile` and `torch.export` want a *graph*, which
# Python control flow does not give them; you will rewrite such control flow into one graph.
#
# **How this lab works.** Replace `raise NotImplementedError(...)` in each *exercise* cell
# with your code; the *check* after it says in words what is wrong. On submission the checks
# run again with hidden cases. Run everything top to bottom before you submit.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import contextlib
import inspect
import itertools
import logging
import random
import time

import numpy as np
import torch.nn.functional as F
from torch import nn

np.set_printoptions(precision=4, suppress=True)
# A graph break logs nothing at WARNING (a data-dependent `if`, a `print`, a `while` on a
# tensor: the graph just ends there); the compiler's own warnings, such as reaching its
# recompile limit, are silenced here: this lab prints what it needs itself.
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
logging.getLogger("torch.fx").setLevel(logging.ERROR)


def op_names(graph_module):
    """The functions a graph calls, by name."""
    found = [n.target for n in graph_module.graph.nodes if n.op == "call_function"]
    return [getattr(t, "__name__", str(t)) for t in found]


def keeping_backend(kept):
    """A torch.compile backend: keeps every graph it is handed in `kept`, runs it unchanged."""

    def keep(graph_module, example_inputs):
        kept.append(graph_module)
        return graph_module.forward

    return keep


def compiled_graphs(fn, *args):
    """The graphs torch.compile makes of fn(*args) (a graph break shows as several graphs)."""
    kept = []
    torch.compiler.reset()
    torch.compile(fn, backend=keeping_backend(kept))(*args)
    return kept


def _closure_record(got, names):
    """What a closure returned: how many gradients, and each one's shape and values."""
    if not isinstance(got, (tuple, list)):
        return "not a tuple"
    record = {"number of gradients returned": len(got)}
    for who, grad in zip(names, got, strict=False):
        record[f"shape of the gradient for {who}"] = list(np.shape(grad))
        record[f"gradient for {who}"] = _plain(grad)
    return record


def _plain(value):
    """A NumPy result as nested lists of floats (the hidden tests record these)."""
    try:
        return np.asarray(value, dtype=float).tolist()
    except (TypeError, ValueError):
        return "not an array of numbers"


print("torch", torch.__version__, " numpy", np.__version__)

# %% [markdown]
# # Part A: a define-by-run autograd in NumPy
#
# ## 1. A tensor that remembers where it came from
#
# Our `Tensor` wraps a `float64` NumPy array with PyTorch's autograd fields: `requires_grad`;
# `grad`, where `backward()` leaves a leaf's gradient; `_parents`, the tensors it was
# computed from; and `_backward`, the *backward closure*, which takes the gradient of the
# loss with respect to this tensor and returns one gradient per parent. It is `None` for a
# leaf, like `grad_fn`. PyTorch links graph *nodes* instead: `grad_fn.next_functions` holds
# the parents' nodes (a leaf's is an `AccumulateGrad` node), not their tensors; a tensor
# that a backward formula needs is kept on the node as a *saved tensor*.
#
# Every operation calls `make_result`, which records the parents and the closure **only
# if** some input requires a gradient and recording is on. `no_grad()` switches it off,
# like `torch.no_grad()`. NumPy *broadcasts*: adding a bias of shape `(3,)` to a batch of
# shape `(5, 3)` uses the bias 5 times. The gradient of the bias is then the sum of those 5
# uses; `unbroadcast` sums a gradient back down to its input's shape.

# %% nbgrader={"locked": true, "grade_id": "engine"}
_RECORDING = [True]  # a list, so functions can switch it without `global`


@contextlib.contextmanager
def no_grad():
    """Inside `with no_grad():` operations compute values but record no graph."""
    saved, _RECORDING[0] = _RECORDING[0], False
    try:
        yield
    finally:
        _RECORDING[0] = saved


class Tensor:
    def __init__(self, data, requires_grad=False):
        self.data = np.array(data, dtype=np.float64)
        self.requires_grad, self.grad = requires_grad, None
        self._parents, self._backward, self._op = (), None, None

    shape = property(lambda self: self.data.shape)
    is_leaf = property(lambda self: self._backward is None)

    # Python operators call the functions you complete in exercises 1 and 2.
    def __add__(self, other):
        return add(self, other)

    def __mul__(self, other):
        return mul(self, other)

    __radd__, __rmul__ = __add__, __mul__

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
        out.requires_grad, out._parents, out._backward, out._op = True, parents, backward_fn, op
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
# Each operation below is complete on the way **forward**: it computes its result and hands
# `make_result` its parents and a closure `backward(grad)`, whose body is yours. `grad` is
# $\partial L/\partial\,\text{out}$, with the shape of the output; return
# $\partial L/\partial$ (each parent), in the order of the parents, each with the shape of
# that parent. The closure can read anything the forward pass computed (PyTorch's *saved
# tensors*). The checks call `out._backward(grad)` and compare with `torch.autograd.grad`.
#
# ### Exercise 1 (2 points): `add`, `mul` and `power`
#
# `add(a, b)`: $\partial(a+b)/\partial a = 1$, the gradient passes through; `mul(a, b)`:
# each factor gets `grad` times the *other* factor; `power(a, n)` for a Python number `n`:
# $n\,a^{n-1}$ times `grad`. `add` and `mul` broadcast, so pass each gradient through
# `unbroadcast(..., a.shape)` (or `b.shape`) before returning it.


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


# %% nbgrader={"grade": true, "grade_id": "test_elementwise_ops", "points": 2}
def _torch_grads(fn, arrays, grad):
    """PyTorch's gradients of fn(*arrays) given the output gradient `grad`."""
    _ts = [torch.tensor(_a, requires_grad=True) for _a in arrays]
    return [_g.numpy() for _g in torch.autograd.grad(fn(*_ts), _ts, torch.tensor(grad))]


def _same(ours, theirs):
    try:
        return np.shape(ours) == np.shape(theirs) and np.allclose(
            ours, theirs, rtol=1e-6, atol=1e-6
        )
    except (TypeError, ValueError):  # not an array of numbers
        return False


_rng = np.random.default_rng(8)
_a, _b, _g = _rng.normal(size=(2, 3)), _rng.normal(size=(2, 3)), _rng.normal(size=(2, 3))
for _name, _ours, _torch in [("add", add, torch.add), ("mul", mul, torch.mul)]:
    _out = _ours(Tensor(_a, requires_grad=True), Tensor(_b, requires_grad=True))
    _got, _error = attempt(_out._backward, _g)
    check(
        isinstance(_got, (tuple, list)) and len(_got) == 2,
        f"The closures of add and mul, on a (2, 3) a and b, should return a tuple of 2 arrays (the closure of {_name}; error: {_error}).",
    )
    _refs = _torch_grads(_torch, [_a, _b], _g)
    _bad = [_who for _m, _r, _who in zip(_got, _refs, "ab", strict=True) if not _same(_m, _r)]
    check(
        not _bad or _name != "add",
        f"add's closure returned a gradient that differs from PyTorch's (for {_bad}): add passes grad on to both inputs unchanged (summed back to each input's shape).",
    )
    check(
        not _bad,
        f"mul's closure returned a gradient that differs from PyTorch's (for {_bad}): each factor gets grad times the OTHER factor.",
    )
_got, _error = attempt(power(Tensor(_a, requires_grad=True), 3)._backward, _g)
check(
    isinstance(_got, (tuple, list))
    and len(_got) == 1
    and _same(_got[0], _torch_grads(lambda t: t**3, [_a], _g)[0]),
    f"power(a, 3)'s closure should return a tuple with one array, (3 * a**2 * grad,). Mind the comma. (error: {_error})",
)
_bias = Tensor(_rng.normal(size=(3,)), requires_grad=True)
_got, _error = attempt(add(Tensor(_a, requires_grad=True), _bias)._backward, _g)
check(
    isinstance(_got, (tuple, list)) and len(_got) == 2 and np.shape(_got[1]) == (3,),
    f"add: a (2, 3) batch plus a (3,) bias: the bias gradient should have shape (3,) (error: {_error}). The bias was used by every row: unbroadcast sums the rows up.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_rng = np.random.default_rng(81)
_records = {"add": {}, "mul": {}, "power": {}}
_cases = [((4, 3), (3,)), ((4, 1), (1, 3)), ((), (2, 2)), ((2, 1, 3), (4, 1)), ((3, 4), None)]
for _sa, _sb in _cases:  # (2, 1, 3) and (4, 1): b used 2 * 3 times; None: b the number 2.5
    _a, _b = _rng.normal(size=_sa), 2.5 if _sb is None else _rng.normal(size=_sb)
    _g = _rng.normal(size=np.broadcast_shapes(_sa, np.shape(_b)))
    for _name, _ours in [("add", add), ("mul", mul)]:
        _bb = _b if _sb is None else Tensor(_b, requires_grad=True)
        _got = _ours(Tensor(_a, requires_grad=True), _bb)._backward(_g)
        _records[_name][f"a {_sa}, b {_sb or 2.5}"] = _closure_record(_got, "ab")
for _n in (2, 0.5, -1, 1, 0):
    _a, _g = np.abs(_rng.normal(size=(3, 2))) + 0.5, _rng.normal(size=(3, 2))
    _records["power"][f"n = {_n}"] = _closure_record(power(Tensor(_a, True), _n)._backward(_g), "a")
observe(
    "the closures of add(a, b) and mul(a, b) on random a, b, grad of 5 pairs of shapes (b the Python number 2.5 in the last), and of power(a, n), a (3, 2), for 5 values of n",
    _records,
    hint="add passes grad on to both inputs, mul gives each factor grad times the OTHER factor, each summed back to its input's shape with unbroadcast (a Python number becomes a 0-d tensor: its gradient has shape ()); power returns (grad * n * a ** (n - 1),).",
)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2 (2 points): `matmul`, `tanh`, `relu` and `total`
#
# `matmul(a, b)` for 2-D arrays: $\partial L/\partial a = G\,b^\top$ and
# $\partial L/\partial b = a^\top G$ (the shapes must match `a` and `b`); `tanh(a)`:
# $1 - \tanh^2(a)$ times `grad`, reusing the forward's `out_data`; `relu(a)`: `grad` where
# `a > 0`, zero elsewhere; `total(a)`, the sum of all entries (`.sum()`): `grad` is a 0-d
# array, and every entry of `a` gets it (`np.ones_like` or `np.broadcast_to` help).


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
_out = matmul(Tensor(_a, requires_grad=True), Tensor(_b, requires_grad=True))
_got, _error = attempt(_out._backward, _g)
check(
    not (_error or "").startswith("ValueError") or not ("mismatch" in _error or "shapes" in _error),
    f"matmul of (3, 2) and (2, 4): the closure raised a ValueError, arrays whose shapes do not fit (the error: {_error}). grad has the output's shape (3, 4): grad @ b.T has a's shape, a.T @ grad has b's.",
)
check(
    isinstance(_got, (tuple, list)) and [np.shape(_x) for _x in _got] == [(3, 2), (2, 4)],
    f"matmul of (3, 2) and (2, 4): the closure should return a tuple of 2 gradients, of shapes (3, 2) and (2, 4) (error: {_error}). Which side does the transpose go on?",
)
for _mine, _ref, _who in zip(_got, _torch_grads(torch.matmul, [_a, _b], _g), "ab", strict=True):
    check(
        _same(_mine, _ref),
        f"matmul's closure returned a gradient that differs from PyTorch's (for {_who}): grad @ b.T for a, a.T @ grad for b.",
    )
for _name, _ours, _torch in [("tanh", tanh, torch.tanh), ("relu", relu, torch.relu)]:
    _got, _error = attempt(_ours(Tensor(_a, requires_grad=True))._backward, _g[:, :2])
    check(
        _error is None,
        f"The closures of tanh and relu, on a (3, 2) a, should run (the closure of {_name} raised: {_error}); call it in a cell of your own to see the whole message.",
    )
    _right = isinstance(_got, (tuple, list)) and len(_got) == 1
    _right = _right and _same(_got[0], _torch_grads(_torch, [_a], _g[:, :2])[0])
    check(
        _right or _name != "tanh",
        "tanh's closure should return (gradient,), the gradient as PyTorch's: grad * (1 - out_data**2), with out_data the tanh the forward pass computed (not the input a).",
    )
    check(
        _right,
        "relu's closure should return (gradient,), the gradient as PyTorch's: grad where a > 0, zero elsewhere.",
    )
_got, _error = attempt(total(Tensor(_a, requires_grad=True))._backward, np.array(2.5))
check(
    isinstance(_got, (tuple, list)) and len(_got) == 1 and _same(_got[0], np.full((3, 2), 2.5)),
    f"total (sum of all entries), on a (3, 2) a and a 0-d grad, should return (gradient,), where every entry gets the incoming gradient 2.5, in the shape of a (error: {_error}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_rng = np.random.default_rng(82)
_records = {}
for _n, _k, _m in [(1, 1, 1), (4, 3, 2), (2, 5, 1), (3, 1, 4)]:
    _a, _b, _g = _rng.normal(size=(_n, _k)), _rng.normal(size=(_k, _m)), _rng.normal(size=(_n, _m))
    _got = matmul(Tensor(_a, True), Tensor(_b, True))._backward(_g)
    _records[f"matmul, a ({_n}, {_k}), b ({_k}, {_m})"] = _closure_record(_got, "ab")
    _a[0, 0] = 0.0  # relu exactly at 0 (PyTorch's gradient there is 0)
    for _name, _ours in [("tanh", tanh), ("relu", relu)]:
        _got = _ours(Tensor(_a[:, :1], True))._backward(_g[:, :1])
        _records[f"{_name}, a ({_n}, 1) with a[0, 0] = 0"] = _closure_record(_got, "a")
    _got = total(Tensor(_a, True))._backward(np.array(_rng.normal()))
    _records[f"total, a ({_n}, {_k}), a 0-d grad"] = _closure_record(_got, "a")
observe(
    "the closures of matmul(a, b), tanh(a), relu(a) and total(a) on random values and grads",
    _records,
    hint="matmul: grad @ b.T for a and a.T @ grad for b; tanh: grad * (1 - out_data ** 2), out_data the forward's tanh(a); relu: grad where a > 0 (strictly), zero elsewhere; total: every entry of a gets the 0-d grad, in an array of a's shape.",
)
### END HIDDEN TESTS


# %% [markdown]
# ## 3. In which order to walk backwards
#
# `backward()` must call each node's closure once, and only when the node's gradient is
# **complete**: after every node that *consumed* it has passed its share back. A
# *topological order* (each node after all its parents), walked in reverse, does it: a
# depth-first search that appends a node **after** visiting its parents (post-order).
# Appending it *before* works on a chain, not on a diamond (one tensor feeding two).
#
# ### Exercise 3 (2 points): `topo_order(root)`
#
# Return a list of every tensor reachable from `root` through `_parents` (root and leaves
# included), each exactly **once** and **after all of its parents**. Recursion is fine here.
# Remember what you visited in a set of `id(tensor)` (tensors are not hashable by value).


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


def _in_order(order, *pairs):
    """Each (parent, child) pair listed, the parent first."""
    _pos = {id(_n): _i for _i, _n in enumerate(order)}
    return all(_pos.get(id(_p), np.inf) < _pos.get(id(_c), -1) for _p, _c in pairs)


_leaf = Tensor(1.0, requires_grad=True)
_n1 = _node(_leaf)
_n2 = _node(_n1)
_chain = _node(_n2)
_order, _error = attempt(topo_order, _chain)
check(
    isinstance(_order, list) and len(_order) == 4,
    f"topo_order should return a list of tensors: a chain of 3 operations on one leaf has 4 (error: {_error}).",
)
check(
    _in_order(_order, (_leaf, _n1), (_n1, _n2), (_n2, _chain)),
    "On a chain, every tensor must come after its parent (leaf first, root last).",
)
_t, _other = _node(_leaf), Tensor(2.0, requires_grad=True)
_mid = _node(_t, _other)
_diamond = _node(_t, _mid)
_order, _error = attempt(topo_order, _diamond)
check(
    isinstance(_order, list) and len(_order) == 5,
    f"A diamond (t feeds two operations) has 5 distinct tensors; topo_order listed another number (error: {_error}). Visit each tensor once: remember id(tensor) in a set.",
)
check(
    _in_order(_order, (_leaf, _t), (_t, _mid), (_other, _mid), (_t, _diamond), (_mid, _diamond)),
    "In the diamond, some tensor comes before one of its parents. Append a node to the list only after visiting all of its parents (post-order).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_prng = random.Random(83)
_graphs = [[Tensor(0.0, requires_grad=True) for _ in range(3)] for _trial in range(4)]
for _pool in _graphs:  # random graphs: 3 leaves, 25 nodes of 1 to 3 parents, a root of 6
    for _k in range(25):
        _pool.append(_node(*_prng.sample(_pool, _prng.randint(1, 3))))
    _pool.append(_node(*_pool[-6:]))
_chain = [Tensor(0.0, requires_grad=True)]  # a chain of 200 operations, then a lone leaf
for _k in range(200):
    _chain.append(_node(_chain[-1]))
_graphs += [_chain, [Tensor(0.0, requires_grad=True)]]
_listed, _before = [], []  # a topological order is not unique: what it lists, and in what order
for _pool in _graphs:
    for _label, _t in enumerate(_pool):  # label each tensor: the records name no ids
        _t.data = np.array(float(_label))
    _order = topo_order(_pool[-1])  # _first: where each tensor is first listed
    _order = _order if isinstance(_order, list) else []
    _order = [_t for _t in _order if isinstance(_t, Tensor) and _t.data.shape == ()]
    _first = {int(_t.data): _i for _i, _t in reversed(list(enumerate(_order)))}
    _listed.append(sorted(int(_t.data) for _t in _order))  # with repeats
    _before.append(  # for each listed tensor, its parents listed before it
        [
            sorted(int(_p.data) for _p in _pool[_l]._parents if _first.get(int(_p.data), _i) < _i)
            for _l, _i in sorted(_first.items())
        ]
    )
observe(
    "topo_order(root) on 4 random graphs (3 leaves, 25 nodes of 1 to 3 parents, a root of 6 parents), a chain of 200 operations and a lone leaf: the tensors it lists, and for each its parents listed before it",
    {"tensors listed": _listed, "parents listed before each": _before},
    hint="List every tensor reachable from root through _parents exactly once (remember id(tensor) in a set), root and leaves included, and append each one only after visiting all its parents (post-order).",
)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The backward pass
#
# 1. Seed the gradient of `root` (a scalar loss) with ones.
# 2. Walk `reversed(topo_order(root))`, keeping the gradients found so far in a dict keyed
#    by `id(tensor)`: call each node's closure with its gradient and **add** each share to
#    what the parent already has (a tensor used twice gets a gradient from each use).
# 3. At a leaf that requires a gradient, **add** the gradient into `.grad` (start from
#    `None`): like PyTorch, two backward passes accumulate.
# 4. Unless `retain_graph=True`, set the `_backward` of every non-leaf node you walked to
#    `graph_freed` (engine cell), which raises the same error PyTorch raises when you go
#    backwards twice. Gradients of intermediate tensors stay in your dict and are dropped,
#    as in PyTorch (where `retain_grad()` would keep them).
#
# ### Exercise 4 (4 points): `backward(root, retain_graph=False)`
#
# Lab 2's function $f(x, y, z) = (x^2 + y)\,z$ at $(-2, 2, 3)$ should give
# $(-12, 3, 6)$: the first check (2 points) tries it; the second, accumulation and freeing.
# These checks, and those of exercise 5, run your code **with stand-ins** for exercises 1 to
# 3 (operations computed by PyTorch, `topo_order` in the order of creation), so a mistake
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


# %% nbgrader={"locked": true, "grade_id": "stand_ins"}
_MADE = itertools.count(1)  # numbers the results the stand-ins make


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
    out._made = next(_MADE)  # topo_order's stand-in sorts by it
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
    saved = {name: globals()[name] for name in STAND_INS if defined(name)}
    globals().update(STAND_INS)
    try:
        yield
    finally:
        for name in STAND_INS:
            globals().pop(name)
        globals().update(saved)


def stand_in_gradients(root, leaves):
    """PyTorch's gradients of a scalar root made by the stand-ins (zeros where unused)."""
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
    check(
        _error is None,
        f"backward((x**2 + y) * z) raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
    )
    check(
        _x.grad is not None,
        "x.grad is None after backward: add the gradient into .grad at each leaf.",
    )
    check(
        _same([_x.grad, _y.grad, _z.grad], [-12, 3, 6]),
        f"f(x, y, z) = (x**2 + y) * z at (-2, 2, 3): expected grads (-12, 3, 6), got ({_x.grad}, {_y.grad}, {_z.grad}).",
    )
    _w = Tensor(1.5, requires_grad=True)
    _, _error = attempt(backward, _w * _w * _w)
    check(
        _error is None,
        f"backward(w * w * w) raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
    )
    check(
        _same(_w.grad, 3 * 1.5**2),
        f"w * w * w at w = 1.5 should give w.grad = 3 w**2 = 6.75 (yours: {_w.grad}): a tensor used several times must receive the SUM of its shares, so add into the dict, do not overwrite.",
    )
    _x = Tensor(0.7, requires_grad=True)
    _t = _x * _x
    _, _error = attempt(backward, _t + _t * Tensor(3.0))
    check(
        _error is None,
        f"backward(t + 3 t) raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
    )
    check(
        _same(_x.grad, 4 * 2 * 0.7),
        f"With t = x * x, t + 3 t at x = 0.7 should give x.grad = 4 * 2x = 5.6 (yours: {_x.grad}): when t feeds two operations, t's closure must run only after both passed their share back, so walk reversed(topo_order(root)).",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_rng = np.random.default_rng(84)
_record = {}
with stand_in_ops():
    for _k in (1, 2, 5):  # lab 1's recurrent cell, with its weight Wh shared k times (lab 3)
        _Wh = Tensor(_rng.normal(size=(3, 3)) * 0.5, requires_grad=True)
        _Wx, _h = Tensor(_rng.normal(size=(3, 2)), requires_grad=True), Tensor(np.zeros((3, 1)))
        for _ in range(_k):
            _h = (_Wx @ Tensor(_rng.normal(size=(2, 1))) + _Wh @ _h).tanh()
        backward(_h.sum())
        _record[f"Wh.grad, Wx.grad, {_k} step(s)"] = [_plain(_Wh.grad), _plain(_Wx.grad)]
    _r, _u = Tensor(_rng.normal(), requires_grad=True), Tensor(_rng.normal(size=2), True)
    _c = Tensor(_rng.normal(size=(2,)))
    backward(_r)  # the root itself a leaf; then a leaf that needs no gradient beside one that does
    backward((_u * _c).sum())
    _grads = [_plain(_r.grad), _plain(_u.grad)]
    _record["r.grad after backward(r); u.grad after backward((u * c).sum())"] = _grads
    _record["c.grad is None"] = _c.grad is None
observe(
    "backward() of lab 1's recurrent cell unrolled 1, 2 and 5 steps, tanh(Wx @ x + Wh @ h), the weights shared by the steps (random values); backward(r) of a leaf r itself; backward() of (u * c).sum(), u needing a gradient and c not",
    _record,
    hint="Seed the root's gradient with ones (even when the root is a leaf), walk reversed(topo_order(root)) calling each node's closure, and add each share into its parent's entry of the dict (a tensor used several times gets the SUM of its shares); at each leaf that requires a gradient, add it into .grad.",
)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_backward_state", "points": 2}
with stand_in_ops():
    _w = Tensor(2.0, requires_grad=True)
    _y = _w**3
    _, _error = attempt(backward, _y, retain_graph=True)
    check(
        _error is None,
        f"backward(w**3, retain_graph=True) raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
    )
    _, _error = attempt(backward, _y)
    check(
        _error is None,
        f"A second backward(w**3), after one with retain_graph=True, raised an error (the error: {_error}): with retain_graph=True the graph must stay usable.",
    )
    check(
        _same(_w.grad, 24.0),
        f"Two backward passes of w**3 at w = 2 should leave w.grad = 12 + 12 = 24 (yours: {_w.grad}): at a leaf, add the new gradient to .grad instead of replacing it.",
    )
    _, _error = attempt(backward, _y)
    check(
        str(_error).startswith("RuntimeError"),
        "A third backward() on the same graph, after a call without retain_graph=True, should raise RuntimeError: set the _backward of every non-leaf node to graph_freed at the end.",
    )
    _u = Tensor(2.0, requires_grad=True)
    _mid = _u * 3.0
    _, _error = attempt(backward, _mid * _mid)
    check(
        _error is None,
        f"backward((u * 3) * (u * 3)) raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
    )
    check(
        _mid.grad is None,
        "After backward(), an intermediate tensor (here u * 3.0) has a .grad: only leaves get .grad. Keep the gradients of intermediate tensors in your dict and let them go at the end, as PyTorch does (unless retain_grad() is called).",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_rng = np.random.default_rng(85)
with stand_in_ops():
    _w = Tensor(_rng.uniform(0.5, 2.0), requires_grad=True)
    _y = _w**3
    backward(_y, retain_graph=True)
    backward(_y)
    _record = {"w.grad after two calls": _plain(_w.grad)}
    _record["third call raised RuntimeError"] = str(attempt(backward, _y)[1]).startswith("Runtime")
    _A = Tensor(_rng.normal(size=(3, 2)), requires_grad=True)
    _loss = ((_A @ Tensor(_rng.normal(size=(2, 2)))).tanh() * _rng.normal(size=(3, 2))).sum()
    backward(_loss, retain_graph=True)
    backward(_loss)
    _record["A.grad after two calls"] = _plain(_A.grad)
    _record["non-leaf tensors not freed after the second call"] = sum(  # the stand-in's walk
        not (_t.is_leaf or _t._backward is graph_freed) for _t in _in_made_order(_loss)
    )
observe(
    "w**3 at a random w, and ((A @ B).tanh() * R).sum() with random A (3, 2): backward(retain_graph=True), then backward() (then a third call on w**3)",
    _record,
    hint="At a leaf, add the new gradient to .grad; without retain_graph=True, set the _backward of every non-leaf node you walked to graph_freed at the end (with retain_graph=True, leave the graph as it is).",
)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. DynamicNet on your engine
#
# DynamicNet draws a depth from 0 to 3 on every forward pass and applies its middle layer
# that many times: every pass adds nodes, and the shared weight collects one gradient per use.
#
# ### Exercise 5 (2 points): `dynamic_net(x, params, depth)`
#
# With `params` (`W_in`, `b_in`, `W_mid`, `b_mid`, `W_out`, `b_out`; a weight of shape
# `(in, out)`, a bias `(out,)`) and a batch `x` of shape `(batch, in)`, return
#
# $$h = \text{relu}(x W_{in} + b_{in}),\quad
#   h \leftarrow \text{relu}(h\,W_{mid} + b_{mid}) \text{ (depth times)},\quad
#   \text{out} = h\,W_{out} + b_{out}$$
#
# DynamicNet's forward pass without its `log_softmax` (our engine has no `exp` or `log`).


# %% nbgrader={"solution": true, "grade_id": "dynamic_net"}
def dynamic_net(x, params, depth):
    ### BEGIN SOLUTION
    h = (x @ params["W_in"] + params["b_in"]).relu()
    for _ in range(depth):
        h = (h @ params["W_mid"] + params["b_mid"]).relu()
    return h @ params["W_out"] + params["b_out"]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_dynamic_net", "points": 2}
_sizes = dict(W_in=(4, 6), b_in=(6,), W_mid=(6, 6), b_mid=(6,), W_out=(6, 3), b_out=(3,))


def _torch_net(x, params, depth):  # dynamic_net in PyTorch
    hidden = torch.relu(x @ params["W_in"] + params["b_in"])
    for _ in range(depth):
        hidden = torch.relu(hidden @ params["W_mid"] + params["b_mid"])
    return hidden @ params["W_out"] + params["b_out"]


def _replay(depths, start, batch):
    """dynamic_net run on the stand-ins for each depth in turn: its outputs, and the gradients
    of (out**2).sum() added up over the depths, by PyTorch through the stand-ins."""
    _ours = {_n: Tensor(_v, requires_grad=True) for _n, _v in start.items()}
    _outs, _grads = [], {_n: np.zeros(np.shape(_v)) for _n, _v in start.items()}
    with stand_in_ops():
        for _d in depths:
            _o = dynamic_net(Tensor(batch), _ours, _d)
            _outs.append(np.array(_o.data) if isinstance(_o, Tensor) else "not a Tensor")
            if not isinstance(_o, Tensor):
                continue
            _found = stand_in_gradients((_o**2).sum(), list(_ours.values()))
            for _n, _g in zip(_ours, _found, strict=True):
                _grads[_n] = _grads[_n] + _g
    return _outs, _grads


_rng = np.random.default_rng(4)
_start = {_n: _rng.normal(size=_s) * 0.5 for _n, _s in _sizes.items()}
_batch = _rng.normal(size=(5, 4))
_params = {_n: Tensor(_v) for _n, _v in _start.items()}
with stand_in_ops():
    _o, _error = attempt(dynamic_net, Tensor(_batch), _params, 2)
check(
    _error is None,
    f"dynamic_net(x, params, 2) on a batch of 5 raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    isinstance(_o, Tensor) and _o.shape == (5, 3),
    "dynamic_net should return a Tensor of shape (batch, 3).",
)
_result, _error = attempt(_replay, [2, 0, 3], _start, _batch)
check(
    _error is None,
    f"dynamic_net with the dice throws 2, 0, 3 raised an error (the error: {_error}): call it in a cell of your own with each depth to see the whole message.",
)
_outs, _grads = _result
_ref = {_n: torch.tensor(_v, requires_grad=True) for _n, _v in _start.items()}
_touts = [_torch_net(torch.tensor(_batch), _ref, _d) for _d in (2, 0, 3)]
sum((_o**2).sum() for _o in _touts).backward()
check(
    all(_same(_a, _b.detach().numpy()) for _a, _b in zip(_outs, _touts, strict=True)),
    "dynamic_net's output differs from the formula: relu after the input and every middle layer, none after the output layer.",
)
for _n in _sizes:
    check(
        _same(_grads[_n], _ref[_n].grad.numpy()),
        f"The gradient of one parameter, added up over the dice throws 2, 0, 3, differs from PyTorch's (of {_n}): is it used as in the formula, and kept in the graph (no .data, no Tensor(...) around a result)?",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_rng = np.random.default_rng(86)
_cases = [(int(_rng.integers(1, 8)), [int(_d) for _d in _rng.integers(0, 4, size=6)])]
_cases += [(1, [0]), (3, [6, 0, 1])]  # a batch of one at depth 0; a depth beyond the die's 3
for _size, _depths in _cases:
    _start = {_n: _rng.normal(size=_s) * 0.5 for _n, _s in _sizes.items()}
    _outs, _grads = _replay(_depths, _start, _rng.normal(size=(_size, 4)))
    observe(
        f"dynamic_net(x, params, depth) on a random batch of {_size}, depths {_depths}: the outputs, and the gradients of (out**2).sum() added up over the depths (by PyTorch, through the stand-ins)",
        {"outputs": [_plain(_o) for _o in _outs]}
        | {f"{_n}.grad": _plain(_grads[_n]) for _n in sorted(_sizes)},
        hint="relu after the input layer and after each of the depth middle layers (all with W_mid and b_mid), none after the output layer; use every parameter as in the formula, and keep every result in the graph: no .data, no new Tensor(...) around a result.",
    )
### END HIDDEN TESTS
# %% [markdown]
# # Part B: static versus dynamic in today's PyTorch
#
# ## 6. What the compiler sees
#
# `torch.compile` does the opposite: its front end, TorchDynamo, reads a function's Python
# bytecode and extracts a graph of tensor operations to optimise. Where it meets something
# it cannot put in a graph, it makes a **graph break**: the graph ends, that bit runs as
# Python, and a new graph starts after it (`compiled_graphs(fn, *args)`, setup cell, returns
# the graphs). In DynamicNet the graph stops at the `for` line: Python needs `depth` as a
# plain `int` to know how many times the loop runs. With torch 2.14 and 2.15, a second graph
# holds the rest, unrolled for the depth that was drawn; with torch 2.10 there is no second
# graph: the compiler gives up on the rest of `forward`, which runs as plain Python.


# %%
# %course-include dynamicnet.py


def depth_that_ran(y):  # compare with the eager network at each fixed depth
    return next(d for d in range(4) if torch.allclose(y, net(batch, depth=d)))


net = DynamicNet(4, 6, 3, seed=0)
batch = torch.randn(5, 4)
if GRADING:  # while graded, nothing below is checked: its six compilations are skipped
    print("(grading mode: the compiled runs are skipped)")
else:
    for number, graph_module in enumerate(compiled_graphs(net, batch), 1):
        print(f"graph {number}: {op_names(graph_module)}")
    print("depth drawn:", net.last_depth, "- does a compiled DynamicNet keep its first throw?")
    graphs = []  # the graphs the compiler hands to the backend when the depth is passed in
    with torch.no_grad():
        print("eager net(batch), depths  :", [(net(batch), net.last_depth)[1] for _ in range(12)])
        torch.compiler.reset()
        compiled = torch.compile(net, backend="eager")
        print("compiled net(batch)       :", [depth_that_ran(compiled(batch)) for _ in range(12)])
        depths = random.Random(1).choices(range(4), k=12)
        torch.compiler.reset()
        compiled = torch.compile(net, backend=keeping_backend(graphs))
        print("compiled net(batch, depth):", [depth_that_ran(compiled(batch, d)) for d in depths])
    print(f"depths passed in: {depths}; {len(graphs)} graphs compiled")

# %% [markdown]
# With torch 2.14.1, the version this lab was written with, it does: every compiled call
# runs the depth of the first throw, and nothing warns. TorchDynamo made the draw
# `self.rng.randint(0, 3)` once, while tracing the first call, and kept the number; the
# model's `rng` is not called again. Torch 2.10 does the same; torch 2.15 calls the `rng`
# on every call, as eager mode does. (`random.randint(0, 3)` is drawn anew on every call,
# and `x * random.randint(0, 3)` compiles into one graph.) What does your version print?
# Draw outside the compiled code and pass the depth in. One graph per depth, and no break:
# the compiler specialises a graph on the value of a Python `int` argument, guards on it,
# and compiles again (a *recompilation*) when a call brings a value it has no graph for;
# after that each depth reuses its own graph.
#
# The loop of `grow` below runs *while a property of the data* holds (lab 5's
# `NormLoopNet`): its condition is a tensor, known only when the data is there, like the
# `if` of `branchy`. `fullgraph=True` turns every graph break into an error: `torch.export`
# needs a single graph that can be saved and run without Python.


# %%
def grow(x, w):
    while x.norm() < 10:
        x = x + torch.relu(x @ w) + 0.5
    return x


def branchy(x, w1, w2):
    if x.sum() > 0:
        return torch.tanh(x @ w1)
    return torch.relu(x @ w2)


w_grow = torch.randn(4, 4) * 0.3
w1, w2 = torch.randn(4, 2), torch.randn(4, 2)
print("grow:", len(compiled_graphs(grow, batch[:1], w_grow)), "graphs")
print("branchy:", len(compiled_graphs(branchy, batch, w1, w2)), "graphs")
torch.compiler.reset()
_, error = attempt(torch.compile(branchy, backend="eager", fullgraph=True), batch, w1, w2)
print("branchy with fullgraph=True:", error or "compiled")

# %% [markdown]
# ## 7. Control flow the compiler can keep
#
# The decision itself must become a graph operation. `torch.cond(pred, true_fn, false_fn,
# operands)` takes a boolean tensor of one element and two functions of the same operands
# that return tensors of the **same shape and dtype**. Both branches are traced into the
# graph; which one runs is decided at run time. Its documentation calls it a *prototype*
# feature, with limited support for input and output types. A loop whose trip count
# depends on data can be **bounded**: a fixed number of steps, each doing nothing once the
# condition fails, with `torch.where(condition, new_value, old_value)`.
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
_x, _w1, _w2 = torch.randn(5, 4), torch.randn(4, 2), torch.randn(4, 2)
for _sign in (1.0, -1.0):
    _xs = _sign * _x.abs()
    _got, _error = attempt(branchy_cond, _xs, _w1, _w2)
    check(
        _error is None,
        f"branchy_cond(x, w1, w2) on a (5, 4) x raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
    )
    check(
        isinstance(_got, torch.Tensor)
        and _got.shape == (5, 2)
        and torch.allclose(_got, branchy(_xs, _w1, _w2)),
        f"branchy_cond differs from branchy for one sign of x.sum() (when it is {'positive' if _sign > 0 else 'negative'}): tanh(x @ w1) when the sum is positive, relu(x @ w2) otherwise.",
    )
_graphs, _error = attempt(compiled_graphs, branchy_cond, _x, _w1, _w2)
check(
    _error is None,
    f"torch.compile could not compile branchy_cond (the error: {_error}): run compiled_graphs(branchy_cond, x, w1, w2) in a cell of your own to see the whole message.",
)
check(
    len(_graphs) == 1,
    f"branchy_cond should compile into one graph, not another number (here: {len(_graphs)}; none: the compiler gave up on it; several: graph breaks between them). Use torch.cond instead of a Python if on a tensor.",
)
check(
    any("cond" in _call for _call in op_names(_graphs[0])),
    "branchy_cond compiles into one graph, but without torch.cond (torch.where?), so it computes both branches and keeps one. This exercise asks for torch.cond: its graph holds both branches and runs only the one chosen (the next cells look for that cond node).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_noted = []  # the graphs TorchDynamo hands to the backend
torch.compiler.reset()
_compiled = torch.compile(branchy_cond, backend=keeping_backend(_noted), fullgraph=True)
_gen = torch.Generator().manual_seed(87)
_record = {}
for _trial in range(2):  # compiled, float64, the sum negative then positive; with gradients
    _x = torch.randn(3, 4, dtype=torch.float64, generator=_gen) + (1.0 if _trial else -1.0)
    _ws = [torch.randn(4, 2, dtype=torch.float64, generator=_gen, requires_grad=True) for _ in "12"]
    _y = _compiled(_x, *_ws)
    _gs = "no grad_fn"  # recorded as it is when the result is not in the autograd graph
    if isinstance(_y, torch.Tensor) and _y.grad_fn is not None:
        _gs = torch.autograd.grad(_y.sum(), _ws, allow_unused=True)  # cond: zeros for the other
        _gs = [torch.zeros_like(_w) if _g is None else _g for _g, _w in zip(_gs, _ws, strict=True)]
    _record[f"compiled, trial {_trial + 1}"] = {"output": _y, "gradients of w1 and w2": _gs}
_conds = sum("cond" in _t for _g in _noted for _t in op_names(_g))
_record["graphs compiled, cond operations"] = [len(_noted), _conds]
# eager, at the boundary (x.sum() exactly 0: relu(x @ w2)) and on random x of either sign
_zero_sum = torch.tensor([[1.0, -2.0, 0.5, 0.5], [3.0, -1.0, -2.0, 0.0]])
_xs = [_zero_sum, torch.rand(2, 4, generator=_gen), -torch.rand(2, 4, generator=_gen)]
for _trial, _x in enumerate(_xs):
    _record[f"eager, x {_trial + 1} (the first sums to exactly 0)"] = branchy_cond(
        _x, torch.randn(4, 3, generator=_gen), torch.randn(4, 3, generator=_gen)
    )
observe(
    "branchy_cond compiled with fullgraph=True on 2 random float64 x (3, 4), with the gradients of w1 and w2; in eager mode on x (2, 4) whose sum is exactly 0, then > 0, < 0",
    _record,
    hint="One torch.cond(x.sum() > 0, true_fn, false_fn, (x, w1, w2)): tanh(x @ w1) when the sum is positive (strictly: a sum of exactly 0 takes relu(x @ w2)), relu(x @ w2) otherwise, and no Python if on a tensor.",
)
### END HIDDEN TESTS

# %% [markdown]
# A single graph can be exported. `torch.export.export` traces **non-strict** by default
# (its `strict` argument, printed below): it runs your Python code once, as in eager mode,
# recording what the tensors do (`strict=True` traces with TorchDynamo). A Python `if` on a
# tensor's value cannot be decided while tracing, so exporting `branchy` stops with an
# error, in both modes; `branchy_cond` exports, its `cond` node holding both branches.
# Python decisions on plain values are made once, at export time: export DynamicNet without
# `strict`: its die is thrown once, and no error says so (with `strict=True`, export refuses
# it). Through `cond`, the branch that did not run gives its weight a gradient of zeros,
# where eager `branchy` gives `None` (that weight was not in the call's graph at all).

# %%
strict_default = inspect.signature(torch.export.export).parameters["strict"].default
exported_net = torch.export.export(net, (batch,))
layers = [n for n in exported_net.graph.nodes if n.target is torch.ops.aten.linear.default]
runs = [exported_net.module()(batch) for _ in range(5)]
print(f"export(..., strict={strict_default}) by default; exported DynamicNet: depth", end=" ")
print(f"{len(layers) - 2}; 5 calls, one output:", all(torch.equal(runs[0], r) for r in runs))
w1g, w2g = torch.randn(4, 2, requires_grad=True), torch.randn(4, 2, requires_grad=True)
with your_code("branchy_cond"):
    grad_cond = torch.autograd.grad(branchy_cond(batch.abs(), w1g, w2g).sum(), [w2g])[0]
print("cond:  grad of w2 =", grad_cond.flatten())
grad_eager = torch.autograd.grad(branchy(batch.abs(), w1g, w2g).sum(), [w2g], allow_unused=True)
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
check(
    _error is None,
    f"grow_bounded(x, w) on a (1, 4) x raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    isinstance(_got, torch.Tensor)
    and _got.shape == (1, 4)
    and torch.allclose(_got, grow(_x, w_grow)),
    "grow_bounded differs from grow: once x.norm() >= 10, the remaining steps must leave x unchanged.",
)
_got0, _ = attempt(grow_bounded, _x, w_grow, max_steps=0)
_got1, _ = attempt(grow_bounded, _x, w_grow, max_steps=1)
check(
    isinstance(_got0, torch.Tensor)
    and isinstance(_got1, torch.Tensor)
    and _got0.shape == _got1.shape == (1, 4)
    and torch.allclose(_got0, _x)
    and torch.allclose(_got1, _x + torch.relu(_x @ w_grow) + 0.5),
    "grow_bounded(x, w, max_steps=0) should return x unchanged, and max_steps=1 take exactly one step: loop over range(max_steps), the argument.",
)
_graphs, _error = attempt(compiled_graphs, grow_bounded, _x, w_grow)
check(
    _error is None,
    f"torch.compile could not compile grow_bounded (the error: {_error}): run compiled_graphs(grow_bounded, x, w) in a cell of your own to see the whole message.",
)
check(
    len(_graphs) == 1,
    f"grow_bounded should compile into one graph, not another number (here: {len(_graphs)}; none: the compiler gave up on it; several: graph breaks between them). No Python if or while on a tensor: use torch.where.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_noted = []  # the graphs TorchDynamo hands to the backend
torch.compiler.reset()
# 12 steps, not 30: the compiler unrolls every step; from entries >= -2 grow stops within 12.
_compiled = torch.compile(
    lambda x, w: grow_bounded(x, w, max_steps=12), backend=keeping_backend(_noted), fullgraph=True
)
_gen = torch.Generator().manual_seed(88)
_record = {}
for _trial in range(4):
    _x = (torch.randn(2, 4, generator=_gen) * 0.5).clamp(-2, 2)
    _w = torch.randn(4, 4, generator=_gen) * 0.3
    _ys = [_compiled(_x, _w), grow_bounded(_x, _w)]
    _record[f"random x (2, 4) and w (4, 4), trial {_trial + 1}: compiled, eager"] = _ys
_record["graphs compiled"] = len(_noted)
for _trial in range(2):  # the lab trains through the loop: the gradients it lets through
    _xw = [torch.randn(_n, 4, generator=_gen).clamp(-1, 1).requires_grad_() for _n in (2, 4)]
    _y = grow_bounded(*_xw)
    _ok = isinstance(_y, torch.Tensor) and _y.grad_fn is not None  # else: not in the graph
    _gs = torch.autograd.grad((_y**2).sum(), _xw, allow_unused=True) if _ok else "no grad_fn"
    _record[f"gradients of (out**2).sum() for x and w, trial {_trial + 1}"] = _gs
# With a (1, 1) x = c and w = 0 each step adds exactly 0.5: c = -4.75 needs exactly 30 steps
# (the default bound), c = -5.25 needs 31, and c = -4 reaches a norm of exactly 10 after 28.
_w0 = torch.zeros(1, 1)
for _c in (-4.75, -5.25, -4.0):
    _record[f"x = {_c}, w = 0, the default max_steps"] = grow_bounded(torch.full((1, 1), _c), _w0)
for _k in (0, 1, 29, 31, 45):
    _record[f"x = -4.75, w = 0, max_steps={_k}"] = grow_bounded(torch.full((1, 1), -4.75), _w0, _k)
observe(
    "grow_bounded on random x and w (compiled with fullgraph=True and max_steps=12, and eager), and from a (1, 1) x = c with w = 0 at and beside the bounds: 30 steps to go, 31, a norm of exactly 10 after 28 steps, and max_steps = 0, 1, 29, 31, 45",
    _record,
    atol=1e-5,
    hint="Each of the max_steps steps (30 by default, the argument) computes x + relu(x @ w) + 0.5 and keeps it only while x.norm() < 10 (strictly), with torch.where: no Python if or while on a tensor, and nothing taken out of the graph (no .detach(), .data or .item()).",
)
### END HIDDEN TESTS

# %% [markdown]
# ## 8. `torch.while_loop`: the loop as one operation
#
# The bounded loop compiles into one graph, but the compiler unrolled all `max_steps`
# steps, and every call runs them all. `torch.while_loop(cond_fn, body_fn, carried_inputs)`
# runs `body_fn` as long as `cond_fn` says so, and the compiler keeps the whole loop as
# **one** operation of the graph, with the condition and the body as subgraphs:
# `torch.while_loop(lambda x: x.norm() < 10, lambda x: (x + torch.relu(x @ w) + 0.5,), (x,))`
# is `grow` in one graph. Break its rules and it refuses: `body_fn` must return the state
# with the **same shapes and dtypes**, and `cond_fn` a **boolean** tensor of one element.
# Outside `torch.compile`, it compiles its functions itself on the first call. Its
# documentation calls it a *prototype* feature that does not support training yet. In eager
# mode it returns a tensor with a `grad_fn` all the same, but with torch 2.10 to 2.15 its
# gradient of a `w` that the body reads from outside is wrong, and nothing warns (it comes out
# right when the carried `x` requires a gradient too). Train through the bounded loop, at the
# price of always running all its steps.
