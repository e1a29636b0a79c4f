"""Claims of lab 2 (backpropagation walks the graph backwards), checked on the installed torch."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from claims import claim

LAB = "lab02_backprop"
FREED = "Trying to backward through the graph a second time"


def cell():
    """Lab 2's recurrent cell step: (Wh, Wx, x, h, i2h, next_h, out), in float64 so that the
    hand-written derivative and autograd's agree to the last digits even where tanh saturates
    (1 - tanh^2 is then tiny, and float32 rounds it differently in the two)."""
    Wh = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    Wx = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    x, h = torch.randn(2, 1, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64)
    i2h = Wx @ x
    next_h = torch.tanh(i2h + Wh @ h)
    return Wh, Wx, x, h, i2h, next_h, next_h.sum()


@claim(LAB, "`i2h` needs a gradient because `Wx` does, and so does everything computed from it")
def test_requires_grad_spreads():
    Wh, Wx, x, h, i2h, next_h, out = cell()
    assert i2h.requires_grad and next_h.requires_grad and out.requires_grad
    assert not (torch.randn(3, 2, dtype=x.dtype) @ x).requires_grad


@claim(LAB, "`x` and `h` were created by you and do not need one: they are leaves with no")
def test_data_are_leaves_without_gradient():
    Wh, Wx, x, h, *_, out = cell()
    out.backward()
    assert x.is_leaf and h.is_leaf and x.grad is None and h.grad is None


@claim(LAB, "`out.backward()` needs no argument: it computes")
def test_scalar_backward_fills_leaf_grads_of_their_shape():
    Wh, Wx, x, h, i2h, next_h, out = cell()
    out.backward()
    assert Wh.grad.shape == Wh.shape and Wx.grad.shape == Wx.shape
    expected = (1 - next_h.detach() ** 2) @ x.T
    assert torch.allclose(Wx.grad, expected)


@claim(LAB, "Its gradient was computed on the way (the chain rule needs it) but then thrown away")
def test_intermediate_gradient_is_computed_then_dropped():
    *_, i2h, next_h, out = cell()
    seen = []
    i2h.register_hook(seen.append)
    out.backward()
    assert len(seen) == 1 and torch.allclose(seen[0], 1 - next_h.detach() ** 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert i2h.grad is None
    assert caught and "not a leaf Tensor" in str(caught[0].message)
    assert "retain_grad" in str(caught[0].message)


@claim(LAB, "To keep a non-leaf gradient, call `.retain_grad()` on it **before** `backward()`.")
def test_retain_grad_before_backward():
    *_, i2h, next_h, out = cell()
    next_h.retain_grad()
    out.backward(retain_graph=True)
    assert torch.equal(next_h.grad, torch.ones_like(next_h))  # out is a sum: all ones
    i2h.retain_grad()  # too late: the gradient of this pass is gone
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert i2h.grad is None


@claim(LAB, "(Since `out` is a sum, that gradient is all ones: a good sanity check.)")
def test_gradient_of_a_sum_is_ones():
    *_, next_h, out = cell()
    next_h.retain_grad()
    out.backward()
    assert torch.equal(next_h.grad, torch.ones_like(next_h))


@claim(LAB, "`y = w ** 2` keeps `w` (as `_saved_self`, next to the exponent)")
def test_pow_saves_its_input_and_exponent():
    w = torch.tensor(3.0, requires_grad=True)
    y = w**2
    assert y.grad_fn._saved_self is w and y.grad_fn._saved_exponent == 2


@claim(LAB, "A second `backward()` through that node finds nothing to work with, and stops")
def test_second_backward_through_pow_raises():
    w = torch.tensor(3.0, requires_grad=True)
    y = w**2
    y.backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()
    with pytest.raises(RuntimeError, match="access saved tensors after they have already been"):
        y.grad_fn._saved_self  # noqa: B018


@claim(LAB, "`AddBackward0` keeps only a number (`alpha`, the factor `torch.add` puts on its")
def test_add_saves_no_tensor_and_backward_runs_twice():
    w = torch.tensor(3.0, requires_grad=True)
    y = w + 1
    saved = [a for a in dir(y.grad_fn) if a.startswith("_saved_")]
    assert saved == ["_saved_alpha"] and y.grad_fn._saved_alpha == 1
    assert torch.add(w, 1, alpha=5).grad_fn._saved_alpha == 5
    y.backward()
    y.backward()
    assert w.grad.item() == 2.0


@claim(LAB, "`w * 3` saves a tensor, the 3 (for $dy/dw = 3$): PyTorch wraps the Python number")
def test_times_a_number_saves_a_wrapped_number():
    w = torch.tensor(3.0, requires_grad=True)
    y = w * 3
    other = y.grad_fn._saved_other
    assert isinstance(other, torch.Tensor) and other.dim() == 0 and other.item() == 3
    assert y.grad_fn._saved_self is None  # w itself is not needed: 3 needs no gradient


@claim(LAB, "so a second `backward()` through `w * 3` fails too (checked on torch 2.10 to 2.15")
def test_second_backward_through_times_a_number_raises():
    w = torch.tensor(3.0, requires_grad=True)
    y = w * 3
    y.backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()


@claim(LAB, "this wrapped number is also kept away from saved-tensor hooks: they see only real")
def test_saved_tensor_hooks_do_not_see_the_wrapped_number():
    packed = []

    def pack(t):
        packed.append(t)
        return t

    w = torch.tensor(3.0, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        by_number = w * 3
        assert packed == []
        w * torch.tensor(3.0)
    assert len(packed) == 1 and packed[0].item() == 3.0
    assert by_number.grad_fn._saved_other.item() == 3


@claim(LAB, "`backward(retain_graph=True)` keeps the saved tensors, so you may go backwards again")
def test_retain_graph_allows_a_second_pass_that_doubles():
    w = torch.tensor(2.0, requires_grad=True)
    y = w**3
    y.backward(retain_graph=True)
    y.backward()
    assert w.grad.item() == 24.0  # 2 x 3w^2 at w = 2, the exercise's example


@claim(LAB, "For `y = w ** 3` at `w = 2` that is $2 \\times 3w^2 = 24$.")
def test_backward_twice_example():
    w = torch.tensor(2.0, requires_grad=True)
    y = w**3
    y.backward(retain_graph=True)
    y.backward(retain_graph=True)
    assert w.grad.item() == 24.0


def accumulation_example():
    Wh = torch.ones(3, 3, requires_grad=True)
    Wx, h = torch.ones(3, 2), torch.ones(3, 1)
    return Wh, lambda x: torch.tanh(Wx @ x + Wh @ h).sum()


@claim(LAB, "each hidden unit is $\\tanh(3)$ and every entry of")
def test_accumulation_example_gradient():
    Wh, forward = accumulation_example()
    out = forward(torch.zeros(2, 1))
    assert torch.allclose(out, torch.tensor(3 * math.tanh(3)))
    out.backward()
    assert torch.allclose(Wh.grad, torch.full((3, 3), 1 - math.tanh(3) ** 2))
    assert f"{1 - math.tanh(3) ** 2:.4f}" == "0.0099"


@claim(LAB, "Every entry went from 0.0099 to 0.0197 to 0.0296, one, two, then three times")
def test_three_passes_accumulate():
    Wh, forward = accumulation_example()
    printed = []
    for _ in range(3):
        forward(torch.zeros(2, 1)).backward()
        assert (Wh.grad == Wh.grad[0, 0]).all()
        printed.append(f"{Wh.grad[0, 0].item():.4f}")
    assert printed == ["0.0099", "0.0197", "0.0296"]


@claim(LAB, "`Wh.grad.zero_()` zeroes it in place, and the next `backward()` adds into it in place")
def test_grad_is_changed_in_place():
    Wh, forward = accumulation_example()
    forward(torch.zeros(2, 1)).backward()
    kept = Wh.grad
    copied = Wh.grad.clone()
    forward(torch.zeros(2, 1)).backward()
    assert Wh.grad is kept and torch.allclose(kept, 2 * copied)
    Wh.grad.zero_()
    assert Wh.grad is kept and (kept == 0).all()
    forward(torch.zeros(2, 1)).backward()
    assert Wh.grad is kept and torch.allclose(kept, copied)


@claim(LAB, "also into the fresh one that the first pass after `Wh.grad = None` creates; this is")
def test_fresh_grad_is_then_updated_in_place_unless_create_graph():
    Wh, forward = accumulation_example()
    forward(torch.zeros(2, 1)).backward()
    Wh.grad = None
    forward(torch.zeros(2, 1)).backward()
    fresh = Wh.grad
    forward(torch.zeros(2, 1)).backward()
    assert Wh.grad is fresh
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_graph=True's warning about a reference cycle
        forward(torch.zeros(2, 1)).backward(create_graph=True)
    assert Wh.grad is not fresh  # with create_graph=True the sum is a new tensor


@claim(LAB, "(`.detach()` is no copy: it shares the data.)")
def test_detach_shares_data_and_clone_does_not():
    Wh, forward = accumulation_example()
    forward(torch.zeros(2, 1)).backward()
    detached, cloned = Wh.grad.detach(), Wh.grad.clone()
    forward(torch.zeros(2, 1)).backward()
    assert torch.equal(detached, Wh.grad) and not torch.equal(cloned, Wh.grad)
    assert detached.data_ptr() == Wh.grad.data_ptr() != cloned.data_ptr()


@claim(LAB, "*grad can be implicitly created only for scalar outputs.*")
def test_vector_backward_error_message():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="^grad can be implicitly created only for scalar"):
        (x**2).backward()


@claim(LAB, "the failed call above freed nothing, so y can still go backwards")
def test_failed_vector_backward_frees_nothing():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x**2
    with pytest.raises(RuntimeError):
        y.backward()
    y.backward(gradient=torch.ones(3))
    assert torch.equal(x.grad, 2 * x.detach())


@claim(LAB, "`y.backward(gradient=v)` computes the gradient of `(v * y).sum()`")
def test_backward_with_gradient_is_a_vjp():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v = torch.tensor([1.0, 0.0, 0.5])
    (x**2).backward(gradient=v)
    by_vjp = x.grad.clone()
    x.grad = None
    (v * x**2).sum().backward()
    J = torch.diag(2 * x.detach())  # the Jacobian of x ** 2
    assert torch.equal(by_vjp, x.grad) and torch.allclose(by_vjp, v @ J)


@claim(LAB, "`y.sum().backward()` is the case `v = ones`.")
def test_sum_is_the_ones_vjp():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x**3).sum().backward()
    by_sum = x.grad.clone()
    x.grad = None
    (x**3).backward(gradient=torch.ones(3))
    assert torch.equal(by_sum, x.grad)


@claim(LAB, "computes the same product and *returns* it, as a tuple with one gradient per input")
def test_autograd_grad_returns_a_tuple_and_leaves_grad_alone():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    z = torch.tensor(2.0, requires_grad=True)
    v = torch.tensor([1.0, 0.0, 0.5])
    got = torch.autograd.grad(x**2 * z, (x, z), grad_outputs=v)
    assert isinstance(got, tuple) and len(got) == 2
    assert torch.equal(got[0], v * 2 * x.detach() * 2) and x.grad is None and z.grad is None


@claim(LAB, "Like `backward()`, it frees what the graph saved unless you pass `retain_graph=True`.")
def test_autograd_grad_frees_unless_retain_graph():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = (x**2).sum()
    torch.autograd.grad(y, x, retain_graph=True)
    torch.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match=FREED):
        torch.autograd.grad(y, x)


@claim(LAB, "With a *one-hot* `v`, 1 at position `i` and 0 elsewhere, $v^\\top J$ is row `i` of")
def test_one_hot_vjp_is_a_row_and_jacrev_agrees():
    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def f(t):
        return torch.stack([t[0] * t[1], t.sin().sum(), t[2] ** 3])

    y = f(x)
    rows = [torch.autograd.grad(y, x, torch.eye(3)[i], retain_graph=True)[0] for i in range(3)]
    a, b, c = x.detach()
    J = torch.tensor([[b, a, 0.0], [a.cos(), b.cos(), c.cos()], [0.0, 0.0, 3 * c**2]])
    assert torch.allclose(torch.stack(rows), J)


@claim(LAB, "a second pass needs `retain_graph=True` as soon as one node saved a tensor")
def test_one_saving_node_is_enough_to_need_retain_graph():
    w = torch.tensor(3.0, requires_grad=True)
    only_adds = (w + 1) + 2
    only_adds.backward()
    only_adds.backward()
    one_saves = (w + 1) * w + 2
    one_saves.backward()
    with pytest.raises(RuntimeError, match=FREED):
        one_saves.backward()


@claim(LAB, "`draw(out)` shows the graph (blue boxes are the leaves that will receive `.grad`).")
def test_blue_boxes_are_the_leaves_that_get_grad():
    torchviz = pytest.importorskip("torchviz")
    Wh, Wx, *_, out = cell()
    source = torchviz.make_dot(out).source
    assert sum("lightblue" in line for line in source.splitlines()) == 2
    assert f"{id(Wh)} [" in source and f"{id(Wx)} [" in source
    out.backward()
    assert Wh.grad is not None and Wx.grad is not None
