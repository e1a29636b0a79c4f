"""Claims of lab 1 (the forward pass builds the graph), checked on the installed torch."""

from __future__ import annotations

import pytest
import torch
from claims import claim

LAB = "lab01_graph"


def cell():
    """Lab 1's recurrent cell step: (Wh, Wx, x, h, i2h, h2h, the sum, next_h, out)."""
    Wh = torch.randn(3, 3, requires_grad=True)
    Wx = torch.randn(3, 2, requires_grad=True)
    x, h = torch.randn(2, 1), torch.randn(3, 1)
    i2h, h2h = Wx @ x, Wh @ h
    total = i2h + h2h
    next_h = torch.tanh(total)
    return Wh, Wx, x, h, i2h, h2h, total, next_h, next_h.sum()


def name(node):
    return type(node).__name__


@claim(LAB, "None of them was computed from anything, so none has a `grad_fn` yet")
def test_created_tensors_have_no_grad_fn():
    Wh, Wx, x, h, *_ = cell()
    assert all(t.grad_fn is None and t.is_leaf for t in (Wh, Wx, x, h))


@claim(LAB, "`i2h.grad_fn` is a node called `MmBackward0`")
def test_matmul_node_name():
    *_, i2h, _h2h, _total, _next_h, _out = cell()
    assert name(i2h.grad_fn) == "MmBackward0"


@claim(LAB, "A second, separate `MmBackward0` node appears: one node per operation that ran")
def test_two_matmuls_are_two_nodes():
    *_, i2h, h2h, _total, _next_h, _out = cell()
    assert name(h2h.grad_fn) == name(i2h.grad_fn) == "MmBackward0"
    assert h2h.grad_fn is not i2h.grad_fn


@claim(LAB, "the graph keeps the old tensor's node: the sum is still there")
def test_reassigned_name_keeps_the_node():
    *_, total, next_h, _out = cell()
    node = next_h.grad_fn.next_functions[0][0]
    assert name(next_h.grad_fn) == "TanhBackward0"
    assert node is total.grad_fn and name(node) == "AddBackward0"


def dot_source(t, **kwargs):
    torchviz = pytest.importorskip("torchviz")
    return torchviz.make_dot(t, **kwargs).source


@claim(LAB, "In the picture, the **arrows follow the forward pass**: from each leaf")
def test_torchviz_edges_point_from_inputs_to_outputs():
    Wh, Wx, *_, out = cell()
    source = dot_source(out, params={"Wh": Wh, "Wx": Wx})
    acc = out.grad_fn.next_functions[0][0].next_functions[0][0].next_functions[0][0]
    acc = acc.next_functions[0][0]  # the AccumulateGrad of Wx
    mm = out.grad_fn.next_functions[0][0].next_functions[0][0].next_functions[0][0]
    assert f"{id(acc)} -> {id(mm)}" in source
    assert f"{id(mm)} -> {id(acc)}" not in source


@claim(LAB, "**blue** boxes are leaf tensors that require a gradient")
def test_torchviz_colours_leaves_blue_and_output_green():
    Wh, Wx, *_, out = cell()
    source = dot_source(out, params={"Wh": Wh, "Wx": Wx})
    blue = [line for line in source.splitlines() if "lightblue" in line]
    assert sorted(blue) == [' (3, 2)" fillcolor=lightblue]', ' (3, 3)" fillcolor=lightblue]']
    assert '"Wh\n (3, 3)" fillcolor=lightblue' in source  # named by params=
    assert sum("darkolivegreen1" in line for line in source.splitlines()) == 1  # out, green
    assert "orange" not in source
    for leaf in (Wh, Wx):  # each hanging from its own AccumulateGrad node
        assert source.count(f"{id(leaf)} -> ") == 1
    assert source.count("AccumulateGrad") == 2


@claim(LAB, "**orange** boxes appear with `show_saved=True`")
def test_torchviz_saved_tensors_are_orange():
    Wh, Wx, *_, out = cell()
    source = dot_source(out, params={"Wh": Wh, "Wx": Wx}, show_saved=True)
    assert "orange" in source and "mat2" in source


@claim(LAB, "$\\tanh'(a) = 1 - \\tanh^2(a)$ needs the result")
def test_tanh_saves_its_result():
    *_, next_h, _out = cell()
    assert torch.equal(next_h.grad_fn._saved_result, next_h)


@claim(LAB, "so that matrix multiply saved `x` (its `mat2`); it did not save `Wx`")
def test_matmul_saves_only_what_a_needed_gradient_uses():
    _Wh, Wx, x, _h, i2h, *_ = cell()
    assert torch.equal(i2h.grad_fn._saved_mat2, x)
    assert i2h.grad_fn._saved_self is None
    both = Wx @ x.clone().requires_grad_()  # both gradients needed: both saved
    assert torch.equal(both.grad_fn._saved_self, Wx)


