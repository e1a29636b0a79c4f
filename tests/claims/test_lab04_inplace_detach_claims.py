"""Claims of lab 4 (names, in-place operations and detach), checked on the installed torch."""

from __future__ import annotations

import warnings

import pytest
import torch
from claims import claim

LAB = "lab04_inplace_detach"
MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace"


def node(name: str) -> str:
    """How the version-counter error names the node: `Exp` (torch 2.14.1, 2.15.0), the node's
    class name `ExpBackward0` on torch 2.10 (the labs say so)."""
    return f"{name}Backward0" if torch.__version__.startswith("2.10.") else name


def two_names():
    w1, w2, x = (torch.tensor(2.0, requires_grad=True) for _ in range(3))
    x = torch.tensor(4.0, requires_grad=True)
    y = w1 * x
    first_y = y
    y = w2 * y
    return first_y, y


@claim(LAB, "`y.grad` is **32**, not 64.")
def test_gradient_of_the_second_y():
    first_y, y = two_names()
    y.retain_grad()
    (y**2).backward()
    assert y.item() == 16.0 and y.grad.item() == 32.0


@claim(
    LAB,
    "`y = w2 * y` the name y points to the new node (and `y *= w2` would turn the first node",
)
def test_node_gradients_hint_for_a_first_gradient_of_32():
    """The check's hint when the first gradient is 32: rebinding or an in-place product both
    leave the returned name on the node that out = y ** 2 used; a second name kept before an
    out-of-place product gets the first node's 64."""
    w1, w2, x = (torch.tensor(v, requires_grad=True) for v in (2.0, 2.0, 4.0))
    y = w1 * x
    y.retain_grad()
    y = w2 * y
    y.retain_grad()
    (y**2).backward()
    assert y.grad.item() == 32.0
    y = w1 * x
    kept = y
    kept.retain_grad()
    y *= w2
    y.retain_grad()
    (y**2).backward()
    assert kept is y and kept.grad.item() == 32.0
    kept, y = two_names()
    kept.retain_grad()
    (y**2).backward()
    assert kept.grad.item() == 64.0


@claim(LAB, "The first node (value 8) is still in the graph, between `w1`, `x` and the new `y`")
def test_first_node_is_still_in_the_graph():
    first_y, y = two_names()
    first_y.retain_grad()
    (y**2).backward()
    assert first_y.item() == 8.0 and y.grad_fn.next_functions[1][0] is first_y.grad_fn
    assert first_y.grad.item() == 64.0


@claim(LAB, "The picture shows two `MulBackward0` nodes, one per line of code")
def test_two_mul_nodes():
    first_y, y = two_names()
    assert type(first_y.grad_fn).__name__ == type(y.grad_fn).__name__ == "MulBackward0"
    assert first_y.grad_fn is not y.grad_fn


@claim(LAB, "a non-leaf keeps its `.grad` only if you call `retain_grad()` on it")
def test_non_leaf_grad_needs_retain_grad():
    first_y, y = two_names()
    y.retain_grad()
    (y**2).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert first_y.grad is None and y.grad is not None


@claim(LAB, "No new tensor: the same tensor now holds other numbers (when it is in the graph")
def test_in_place_keeps_the_tensor_and_records_a_node():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 2
    ptr = b.data_ptr()
    assert b.add_(1) is b and b.data_ptr() == ptr
    assert type(b.grad_fn).__name__ == "AddBackward0"
    assert type(b.grad_fn.next_functions[0][0]).__name__ == "MulBackward0"


@claim(LAB, "Every tensor carries a *version counter*, `t._version`, which each in-place")
def test_every_in_place_operation_bumps_the_version():
    t = torch.zeros(3)
    ops = [
        lambda: t.add_(1),
        lambda: t.mul_(3),
        lambda: t.__iadd__(1),
        lambda: t.__setitem__(0, 5),
        lambda: torch.relu_(t),
    ]
    for expected, op in enumerate(ops, start=1):
        op()
        assert t._version == expected
    t + 1
    assert t._version == len(ops)


@claim(LAB, "A backward node remembers the version of every tensor it saved, and checks it again")
def test_saved_version_is_checked_at_backward():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    e = a.exp()
    e.add_(1)  # no error yet: the check comes when backward() reaches the node
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0 instead"):
        e.sum().backward()


