# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 1: The forward pass builds the graph
#
# NumPy computes a number and forgets how it got there. PyTorch computes the same number
# and, when a tensor asks for gradients, it also writes down *how* the number was made:
# one node per operation, linked to the nodes of its inputs. That record is the
# **computational graph**, and PyTorch builds it again, from scratch, every time your code
# runs. Nothing is declared in advance: the graph is whatever your Python actually did.
#
# In this lab you will:
#
# 1. build the graph of one step of a recurrent cell, operation by operation, and look at
#    it after each step;
# 2. walk the graph by hand through `grad_fn` and `next_functions`, then write a function
#    that walks it for you;
# 3. predict which tensors are tracked (`requires_grad`, `is_leaf`, `grad_fn`) before
#    PyTorch tells you, then write the rules down as a function;
# 4. find, from the graph alone, which tensors will receive a gradient.
#
# %course-include how_this_lab_works.md

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
print("torch", torch.__version__)

# %% [markdown]
# ## 1. One step of a recurrent cell, built step by step
#
# Our running example is the update of a tiny recurrent network: a hidden state `h` of 3
# numbers and an input `x` of 2 numbers are mixed by two weight matrices and squashed by
# $\tanh$; we then sum the new state to get one number to differentiate later.
#
# $$\text{i2h} = W_x x,\qquad \text{h2h} = W_h h,\qquad
#   \text{next\_h} = \tanh(\text{i2h} + \text{h2h}),\qquad
#   \text{out} = \textstyle\sum_i \text{next\_h}_i$$
#
# | tensor | shape | requires a gradient? |
# |---|---|---|
# | `Wh` | 3 x 3 | yes: a parameter we will train |
# | `Wx` | 3 x 2 | yes: a parameter we will train |
# | `x` | 2 x 1 | no: data |
# | `h` | 3 x 1 | no: the previous state, given |
#
# We start with the four inputs alone. None of them was computed from anything, so none
# has a `grad_fn` yet: there is no graph.

# %%
Wh = torch.randn(3, 3, requires_grad=True)
Wx = torch.randn(3, 2, requires_grad=True)
x = torch.randn(2, 1)
h = torch.randn(3, 1)
params = {"Wh": Wh, "Wx": Wx}  # names for draw(): make_dot labels these leaves

for _name, _t in [("Wh", Wh), ("Wx", Wx), ("x", x), ("h", h)]:
    print(
        f"{_name}: shape {tuple(_t.shape)}, requires_grad={_t.requires_grad}, grad_fn={_t.grad_fn}"
    )

# %% [markdown]
# **Step 1.** Multiply the input by its weights. The result remembers the operation that
# made it: `i2h.grad_fn` is a node called `MmBackward0` ("the backward of a matrix
# multiply"), and PyTorch prints it next to the values.

# %%
i2h = Wx @ x
print(i2h)
draw(i2h, params=params)

# %% [markdown]
# **Step 2.** The same for the hidden state. A second, separate `MmBackward0` node appears:
# one node per operation that ran, even when two operations are of the same kind.

# %%
h2h = Wh @ h
print(h2h)
draw(h2h, params=params)

# %% [markdown]
# **Step 3.** Add the two and apply $\tanh$. We write it the way people often do, reusing
# one name: `next_h` first names the sum, then the $\tanh$ of the sum. Python moves the
# *name*, but the graph keeps the old tensor's node: the sum is still there, just without
# a variable pointing at it.

# %%
next_h = i2h + h2h
print("the sum:     ", next_h.grad_fn)
next_h = torch.tanh(next_h)
print("after tanh:  ", next_h.grad_fn)
print("and its input is still the sum:", next_h.grad_fn.next_functions[0][0])
draw(next_h, params=params)

# %% [markdown]
# **Step 4.** Sum the three hidden units into the scalar `out`. This is the complete graph.

# %%
out = next_h.sum()
print(out)
draw(out, params=params)

# %% [markdown]
# ### Reading a torchviz picture
#
# `draw(t)` calls torchviz's `make_dot(t)` and turns it into a picture with Graphviz's `dot`
# or `graphviz-pure` (with neither, it prints the graph's nodes and edges as text and says
# how to get pictures; everything else in this lab works without them). In the
# picture, the **arrows follow the forward pass**: from each leaf, through the operations
# that used it, to the output. `backward()` walks the same arrows the other way, from the
# output back to the leaves. The colours mean:
#
# * **grey** boxes are backward nodes, the `grad_fn` objects: `SumBackward0`,
#   `TanhBackward0`, `AddBackward0`, `MmBackward0`, and `AccumulateGrad`;
# * **blue** boxes are leaf tensors that require a gradient (here `Wh` and `Wx`, named
#   because we passed `params=`): the tensors whose `.grad` `backward()` will fill, each
#   hanging from its own `AccumulateGrad` node;
# * the **green** box is the tensor you asked to draw (`out`);
# * **orange** boxes appear with `show_saved=True`: the tensors a node *saved* during the
#   forward pass because its derivative needs them. $\tanh'(a) = 1 - \tanh^2(a)$ needs the
#   result. The gradient of `Wx @ x` with respect to `Wx` is `grad @ x.T`, so that matrix
#   multiply saved `x` (its `mat2`); it did not save `Wx`, which only `x`'s gradient would
#   need, and nobody asked for that one.
#
# `show_attrs=True` prints the non-tensor attributes a node saved, such as the shape of
# the tensor that `sum` reduced, inside the grey boxes. `x` and `h` appear only as saved
# `mat2` boxes, never as blue leaves with their own `AccumulateGrad`: they do not require
# gradients, so no gradient will ever flow to them.
#
# You can read the saved tensors in code too: their names start with `_saved_`.

# %%
draw(out, params=params, show_saved=True, show_attrs=True)

# %%
tanh_node = next_h.grad_fn
print("TanhBackward0 saved its result:", torch.equal(tanh_node._saved_result, next_h))
mm_node = i2h.grad_fn
print("MmBackward0 saved x as mat2:   ", torch.equal(mm_node._saved_mat2, x))
print("and did not save Wx (self):     ", mm_node._saved_self is None)
print("SumBackward0 saved the input shape:", out.grad_fn._saved_self_sym_sizes)

# %% [markdown]
# ## 2. Walking the graph by hand: `grad_fn` and `next_functions`
#
# Every node has a tuple `next_functions`: one entry `(node, index)` per input of the
# operation, pointing at the node that produced that input. An input that does not need a
# gradient gives `(None, 0)`. Start at `out.grad_fn` and follow the first entry each time:

