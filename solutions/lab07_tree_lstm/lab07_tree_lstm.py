# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 7: Tree-LSTMs, and how to batch a graph that changes with every sample
#
# A Tree-LSTM reads an expression along its parse tree: every node runs the same LSTM cell
# on its own input and on its children's states, from the leaves up. The network's *shape*
# is the tree's, so it changes with every sample; the *parameters* (one cell) stay the same.
# Built as the code runs, it is a few lines of recursion; the price is batching. You will
# (1) write the evaluator of ListOps trees such as `[MAX 2 9 [MIN 4 7 ] 0 ]`; (2) write the
# child-sum Tree-LSTM cell and `gradcheck` it; (3) run it recursively; (4) batch it *level by
# level*, all nodes of one height across a batch in **one** call; (5) train it against an LSTM.
#
# **How this lab works.** Replace `raise NotImplementedError(...)` in each *exercise* cell
# with your code; the *check* after it says in words what is wrong. On submission the checks
# run again with hidden cases. Run everything top to bottom before you submit.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import random
import time

import matplotlib.pyplot as plt
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

# The cell works on small matrices: one thread is as fast as several, and steadier.
torch.set_num_threads(1)
print("torch", torch.__version__, "| grading run" if GRADING else "| full run")


def pair_of(out, rows, size):
    """Whether `out` is a pair (h, c) of tensors of shape (rows, size): the checks test this
    before they read a result."""
    shapes = (
        [tuple(t.shape) for t in out if isinstance(t, torch.Tensor)]
        if isinstance(out, tuple)
        else []
    )
    return shapes == [(rows, size)] * 2


# %% [markdown]
# ## 1. ListOps trees
#
# A ListOps expression applies an operator to a list of arguments; an argument is a digit or
# another expression. We use four operators, all on digits 0 to 9:
#
# | operator | value |
# |---|---|
# | `MIN` | the smallest argument |
# | `MAX` | the largest argument |
# | `MED` | the median: the middle of the sorted arguments; for an even number of arguments, the **lower** of the two middle ones |
# | `SUM` | the sum of the arguments, modulo 10 |
#
# In Python a tree is an `int` (a leaf) or a tuple `(operator, arg1, arg2, ...)`. The
# generator is seeded; `to_string` and `parse` go between a tree and its bracketed text.

# %%
OPS = ("MIN", "MAX", "MED", "SUM")
VOCAB = [str(d) for d in range(10)] + list(OPS)  # token ids: digits 0-9 are 0-9, then the ops
TOKEN = {t: i for i, t in enumerate(VOCAB)}


def make_tree(rng, max_depth=4, max_args=3, p_subtree=0.3, depth=1):
    """A random ListOps tree; `rng` is a random.Random, so the result is reproducible."""
    op = rng.choice(OPS)
    args = []
    for _ in range(rng.randint(2, max_args)):
        if depth < max_depth and rng.random() < p_subtree:
            args.append(make_tree(rng, max_depth, max_args, p_subtree, depth + 1))
        else:
            args.append(rng.randint(0, 9))
    return (op, *args)


def to_string(tree):
    if isinstance(tree, int):
        return str(tree)
    op, *args = tree
    return "[" + op + " " + " ".join(to_string(a) for a in args) + " ]"


def height(tree):
    return 1 if isinstance(tree, int) else 1 + max(height(a) for a in tree[1:])


def n_nodes(tree):
    return 1 if isinstance(tree, int) else 1 + sum(n_nodes(a) for a in tree[1:])


def parse(text):
    """Read a bracketed expression back into a tree, with a stack of open expressions."""
    stack = [[]]
    for token in text.replace("[", " [ ").replace("]", " ] ").split():
        if token == "[":
            stack.append([])
        elif token == "]":
            node = tuple(stack.pop())
            stack[-1].append(node)
        elif token in OPS:
            stack[-1].append(token)
        else:
            stack[-1].append(int(token))
    (tree,) = stack[0]
    return tree


rng = random.Random(7)
for _ in range(4):
    tree = make_tree(rng)
    print(to_string(tree))
    assert parse(to_string(tree)) == tree
print("parse(to_string(tree)) gives the tree back")

# %% [markdown]
# ### Exercise 1 (2 points): the evaluator
#
# Write `evaluate(tree)` that returns the value of a tree as an `int`, using the table
# above. It is the ground truth for everything that follows: the labels we train on.
# Evaluate the arguments first (recursion), then apply the operator.