@claim(LAB, "`b = a * 2` saves the constant 2 and nothing of `b`")
def test_times_two_then_in_place_is_allowed():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 2
    saved = {n: getattr(b.grad_fn, n) for n in dir(b.grad_fn) if n.startswith("_saved_")}
    assert saved["_saved_other"].item() == 2 and saved["_saved_self"] is None
    b.add_(1)
    assert b._version == 1
    b.sum().backward()
    assert torch.equal(a.grad, torch.full((3,), 2.0))


@claim(LAB, "so `torch.exp` saves its **output**. Adding 1 to that output in place destroys")
def test_exp_saves_its_output_and_in_place_breaks_backward():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    e = a.exp()
    assert e.grad_fn._saved_result._version == e._version == 0
    e.add_(1)
    with pytest.raises(RuntimeError, match=MODIFIED):
        e.sum().backward()


@claim(
    LAB,
    "it is a float tensor of shape `[3]`, the *output 0 of Exp* (the result of `exp`; torch 2.10 "
    "writes the node's class name, *ExpBackward0*)",
)
def test_version_error_message():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    e = a.exp()
    e += 1
    with pytest.raises(RuntimeError) as caught:
        e.sum().backward()
    assert (
        f"[torch.FloatTensor [3]], which is output 0 of {node('Exp')}, is at version 1; "
        "expected version 0" in str(caught.value)
    )


@claim(
    LAB,
    "That names the culprit here because `exp` saved its *output*: the message names the "
    "operation that made the tensor. For a saved *input* it names the in-place operation that "
    "last wrote it (*output 0 of Add* after an `add_`), and nothing for a tensor that needs no "
    "gradient",
)
def test_version_error_names_the_maker_of_an_output_and_the_writer_of_an_input():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 2
    s = b.sin()  # sin saves its input b, the output of Mul
    b.add_(1)
    with pytest.raises(RuntimeError) as caught:
        s.sum().backward()
    message = str(caught.value)
    assert f"which is output 0 of {node('Add')}, is at version 1; expected version 0" in message
    assert "Mul" not in message and "Sin" not in message  # neither b's maker nor the saver
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = torch.tensor([1.0, 2.0, 3.0])
    y = w * x  # saves x, which needs no gradient
    x.mul_(2)
    with pytest.raises(RuntimeError) as caught:
        y.sum().backward()
    assert "[torch.FloatTensor [3]] is at version 1; expected version 0" in str(caught.value)
    assert "which is output" not in str(caught.value)


@claim(
    LAB,
    "the message tells you that a saved tensor was overwritten, its shape, and how many times "
    "it was written since",
)
def test_version_error_counts_the_writes():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    e = a.exp()
    e.add_(1)
    e.mul_(2)
    with pytest.raises(RuntimeError) as caught:
        e.sum().backward()
    assert (
        f"[torch.FloatTensor [3]], which is output 0 of {node('Exp')}, is at version 2; "
        "expected version 0" in str(caught.value)
    )


@claim(LAB, "write it **out of place**, `e = a.exp() + 1`: a new tensor, the saved one is")
def test_out_of_place_fix():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (a.exp() + 1).sum().backward()
    assert torch.allclose(a.grad, a.detach().exp())


@claim(LAB, "**clone** before changing, `e = a.exp().clone(); e.add_(1)`: the in-place op now")
def test_clone_fix():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    e = a.exp().clone()
    e.add_(1)
    e.sum().backward()
    assert torch.allclose(a.grad, a.detach().exp())


def saved_names(fn, *args):
    return sorted(n for n in dir(fn(*args).grad_fn) if n.startswith("_saved_"))


@claim(LAB, "Functions whose backward needs their output: `exp`, `tanh`, `sigmoid`, `relu`")
def test_which_functions_save_their_output():
    x = torch.rand(3, requires_grad=True) + 0.5
    for fn in (torch.exp, torch.tanh, torch.sigmoid, torch.relu, torch.sqrt):
        assert saved_names(fn, x) == ["_saved_result"], fn.__name__
        y = fn(x)
        y.mul_(2)
        with pytest.raises(RuntimeError, match=MODIFIED):
            y.sum().backward()