@claim(LAB, "`show_attrs=True` prints the non-tensor attributes a node saved, such as the shape")
def test_show_attrs_prints_the_reduced_shape():
    *_, out = cell()
    assert tuple(out.grad_fn._saved_self_sym_sizes) == (3, 1)
    assert "self_sym_sizes" in dot_source(out, show_attrs=True)
    assert "self_sym_sizes" not in dot_source(out)


@claim(LAB, "`x` and `h` appear only as saved `mat2` boxes, never as blue leaves")
def test_data_inputs_are_not_leaves_of_the_graph():
    Wh, Wx, x, h, *_, out = cell()
    source = dot_source(out, params={"Wh": Wh, "Wx": Wx}, show_saved=True)
    assert sum("lightblue" in line for line in source.splitlines()) == 2
    assert source.count("mat2") == 2
    assert all(n.variable is not x and n.variable is not h for n in acc_nodes(out))


@claim(LAB, "You can read the saved tensors in code too: their names start with `_saved_`.")
def test_saved_attributes_are_named_saved():
    *_, i2h, _h2h, _total, next_h, _out = cell()
    assert [a for a in dir(next_h.grad_fn) if a.startswith("_saved_")] == ["_saved_result"]
    assert {"_saved_mat2", "_saved_self"} <= set(dir(i2h.grad_fn))


def acc_nodes(t):
    seen, todo, found = set(), [t.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)  # the node itself: its id() may be reused once it is freed (lab 3)
        if hasattr(node, "variable"):
            found.append(node)
        todo += [child for child, _ in node.next_functions]
    return found


@claim(LAB, "one entry `(node, index)` per input of the operation, pointing at the node that")
def test_next_functions_has_one_entry_per_input():
    Wh, Wx, x, h, i2h, h2h, total, next_h, out = cell()
    assert [n for n, _ in total.grad_fn.next_functions] == [i2h.grad_fn, h2h.grad_fn]
    left, right = torch.randn(3, requires_grad=True).split(2)
    assert left.grad_fn is right.grad_fn  # a two-output node: the index says which output
    assert [i for _, i in (left * 2 + right[0]).grad_fn.next_functions] == [0, 0]
    assert (left[0] + right[0]).grad_fn.next_functions[1][0].next_functions[0][1] == 1


@claim(LAB, "An input that does not need a gradient gives `(None, 0)`.")
def test_input_without_gradient_is_none_zero():
    _Wh, Wx, _x, _h, i2h, *_ = cell()
    first, second = i2h.grad_fn.next_functions
    assert name(first[0]) == "AccumulateGrad" and first[0].variable is Wx
    assert second == (None, 0)


@claim(LAB, "The walk ended at an `AccumulateGrad` node with no inputs.")
def test_walk_ends_at_accumulate_grad():
    *_, out = cell()
    node = out.grad_fn
    for _ in range(4):
        node = node.next_functions[0][0]
    assert name(node) == "AccumulateGrad" and node.next_functions == ()


@claim(LAB, "*accumulates* (adds) the incoming gradient into the tensor's `.grad`")
def test_accumulate_grad_adds():
    w = torch.tensor(2.0, requires_grad=True)
    (w * 3).backward()
    (w * 4).backward()
    assert w.grad.item() == 7.0


@claim(LAB, "The node holds on to its tensor as `.variable`.")
def test_accumulate_grad_variable():
    _Wh, Wx, _x, _h, i2h, *_ = cell()
    assert i2h.grad_fn.next_functions[0][0].variable is Wx


@claim(LAB, "For `a * a` the multiply's two inputs are the very same `AccumulateGrad` object.")
def test_square_has_one_leaf_node_twice():
    a = torch.randn(3, requires_grad=True)
    (first, _), (second, _) = (a * a).grad_fn.next_functions
    assert first is second and first.variable is a


@claim(LAB, "both branches point back at the one `MmBackward0` that made `u`")
def test_intermediate_used_twice_is_one_node():
    _Wh, Wx, x, *_ = cell()
    u = Wx @ x
    add = (u.sin() + u.cos()).grad_fn
    sin, cos = (n for n, _ in add.next_functions)
    assert sin.next_functions[0][0] is cos.next_functions[0][0] is u.grad_fn


@claim(LAB, "a weight used twice gets the *sum* of two gradients")
def test_weight_used_twice_gets_the_sum():
    a = torch.tensor(3.0, requires_grad=True)
    (a * torch.tensor(2.0) + a * torch.tensor(5.0)).backward()
    assert a.grad.item() == 7.0