# %% nbgrader={"solution": true, "grade_id": "evaluate"}
def evaluate(tree):
    ### BEGIN SOLUTION
    if isinstance(tree, int):
        return tree
    op, *args = tree
    values = sorted(evaluate(a) for a in args)
    if op == "MIN":
        return values[0]
    if op == "MAX":
        return values[-1]
    if op == "MED":
        return values[(len(values) - 1) // 2]
    if op == "SUM":
        return sum(values) % 10
    raise ValueError(f"unknown operator {op!r}")
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_evaluate"}
def _evaluate_text(text):
    """evaluate(parse(text)), or None and the error it raised, in words."""
    return attempt(evaluate, parse(text))


for _text, _want in [("7", 7), ("[MIN 4 7 2 ]", 2), ("[MAX 2 9 0 ]", 9), ("[SUM 5 8 ]", 3)]:
    _got, _error = _evaluate_text(_text)
    check(
        _error is None,
        f"evaluate raised an error on a flat expression (on {_text}; the error: {_error}): call evaluate(parse(text)) on it in a cell of your own to see the whole message.",
    )
    check(
        _got == _want,
        f"evaluate returned a wrong value on a flat expression of MIN, MAX or SUM (on {_text} it should be {_want}; yours: {_got}): MIN is the smallest argument, MAX the largest, SUM the sum of the arguments modulo 10.",
    )
for _text, _want in [("[MED 3 1 2 ]", 2), ("[MED 8 1 5 3 ]", 3), ("[MED 9 4 ]", 4)]:
    _got, _error = _evaluate_text(_text)
    check(
        _error is None,
        f"evaluate raised an error on a MED expression (on {_text}; the error: {_error}): call evaluate(parse(text)) on it in a cell of your own to see the whole message.",
    )
    check(
        _got == _want,
        f"evaluate returned a wrong value on a MED expression (on {_text} it should be {_want}; yours: {_got}): MED sorts the arguments and takes the middle one; with an even number of them, the lower of the two middle ones (an int).",
    )
_text = "[MAX 2 9 [MIN 4 7 ] 0 ]"
_got, _error = _evaluate_text(_text)
check(
    _error is None,
    f"evaluate raised an error on a nested expression (the error: {_error}): evaluate the arguments first, then apply the operator to their values.",
)
check(
    _got == 9,
    f"evaluate should give 9 for [MAX 2 9 [MIN 4 7 ] 0 ] (yours: {_got}): evaluate the arguments first, then apply the operator to their values.",
)
_text = "[SUM [MAX 8 2 ] [SUM 9 9 ] 1 ]"
_got, _error = _evaluate_text(_text)
check(
    _error is None,
    f"evaluate raised an error on a nested SUM expression (the error: {_error}): call it on [SUM [MAX 8 2 ] [SUM 9 9 ] 1 ] in a cell of your own to see the whole message.",
)
check(
    _got == 7,
    f"evaluate should give (8 + 8 + 1) % 10 = 7 for [SUM [MAX 8 2 ] [SUM 9 9 ] 1 ] (yours: {_got}): a nested SUM is already reduced modulo 10.",
)
check(
    isinstance(_evaluate_text("[MED 8 1 5 3 ]")[0], int),
    "evaluate should return an int (for MED too: pick an argument, do not average two).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_r = random.Random(1234)


def _flat(op, counts):
    """60 expressions [op d1 d2 ...] of random digits, with a number of digits from `counts`."""
    return [(op, *(_r.randint(0, 9) for _ in range(_r.choice(counts)))) for _ in range(60)]


observe(
    "evaluate(tree) on [MIN ...], [MAX ...] and [SUM ...] of 2 to 6 random digits",
    {_op: [evaluate(_t) for _t in _flat(_op, (2, 3, 4, 5, 6))] for _op in ("MIN", "MAX", "SUM")},
    hint="MIN is the smallest argument, MAX the largest, SUM the sum of the arguments modulo 10.",
)
observe(
    "evaluate(tree) on [MED ...] of random digits",
    {
        "odd number of digits (3, 5)": [evaluate(_t) for _t in _flat("MED", (3, 5))],
        "even number of digits (2, 4, 6)": [evaluate(_t) for _t in _flat("MED", (2, 4, 6))],
    },
    hint="MED sorts the arguments and takes the middle one; with an even number of arguments, the lower of the two middle ones.",
)
observe(
    "evaluate(tree) on 500 random trees (depth <= 5, <= 6 arguments)",
    [evaluate(make_tree(_r, max_depth=5, max_args=6)) for _ in range(500)],
    hint="Evaluate every argument first (recursion), then apply the operator to their values.",
)
# Beside the generator's limits: bare digits (a tree of one leaf), one argument (the generator
# makes 2 or more), nine arguments, and trees deeper than any in the data.
_one_arg = [(_op, _r.randint(0, 9)) for _op in OPS for _ in range(5)]
_nine_args = [(_op, *(_r.randint(0, 9) for _ in range(9))) for _op in OPS for _ in range(5)]
_deep = []
for _ in range(20):
    _t = _r.randint(0, 9)
    for _level in range(_r.randint(6, 12)):  # a chain: each operator has one subtree argument
        _args = [_t, *(_r.randint(0, 9) for _ in range(_r.randint(1, 3)))]
        _r.shuffle(_args)
        _t = (_r.choice(OPS), *_args)
    _deep.append(_t)
observe(
    "evaluate(tree) beside the generator's limits",
    {
        "a bare digit 0 to 9": [evaluate(_d) for _d in range(10)],
        "one argument, each operator": [evaluate(_t) for _t in _one_arg],
        "nine arguments, each operator": [evaluate(_t) for _t in _nine_args],
        "chains 7 to 13 operators deep": [evaluate(_t) for _t in _deep],
    },
    hint="A leaf is its own value; with one argument, MIN, MAX and MED give it and SUM gives it modulo 10; evaluate every argument first, however deep the tree.",
)
### END HIDDEN TESTS

# %% [markdown]
# The data: a test set of 2,000 trees from one seed, and **fresh** training batches from
# another, skipping any tree whose text is in the test set. A tree's **height**: leaves have
# height 1, a node is one taller than its tallest child.


# %%
def labels(trees):
    """The labels of the trees: your evaluate's values (exercise 1)."""
    return torch.tensor([evaluate(t) for t in trees])


def fresh_trees(rng, n):
    """n fresh trees, none of them in the test set."""
    trees = []
    while len(trees) < n:
        tree = make_tree(rng)
        if to_string(tree) not in HELD_OUT:
            trees.append(tree)
    return trees


def training_batch(rng, n):
    """n fresh trees, none of them in the test set, and their labels."""
    trees = fresh_trees(rng, n)
    return trees, labels(trees)


test_rng = random.Random(2)
test_trees = [make_tree(test_rng) for _ in range(2000)]
HELD_OUT = {to_string(t) for t in test_trees}
train_rng = random.Random(1)
sample_trees = fresh_trees(train_rng, 128)  # one batch, for the demos
test_labels, sample_labels = labels(test_trees), labels(sample_trees)  # needs exercise 1
print("test set, value counts  :", torch.bincount(test_labels, minlength=10).tolist())
print(
    "test set, height counts :",
    torch.bincount(torch.tensor([height(t) for t in test_trees])).tolist(),
)
print("nodes per tree, average :", sum(n_nodes(t) for t in test_trees) / len(test_trees))

# %% [markdown]
# ## 2. The child-sum Tree-LSTM cell
#
# A node $j$ has an input $x_j$ (its token's embedding) and children $C(j)$ with states
# $(h_k, c_k)$. The operators do not care about the order of their arguments, so we use the
# **child-sum** Tree-LSTM (Tai et al., 2015), which adds up the children:
#
# $$\tilde h_j = \sum_{k \in C(j)} h_k$$
# $$i_j = \sigma(W_i x_j + U_i \tilde h_j + b_i),\quad
#   o_j = \sigma(W_o x_j + U_o \tilde h_j + b_o),\quad
#   u_j = \tanh(W_u x_j + U_u \tilde h_j + b_u)$$
# $$f_{jk} = \sigma(W_f x_j + U_f h_k + b_f)\quad\text{one forget gate per child } k$$
# $$c_j = i_j \odot u_j + \sum_{k \in C(j)} f_{jk} \odot c_k,\qquad h_j = o_j \odot \tanh(c_j)$$
#
# A leaf has no children: its sums are zero. The cell works on **many nodes at once**
# (section 4 needs it). Its arguments:
#
# * `x`: `(n, input_size)`, one row per node;
# * `child_h`, `child_c`: `(m, hidden_size)`, one row per child, of all the nodes together;
# * `parent`: `(m,)` integers, `parent[k]` is the row of `x` that child `k` belongs to.
#
# It returns `(h, c)`, each `(n, hidden_size)`. The parameters are made for you:
# `self.W(x)` gives $W x + b$ for the four gates stacked in the order $i, o, u, f$
# (`4 * hidden_size` columns), `self.U_iou(h)` gives $U_i h, U_o h, U_u h$ stacked, and
# `self.U_f(h)` gives $U_f h$.
#
# ### Exercise 2 (3 points): the cell
#
# Hints: `torch.zeros(n, H).index_add(0, parent, child_h)` adds row `k` of `child_h` into
# row `parent[k]`: that is $\tilde h$ for all nodes in one call. `wx[parent]` repeats a
# node's row once per child. Create new tensors with `x.new_zeros(...)` so that they
# follow `x`'s dtype (the gradient check runs in float64). No Python loop over nodes.


# %% nbgrader={"solution": true, "grade_id": "cell"}
class ChildSumTreeLSTMCell(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.W = nn.Linear(input_size, 4 * hidden_size)  # i, o, u, f
        self.U_iou = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.U_f = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x, child_h, child_c, parent):
        ### BEGIN SOLUTION
        H, n = self.hidden_size, x.shape[0]
        wx = self.W(x)
        h_sum = x.new_zeros(n, H).index_add(0, parent, child_h)
        i, o, u = (wx[:, : 3 * H] + self.U_iou(h_sum)).chunk(3, dim=1)
        f = torch.sigmoid(wx[parent, 3 * H :] + self.U_f(child_h))
        fc_sum = x.new_zeros(n, H).index_add(0, parent, f * child_c)
        c = torch.sigmoid(i) * torch.tanh(u) + fc_sum
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c
        ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_cell"}
torch.manual_seed(1)
_cell = ChildSumTreeLSTMCell(3, 4)
_x = torch.randn(3, 3)
_ch, _cc = torch.randn(4, 4), torch.randn(4, 4)
_parent = torch.tensor([0, 0, 2, 2])  # node 0 and node 2 have two children each, node 1 none
_out, _error = attempt(_cell, _x, _ch, _cc, _parent)
check(
    _error is None,
    f"The cell raised an error on 3 nodes with 4 children (the error: {_error}): call it in a cell of your own on these inputs to see the whole message.",
)
check(
    isinstance(_out, tuple) and len(_out) == 2 and all(isinstance(t, torch.Tensor) for t in _out),
    "forward should return a pair of tensors (h, c).",
)
_h, _c = _out
check(
    tuple(_h.shape) == (3, 4) and tuple(_c.shape) == (3, 4),
    f"h and c should have one row per node and hidden_size columns, the shape (3, 4) here (yours: {tuple(_h.shape)}, {tuple(_c.shape)}).",
)
_empty = torch.zeros(0, 4)
_out, _error = attempt(_cell, _x[1:2], _empty, _empty, torch.zeros(0, dtype=torch.long))
check(
    _error is None and pair_of(_out, 1, 4),
    f"The cell on one node with no children (child_h and child_c of shape (0, 4), an empty parent) should return h and c of shape (1, 4) (the error: {_error}). A leaf has no children: its sums are zero.",
)
_h1, _c1 = _out
check(
    torch.allclose(_h[1:2], _h1, atol=1e-6) and torch.allclose(_c[1:2], _c1, atol=1e-6),
    "Node 1 (no children) gives a different result inside a batch than alone: each node must only see its own children, those with parent[k] == its row.",
)
_out = attempt(_cell, _x[0:1], _ch[:2], _cc[:2], torch.tensor([0, 0]))[0]
_h0, _c0 = _out if pair_of(_out, 1, 4) else (None, None)
check(
    _h0 is not None
    and torch.allclose(_h[0:1], _h0, atol=1e-6)
    and torch.allclose(_c[0:1], _c0, atol=1e-6),
    "Node 0 gives a different result inside a batch than alone with its two children.",
)
_out = attempt(_cell, _x, _ch[[1, 0, 3, 2]], _cc[[1, 0, 3, 2]], _parent)[0]
check(
    pair_of(_out, 3, 4) and torch.allclose(_h, _out[0], atol=1e-6),
    "Swapping the order of a node's children changed its output: the child-sum cell only uses the sum of the children's h and the sum of f_jk * c_k.",
)
# Hand-made case: all weights 0 except U_f = 100 I. Then i = o = 0.5, u = 0, and the forget
# gate of a child is about 1 when its h is positive and about 0 when it is negative.
with torch.no_grad():
    _hand = ChildSumTreeLSTMCell(2, 3)
    for _p in _hand.parameters():
        _p.zero_()
    _hand.U_f.weight.copy_(100 * torch.eye(3))
    _out = attempt(
        _hand,
        torch.zeros(1, 2),
        torch.tensor([[1.0, 1, 1], [-1, -1, -1]]),
        torch.tensor([[1.0, 1, 1], [5, 5, 5]]),
        torch.tensor([0, 0]),
    )[0]
_chand = _out[1] if pair_of(_out, 1, 3) else torch.full((1, 3), torch.nan)
check(
    torch.allclose(_chand, torch.ones(1, 3), atol=1e-4),
    f"In the hand-made case (all weights 0 but U_f = 100 I) c should be 1*1 + 0*5 = 1 (yours: {_chand[0, 0].item():.3f}): each child k needs its own forget gate f_jk = sigmoid(W_f x_j + U_f h_k + b_f), computed from its own h_k (not from the sum of the children), multiplied with its own c_k.",
)
# A fixed case: 3 nodes (two children, none, one), weights from a fixed generator; the
# expected numbers were computed once with exercise 2's formulas.
with torch.no_grad():
    _fixed = ChildSumTreeLSTMCell(2, 2)
    _fixed_gen = torch.Generator().manual_seed(7)
    for _name, _p in sorted(_fixed.named_parameters()):
        _p.copy_(torch.randn(_p.shape, generator=_fixed_gen))
    _xf = torch.randn(3, 2, generator=_fixed_gen)
    _chf, _ccf = torch.randn(3, 2, generator=_fixed_gen), torch.randn(3, 2, generator=_fixed_gen)
    _out = attempt(_fixed, _xf, _chf, _ccf, torch.tensor([0, 0, 2]))[0]
    _hf, _cf = _out if pair_of(_out, 3, 2) else (torch.full((3, 2), torch.nan),) * 2
_want_h = torch.tensor([[0.14785, -0.08437], [0.63562, -0.39820], [-0.21096, -0.59334]])
_want_c = torch.tensor([[0.14922, -0.13398], [0.82531, -0.46760], [-0.42753, -0.79195]])


def _rows(t):
    return [[round(_v, 5) for _v in _row] for _row in t.tolist()]


check(
    torch.allclose(_cf, _want_c, atol=1e-4),
    f"In the fixed case (3 nodes, weights from torch.Generator().manual_seed(7)) c differs from exercise 2's formulas (expected\n  c = {_rows(_want_c)}\ngot\n  c = {_rows(_cf)}\n). Usual suspects: the order of the gates in the columns of self.W(x) and self.U_iou(...) is i, o, u (then f for W): which chunk did you call what? Each child's forget gate needs the W_f x_j + b_f term of its parent node j, not only U_f h_k.",
)
check(
    torch.allclose(_hf, _want_h, atol=1e-4),
    f"In the fixed case (3 nodes, weights from torch.Generator().manual_seed(7)) c is right but h is not (expected\n  h = {_rows(_want_h)}\ngot\n  h = {_rows(_hf)}\n): h_j = o_j * tanh(c_j), with the tanh, and o_j the sigmoid of the output gate's columns.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(71)
# The hand-made weights again (all 0 but U_f = 100 I), on other inputs: 4 nodes, 7 children
# with random h and c, parents drawn at random.
with torch.no_grad():
    _hand = ChildSumTreeLSTMCell(2, 3)
    for _p in _hand.parameters():
        _p.zero_()
    _hand.U_f.weight.copy_(100 * torch.eye(3))
    _out = _hand(
        torch.zeros(4, 2),
        torch.randn(7, 3, generator=_gen),
        torch.randn(7, 3, generator=_gen) * 3,
        torch.randint(0, 4, (7,), generator=_gen),
    )
observe(
    "cell(...) with all weights 0 but U_f = 100 I, on 4 nodes with 7 random children",
    dict(zip("hc", _out, strict=True)) if pair_of(_out, 4, 3) else "not (h, c) of shape (4, 3)",
    atol=1e-5,
    hint="Each child k needs its own forget gate f_jk = sigmoid(W_f x_j + U_f h_k + b_f), from its own h_k (not from the sum of the children), multiplied with its own c_k.",
)
# Random weights and inputs of other sizes; no children at all; ten children of one node.
for _n, _m, _H, _E in [(5, 9, 6, 4), (1, 3, 2, 5), (8, 12, 3, 3), (4, 0, 3, 2), (2, 10, 4, 3)]:
    _cell = ChildSumTreeLSTMCell(_E, _H)
    with torch.no_grad():  # weights from an explicit generator, not from the global RNG
        for _name, _p in sorted(_cell.named_parameters()):
            _p.copy_(torch.randn(_p.shape, generator=_gen) * 0.5)
    _x = torch.randn(_n, _E, generator=_gen)
    _ch, _cc = torch.randn(_m, _H, generator=_gen), torch.randn(_m, _H, generator=_gen)
    # the last node is a leaf, unless it is the only one
    _parent = torch.randint(0, max(_n - 1, 1), (_m,), generator=_gen)
    _out = _cell(_x, _ch, _cc, _parent)
    observe(
        f"cell(x, child_h, child_c, parent) on {_n} node(s) with {_m} children (random weights, hidden size {_H}, input size {_E})",
        dict(zip("hc", _out, strict=True)) if pair_of(_out, _n, _H) else "not (h, c) of that shape",
        atol=1e-6,
        hint="Usual suspects: the gates' order in the columns is i, o, u (then f for W); each child's forget gate needs its parent's W_f x_j + b_f; h = o * tanh(c).",
    )
### END HIDDEN TESTS

# %% [markdown]
# `torch.autograd.gradcheck` compares the gradients autograd computes through your cell with
# finite differences. Finite differences need float64: they divide the difference of two
# outputs a tiny step apart (`eps=1e-6` in `gradcheck`) by that step. In float32 the rounding
# error of each number is smaller than that step, but divided by it, it becomes a few
# hundredths of the derivative, far above gradcheck's tolerance. So we convert the cell with
# `.double()` and use a tiny hidden size.

# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_cell_gradcheck"}
torch.manual_seed(2)
_cell = ChildSumTreeLSTMCell(2, 3).double()
_x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
_ch = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
_cc = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
_parent = torch.tensor([0, 0, 2, 2])
_ok, _error = attempt(
    torch.autograd.gradcheck, lambda a, b, c: _cell(a, b, c, _parent), (_x, _ch, _cc)
)
check(
    _error is None or not ("double" in _error.lower() and "float" in _error.lower()),
    f"gradcheck of the float64 cell raised an error that mixes Float and Double (the error: {_error}): a tensor you create inside forward is float32: make it with x.new_zeros(...) so it follows x's dtype.",
)
check(
    _error is None or "Jacobian mismatch" not in _error,
    "gradcheck in float64: autograd's gradients through the cell and the finite differences disagree, so autograd misses part of how the outputs depend on the inputs: something in forward is cut from the graph (.item(), .detach(), .data, torch.no_grad).",
)
check(
    _error is None and _ok,
    f"gradcheck of the float64 cell failed (the error: {_error}): run it on these inputs in a cell of your own to see the whole message.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(72)
_cell = ChildSumTreeLSTMCell(3, 2).double()
with torch.no_grad():  # weights from an explicit generator, not from the global RNG
    for _name, _p in sorted(_cell.named_parameters()):
        _p.copy_(torch.randn(_p.shape, generator=_gen, dtype=torch.float64))
_params = dict(_cell.named_parameters())
_x = torch.randn(5, 3, dtype=torch.float64, generator=_gen)
_ch = torch.randn(8, 2, dtype=torch.float64, generator=_gen)
_cc = torch.randn(8, 2, dtype=torch.float64, generator=_gen)
_parent = torch.randint(0, 4, (8,), generator=_gen)  # node 4 has no children
_mix_h = torch.randn(5, 2, dtype=torch.float64, generator=_gen)
_mix_c = torch.randn(5, 2, dtype=torch.float64, generator=_gen)


def _outputs(x, ch, cc, *weights):
    """The cell's (h, c) as a function of its inputs and weights."""
    return torch.func.functional_call(
        _cell, dict(zip(_params, weights, strict=True)), (x, ch, cc, _parent)
    )


def _scalar(*args):
    _h, _c = _outputs(*args)
    return (_h * _mix_h).sum() + (_c * _mix_c).sum()


def _rows_used(grad):
    """The rows of an input where autograd gives a nonzero gradient."""
    if grad is None:
        return []
    return [int(_k) for _k in (grad != 0).any(dim=1).nonzero().flatten()]


# What autograd makes of the student's cell in float64: the dtypes, which input rows each
# node depends on, and autograd's directional derivatives against central finite differences.
_point = [_x, _ch, _cc, *(p.detach() for p in _params.values())]
_leaves = [t.clone().requires_grad_() for t in _point]
_out = _outputs(*_leaves)
_h, _c = _out if pair_of(_out, 5, 2) else (torch.zeros(5, 2), torch.zeros(5, 2))
_in_graph = _h.grad_fn is not None and _c.grad_fn is not None
_depends = {"x": [], "child_h": [], "child_c": []}
for _j in range(_h.shape[0] if _in_graph else 0):
    _per_input = torch.autograd.grad(
        (_h[_j] + _c[_j]).sum(), _leaves[:3], retain_graph=True, allow_unused=True
    )
    for _key, _g in zip(_depends, _per_input, strict=True):
        _depends[_key].append(_rows_used(_g))
_grads = torch.autograd.grad(_scalar(*_leaves), _leaves, allow_unused=True) if _in_graph else []
_gaps = []
for _trial in range(6 if _in_graph else 0):
    _dirs = [torch.randn(t.shape, dtype=torch.float64, generator=_gen) for t in _point]
    with torch.no_grad():
        _up = _scalar(*(t + 1e-6 * d for t, d in zip(_point, _dirs, strict=True)))
        _down = _scalar(*(t - 1e-6 * d for t, d in zip(_point, _dirs, strict=True)))
    _numeric = ((_up - _down) / 2e-6).item()
    _analytic = sum(
        (g * d).sum() for g, d in zip(_grads, _dirs, strict=True) if g is not None
    ).item()
    _gaps.append((_analytic - _numeric) / max(1.0, abs(_numeric)))
observe(
    "cell(...) converted with .double(), on float64 inputs (5 nodes, 8 children, random weights): dtypes, what autograd sees, autograd against finite differences",
    {
        "h and c in the autograd graph": _in_graph,
        "dtype of h": str(_h.dtype),
        "dtype of c": str(_c.dtype),
        "rows of x each node depends on": _depends["x"],
        "rows of child_h each node depends on": _depends["child_h"],
        "rows of child_c each node depends on": _depends["child_c"],
        "autograd minus finite differences, 6 random directions (relative)": _gaps,
    },
    atol=1e-6,
    hint="Everything in forward must stay differentiable in float64: no .item(), .detach(), torch.no_grad() or NumPy, and new tensors made with x.new_zeros(...) so that they follow x's dtype.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The recursive Tree-LSTM
#
# The model is an embedding for the 14 tokens, one cell, and a linear layer that reads the
# root's `h` and scores the 10 possible values.


# %%
class TreeLSTM(nn.Module):
    def __init__(self, hidden_size=128, embed_size=32):
        super().__init__()
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(len(VOCAB), embed_size)
        self.cell = ChildSumTreeLSTMCell(embed_size, hidden_size)
        self.out = nn.Linear(hidden_size, 10)


class CallCounter:
    """Counts the calls of a module with a forward hook: `with CallCounter(m) as n: ...`."""

    def __init__(self, module):
        self.module, self.calls = module, 0

    def __enter__(self):
        self.handle = self.module.register_forward_hook(
            lambda *_: setattr(self, "calls", self.calls + 1)
        )
        return self

    def __exit__(self, *exc):
        self.handle.remove()


# %% [markdown]
# The checks of exercises 3 and 4 run your encoders on a `StandInTreeModel`, whose cell is a
# fixed *stand-in* with your cell's arguments and results, so a mistake in exercise 2 costs
# points only there.


# %% nbgrader={"locked": true, "grade_id": "stand_in"}
class StandInCell(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.W = nn.Linear(input_size, 4 * hidden_size)
        self.U = nn.Linear(hidden_size, 4 * hidden_size, bias=False)

    def forward(self, x, child_h, child_c, parent):
        a, b, d, e = self.U(child_h).chunk(4, dim=1)
        per_child = torch.tanh(e + a) * child_c + b * d
        gathered = x.new_zeros(x.shape[0], self.hidden_size).index_add(0, parent, per_child)
        p, q, r, s = self.W(x).chunk(4, dim=1)
        c = torch.tanh(p + gathered) * torch.sigmoid(q)
        return torch.tanh(r * c + s), c


class StandInTreeModel(nn.Module):
    """TreeLSTM's parts (embed, cell, out, hidden_size), the cell a StandInCell, and every
    weight drawn from `seed`."""

    def __init__(self, seed, hidden_size=8, embed_size=4):
        super().__init__()
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(len(VOCAB), embed_size)
        self.cell = StandInCell(embed_size, hidden_size)
        self.out = nn.Linear(hidden_size, 10)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _, p in sorted(self.named_parameters()):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def cell_by_hand(model, token, children):
    """One call of model.cell for one node: its token (a digit or an operator) and the (h, c)
    of its children, already computed. The checks unroll small trees with it."""
    x = model.embed(torch.tensor([token if isinstance(token, int) else TOKEN[token]]))
    empty = x.new_zeros(0, model.hidden_size)
    child_h = torch.cat([h for h, _ in children]) if children else empty
    child_c = torch.cat([c for _, c in children]) if children else empty
    return model.cell(x, child_h, child_c, torch.zeros(len(children), dtype=torch.long))


# %% [markdown]
# ### Exercise 3 (2 points): one node at a time
#
# Write `encode_recursive(model, tree)` that returns the root's `(h, c)`, each of shape
# `(1, hidden_size)`, calling `model.cell(...)` **once per node**:
#
# * a leaf `d`: `x = model.embed(torch.tensor([d]))`, `child_h` and `child_c` of shape
#   `(0, hidden_size)` and `parent = torch.zeros(0, dtype=torch.long)`;
# * a node `(op, *args)`: encode every argument first, stack their `h` and `c`, embed
#   `TOKEN[op]`, and call the cell with `parent` all zeros (every child belongs to row 0).
#
# Always call `model.cell(...)`, never `model.cell.forward(...)`: the checks count the calls
# with a hook.


# %% nbgrader={"solution": true, "grade_id": "encode_recursive"}
def encode_recursive(model, tree):
    ### BEGIN SOLUTION
    if isinstance(tree, int):
        x = model.embed(torch.tensor([tree]))
        empty = x.new_zeros(0, model.hidden_size)
        return model.cell(x, empty, empty, torch.zeros(0, dtype=torch.long))
    op, *args = tree
    states = [encode_recursive(model, a) for a in args]
    child_h = torch.cat([h for h, _ in states])
    child_c = torch.cat([c for _, c in states])
    x = model.embed(torch.tensor([TOKEN[op]]))
    return model.cell(x, child_h, child_c, torch.zeros(len(args), dtype=torch.long))
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_encode_recursive"}
_model = StandInTreeModel(3, hidden_size=8, embed_size=4)
_tree = parse("[MAX 2 9 [MIN 4 7 ] 0 ]")
with CallCounter(_model.cell) as _count:
    _out, _error = attempt(encode_recursive, _model, _tree)
check(
    _error is None or "out of bounds" not in _error,
    f"encode_recursive(model, tree) on [MAX 2 9 [MIN 4 7 ] 0 ] gave the cell a parent index out of bounds (the error: {_error}): an inner node calls the cell with x of one row (its own token), and all its children belong to that one node, so parent is 0 for every child row, not 0, 1, 2, ...",
)
check(
    _error is None,
    f"encode_recursive(model, tree) raised an error on [MAX 2 9 [MIN 4 7 ] 0 ] (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    isinstance(_out, tuple) and len(_out) == 2 and all(isinstance(t, torch.Tensor) for t in _out),
    "encode_recursive should return the pair (h, c) that the cell returns for the root.",
)
_h, _c = _out
check(
    tuple(_h.shape) == (1, 8) and tuple(_c.shape) == (1, 8),
    f"encode_recursive should return (h, c) of shape (1, hidden_size), the root's row only (yours: {tuple(_h.shape)}, {tuple(_c.shape)}).",
)
check(
    _count.calls == n_nodes(_tree),
    f"The cell should run once per node of the tree, leaves included (on a tree of {n_nodes(_tree)} nodes it ran {_count.calls} times): call model.cell(...), not model.cell.forward(...).",
)
_leaf = cell_by_hand(_model, 5, [])
_out, _error = attempt(encode_recursive, _model, 5)
check(
    _error is None,
    f"encode_recursive(model, 5), on a leaf, raised an error (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    pair_of(_out, 1, 8) and torch.allclose(_out[0], _leaf[0]),
    "A leaf 5 should give model.cell(model.embed(torch.tensor([5])), empty, empty, empty_parent): child_h and child_c of shape (0, hidden_size), parent torch.zeros(0, dtype=torch.long).",
)
_hmin = cell_by_hand(_model, "MIN", [cell_by_hand(_model, 4, []), cell_by_hand(_model, 7, [])])
_out, _ = attempt(encode_recursive, _model, parse("[MIN 4 7 ]"))
check(
    pair_of(_out, 1, 8) and torch.allclose(_out[0], _hmin[0], atol=1e-6),
    "[MIN 4 7 ] should be the cell on the embedding of MIN, with the two leaves' states (h and c) as its children, in one call.",
)
_hmax = cell_by_hand(_model, "MAX", [cell_by_hand(_model, 2, []), _hmin])
_out, _ = attempt(encode_recursive, _model, parse("[MAX 2 [MIN 4 7 ] ]"))
check(
    pair_of(_out, 1, 8) and torch.allclose(_out[0], _hmax[0], atol=1e-6),
    "[MAX 2 [MIN 4 7 ] ] should be the cell on MAX with the states of the leaf 2 and of [MIN 4 7 ] as children: encode every argument first, recursively, then the node.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_model_s = StandInTreeModel(73, hidden_size=8, embed_size=4)
_r = random.Random(99)
_chain = 0
for _ in range(9):  # a chain 10 nodes tall, and a node with 8 arguments
    _chain = (_r.choice(OPS), _r.randint(0, 9), _chain)
_trees = [3, 8, 0, *(make_tree(_r, max_depth=5, max_args=5) for _ in range(10)), _chain]
_trees.append(("SUM", *(_r.randint(0, 9) for _ in range(8))))
_calls, _hs, _cs = [], [], []
for _t in _trees:
    with CallCounter(_model_s.cell) as _count:
        _out = encode_recursive(_model_s, _t)
    _h, _c = _out if pair_of(_out, 1, 8) else ("not (h, c) of shape (1, 8)",) * 2
    _calls.append(_count.calls)
    _hs.append(_h)
    _cs.append(_c)
_what = "encode_recursive(model, tree) on 3 leaves, 10 random trees (depth <= 5, <= 5 arguments), a chain 10 nodes tall and a node with 8 arguments"
observe(
    f"{_what}: cell calls",
    _calls,
    hint="The cell runs once per node, leaves included: call model.cell(...) exactly once for every node, never model.cell.forward(...).",
)
observe(
    f"{_what}, the cell a stand-in (StandInTreeModel): root h and root c",
    {"root h": _hs, "root c": _cs},
    atol=1e-6,
    hint="A leaf d: x = model.embed(torch.tensor([d])) and no children. An inner node: encode every argument first, stack their h and c in two tensors, embed TOKEN[op], and call the cell with parent all zeros; return the (h, c) the cell returns.",
)
_model_s.zero_grad()
_roots = [_h for _h in _hs if isinstance(_h, torch.Tensor) and _h.grad_fn is not None]
if len(_roots) == len(_hs):  # the lab trains through encode_recursive: its gradients
    F.cross_entropy(_model_s.out(torch.cat(_roots)), torch.arange(len(_roots)) % 10).backward()
observe(
    f"{_what}: the gradient of each parameter after cross-entropy of the roots and backward()",
    {_n: _p.grad for _n, _p in sorted(_model_s.named_parameters())},
    atol=1e-5,
    hint="Keep every state in the autograd graph: no .detach(), .data or torch.tensor(...) around a state, so that training reaches the cell and the embedding.",
)
### END HIDDEN TESTS

# %% [markdown]
# Every cell call added its own nodes to the autograd graph, and `backward()` walks back
# through all of them. See it on a small tree, `[MAX 2 [MIN 4 7 ] ]` (each node drawn at its
# height), and below it `draw()` of the graph that `encode_recursive` built for it with a
# tiny model, each call of the cell drawn as one box that stands for all the operations it
# recorded (`calls=`: the setup cell's `calls_of` records the calls with a forward hook). The
# cell's operations appear five times, once per node; the parameters at the top feed all five
# copies, so their gradients add up over the nodes.


# %%
def plot_tree(tree, ax):
    """Draw a ListOps tree on `ax`: leaves in a row at the bottom, each node at its height."""
    spots, edges = [], []  # spots: (x, y, label) of each node; edges: (parent, child)

    def place(node, next_leaf):
        if isinstance(node, int):
            spots.append((next_leaf, 1, str(node)))
            return len(spots) - 1, next_leaf + 1
        kids = []
        for arg in node[1:]:
            kid, next_leaf = place(arg, next_leaf)
            kids.append(kid)
        spots.append((sum(spots[k][0] for k in kids) / len(kids), height(node), node[0]))
        edges.extend((len(spots) - 1, k) for k in kids)
        return len(spots) - 1, next_leaf

    place(tree, 0)
    for a, b in edges:
        ax.plot([spots[a][0], spots[b][0]], [spots[a][1], spots[b][1]], color="gray", zorder=1)
    for x, y, label in spots:
        color = "white" if label.isdigit() else "lightblue"
        ax.text(x, y, label, ha="center", va="center", bbox={"boxstyle": "round", "fc": color})
    ax.set_xlim(-0.7, max(x for x, _, _ in spots) + 0.7)
    ax.set_ylim(0.5, height(tree) + 0.5)
    ax.set_yticks(range(1, height(tree) + 1))
    ax.set_ylabel("height")
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_xticks([])


small_tree = parse("[MAX 2 [MIN 4 7 ] ]")
torch.manual_seed(0)
small_model = TreeLSTM(hidden_size=2, embed_size=2)
with your_code("encode_recursive"), calls_of(small_model.cell) as small_calls:
    small_h, _ = encode_recursive(small_model, small_tree)
fig, ax = plt.subplots(figsize=(2.8, 2.6))
plot_tree(small_tree, ax)
ax.set_title(to_string(small_tree), fontsize=9)
show_figure(
    fig,
    f"The tree {to_string(small_tree)} drawn by height: its leaves at height 1, each "
    "operator one above its tallest child.",
)
draw(small_h, params=dict(small_model.named_parameters()), calls=small_calls)

# %% [markdown]
# For a batch of trees we call `encode_recursive` once per tree and stack the roots:
# correct, but the cell runs once per node, on a single row. Count it:

# %%
torch.manual_seed(0)
model = TreeLSTM()
batch = sample_trees
with CallCounter(model.cell) as counter, your_code("encode_recursive"):
    roots = torch.cat([encode_recursive(model, t)[0] for t in batch])
print(f"128 trees, {sum(n_nodes(t) for t in batch)} nodes: {counter.calls} calls of the cell")
print("tallest tree:", max(height(t) for t in batch))

# %% [markdown]
# ## 4. Level-wise batching
#
# A node can run as soon as its children are done: all nodes of **height** $k$, over all the
# trees of a batch, only need nodes of height less than $k$. So a batch needs as many calls
# of the cell as the **tallest tree's height**, whatever the number of nodes.
#
# This schedule is *depth-based batching*, TensorFlow Fold's (Looks et al., 2017). DyNet's
# automatic batching (Neubig, Goldberg and Dyer, 2017) batches single operations instead,
# whichever have their inputs ready, so it may run operations of different depths together.
#
# `flatten(trees)` numbers the nodes of a batch 0, 1, 2, ... in post-order (children
# first) and returns `tokens[v]` (node `v`'s token id), `children[v]` (its children's ids)
# and `roots[b]` (the id of tree `b`'s root).


# %%
def flatten(trees):
    tokens, children, roots = [], [], []

    def visit(tree):
        if isinstance(tree, int):
            tokens.append(tree)
            children.append([])
        else:
            kids = [visit(a) for a in tree[1:]]
            tokens.append(TOKEN[tree[0]])
            children.append(kids)
        return len(tokens) - 1

    for tree in trees:
        roots.append(visit(tree))
    return tokens, children, roots


toy = [parse("[MIN 4 7 ]"), parse("[SUM 1 [MAX 2 3 ] ]")]
toy_tokens, toy_children, toy_roots = flatten(toy)
for v in range(len(toy_tokens)):
    print(f"node {v}: token {VOCAB[toy_tokens[v]]:>3}  children {toy_children[v]}")
print("roots:", toy_roots)

# %% [markdown]
# ### Exercise 4 (5 points): one cell call per level
#
# Write `encode_batched(model, trees)` that returns the roots' `h`, shape
# `(len(trees), hidden_size)`, row `b` for tree `b`, with exactly as many calls of
# `model.cell(...)` as the tallest tree's height: call $k$ ($k = 1, 2, \dots$) runs all the
# nodes of height $k$, from every tree, and only them. A plan:
#
# 1. `tokens, children, roots = flatten(trees)`; compute every node's height (post-order
#    means a node's children have their heights already when you reach it);
# 2. keep the finished nodes' states in `h_all = torch.zeros(N, H)` (and `c_all`), updated
#    after each level **out of place**, `h_all = h_all.index_copy(0, level_ids, h)`. Writing
#    in place, `h_all[level_ids] = h`, happens to work here, because reading rows by index
#    saves only the indices for backward; but writing in place into a tensor that autograd
#    saved for its backward pass (the input of a multiplication, say) makes `backward()` fail;
# 3. for each height $k = 1, 2, \dots$: take the nodes of that height, embed their tokens,
#    gather their children's states (`h_all[child_ids]`), build `parent` (position of each
#    child's node within the level), and call the cell once;
# 4. return the rows of the roots.
#
# The checks compare the roots, the loss and **every gradient** with the trees unrolled by
# hand (`cell_by_hand`), and count the calls and their nodes.


# %% nbgrader={"solution": true, "grade_id": "encode_batched"}
def encode_batched(model, trees):
    ### BEGIN SOLUTION
    tokens, children, roots = flatten(trees)
    heights = []
    for kids in children:
        heights.append(1 + max((heights[k] for k in kids), default=0))
    levels = [[] for _ in range(max(heights))]
    for v, k in enumerate(heights):
        levels[k - 1].append(v)
    x_all = model.embed(torch.tensor(tokens))
    h_all = x_all.new_zeros(len(tokens), model.hidden_size)
    c_all = x_all.new_zeros(len(tokens), model.hidden_size)
    for level in levels:
        ids = torch.tensor(level)
        kids = torch.tensor([k for v in level for k in children[v]], dtype=torch.long)
        parent = torch.tensor(
            [j for j, v in enumerate(level) for _ in children[v]], dtype=torch.long
        )
        h, c = model.cell(x_all[ids], h_all[kids], c_all[kids], parent)
        h_all = h_all.index_copy(0, ids, h)
        c_all = c_all.index_copy(0, ids, c)
    return h_all[torch.tensor(roots)]
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 3, "grade_id": "test_batched_equal"}
def _loss_and_grads(model, roots_h, labels):
    """The loss and each parameter's gradient (None: none arrived), or a sentence when
    `roots_h` is not in the autograd graph (the checks record it)."""
    model.zero_grad(set_to_none=True)
    if not isinstance(roots_h, torch.Tensor) or roots_h.grad_fn is None:
        return "the roots are not in the autograd graph (no grad_fn)", {}
    _loss = F.cross_entropy(model.out(roots_h), labels)
    _loss.backward()
    return _loss.item(), {n: p.grad for n, p in model.named_parameters()}


_model = StandInTreeModel(4, hidden_size=16, embed_size=8)
_trees = [parse("[MIN 4 7 ]"), parse("[SUM 1 [MAX 2 3 ] ]"), 6]
_trees.append(parse("[MED 1 [SUM 2 [MAX 3 4 ] ] ]"))
_labels = torch.tensor([4, 4, 6, 1])
_leaves = {_d: cell_by_hand(_model, _d, []) for _d in range(10)}
_L, _node = _leaves, lambda op, *kids: cell_by_hand(_model, op, list(kids))  # unrolled by hand
_sum = _node("SUM", _L[2], _node("MAX", _L[3], _L[4]))
_roots = [_node("MIN", _L[4], _L[7]), _node("SUM", _L[1], _node("MAX", _L[2], _L[3])), _L[6]]
_by_hand = torch.cat([_r[0] for _r in [*_roots, _node("MED", _L[1], _sum)]])
_out, _error = attempt(encode_batched, _model, _trees)
check(
    _error is None,
    f"encode_batched(model, trees) raised an error on 4 small trees (the error: {_error}): call it in a cell of your own on a few trees to see the whole message.",
)
check(
    isinstance(_out, torch.Tensor) and tuple(_out.shape) == (len(_trees), 16),
    f"encode_batched should return a tensor with one row per tree and hidden_size columns, the shape (4, 16) here (yours: {tuple(getattr(_out, 'shape', ()))}).",
)
_bad = [b for b in range(len(_trees)) if not torch.allclose(_out[b], _by_hand[b], atol=1e-5)]
check(
    not _bad,
    f"Some root states differ from the trees unrolled by hand (for {[to_string(_trees[b]) for b in _bad]}): is row b tree b's root? Is every node computed after all its children (a node's height is 1 + the height of its TALLEST child)?",
)
_loss_h, _grads_h = _loss_and_grads(_model, _by_hand, _labels)
_loss_b, _grads_b = _loss_and_grads(_model, _out, _labels)
check(
    isinstance(_loss_b, float),
    "The roots encode_batched returns are not in the autograd graph (no grad_fn), so training cannot reach the model: keep every state in the graph (no .detach() or .data).",
)
check(
    abs(_loss_h - _loss_b) < 1e-5,
    f"The loss on the batched roots differs from the loss on the trees unrolled by hand (by hand {_loss_h:.6f}, batched {_loss_b:.6f}): compare the roots row by row.",
)
for _name in _grads_h:
    _g = _grads_b.get(_name)
    check(
        _g is not None and torch.allclose(_grads_h[_name], _g, atol=1e-5),
        f"The gradient of a parameter differs between the trees unrolled by hand and the batched version (of {_name}): did a state get detached (.detach(), .data) or lost on the way?",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_model_s = StandInTreeModel(74, hidden_size=16, embed_size=8)
_gen = torch.Generator().manual_seed(74)
_r = random.Random(2025)
_batches = [
    (
        f"{_size} random tree(s) (depth <= 5, <= 5 arguments)",
        [make_tree(_r, 5, 5) for _ in range(_size)],
    )
    for _size in (1, 7, 33)
]
_twice = make_tree(_r, max_depth=4, max_args=3, p_subtree=0.6)
_batches += [
    ("a single leaf", [5]),
    ("the ten digits, leaves only", list(range(10))),
    ("the same random tree twice, then a leaf", [_twice, _twice, 3]),
]
for _what, _trees in _batches:
    _labels = torch.randint(0, 10, (len(_trees),), generator=_gen)
    _roots = encode_batched(_model_s, _trees)
    _ok = isinstance(_roots, torch.Tensor) and tuple(_roots.shape) == (len(_trees), 16)
    _roots = _roots if _ok else "not a tensor of one row per tree"
    _loss, _grads = _loss_and_grads(_model_s, _roots, _labels) if _ok else ("none", {})
    observe(
        f"encode_batched(model, trees) on {_what}, the cell a stand-in (StandInTreeModel), then cross-entropy and backward()",
        {"root h": _roots, "loss": _loss, **{f"gradient of {_n}": _g for _n, _g in _grads.items()}},
        atol=1e-5,
        hint="Row b must be tree b's root; a node must run after all its children (its height is 1 + the height of its TALLEST child); the states must stay in the autograd graph (no .detach(), no .data).",
    )
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_batched_calls"}
_model = StandInTreeModel(5, hidden_size=16, embed_size=8)
_rng = random.Random(5)
for _trees in ([parse("[SUM 1 [MAX 2 3 ] ]")], [5, 6, 7], [make_tree(_rng) for _ in range(64)]):
    with CallCounter(_model.cell) as _count:
        _, _error = attempt(encode_batched, _model, _trees)
    check(
        _error is None,
        f"encode_batched raised an error on a batch of trees (on {len(_trees)} trees; the error: {_error}): call it in a cell of your own to see the whole message.",
    )
    _tallest = max(height(t) for t in _trees)
    check(
        _count.calls == _tallest,
        f"The cell should run once per height, as many times as the tallest tree is tall, with the nodes of that height from all trees together (on {len(_trees)} trees of height up to {_tallest}, it ran {_count.calls} times).",
    )
_sizes = []
_handle = _model.cell.register_forward_hook(lambda m, i, out: _sizes.append(out[0].shape[0]))
try:
    attempt(encode_batched, _model, [parse("[SUM 1 [MAX 2 3 ] ]"), 5])
finally:
    _handle.remove()
check(
    _sizes == [4, 1, 1],
    f"On [SUM 1 [MAX 2 3 ] ] and 5, the cell calls should have 4, 1 and 1 nodes (yours: {_sizes}): first the four leaves (height 1: 1, 2, 3 and 5), then MAX (height 2), then SUM (height 3).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_model_s = StandInTreeModel(75, hidden_size=16, embed_size=8)
_r = random.Random(77)
_chain = 0
for _ in range(7):  # a chain 8 nodes tall
    _chain = (_r.choice(OPS), _chain, _r.randint(0, 9))
_nodes_per_call = []
_handle = _model_s.cell.register_forward_hook(
    lambda module, inputs, output: _nodes_per_call[-1].append(int(output[0].shape[0]))
)
try:
    for _trees in (
        [parse("[SUM 1 [MAX 2 [MIN 3 [MED 4 5 6 ] ] ] ]")],
        [5, 6, 7],
        [5],
        [_chain, 4, parse("[MIN 1 [MAX 2 3 ] ]")],
        *(
            [make_tree(_r, max_depth=6, max_args=3, p_subtree=0.5) for _ in range(_size)]
            for _size in (2, 9, 50)
        ),
    ):
        _nodes_per_call.append([])
        encode_batched(_model_s, _trees)
finally:
    _handle.remove()
observe(
    "encode_batched(model, trees) on 7 batches (a chain of 4 operators; 3 leaves; 1 leaf; a chain 8 tall with a leaf and a tree of height 3; 2, 9 and 50 random trees of depth <= 6): the number of nodes in each cell call, in call order",
    _nodes_per_call,
    hint="One call of the cell per height, 1, 2, 3, ... up to the tallest tree's, each with all the nodes of that height from all the trees together.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. How much faster?
#
# One training step (forward, backward, Adam step) on the same 128 trees, both ways, on your
# machine (`benchmarks/tree_lstm.py` in the course repository measures more carefully).


# %%
def time_steps(encode, trees, labels, seconds):
    torch.manual_seed(0)
    model = TreeLSTM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    done, start = 0, time.perf_counter()
    while done == 0 or time.perf_counter() - start < seconds:
        loss = F.cross_entropy(model.out(encode(model, trees)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += len(trees)
    return done / (time.perf_counter() - start)


def recursive_batch(model, trees):
    return torch.cat([encode_recursive(model, t)[0] for t in trees])


check(defined("sample_labels"), "Run the data cell of section 1 first (it needs exercise 1).")
window, timed = (0.1, 16) if GRADING else (3.0, len(sample_trees))  # graded: 16 trees, briefly
with your_code("encode_recursive"):
    rec_speed = time_steps(recursive_batch, sample_trees[:timed], sample_labels[:timed], window)
with your_code("encode_batched"):
    bat_speed = time_steps(encode_batched, sample_trees[:timed], sample_labels[:timed], window)
print(f"recursive     : {rec_speed:8.0f} trees/s")
print(f"level-batched : {bat_speed:8.0f} trees/s   ({bat_speed / rec_speed:.1f}x)")

# %% [markdown]
# ## 6. Training, and a sequential baseline
#
# The level-batched Tree-LSTM trains for a fixed time (Adam, fresh batches of 128, a
# linearly decaying learning rate), then a plain LSTM on the same expressions read as
# tokens, brackets included: it must discover the structure the Tree-LSTM is given. Under
# grading the runs are seconds long; your own run takes the full budget (90 s and 60 s).
# The LSTM reads a padded batch through `pack_padded_sequence`, so its final `h` is each
# expression's state at its own last token, not after the padding.


# %%
class SeqLSTM(nn.Module):
    def __init__(self, hidden_size=128, embed_size=32):
        super().__init__()
        self.index = {t: i + 1 for i, t in enumerate(VOCAB + ["[", "]"])}  # 0 is padding
        self.embed = nn.Embedding(len(self.index) + 1, embed_size, padding_idx=0)
        self.lstm = nn.LSTM(embed_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, 10)

    def forward(self, trees):
        seqs = [
            [self.index[t] for t in to_string(tree).replace("[", "[ ").split()] for tree in trees
        ]
        lengths = torch.tensor([len(s) for s in seqs])
        padded = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)
        for b, s in enumerate(seqs):
            padded[b, : len(s)] = torch.tensor(s)
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embed(padded), lengths, batch_first=True, enforce_sorted=False
        )
        _, (h, _) = self.lstm(packed)
        return self.out(h[-1])


def train(logits_fn, params, seconds, batch=128, lr=3e-3, name="model"):
    """Adam for `seconds` of wall time, with a progress bar."""
    opt = torch.optim.Adam(params, lr=lr)
    losses, start = [], time.perf_counter()
    bar = tqdm(total=seconds, desc=f"training {name}", unit="s", disable=GRADING)
    while (elapsed := time.perf_counter() - start) < seconds:
        for group in opt.param_groups:
            group["lr"] = lr * (1 - 0.95 * elapsed / seconds)
        trees, labels = training_batch(train_rng, batch)
        loss = F.cross_entropy(logits_fn(trees), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if len(losses) % 100 == 0:  # whole seconds on the bar
            bar.update(int(min(elapsed, seconds)) - bar.n)
            bar.set_postfix(loss=f"{sum(losses[-100:]) / 100:.3f}")
    bar.update(bar.total - bar.n)  # the time is up: the bar ends full
    bar.close()
    return losses


def test_accuracy(logits_fn, n=500 if GRADING else 2000):
    """The accuracy on the first n test trees (graded: 500, the runs are seconds long)."""
    with torch.no_grad():
        logits = torch.cat([logits_fn(test_trees[s : s + 500]) for s in range(0, n, 500)])
    return (logits.argmax(1) == test_labels[:n]).float().mean().item()


TREE_SECONDS, LSTM_SECONDS = (1, 0.5) if GRADING else (90, 60)
torch.manual_seed(0)
tree_model = TreeLSTM()
with your_code("encode_batched"):
    tree_losses = train(
        lambda ts: tree_model.out(encode_batched(tree_model, ts)),
        tree_model.parameters(),
        TREE_SECONDS,
        name="Tree-LSTM",
    )
    tree_acc = test_accuracy(lambda ts: tree_model.out(encode_batched(tree_model, ts)))
print(f"Tree-LSTM: {len(tree_losses)} steps in {TREE_SECONDS}s, test accuracy {tree_acc:.1%}")
lstm_model = SeqLSTM()
lstm_losses = train(lstm_model, lstm_model.parameters(), LSTM_SECONDS, name="LSTM")
lstm_acc = test_accuracy(lstm_model)
print(f"LSTM     : {len(lstm_losses)} steps in {LSTM_SECONDS}s, test accuracy {lstm_acc:.1%}")

# %%
check(defined("tree_losses"), "Run the training cell above first (it needs exercises 1 to 4).")
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(tree_losses, label=f"Tree-LSTM (test accuracy {tree_acc:.1%})", alpha=0.8)
ax.plot(lstm_losses, label=f"LSTM (test accuracy {lstm_acc:.1%})", alpha=0.8)
ax.set_xlabel("training step (batch of 128)")
ax.set_ylabel("cross-entropy")
ax.legend()
show_figure(
    fig,
    f"The training loss (cross-entropy) against the step: the Tree-LSTM (test accuracy "
    f"{tree_acc:.1%}) and the LSTM (test accuracy {lstm_acc:.1%}).",
)

# %% [markdown]
# ## What you have seen
#
# * A Tree-LSTM's graph follows each sample's tree; one cell runs at every node, and autograd
#   adds up its gradients from all of them. Run naively, that is one call per node.
# * Grouping the nodes by height runs a batch of different trees in as many calls as the
#   tallest tree is high, with the same loss and gradients, to rounding (depth-based
#   batching, as in TensorFlow Fold).
# * `gradcheck` (in float64) is the quick way to trust a hand-written cell.