@claim(LAB, "functions that need their *input*, such as `pow`, `sin` or `a * b` of two tensors")
def test_which_functions_save_their_input():
    for make in (lambda t, u: t**2, lambda t, u: t.sin(), lambda t, u: t * u):
        base = torch.rand(3, requires_grad=True)
        t, u = base * 1, torch.rand(3, requires_grad=True)
        y = make(t, u)
        t.add_(1)  # the input changed after it was saved
        with pytest.raises(RuntimeError, match=MODIFIED):
            y.sum().backward()
    assert saved_names(lambda t: t**2, torch.rand(3, requires_grad=True)) == [
        "_saved_exponent",
        "_saved_self",
    ]
    assert saved_names(torch.sin, torch.rand(3, requires_grad=True)) == ["_saved_self"]


@claim(LAB, "autograd refuses any in-place change to it while it is recording")
def test_in_place_on_a_leaf_is_refused():
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in"):
        w += 1


@claim(LAB, "`w = w - lr * w.grad` would only move the name `w` to a new, non-leaf tensor")
def test_out_of_place_update_makes_a_non_leaf():
    w = torch.ones(3, requires_grad=True)
    w.grad = torch.ones(3)
    new = w - 0.1 * w.grad
    assert new is not w and not new.is_leaf and new.grad_fn is not None


@claim(LAB, "inside `with torch.no_grad():` nothing is recorded, so in-place changes to a")
def test_in_place_update_under_no_grad():
    w = torch.ones(3, requires_grad=True)
    w.grad = torch.tensor([0.5, -1.0, 2.0])
    ptr = w.data_ptr()
    with torch.no_grad():
        w -= 0.1 * w.grad
    assert w.data_ptr() == ptr and w.is_leaf and w.requires_grad and w.grad_fn is None
    assert w._version == 1 and torch.allclose(w, torch.tensor([0.95, 1.1, 0.8]))


@claim(
    LAB,
    "This is what `torch.optim.SGD(params, lr).step()` followed by "
    "`zero_grad(set_to_none=False)` does; its default, `zero_grad()`, sets each `.grad` to "
    "`None` instead, which the next `backward()` fills afresh just the same.",
)
def test_sgd_step_by_hand_is_sgd():
    by_hand = torch.tensor([1.0, -2.0], requires_grad=True)
    other = by_hand.detach().clone().requires_grad_()
    default = by_hand.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([other], lr=0.1)
    optimizer_default = torch.optim.SGD([default], lr=0.1)
    for p in (by_hand, other, default):
        (p**2).sum().backward()
    with torch.no_grad():
        by_hand -= 0.1 * by_hand.grad
    by_hand.grad.zero_()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    optimizer_default.step()
    optimizer_default.zero_grad()  # the default: None, not zeros (so not what zero_() does)
    assert torch.equal(by_hand.detach(), other.detach())
    assert torch.equal(other.grad, by_hand.grad) and torch.equal(other.grad, torch.zeros(2))
    assert default.grad is None and torch.equal(default.detach(), by_hand.detach())
    for p in (by_hand, default):  # the next backward() starts afresh either way
        (p**2).sum().backward()
    assert torch.equal(default.grad, by_hand.grad)