# %%
node = out.grad_fn
for _step in range(4):
    print(f"{type(node).__name__:>15}  next_functions = {node.next_functions}")
    node = node.next_functions[0][0]
print(f"{type(node).__name__:>15}  next_functions = {node.next_functions}")

# %% [markdown]
# The walk ended at an `AccumulateGrad` node with no inputs. That is what a **leaf** that
# requires a gradient looks like from inside the graph: `backward()` arrives there and
# *accumulates* (adds) the incoming gradient into the tensor's `.grad`. The node holds on to
# its tensor as `.variable`. Notice also the `(None, 0)` in the matrix multiply's
# `next_functions`: that is `x`, which needs no gradient, so there is nothing to walk to.

# %%
mm_node = i2h.grad_fn
acc = mm_node.next_functions[0][0]
print(mm_node.next_functions)
print("acc.variable is Wx:", acc.variable is Wx)

# %% [markdown]
# ### A tensor used twice is one node with two edges
#
# What if the same tensor feeds two operations? The graph does **not** copy it: there is
# one node, and two arrows lead to it. For `a * a` the multiply's two inputs are the very
# same `AccumulateGrad` object. For an intermediate tensor `u` used by `sin` and `cos`,
# both branches point back at the one `MmBackward0` that made `u`. (This is why, in lab 3,
# a weight used twice gets the *sum* of two gradients.)

# %%
a = torch.randn(3, requires_grad=True)
sq = (a * a).sum()
first, second = sq.grad_fn.next_functions[0][0].next_functions
print("a * a:", first[0], second[0], "same node:", first[0] is second[0])

u = Wx @ x
branches = (u.sin() + u.cos()).sum()
add_node = branches.grad_fn.next_functions[0][0]
sin_node, cos_node = (pair[0] for pair in add_node.next_functions)
print(
    "sin and cos lead to the same MmBackward0:",
    sin_node.next_functions[0][0] is cos_node.next_functions[0][0],
)
draw(branches)

# %% [markdown]
# ### Exercise 1 (4 points): walk the whole graph
#
# Write `walk(t)` that returns `(nodes, edges)`, the graph behind the tensor `t`:
#
# * `nodes`: a list of the backward nodes reachable from `t.grad_fn` (the `grad_fn`
#   objects themselves, `AccumulateGrad` nodes included), **each node exactly once**,
#   starting with `t.grad_fn`. The order of the others is up to you (breadth-first, in the
#   order of `next_functions`, is a natural choice).
# * `edges`: a list of pairs `(parent, child)`, one for **every** entry of
#   `parent.next_functions` whose node is not `None`; `child` is that node. So `a * a`
#   gives the pair `(MulBackward0, AccumulateGrad)` twice: a tensor used twice is two
#   edges into one node.
# * If `t.grad_fn` is `None` (a leaf, or a tensor that is not tracked), return `([], [])`.
#
# Compare nodes by identity (`is`, or `id(node)` in a set while `nodes` holds the node itself:
# an `id` may be reused once its object is freed), not by name: the recurrent
# cell has two different nodes both called `MmBackward0`.
#
# `show_graph(nodes, edges)` (defined below) prints your result, numbering the nodes so that
# two nodes with the same name can be told apart.


# %% nbgrader={"locked": true, "grade_id": "graph_helpers"}
def node_name(node):
    """The class name of a backward node, e.g. 'MmBackward0' or 'AccumulateGrad'."""
    return type(node).__name__


def show_graph(nodes, edges):
    """Print a graph given as (nodes, edges); nodes are numbered in the order of `nodes`."""
    number = {id(n): i for i, n in enumerate(nodes)}

    def label(n):
        return f"{node_name(n)}#{number.get(id(n), '?')}"

    print(f"{len(nodes)} nodes, {len(edges)} edges")
    for parent, child in edges:
        print(f"  {label(parent):>20} -> {label(child)}")


def _graph_problems(result, t, expected_nodes, expected_edges):
    """Plain-words differences between a student's walk(t) and the expected graph."""
    from collections import Counter

    if not (isinstance(result, tuple) and len(result) == 2):
        return ["walk(t) should return a tuple (nodes, edges)."]
    nodes, edges = result
    if not isinstance(nodes, list) or not isinstance(edges, list):
        return ["walk(t) should return two lists: (nodes, edges)."]
    problems = []
    counts = Counter(id(n) for n in nodes)
    twice = {node_name(n) for n in nodes if counts[id(n)] > 1}
    if twice:
        problems.append(
            f"these nodes are listed more than once: {sorted(twice)}. A node reached along "
            "two paths is still one node: remember which nodes you have already visited."
        )
    want = {id(n): n for n in expected_nodes}
    missing = sorted(node_name(n) for i, n in want.items() if i not in counts)
    extra = sorted({node_name(n) for n in nodes if id(n) not in want})
    if any(n is None for n in nodes):
        problems.append("nodes contains None: skip the (None, 0) entries of next_functions.")
    if missing:
        problems.append(f"nodes is missing {missing}.")
    if extra:
        problems.append(f"nodes has nodes that are not in the graph: {extra}.")
    if nodes and nodes[0] is not t.grad_fn:
        problems.append("nodes[0] should be t.grad_fn, the node where the walk starts.")
    try:
        got = Counter((id(p), id(c)) for p, c in edges)
    except (TypeError, ValueError):
        return problems + ["every edge should be a pair (parent, child) of nodes."]
    names = {id(n): node_name(n) for n in expected_nodes}
    for (p, c), k in Counter((id(p), id(c)) for p, c in expected_edges).items():
        if got.get((p, c), 0) != k:
            problems.append(
                f"the edge {names[p]} -> {names[c]} should appear {k} time(s), you have it "
                f"{got.get((p, c), 0)} time(s). Every non-None entry of next_functions is one edge."
            )
    wanted = {(id(p), id(c)) for p, c in expected_edges}
    if any(pair not in wanted for pair in got):
        problems.append(
            "edges has pairs that are not edges of the graph: each pair must be (parent, child) "
            "with child taken from parent.next_functions (check the order inside the pair)."
        )
    return problems