@claim(LAB, "a tensor you create yourself is a **leaf**; it requires a gradient only if you say")
def test_created_tensor_is_a_leaf():
    assert torch.randn(3).is_leaf and not torch.randn(3).requires_grad
    t = torch.zeros(2, requires_grad=True)
    assert t.is_leaf and t.requires_grad and t.grad_fn is None


@claim(LAB, "an integer or boolean result, such as `a.argmax()` or `a > 0`, never requires")
def test_integer_results_never_require_a_gradient():
    a = torch.randn(3, requires_grad=True)
    t = a * 2
    assert t.requires_grad and not t.is_leaf and t.grad_fn is not None
    for result in (a.argmax(), a > 0, a.long()):
        assert not result.requires_grad and result.is_leaf and result.grad_fn is None


@claim(LAB, "a result nobody needs a gradient for is not recorded at all: it is again a leaf")
def test_untracked_result_is_a_leaf():
    t = torch.randn(3).exp() * 2
    assert t.is_leaf and t.grad_fn is None and not t.requires_grad


@claim(LAB, "inside `with torch.no_grad():` nothing is recorded, and `t.detach()` gives a tensor")
def test_no_grad_and_detach():
    a = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        inside = a * 2
    assert inside.grad_fn is None and not inside.requires_grad
    t = a * 2
    d = t.detach()
    assert d.data_ptr() == t.data_ptr() and d.grad_fn is None and not d.requires_grad


@claim(LAB, "`t.requires_grad_()` switches `requires_grad` on for a leaf `t`, in place")
def test_requires_grad_underscore_changes_nothing_else():
    t = torch.randn(3)
    ptr, version = t.data_ptr(), t._version
    assert t.requires_grad_() is t
    assert t.requires_grad and t.is_leaf and t.grad_fn is None
    assert t.data_ptr() == ptr and t._version == version


@claim(LAB, "indexing one element is a *select*, and a sum is `SumBackward0`")
def test_select_and_sum_node_names():
    a = torch.randn(3, requires_grad=True)
    assert name(a[0].grad_fn) == "SelectBackward0" and name(a.sum().grad_fn) == "SumBackward0"


@claim(LAB, "when PyTorch records one, the name of its node is `NODE_NAMES[op]`")
def test_node_names_table():
    a = torch.randn(3, requires_grad=True)
    made = {
        "AddBackward0": a + 1,
        "SubBackward0": a - 1,
        "MulBackward0": a * 2,
        "SumBackward0": a.sum(),
        "SelectBackward0": a[0],
        "TanhBackward0": torch.tanh(a),
        "ExpBackward0": torch.exp(a),
    }
    assert all(name(t.grad_fn) == node for node, t in made.items())
    assert name((2 * a).grad_fn) == "MulBackward0" and name((1 - a).grad_fn) == "RsubBackward1"


@claim(LAB, "`t.detach().requires_grad_()` makes one from any tensor, with no history behind it")
def test_detached_leaf_stops_the_gradient():
    a = torch.randn(3, requires_grad=True)
    t = a * 2
    leaf = t.detach().requires_grad_()
    (leaf * 3).sum().backward()
    assert leaf.is_leaf and leaf.grad_fn is None and torch.equal(leaf.grad, torch.full((3,), 3.0))
    assert a.grad is None


@claim(LAB, "A tensor can be *computed* and still be a leaf")
def test_computed_leaf():
    t = torch.ones(3) + 1
    assert t.is_leaf and t.grad_fn is None


@claim(LAB, "Of the leaves, `backward()` fills `.grad` exactly on the tensors hanging from the")
def test_backward_fills_exactly_the_leaves_of_the_graph():
    Wh, Wx, x, h, i2h, *_, out = cell()
    unused = torch.randn(2, requires_grad=True)
    out.backward()
    assert {id(n.variable) for n in acc_nodes(out)} == {id(Wh), id(Wx)}
    assert Wh.grad is not None and Wx.grad is not None
    assert x.grad is None and h.grad is None and unused.grad is None


@claim(LAB, "leaves that require a gradient end in `AccumulateGrad`, inputs that do not are")
def test_summary_of_next_functions():
    Wh, Wx, x, h, i2h, h2h, *_ = cell()
    assert name(h2h.grad_fn.next_functions[0][0]) == "AccumulateGrad"
    assert h2h.grad_fn.next_functions[1] == (None, 0)


@claim(LAB, "`torch.no_grad()` and `detach()` stop it, and `requires_grad_()` starts it again")
def test_summary_of_spreading():
    a = torch.randn(3, requires_grad=True)
    assert (a.detach() * 2).requires_grad is False
    with torch.no_grad():
        assert (a * 2).requires_grad is False
    restarted = a.detach().requires_grad_()
    assert (restarted * 2).requires_grad and restarted.is_leaf