@claim(LAB, "which levels off near the variance of the noise in the data, $0.1^2$")
def test_line_fit_loss_levels_off_near_the_noise_variance():
    gen = torch.Generator().manual_seed(4)
    xs = torch.linspace(-1, 1, 64)
    ys = 3 * xs - 1 + 0.1 * torch.randn(64, generator=gen)
    slope = torch.zeros((), requires_grad=True)
    intercept = torch.zeros((), requires_grad=True)
    losses = []
    for _ in range(200):
        loss = ((slope * xs + intercept - ys) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in (slope, intercept):
                p -= 0.1 * p.grad
                p.grad.zero_()
        losses.append(loss.item())
    assert 0.005 < losses[-1] < 0.02 and abs(losses[-1] - losses[-50]) < 0.001


def four_ways():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    base = x * 2
    with torch.no_grad():
        no_grad = base * 1
    with torch.inference_mode():
        inference = base * 1
    return x, base, base.detach(), base.detach().clone(), no_grad, inference


@claim(LAB, "`detach()` makes a new tensor object over the **same memory**, outside the graph.")
def test_detach_shares_memory():
    _x, base, detached, *_ = four_ways()
    assert detached is not base and detached.data_ptr() == base.data_ptr()
    assert detached.grad_fn is None and not detached.requires_grad


@claim(LAB, "`detach().clone()` also copies the memory: a snapshot that nothing else can change.")
def test_detach_clone_copies():
    _x, base, _detached, snapshot, *_ = four_ways()
    assert snapshot.data_ptr() != base.data_ptr()
    before = snapshot.clone()
    with torch.no_grad():
        base.mul_(5)
    assert torch.equal(snapshot, before)


@claim(LAB, "Results are ordinary tensors with no `grad_fn`, in new memory as usual")
def test_no_grad_results_feed_a_recorded_computation():
    x, base, _d, _s, no_grad, _inference = four_ways()
    assert no_grad.grad_fn is None and not no_grad.requires_grad and not no_grad.is_inference()
    assert no_grad.data_ptr() != base.data_ptr()
    (no_grad * x).sum().backward()
    assert torch.equal(x.grad, no_grad)


@claim(LAB, "it also skips the version counter and view tracking (which the PyTorch")
def test_inference_tensors_have_no_version_counter():
    *_, inference = four_ways()
    assert inference.is_inference() and inference.grad_fn is None
    with pytest.raises(RuntimeError, match="Inference tensors do not track version counter"):
        inference._version  # noqa: B018


@claim(LAB, "marks its results as *inference tensors* that autograd refuses to save later")
def test_inference_tensors_cannot_be_saved_but_can_be_added():
    x, *_, inference = four_ways()
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (inference * x).sum().backward()
    (inference + x).sum().backward()  # `t + x` saves neither
    assert torch.equal(x.grad, torch.ones(3))


@claim(LAB, "`inference_mode()` records nothing and makes inference tensors, which autograd")
def test_summary_of_inference_mode():
    x, *_, inference = four_ways()
    assert not inference.requires_grad
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (inference * x).sum().backward()


@claim(LAB, "The window of `detach()` also carries the version counter.")
def test_detach_shares_the_version_counter():
    a = torch.tensor([0.5, 1.0], requires_grad=True)
    e = a.exp()
    view = e.detach()
    view.zero_()
    assert torch.equal(e, torch.zeros(2)) and e._version == 1
    with pytest.raises(RuntimeError, match="output 0 of Exp"):
        e.sum().backward()


@claim(LAB, "with `y = x.detach() ** 2`, the branch through `y` is cut off, so only")
def test_detached_branch_sends_no_gradient():
    x = torch.ones(3, requires_grad=True)
    ((x.detach() ** 2) + x**3).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 3.0))


def bootstrap(w, s, r, s_next, gamma):
    return ((w * s).sum() - (r + gamma * (w.detach() * s_next).sum())) ** 2


@claim(LAB, "So the gradient must flow through $v(s)$ only:")
def test_stop_gradient_target_gradient():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(4, requires_grad=True, generator=gen)
    s, s_next = torch.randn(4, generator=gen), torch.randn(4, generator=gen)
    bootstrap(w, s, 0.3, s_next, 0.9).backward()
    target = 0.3 + 0.9 * (w.detach() * s_next).sum()
    assert torch.allclose(w.grad, 2 * ((w.detach() * s).sum() - target) * s)


@claim(LAB, "In the picture, look at `w[2]`: the two gradients push it in opposite directions.")
def test_w2_gradients_have_opposite_signs():
    w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    s, s_next = torch.tensor([1.0, 2.0, 0.5]), torch.tensor([0.0, 1.0, 2.0])
    full = ((w * s).sum() - (1.0 + 0.5 * (w * s_next).sum())) ** 2
    (full_grad,) = torch.autograd.grad(full, w)
    bootstrap(w, s, 1.0, s_next, 0.5).backward()
    assert full_grad[2] * w.grad[2] < 0
    assert torch.equal(full_grad, torch.tensor([-6.0, -9.0, 3.0]))
    assert torch.equal(w.grad, torch.tensor([-6.0, -12.0, -3.0]))