# %% nbgrader={"solution": true, "grade_id": "walk"}
def walk(t):
    ### BEGIN SOLUTION
    if t.grad_fn is None:
        return [], []
    nodes, edges = [t.grad_fn], []
    seen = {id(t.grad_fn)}
    i = 0
    while i < len(nodes):
        parent = nodes[i]
        i += 1
        for child, _index in parent.next_functions:
            if child is None:
                continue
            edges.append((parent, child))
            if id(child) not in seen:
                seen.add(id(child))
                nodes.append(child)
    return nodes, edges
    ### END SOLUTION


# %%
show_graph(*walk(out))


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_walk_chain"}
### BEGIN HIDDEN TESTS
# Defined before the visible checks, so that test_walk_shared can use it even when a check
# here fails (a failed check stops the rest of its cell).
def _graph_record(result, made_by, leaves):
    """walk(t)'s answer in words that do not depend on the order the student chose: a node is
    named by the tensor it made (`made_by`: name -> tensor), an AccumulateGrad node by the
    tensor it fills (`leaves`: name -> tensor), anything else by its class; lists sorted."""
    named = [(t.grad_fn, name) for name, t in made_by.items()]  # keeps the node objects alive

    def label(n):
        if hasattr(n, "variable"):
            return next(
                (f"AccumulateGrad of {name}" for name, v in leaves.items() if n.variable is v),
                "AccumulateGrad of another tensor",
            )
        return next((name for node, name in named if node is n), f"another {type(n).__name__}")

    if not isinstance(result, tuple | list) or len(result) != 2:
        return {"returned": type(result).__name__}
    nodes, edges = result
    if not (isinstance(nodes, list | tuple) and isinstance(edges, list | tuple)) or not all(
        isinstance(e, tuple | list) and len(e) == 2 for e in edges
    ):
        return {"returned": f"{type(result).__name__} of {type(nodes).__name__}, not edge pairs"}
    return {
        "returned": f"{type(result).__name__} of {type(nodes).__name__}, {type(edges).__name__}",
        "first": label(nodes[0]) if nodes else None,
        "nodes": sorted(label(n) for n in nodes),
        "edges": sorted([label(p), label(c)] for p, c in edges),
    }


### END HIDDEN TESTS
check(
    defined("walk") and callable(walk),
    "walk is not defined: run the exercise 1 cell above (did it stop with an error?).",
)
# The recurrent cell: no tensor is used twice, so the graph is a tree.
_s = out.grad_fn
_tanh = _s.next_functions[0][0]
_add = _tanh.next_functions[0][0]
_mm_x, _mm_h = (pair[0] for pair in _add.next_functions)
_acc_x, _acc_h = _mm_x.next_functions[0][0], _mm_h.next_functions[0][0]
_expected_nodes = [_s, _tanh, _add, _mm_x, _mm_h, _acc_x, _acc_h]
_expected_edges = [
    (_s, _tanh),
    (_tanh, _add),
    (_add, _mm_x),
    (_add, _mm_h),
    (_mm_x, _acc_x),
    (_mm_h, _acc_h),
]
_walked, _error = attempt(walk, out)
check(
    _error is None,
    f"walk(out) raised an error, so its graph could not be checked (the error: {_error}); "
    "call walk(out) in a cell to see the whole message.",
)
_problems = _graph_problems(_walked, out, _expected_nodes, _expected_edges)
check(
    not _problems,
    "walk(out) does not give the recurrent cell's graph: run show_graph(*walk(out)) in a cell "
    f"and compare it with the drawing of out ({' '.join(_problems)})",
)
_walked, _error = attempt(walk, Wh)
check(
    _error is None,
    f"walk(Wh) raised an error (the error: {_error}): Wh is a leaf, its grad_fn is None, so "
    "there is no graph to walk; return ([], []) before reading grad_fn.next_functions.",
)
check(
    _walked == ([], []),
    "walk(Wh) should be ([], []): Wh is a leaf, its grad_fn is None, there is no graph behind it.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

# a recurrent cell step of other sizes, on new random inputs, every tensor kept to name its node
_gen = torch.Generator().manual_seed(11)
_Wh_new = torch.randn(4, 4, requires_grad=True, generator=_gen)
_Wx_new = torch.randn(4, 3, requires_grad=True, generator=_gen)
_x_new, _h_new = torch.randn(3, 1, generator=_gen), torch.randn(4, 1, generator=_gen)
_cell = {"Wx @ x": _Wx_new @ _x_new, "Wh @ h": _Wh_new @ _h_new}
_cell["Wx @ x + Wh @ h"] = _cell["Wx @ x"] + _cell["Wh @ h"]
_cell["tanh"] = torch.tanh(_cell["Wx @ x + Wh @ h"])
_cell["sum"] = _cell["tanh"].sum()
observe(
    "walk(t) on a new recurrent cell step (4 hidden units, 3 inputs, random values)",
    _graph_record(walk(_cell["sum"]), _cell, {"Wh": _Wh_new, "Wx": _Wx_new}),
    hint="Follow every entry of next_functions, not only the first: the add node has two inputs.",
)
_no_graph_hint = "When t.grad_fn is None there is no graph: return ([], []), with no None inside."
observe(
    "walk(t) on a leaf t that requires a gradient (the new random Wh)",
    _graph_record(walk(_Wh_new), {}, {"Wh": _Wh_new}),
    hint=_no_graph_hint,
)
with torch.no_grad():
    _untracked = _Wh_new @ _h_new
observe(
    "walk(t) on Wh @ h computed under torch.no_grad()",
    _graph_record(walk(_untracked), {}, {"Wh": _Wh_new}),
    hint=_no_graph_hint,
)
# a chain of one-input operations on a new random leaf p
_p = torch.randn(4, requires_grad=True, generator=_gen)
_chain = {"p.exp()": _p.exp()}
_chain["p.exp().log()"] = _chain["p.exp()"].log()
_chain["p.exp().log().mul(3)"] = _chain["p.exp().log()"].mul(3)
_chain["p.exp().log().mul(3).sum()"] = _chain["p.exp().log().mul(3)"].sum()
observe(
    "walk(t) on t = p.exp().log().mul(3).sum() for a new random leaf p",
    _graph_record(walk(_chain["p.exp().log().mul(3).sum()"]), _chain, {"p": _p}),
)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_walk_shared"}
check(
    defined("walk") and callable(walk),
    "walk is not defined: run the exercise 1 cell above (did it stop with an error?).",
)
# A leaf used twice (a * a) and an intermediate tensor used by two branches (sin and cos).
_sq = (a * a).sum()
_sum, _mul = _sq.grad_fn, _sq.grad_fn.next_functions[0][0]
_acc = _mul.next_functions[0][0]
_walked, _error = attempt(walk, _sq)
check(
    _error is None,
    f"walk((a * a).sum()) raised an error, so its graph could not be checked (the error: "
    f"{_error}); call it in a cell to see the whole message.",
)
_problems = _graph_problems(
    _walked, _sq, [_sum, _mul, _acc], [(_sum, _mul), (_mul, _acc), (_mul, _acc)]
)
check(
    not _problems,
    "walk((a * a).sum()) does not give its graph, one node with two edges into a's "
    f"AccumulateGrad: run show_graph(*walk((a * a).sum())) to see it ({' '.join(_problems)})",
)

_u = Wx @ x
_out2 = (_u.sin() + _u.cos()).sum()
_s = _out2.grad_fn
_add = _s.next_functions[0][0]
_sin, _cos = (pair[0] for pair in _add.next_functions)
_mm = _sin.next_functions[0][0]
_acc = _mm.next_functions[0][0]
_expected_nodes = [_s, _add, _sin, _cos, _mm, _acc]
_expected_edges = [(_s, _add), (_add, _sin), (_add, _cos), (_sin, _mm), (_cos, _mm), (_mm, _acc)]
_walked, _error = attempt(walk, _out2)
check(
    _error is None,
    "walk((u.sin() + u.cos()).sum()) raised an error, so its graph could not be checked (the "
    f"error: {_error}); call it in a cell to see the whole message.",
)
_problems = _graph_problems(_walked, _out2, _expected_nodes, _expected_edges)
check(
    not _problems,
    "walk((u.sin() + u.cos()).sum()) does not give its graph, where the node of u = Wx @ x is "
    f"reached along two paths: run show_graph on it to see yours ({' '.join(_problems)})",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_shared_hint = (
    "A node reached along two paths is still one node (remember the nodes already visited), "
    "and every non-None entry of next_functions is one edge, even when two entries are equal."
)
# a new leaf used twice, and a new intermediate tensor used by two branches
_gen = torch.Generator().manual_seed(12)
_b = torch.randn(5, requires_grad=True, generator=_gen)
_square = {"b * b": _b * _b}
_square["(b * b).sum()"] = _square["b * b"].sum()
observe(
    "walk(t) on t = (b * b).sum() for a new random leaf b",
    _graph_record(walk(_square["(b * b).sum()"]), _square, {"b": _b}),
    hint=_shared_hint,
)
_W = torch.randn(3, 4, requires_grad=True, generator=_gen)
_v = torch.randn(4, 1, generator=_gen)
_branches = {"W @ v": _W @ _v}
_branches["sin"] = _branches["W @ v"].sin()
_branches["cos"] = _branches["W @ v"].cos()
_branches["sin + cos"] = _branches["sin"] + _branches["cos"]
_branches["sum"] = _branches["sin + cos"].sum()
observe(
    "walk(t) on t = (u.sin() + u.cos()).sum() with u = W @ v (new random W and v)",
    _graph_record(walk(_branches["sum"]), _branches, {"W": _W}),
    hint=_shared_hint,
)
# a recurrent cell unrolled over 3 steps: Wh and Wx are shared by every step
_Wh_new = torch.randn(3, 3, requires_grad=True, generator=_gen)
_Wx_new = torch.randn(3, 2, requires_grad=True, generator=_gen)
_rnn, _hs = {}, torch.randn(3, 1, generator=_gen)
for _k in (1, 2, 3):
    _rnn[f"step {_k}: Wx @ x"] = _Wx_new @ torch.randn(2, 1, generator=_gen)
    _rnn[f"step {_k}: Wh @ h"] = _Wh_new @ _hs
    _rnn[f"step {_k}: add"] = _rnn[f"step {_k}: Wx @ x"] + _rnn[f"step {_k}: Wh @ h"]
    _rnn[f"step {_k}: tanh"] = _hs = torch.tanh(_rnn[f"step {_k}: add"])
_rnn["sum of the last h"] = _hs.sum()
observe(
    "walk(t) on a recurrent cell unrolled over 3 steps (Wh and Wx shared by every step)",
    _graph_record(walk(_rnn["sum of the last h"]), _rnn, {"Wh": _Wh_new, "Wx": _Wx_new}),
    hint=_shared_hint,
)
# a diamond with a leaf used by two different operations, and a two-output operation
_q = torch.randn(4, requires_grad=True, generator=_gen)
_r = torch.randn(4, requires_grad=True, generator=_gen)
_diamond = {"q * r": _q * _r}
_diamond["q * r + q"] = _diamond["q * r"] + _q
_left, _right = _diamond["q * r + q"].split(2)
_diamond["split"] = _left  # both halves come from the one SplitBackward0 node
_diamond["left * right"] = _left * _right
_diamond["(left * right).sum()"] = _diamond["left * right"].sum()
_diamond["q.sum()"] = _q.sum()
_diamond["(left * right).sum() + q.sum()"] = _diamond["(left * right).sum()"] + _diamond["q.sum()"]
observe(
    "walk(t) on t = (left * right).sum() + q.sum() with left, right = (q * r + q).split(2)",
    _graph_record(walk(_diamond["(left * right).sum() + q.sum()"]), _diamond, {"q": _q, "r": _r}),
    hint=_shared_hint,
)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. `requires_grad` is contagious
#
# The rule PyTorch follows is short:
#
# * a tensor you create yourself is a **leaf**; it requires a gradient only if you say so
#   (`requires_grad=True`);
# * the result of an operation requires a gradient if **any** input does, and then it is
#   not a leaf: it has a `grad_fn` (for a floating-point result: an integer or boolean
#   result, such as `a.argmax()` or `a > 0`, never requires a gradient);
# * a result nobody needs a gradient for is not recorded at all: it is again a leaf with
#   `grad_fn = None`;
# * two ways to switch recording off: inside `with torch.no_grad():` nothing is recorded,
#   and `t.detach()` gives a tensor that shares `t`'s data but is cut off from the graph;
# * `t.requires_grad_()` switches `requires_grad` on for a leaf `t`, in place, and changes
#   nothing else about it.
#
# ### Exercise 2 (2 points): predict, then run
#
# For each expression below (built from `a`, which requires a gradient, and `b`, which does
# not), predict the triple `(requires_grad, is_leaf, grad_fn)` **before running anything**.
# For `grad_fn`, give the class name of the node as a string, such as `"MulBackward0"` (the
# number at the end may be left off: `"MulBackward"` is fine), or `None`. Hints: indexing
# one element is a *select*, and a sum is `SumBackward0`.
#
# Fill in the dictionary `predictions` with one entry per expression. The check tells you
# which expressions, and which of the three properties, PyTorch disagrees with; it does not
# tell you the answers. Then `show(...)` (defined below) lets you run one expression and
# see for yourself.

# %% nbgrader={"locked": true, "grade_id": "expressions"}
a = torch.randn(3, requires_grad=True)
b = torch.randn(3)


def _a_times_two_without_grad():
    with torch.no_grad():
        return a * 2


EXPRESSIONS = {
    "a": lambda: a,
    "b": lambda: b,
    "a * b": lambda: a * b,
    "b * 2": lambda: b * 2,
    "torch.ones(3) + 1": lambda: torch.ones(3) + 1,
    "a.sum()": lambda: a.sum(),
    "a[0]": lambda: a[0],
    "a.detach()": lambda: a.detach(),
    "a.detach() * 2": lambda: a.detach() * 2,
    "with torch.no_grad(): a * 2": _a_times_two_without_grad,
    "(a * 2).detach().requires_grad_()": lambda: (a * 2).detach().requires_grad_(),
    "torch.tanh(b) + a": lambda: torch.tanh(b) + a,
}


def properties(t):
    """What PyTorch says about a tensor: (requires_grad, is_leaf, name of grad_fn or None)."""
    return t.requires_grad, t.is_leaf, None if t.grad_fn is None else type(t.grad_fn).__name__


def show(expression):
    """Print the three properties of one of the EXPRESSIONS (by its text), or of a tensor."""
    if isinstance(expression, str):
        requires_grad, is_leaf, grad_fn = properties(EXPRESSIONS[expression]())
    else:
        requires_grad, is_leaf, grad_fn = properties(expression)
    print(f"requires_grad={requires_grad}, is_leaf={is_leaf}, grad_fn={grad_fn}")


for _expression in EXPRESSIONS:
    print(_expression)

# %% nbgrader={"solution": true, "grade_id": "predictions"}
### BEGIN SOLUTION
predictions = {
    "a": (True, True, None),
    "b": (False, True, None),
    "a * b": (True, False, "MulBackward0"),
    "b * 2": (False, True, None),
    "torch.ones(3) + 1": (False, True, None),
    "a.sum()": (True, False, "SumBackward0"),
    "a[0]": (True, False, "SelectBackward0"),
    "a.detach()": (False, True, None),
    "a.detach() * 2": (False, True, None),
    "with torch.no_grad(): a * 2": (False, True, None),
    "(a * 2).detach().requires_grad_()": (True, True, None),
    "torch.tanh(b) + a": (True, False, "AddBackward0"),
}
### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_predictions"}
def _same_name(predicted, actual):
    """Two node names agree when they differ only by the number at the end (or are None)."""
    if predicted is None or actual is None:
        return predicted is None and actual is None
    strip = "0123456789"
    return isinstance(predicted, str) and predicted.rstrip(strip) == actual.rstrip(strip)


def _disagreements(predicted, actual):
    """The names of the properties on which a triple disagrees with PyTorch's (no values)."""
    names = []
    if predicted[0] != actual[0]:
        names.append("requires_grad")
    if predicted[1] != actual[1]:
        names.append("is_leaf")
    if not _same_name(predicted[2], actual[2]):
        names.append("grad_fn")
    return names


check(
    defined("predictions"),
    "predictions is not defined yet: fill in the dictionary in the exercise cell above and run it.",
)
check(
    isinstance(predictions, dict),
    "predictions should be a dict: expression -> (requires_grad, is_leaf, grad_fn).",
)
_missing = [e for e in EXPRESSIONS if e not in predictions]
check(
    not _missing,
    "predictions lacks an entry for some of the expressions: copy each expression string "
    f"exactly as EXPRESSIONS spells it (the missing: {_missing}).",
)
for _expression in EXPRESSIONS:
    _p = predictions[_expression]
    check(
        isinstance(_p, tuple | list) and len(_p) == 3,
        "Each value of predictions should be a triple (requires_grad, is_leaf, grad_fn), and one "
        f"is not (the expression: {_expression!r}; its value: {_p!r}).",
    )
    check(
        isinstance(_p[0], bool) and isinstance(_p[1], bool),
        f"predictions[{_expression!r}]: requires_grad and is_leaf should be True or False "
        f"(not {_p[0]!r} and {_p[1]!r}).",
    )
    check(
        _p[2] != "None",
        f'predictions[{_expression!r}]: grad_fn is the text "None"; write None without quotes.',
    )
    check(
        _p[2] is None or isinstance(_p[2], str),
        f"predictions[{_expression!r}]: grad_fn should be a node's name as a string, such as "
        f'"MulBackward0", or None (not {_p[2]!r}).',
    )
_wrong = {"requires_grad": [], "is_leaf": [], "grad_fn": []}
for _expression in EXPRESSIONS:
    for _property in _disagreements(
        predictions[_expression], properties(EXPRESSIONS[_expression]())
    ):
        _wrong[_property].append(_expression)
check(
    not _wrong["requires_grad"],
    "requires_grad is predicted wrong for some expressions: an operation's result requires a "
    "gradient only if an input requires one and recording is on; run show(expression) on "
    f"them to see why (the expressions: {_wrong['requires_grad']}).",
)
check(
    not _wrong["is_leaf"],
    "is_leaf is predicted wrong for some expressions: a tensor is a leaf when it has no "
    "recorded history, computed or not; run show(expression) on them to see why (the "
    f"expressions: {_wrong['is_leaf']}).",
)
check(
    not _wrong["grad_fn"],
    "grad_fn is predicted wrong for some expressions: only a recorded result has a node, "
    "named after the operation that made it; run show(expression) on them to see why (the "
    f"expressions: {_wrong['grad_fn']}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

# each prediction as given, with the optional trailing digits of a node name taken off
observe(
    "your predictions (requires_grad, is_leaf, grad_fn) for each expression",
    {
        _expression: {
            "requires_grad": predictions[_expression][0],
            "is_leaf": predictions[_expression][1],
            "grad_fn": predictions[_expression][2].rstrip("0123456789")
            if isinstance(predictions[_expression][2], str)
            else predictions[_expression][2],
        }
        for _expression in EXPRESSIONS
    },
    hint="An operation's result is tracked only if an input requires a gradient and recording "
    "is on; requires_grad and is_leaf are True or False, grad_fn a name or None.",
)
### END HIDDEN TESTS

# %% [markdown]
# For an expression the check named, think again about which rule applies, then run it
# with `show("...")`, its text in quotes. `show` also takes a tensor; here is one that is in
# no table above:

# %%
show(torch.exp(b) * a.sum())

# %% [markdown]
# ### Exercise 3 (2 points): the rules as code
#
# A table of twelve answers can be filled in by running the twelve expressions. The rules
# themselves are better written down as a function. Write `predict(expression,
# requires_grad)` that returns the triple `(requires_grad, is_leaf, grad_fn)` of the tensor
# an expression gives, **worked out from the rules alone**, without building any tensor:
# the hidden checks try it on expressions and tensors you have not seen.
#
# An expression is written as nested tuples:
#
# * a string, such as `"a"`, names a tensor you created yourself; `requires_grad[name]` is
#   `True` when you created it with `requires_grad=True`;
# * a number, such as `2`, is a plain Python number: not a tensor, it never requires a
#   gradient;
# * a tuple `(op, arg, ...)` applies an operation to its arguments, each an expression:
#   * the operations of `NODE_NAMES` (below) compute a result; when PyTorch records one,
#     the name of its node is `NODE_NAMES[op]`;
#   * `("detach", e)` is `e.detach()`;
#   * `("requires_grad_", e)` is `e.requires_grad_()`, applied to leaves only;
#   * `("no_grad", e)` is `e` computed inside `with torch.no_grad():`, all of it.
#
# `EXPRESSION_TREES` writes the twelve expressions of exercise 2 this way, for instance
# `"a.detach() * 2"` as `("mul", ("detach", "a"), 2)`. `MORE_TREES` mixes the rules: a
# `no_grad` block around a name, around `requires_grad_()`, or inside a recorded operation,
# and `detach()` deep inside an expression. The check tries both sets against PyTorch (the
# tensors of `MORE_TREES` are built by `MORE_EXPRESSIONS`, so `show(MORE_EXPRESSIONS[...]())`
# runs one). A function that calls itself on each argument is the natural shape; the
# optional third parameter `recording` can carry whether recording is on down to the
# arguments.

# %% nbgrader={"locked": true, "grade_id": "expression_trees"}
NODE_NAMES = {
    "add": "AddBackward0",  # x + y
    "sub": "SubBackward0",  # x - y
    "mul": "MulBackward0",  # x * y
    "sum": "SumBackward0",  # x.sum()
    "select": "SelectBackward0",  # x[0]
    "tanh": "TanhBackward0",  # torch.tanh(x)
    "exp": "ExpBackward0",  # torch.exp(x)
}
GIVEN = {"a": True, "b": False, "ones": False}  # which named tensors require a gradient
EXPRESSION_TREES = {
    "a": "a",
    "b": "b",
    "a * b": ("mul", "a", "b"),
    "b * 2": ("mul", "b", 2),
    "torch.ones(3) + 1": ("add", "ones", 1),
    "a.sum()": ("sum", "a"),
    "a[0]": ("select", "a"),
    "a.detach()": ("detach", "a"),
    "a.detach() * 2": ("mul", ("detach", "a"), 2),
    "with torch.no_grad(): a * 2": ("no_grad", ("mul", "a", 2)),
    "(a * 2).detach().requires_grad_()": ("requires_grad_", ("detach", ("mul", "a", 2))),
    "torch.tanh(b) + a": ("add", ("tanh", "b"), "a"),
}
ones = torch.ones(3)


def _without_grad(make):
    """make() computed inside `with torch.no_grad():`."""
    with torch.no_grad():
        return make()


MORE_TREES = {
    "with torch.no_grad(): a": ("no_grad", "a"),
    "with torch.no_grad(): (b * 2).requires_grad_()": (
        "no_grad",
        ("requires_grad_", ("mul", "b", 2)),
    ),
    "(with torch.no_grad(): a.tanh()) - a": ("sub", ("no_grad", ("tanh", "a")), "a"),
    "(with torch.no_grad(): a + 1) * b": ("mul", ("no_grad", ("add", "a", 1)), "b"),
    "a.detach().requires_grad_() * b": ("mul", ("requires_grad_", ("detach", "a")), "b"),
    "(2 * a.detach().exp())[0]": ("select", ("mul", 2, ("exp", ("detach", "a")))),
    "(ones - b).sum() + a[0]": ("add", ("sum", ("sub", "ones", "b")), ("select", "a")),
}
MORE_EXPRESSIONS = {
    "with torch.no_grad(): a": lambda: _without_grad(lambda: a),
    "with torch.no_grad(): (b * 2).requires_grad_()": lambda: _without_grad(
        lambda: (b * 2).requires_grad_()
    ),
    "(with torch.no_grad(): a.tanh()) - a": lambda: _without_grad(lambda: a.tanh()) - a,
    "(with torch.no_grad(): a + 1) * b": lambda: _without_grad(lambda: a + 1) * b,
    "a.detach().requires_grad_() * b": lambda: a.detach().requires_grad_() * b,
    "(2 * a.detach().exp())[0]": lambda: (2 * a.detach().exp())[0],
    "(ones - b).sum() + a[0]": lambda: (ones - b).sum() + a[0],
}


# %% nbgrader={"solution": true, "grade_id": "predict"}
def predict(expression, requires_grad, recording=True):
    ### BEGIN SOLUTION
    if isinstance(expression, str):
        return requires_grad[expression], True, None
    op, *args = expression
    if op == "no_grad":
        return predict(args[0], requires_grad, recording=False)
    if op == "detach":
        return False, True, None
    if op == "requires_grad_":
        _requires, is_leaf, node = predict(args[0], requires_grad, recording)
        return True, is_leaf, node
    tensors = [arg for arg in args if not isinstance(arg, int | float)]
    tracked = recording and any(predict(arg, requires_grad, recording)[0] for arg in tensors)
    return tracked, not tracked, NODE_NAMES[op] if tracked else None
    ### END SOLUTION


# %%
print(predict(("mul", "a", "b"), GIVEN))


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_predict"}
check(
    defined("predict") and callable(predict),
    "predict is not defined: run the exercise 3 cell above (did it stop with an error?).",
)
_cases = {_e: (_t, EXPRESSIONS[_e]) for _e, _t in EXPRESSION_TREES.items()}
_cases.update({_e: (_t, MORE_EXPRESSIONS[_e]) for _e, _t in MORE_TREES.items()})
_wrong = {"requires_grad": [], "is_leaf": [], "grad_fn": []}
for _expression, (_tree, _make) in _cases.items():
    _got, _error = attempt(predict, _tree, GIVEN)
    check(
        _error is None,
        "predict raised an error on one of the expression trees: call predict on that tree "
        f"yourself to see where (the expression: {_expression!r}; the error: {_error}).",
    )
    check(
        isinstance(_got, tuple | list) and len(_got) == 3,
        "predict should return a triple (requires_grad, is_leaf, grad_fn), and for one "
        f"expression it did not (the expression: {_expression!r}; it returned: {_got!r}).",
    )
    check(
        isinstance(_got[0], bool) and isinstance(_got[1], bool) and _got[2] != "None",
        "predict should give requires_grad and is_leaf as True or False, and grad_fn as a name "
        "or None (without quotes), and for one expression it did not (the expression: "
        f"{_expression!r}; it gave: {_got!r}).",
    )
    for _property in _disagreements(_got, properties(_make())):
        _wrong[_property].append(_expression)
check(
    not _wrong["requires_grad"],
    "predict gives the wrong requires_grad for some expressions: a result requires a gradient "
    "when recording is on and one of its tensor arguments requires one; a name keeps its own "
    "requires_grad even inside no_grad, detach() gives a tensor that requires none, and "
    "requires_grad_() switches it on, even inside no_grad (the expressions: "
    f"{_wrong['requires_grad']}).",
)
check(
    not _wrong["is_leaf"],
    "predict gives the wrong is_leaf for some expressions: a tensor is a leaf exactly when it "
    "has no history: a name, anything detach() gives (requires_grad_() keeps a leaf a leaf), "
    "and any result that was not recorded, because nothing required a gradient or because of "
    f"no_grad (the expressions: {_wrong['is_leaf']}).",
)
check(
    not _wrong["grad_fn"],
    "predict gives the wrong grad_fn for some expressions: only a recorded result has a node, "
    "NODE_NAMES[op] of the operation that made it; a leaf's grad_fn is None (the expressions: "
    f"{_wrong['grad_fn']}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _predicted(expression, given):
    """predict's answer as named parts, the node name without its trailing digits."""
    got = predict(expression, given)
    if not (isinstance(got, tuple | list) and len(got) == 3):
        return {"returned": type(got).__name__}
    node = got[2].rstrip("0123456789") if isinstance(got[2], str) else got[2]
    return {"requires_grad": got[0], "is_leaf": got[1], "grad_fn": node}


# new names, and each of them both with and without a gradient
_hidden_trees = {
    "with torch.no_grad(): v": ("no_grad", "v"),
    "(with torch.no_grad(): v * 2) * w": ("mul", ("no_grad", ("mul", "v", 2)), "w"),
    "(with torch.no_grad(): v.exp()) + u": ("add", ("no_grad", ("exp", "v")), "u"),
    "v.tanh().detach().requires_grad_().sum()": (
        "sum",
        ("requires_grad_", ("detach", ("tanh", "v"))),
    ),
    "with torch.no_grad(): (u - 1).requires_grad_()": (
        "no_grad",
        ("requires_grad_", ("sub", "u", 1)),
    ),
    "(w.detach() - u.exp())[0]": ("select", ("sub", ("detach", "w"), ("exp", "u"))),
    "torch.tanh(3 * (u + w))": ("tanh", ("mul", 3, ("add", "u", "w"))),
    "v.detach().exp()": ("exp", ("detach", "v")),
    "u * w - v": ("sub", ("mul", "u", "w"), "v"),
    "(u + 2).sum() * v[0]": ("mul", ("sum", ("add", "u", 2)), ("select", "v")),
}
_hint = (
    "Apply the rules to each argument first: a result is tracked only if recording is on and "
    "an argument requires a gradient; no_grad covers everything inside it; detach() cuts; "
    "requires_grad_() switches a leaf on."
)
for _given, _words in (
    ({"u": False, "v": True, "w": True}, "u needs no gradient, v and w do"),
    ({"u": True, "v": False, "w": False}, "u needs a gradient, v and w do not"),
):
    observe(
        f"predict(expression, requires_grad) on new expressions where {_words}",
        {_text: _predicted(_tree, _given) for _text, _tree in _hidden_trees.items()},
        hint=_hint,
    )
### END HIDDEN TESTS

# %% [markdown]
# Two kinds of answer deserve a second look. A tensor can be *computed* and still be a
# leaf: when nothing in a computation needs a gradient, nothing is recorded, and a tensor
# with no history is a leaf. And a leaf that requires a gradient need not be a parameter you
# created: `t.detach().requires_grad_()` makes one from any tensor, with no history behind
# it, so a gradient computed through it stops there and never reaches what `t` came from.
#
# ## 4. Which tensors will get a gradient?
#
# Of the leaves, `backward()` fills `.grad` exactly on the tensors hanging from the
# `AccumulateGrad` nodes of the graph (lab 2 shows how to keep the gradient of a non-leaf
# too). You can therefore know, before calling `backward()`, which parameters
# a loss will update, and which it will not touch at all (lab 3 comes back to parameters
# that a forward pass did not use).
#
# ### Exercise 4 (2 points): the leaves behind a tensor
#
# Write `leaves(t)` that returns a list of the tensors whose `.grad` `t.backward()` would
# fill, each **once** (in any order). Use your `walk` and the `.variable` of the
# `AccumulateGrad` nodes. (The check runs your `leaves` with a `walk` known to be right, so
# that a mistake in exercise 1 costs points there only.)


# %% nbgrader={"solution": true, "grade_id": "leaves"}
def leaves(t):
    ### BEGIN SOLUTION
    nodes, _edges = walk(t)
    return [n.variable for n in nodes if hasattr(n, "variable")]
    ### END SOLUTION


# %%
print([tuple(v.shape) for v in leaves(out)])


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_leaves"}
def _ids(tensors):
    return sorted(id(v) for v in tensors)


check(
    defined("leaves") and callable(leaves),
    "leaves is not defined: run the exercise 4 cell above (did it stop with an error?).",
)
# The graphs of the two tensors below, written out by hand: leaves(t) runs here with this
# walk in place of yours, so that a mistake in exercise 1 costs points there only.
_s = out.grad_fn
_tanh = _s.next_functions[0][0]
_add = _tanh.next_functions[0][0]
_mm_x, _mm_h = (pair[0] for pair in _add.next_functions)
_acc_x, _acc_h = _mm_x.next_functions[0][0], _mm_h.next_functions[0][0]
_sq = (a * a).sum()
_mul = _sq.grad_fn.next_functions[0][0]
_acc = _mul.next_functions[0][0]
_known_graphs = {
    id(out): (
        [_s, _tanh, _add, _mm_x, _mm_h, _acc_x, _acc_h],
        [
            (_s, _tanh),
            (_tanh, _add),
            (_add, _mm_x),
            (_add, _mm_h),
            (_mm_x, _acc_x),
            (_mm_h, _acc_h),
        ],
    ),
    id(_sq): ([_sq.grad_fn, _mul, _acc], [(_sq.grad_fn, _mul), (_mul, _acc), (_mul, _acc)]),
}


def _known_walk(t):
    return _known_graphs[id(t)]


_your_walk = globals().get("walk")
walk = _known_walk  # leaves(t) calls this walk while the check runs it, then yours is back
try:
    _got, _error = attempt(leaves, out)
    _got_sq, _error_sq = attempt(leaves, _sq)
finally:
    walk = _your_walk
check(
    _error is None,
    f"leaves(out) raised an error, so it could not be checked (the error: {_error}); call "
    "leaves(out) in a cell to see the whole message.",
)
check(
    _error_sq is None,
    "leaves((a * a).sum()) raised an error, so it could not be checked (the error: "
    f"{_error_sq}); call it in a cell to see the whole message.",
)
check(
    isinstance(_got, list) and isinstance(_got_sq, list),
    "leaves(t) should return a list of tensors, and it returned something else (it returned: "
    f"{type(_got).__name__}); print leaves(out) to see it.",
)
check(
    all(isinstance(v, torch.Tensor) for v in _got + _got_sq),
    "leaves(t) should return tensors (the .variable of each AccumulateGrad node), not nodes.",
)
check(
    _ids(_got) == _ids([Wh, Wx]),
    "leaves(out) for the recurrent cell should be Wh and Wx (x and h need no gradient).",
)
check(
    _ids(_got_sq) == [id(a)],
    "leaves((a * a).sum()) should be [a], with a once: a tensor used twice is still one leaf, "
    f"one AccumulateGrad node (the number of tensors you returned: {len(_got_sq)}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe


def _right_walk(t):
    """The walk of exercise 1, so that a mistake there does not cost points again here."""
    if t.grad_fn is None:
        return [], []
    nodes, edges, seen = [t.grad_fn], [], {t.grad_fn}
    for parent in nodes:
        for child, _index in parent.next_functions:
            if child is not None:
                edges.append((parent, child))
                if child not in seen:
                    seen.add(child)
                    nodes.append(child)
    return nodes, edges


_gen = torch.Generator().manual_seed(13)
_w1 = torch.randn(2, 2, requires_grad=True, generator=_gen)
_w2 = torch.randn(2, 2, requires_grad=True, generator=_gen)
_w3 = torch.randn(2, 2, requires_grad=True, generator=_gen)
_unused = torch.randn(2, 2, requires_grad=True, generator=_gen)
_inp = torch.randn(2, 1, generator=_gen)
_hid = torch.tanh(_w1 @ _inp)
_loss = (_w2 @ _hid + _w1 @ _hid).sum()
_cut = (_w1.detach() @ _inp).sum() * (_w3 @ _inp + _w3 @ _hid.detach()).sum()
_names = {id(Wh): "Wh", id(Wx): "Wx", id(a): "a", id(_w1): "w1", id(_w2): "w2", id(_w3): "w3"}
_names[id(_unused)] = "unused"


def _which(tensors):
    """The leaves a student returned, by name (sorted, duplicates kept); the kind of anything
    that is not a list or tuple, which the judge reports as a difference."""
    if not isinstance(tensors, list | tuple):
        return f"not a list: {type(tensors).__name__}"
    return sorted(_names.get(id(v), "other") for v in tensors)


_once_hint = "Each leaf once: a tensor used twice hangs from one AccumulateGrad node."
_your_walk = globals().get("walk")
walk = _right_walk
try:
    observe("leaves(t) on the recurrent cell's out", _which(leaves(out)))
    observe("leaves(t) on (a * a).sum()", _which(leaves((a * a).sum())), hint=_once_hint)
    observe(
        "leaves(t) on a new two-layer loss that uses w1 twice and w2 once (unused is left out)",
        _which(leaves(_loss)),
        hint=_once_hint,
    )
    observe(
        "leaves(t) on a new loss that uses w1 only through w1.detach(), and w3 twice",
        _which(leaves(_cut)),
        hint="Only the AccumulateGrad nodes of t's graph count: detach() cuts w1 off the graph.",
    )
    # a leaf has no graph behind it: [] and [the leaf itself] are both right, so w1 is taken
    # out once
    _got = _which(leaves(_w1))
    if "w1" in _got:
        _got.remove("w1")
    observe("leaves(t) on the leaf w1 itself, apart from w1 (both [] and [w1] are right)", _got)
finally:
    walk = _your_walk
# leaves(t) only reads the graph: it runs no backward() and changes no tensor
observe(
    "w1, w2, w3 and unused after all the calls to leaves(t) above: requires_grad and .grad",
    {
        f"{_n}.{_attr}": getattr(_t, _attr)
        for _n, _t in (("w1", _w1), ("w2", _w2), ("w3", _w3), ("unused", _unused))
        for _attr in ("requires_grad", "grad")
    },
    hint="leaves(t) should only read the graph: no backward(), no change to the tensors.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## What you have seen
#
# * While recording is on, every operation on a tensor that requires a gradient adds a node
#   (`grad_fn`) to a graph, built as the code runs; reusing a Python name does not remove a
#   node.
# * `next_functions` links each node to the nodes of its inputs; leaves that require a
#   gradient end in `AccumulateGrad`, inputs that do not are `(None, 0)`.
# * A tensor used twice is one node with two edges into it.
# * `requires_grad` spreads from inputs to results; `torch.no_grad()` and `detach()` stop it,
#   and `requires_grad_()` starts it again from a leaf.
#
# Lab 2 runs the graph backwards with `backward()`.
