"""Claims of lab 10 (forward mode and torch.func), each checked on the installed torch."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.autograd.functional as AF
import torch.func
import torch.nn.functional as F
from claims import claim, lab_class
from torch import nn

LAB = "lab10_forward_func"

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")


# ---------------------------------------------------------------- helpers


DynamicNet = lab_class(LAB, "DynamicNet")


Softsign = lab_class(LAB, "Softsign")  # the lab's own, its solution included


def softsign_function(*, save_backward=True, save_forward=True, jvp=True, vmap_rule=True):
    """The lab's Softsign, or a subclass of it without the pieces asked away."""
    if save_backward and save_forward and jvp and vmap_rule:
        return Softsign

    class Variant(Softsign):
        generate_vmap_rule = vmap_rule

    if not (save_backward and save_forward):

        def setup_context(ctx, inputs, output):
            (x,) = inputs
            if save_backward:
                ctx.save_for_backward(x)
            if save_forward:
                ctx.save_for_forward(x)

        Variant.setup_context = staticmethod(setup_context)
    if not jvp:
        Variant.jvp = staticmethod(torch.autograd.Function.jvp)  # the inherited one, which raises
    return Variant


class DoubleOldStyle(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


X = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
V = torch.tensor([1.0, 0.5, -2.0], dtype=torch.float64)


# ---------------------------------------------------------------- 1. dual numbers


@claim(
    LAB, "`fwAD.make_dual(x, v)` makes a dual tensor with primal `x` and tangent `v` (same shape)"
)
def test_make_dual_pairs_a_primal_with_a_tangent_of_its_shape():
    with fwAD.dual_level():
        primal, tangent = fwAD.unpack_dual(fwAD.make_dual(X, V))
        assert torch.equal(primal, X) and torch.equal(tangent, V)
        with pytest.raises(RuntimeError, match="different size"):
            fwAD.make_dual(X, torch.ones(2, dtype=torch.float64))


@claim(LAB, "`with fwAD.dual_level():` opens a region where dual tensors exist")
def test_dual_tensors_need_a_level():
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(X, V)


@claim(LAB, "every operation on a dual tensor computes its output's tangent as well")
def test_every_operation_carries_the_tangent():
    with fwAD.dual_level():
        d = fwAD.make_dual(X, V)
        y = (d.sin() * d).exp() @ torch.arange(3.0, dtype=torch.float64) + d.tanh().sum()
        tangent = fwAD.unpack_dual(y).tangent
    want = torch.func.jvp(
        lambda t: (t.sin() * t).exp() @ torch.arange(3.0, dtype=torch.float64) + t.tanh().sum(),
        (X,),
        (V,),
    )[1]
    assert torch.allclose(tangent, want)


@claim(LAB, "`fwAD.unpack_dual(y)` returns a named tuple `(primal, tangent)`")
def test_unpack_dual_is_a_named_tuple():
    with fwAD.dual_level():
        out = fwAD.unpack_dual(fwAD.make_dual(X, V).sin())
    assert isinstance(out, tuple) and out._fields == ("primal", "tangent")
    assert torch.allclose(out.tangent, X.cos() * V)


@claim(LAB, "computed during the forward pass, without any graph: `y` does not require grad")
def test_forward_mode_records_no_graph():
    with fwAD.dual_level():
        y = fwAD.make_dual(X, V).sin() * 2
        assert not y.requires_grad and y.grad_fn is None
        assert fwAD.unpack_dual(y).tangent is not None


@claim(LAB, "A tensor computed from plain tensors only has no tangent (`None`)")
def test_plain_tensors_have_no_tangent():
    with fwAD.dual_level():
        fwAD.make_dual(X, V)  # a dual tensor exists, but x.sin() does not use it
        assert fwAD.unpack_dual(X.sin()).tangent is None


@claim(LAB, "once the `with` block ends, `unpack_dual` finds none, so read them inside")
def test_tangents_are_gone_after_the_level():
    with fwAD.dual_level():
        y = fwAD.make_dual(X, V).sin()
        inside = fwAD.unpack_dual(y).tangent
    assert inside is not None
    assert fwAD.unpack_dual(y).tangent is None
    assert torch.allclose(inside, X.cos() * V)  # read inside, it stays a tensor afterwards


# ---------------------------------------------------------------- 2. jvp and vjp


def _f(x):
    return torch.stack([x[0] * x[1], x[1].sin() + x[2] ** 2])


@claim(LAB, "`y.backward(gradient=u)` computed $u^\\top J$, a **vector-Jacobian product**")
def test_backward_with_a_gradient_is_a_vjp():
    x = X.clone().requires_grad_()
    u = torch.tensor([2.0, -1.0], dtype=torch.float64)
    _f(x).backward(gradient=u)
    assert torch.allclose(x.grad, u @ torch.func.jacrev(_f)(X))


@claim(LAB, "`torch.func.jvp(f, (x,), (v,))` returns `(f(x), J v)`: what you just built with dual")
def test_func_jvp_returns_the_output_and_jv_as_dual_numbers_do():
    out, jv = torch.func.jvp(_f, (X,), (V,))
    assert torch.allclose(out, _f(X))
    assert torch.allclose(jv, torch.func.jacrev(_f)(X) @ V)
    with fwAD.dual_level():
        assert torch.allclose(fwAD.unpack_dual(_f(fwAD.make_dual(X, V))).tangent, jv)


@claim(LAB, "`vjp_fn(u)` returns the tuple `(u^T J,)`, one entry per input of `f`")
def test_vjp_fn_returns_one_entry_per_input():
    out, vjp_fn = torch.func.vjp(lambda a, b: a * b.sum(), X, V)
    grads = vjp_fn(torch.ones(3, dtype=torch.float64))
    assert isinstance(grads, tuple) and len(grads) == 2
    assert torch.allclose(grads[0], V.sum().expand(3)) and torch.allclose(
        grads[1], X.sum().expand(3)
    )


@claim(LAB, "The forward pass runs once; `vjp_fn` can be called for many `u`.")
def test_vjp_runs_the_forward_once():
    calls = []

    def f(x):
        calls.append(1)
        return _f(x)

    _, vjp_fn = torch.func.vjp(f, X)
    rows = [vjp_fn(u)[0] for u in torch.eye(2, dtype=torch.float64)]
    assert len(calls) == 1
    assert torch.allclose(torch.stack(rows), torch.func.jacrev(_f)(X))


@claim(
    LAB, "So reverse mode gives one row of the Jacobian per backward pass, forward mode one column"
)
def test_a_row_per_backward_a_column_per_forward():
    J = torch.func.jacrev(_f)(X)
    for i, u in enumerate(torch.eye(2, dtype=torch.float64)):
        x = X.clone().requires_grad_()
        _f(x).backward(gradient=u)
        assert torch.allclose(x.grad, J[i])
    for j, e in enumerate(torch.eye(3, dtype=torch.float64)):
        assert torch.allclose(torch.func.jvp(_f, (X,), (e,))[1], J[:, j])


@claim(
    LAB,
    (
        'its `jvp` gets $Jv$ from two reverse passes, "the double backwards trick" in its '
        "documentation, where `torch.func.jvp` uses forward mode"
    ),
)
def test_autograd_functional_jvp_uses_backward_and_func_jvp_forward_mode():
    assert "double backwards trick" in AF.jvp.__doc__

    class OnlyJvp(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return 2 * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def jvp(ctx, t):
            return 2 * t

    assert torch.allclose(torch.func.jvp(OnlyJvp.apply, (X,), (V,))[1], 2 * V)
    with pytest.raises(NotImplementedError):  # the reverse passes need a backward
        AF.jvp(OnlyJvp.apply, X, V)
    assert torch.allclose(
        AF.vjp(_f, X, torch.ones(2, dtype=torch.float64))[1], torch.func.jacrev(_f)(X).sum(0)
    )


# ---------------------------------------------------------------- 3. jacfwd and jacrev


@claim(
    LAB,
    (
        "`torch.func.jacfwd(f)` is your function done in one batch: it `vmap`s `jvp` over the $n$ "
        "basis vectors of the input."
    ),
)
def test_jacfwd_is_forward_mode_in_one_batch():
    calls = []

    def f(x):
        calls.append(1)
        return _f(x)

    J = torch.func.jacfwd(f)(X)
    assert len(calls) == 1  # one batched run, not one per column
    assert torch.allclose(
        J,
        torch.stack(
            [torch.func.jvp(_f, (X,), (e,))[1] for e in torch.eye(3, dtype=torch.float64)], 1
        ),
    )
    no_jvp = softsign_function(jvp=False)
    with pytest.raises(
        NotImplementedError, match="jvp function"
    ):  # forward mode, so it needs a jvp
        torch.func.jacfwd(no_jvp.apply)(X)


@claim(
    LAB,
    (
        "`torch.func.jacrev(f)` runs the forward pass once and `vmap`s `vjp_fn` over the $m$ "
        "basis vectors of the output. Both give the same matrix"
    ),
)
def test_jacrev_runs_forward_once_and_matches_jacfwd():
    calls = []

    def f(x):
        calls.append(1)
        return _f(x)

    J = torch.func.jacrev(f)(X)
    assert len(calls) == 1
    assert torch.allclose(J, torch.func.jacfwd(_f)(X))
    no_jvp = softsign_function(jvp=False)  # reverse mode: needs backward only
    assert torch.allclose(torch.func.jacrev(no_jvp.apply)(X), torch.diag(1 / (1 + X.abs()) ** 2))


# ---------------------------------------------------------------- 4. grad, vmap, functional_call


@claim(
    LAB,
    (
        "no `.grad`, no `requires_grad`, no `backward()`, and nothing left behind. Its first "
        "argument may be a dict of tensors; the gradient is then a dict with the same keys."
    ),
)
def test_func_grad_leaves_nothing_and_takes_dicts():
    x = X.clone()
    g = torch.func.grad(lambda t: (t**3).sum())(x)
    assert torch.allclose(g, 3 * X**2)
    assert not x.requires_grad and x.grad is None and not g.requires_grad
    params = {"a": X.clone(), "b": V.clone()}
    gd = torch.func.grad(lambda p: (p["a"] * p["b"]).sum())(params)
    assert set(gd) == {"a", "b"} and torch.allclose(gd["a"], V) and torch.allclose(gd["b"], X)


@claim(
    LAB,
    (
        "(`in_dims` says which dimension of each argument is the batch, `None` for an argument "
        "shared by all)"
    ),
)
def test_vmap_in_dims_none_shares_an_argument():
    W = torch.randn(4, 3, dtype=torch.float64)
    xs = torch.randn(5, 3, dtype=torch.float64)
    out = torch.func.vmap(lambda w, x: w @ x, in_dims=(None, 0))(W, xs)
    assert torch.allclose(out, xs @ W.T)
    xs_t = xs.T.contiguous()  # batch along dim 1
    assert torch.allclose(torch.func.vmap(lambda w, x: w @ x, in_dims=(None, 1))(W, xs_t), xs @ W.T)


@claim(
    LAB,
    (
        "with the tensors of the dict `params` (keys as in "
        "`model.named_parameters()`) in place of the model's own"
    ),
)
def test_functional_call_swaps_the_parameters():
    torch.manual_seed(0)
    model = DynamicNet(4, 5, 3, seed=0)
    other = DynamicNet(4, 5, 3, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = dict(other.named_parameters())
    x = torch.randn(2, 4)
    out = torch.func.functional_call(model, params, (x,), {"depth": 2})
    assert torch.allclose(out, other(x, depth=2))
    assert not torch.allclose(out, model(x, depth=2))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@claim(
    LAB,
    (
        "`vmap` runs the Python code of the function **once**, on tensors that stand for the "
        "whole batch. So a `DynamicNet` that draws its own depth draws it once per `vmap` call, "
        "and every "
        "sample of the batch gets the same depth"
    ),
)
def test_vmap_runs_python_once_so_one_depth_per_call():
    model = DynamicNet(5, 8, 3, seed=1)
    draws = []
    draw = model.rng.randint
    model.rng.randint = lambda a, b: draws.append(draw(a, b)) or draws[-1]
    params = {n: p.detach() for n, p in model.named_parameters()}
    xs = torch.randn(6, 5)
    out = torch.func.vmap(
        lambda p, x: torch.func.functional_call(model, p, (x[None],)), in_dims=(None, 0)
    )(params, xs)
    assert len(draws) == 1
    same = model(xs, depth=draws[0])  # every sample at the one depth drawn
    assert torch.allclose(out[:, 0], same, atol=1e-6)


@claim(
    LAB,
    "**per-sample gradients**, which one `backward()` of the batch's loss does not give by "
    "itself (it sums over the batch, as lab 3 showed; lab 9's hooks had to collect the pieces, "
    "layer by layer)",
)
def test_backward_sums_what_vmap_grad_keeps_apart():
    model = DynamicNet(5, 8, 3, seed=1)
    xs, ys = torch.randn(6, 5), torch.randint(0, 3, (6,))
    params = {n: p.detach() for n, p in model.named_parameters()}

    def loss_one(p, x, y):
        out = torch.func.functional_call(model, p, (x[None],), {"depth": 2})
        return F.nll_loss(out, y[None])

    per_sample = torch.func.vmap(torch.func.grad(loss_one), in_dims=(None, 0, 0))(params, xs, ys)
    F.nll_loss(model(xs, depth=2), ys, reduction="sum").backward()
    for name, p in model.named_parameters():
        assert per_sample[name].shape == (6, *p.shape) and p.grad.shape == p.shape
        assert torch.allclose(per_sample[name].sum(0), p.grad, atol=1e-5)
        assert not torch.allclose(per_sample[name][0], per_sample[name][1])


@claim(
    LAB,
    "`torch.func.functional_call(model, params, args, kwargs)` calls `model(*args, **kwargs)`, "
    "its hooks included,",
)
def test_functional_call_calls_the_module_with_its_hooks():
    model = nn.Linear(3, 2)
    fired = []
    model.register_forward_pre_hook(lambda m, args: fired.append("pre"))
    model.register_forward_hook(lambda m, args, out: fired.append("post"))
    params = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    out = torch.func.functional_call(model, params, (torch.ones(1, 3),))
    assert fired == ["pre", "post"] and torch.equal(out, torch.zeros(1, 2))


@claim(
    LAB,
    "`vmap` refuses three more things a dynamic model does, with the messages below (the same on "
    "torch 2.10 to 2.15): a Python `if` or `while` on a tensor's value (each sample would need "
    "a branch of its own), `.item()` (a batched tensor has no one number), and random "
    'operations, dropout included, unless you choose `randomness="different"` (a draw per '
    'sample) or `"same"` (one draw for all).',
)
def test_what_vmap_refuses():
    xs = torch.randn(4, 3)

    def branch(x):
        return x * 2 if x.sum() > 0 else x

    def loop(x):
        while x.abs().max() > 1:
            x = x / 2
        return x

    def item(x):
        return x * x.sum().item()

    def noisy(x):
        return F.dropout(x, 0.5)

    for fn in (branch, loop):
        with pytest.raises(RuntimeError, match="data-dependent control flow"):
            torch.func.vmap(fn)(xs)
    with pytest.raises(RuntimeError, match=r"calling \.item\(\) on a Tensor"):
        torch.func.vmap(item)(xs)
    for fn in (noisy, lambda x: x + torch.rand(3)):
        with pytest.raises(RuntimeError, match="randomness error mode"):
            torch.func.vmap(fn)(xs)
    ones = torch.ones(64, 3)
    different = torch.func.vmap(noisy, randomness="different")(ones)
    same = torch.func.vmap(noisy, randomness="same")(ones)
    assert not all(torch.equal(different[0], row) for row in different)
    assert all(torch.equal(same[0], row) for row in same)


@claim(LAB, "`torch.func` needs no `requires_grad`, and it never writes into a parameter's `.grad`")
def test_func_grad_never_writes_grad():
    model = DynamicNet(3, 4, 2, seed=0)
    x, y = torch.randn(2, 3), torch.tensor([1, 0])

    def loss(p):
        return F.nll_loss(torch.func.functional_call(model, p, (x,), {"depth": 1}), y)

    for params in (
        dict(model.named_parameters()),  # parameters that require grad
        {n: p.detach() for n, p in model.named_parameters()},  # plain tensors
    ):
        g = torch.func.grad(loss)(params)
        assert g["output_linear.bias"].abs().sum() > 0
        assert all(p.grad is None for p in model.parameters())
    plain = {n: p.detach() for n, p in model.named_parameters()}
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            torch.func.grad(loss)(plain).values(),
            torch.func.grad(loss)(dict(model.named_parameters())).values(),
            strict=True,
        )
    )


@claim(LAB, "(zeros for a parameter that this depth does not use)")
def test_func_grad_gives_zeros_for_an_unused_parameter():
    model = DynamicNet(3, 4, 2, seed=0)
    params = {n: p.detach() for n, p in model.named_parameters()}
    x, y = torch.randn(1, 3), torch.tensor([1])

    def loss(p):
        return F.nll_loss(torch.func.functional_call(model, p, (x,), {"depth": 0}), y)

    g = torch.func.grad(loss)(params)
    assert torch.equal(g["middle_linear.weight"], torch.zeros(4, 4))
    assert g["output_linear.bias"].abs().sum() > 0  # softmax minus one-hot: never zero
    # autograd.grad, by contrast, answers None for it
    grads = torch.autograd.grad(
        loss(dict(model.named_parameters())), list(model.parameters()), allow_unused=True
    )
    assert grads[2] is None


# ---------------------------------------------------------------- 5. second derivatives


@claim(
    LAB,
    (
        "`torch.autograd.grad(out, x)` returns the gradient as a plain tensor: the backward pass "
        "is not itself recorded. With `create_graph=True` it is, and the gradient is a tensor in "
        "a graph, with a `grad_fn`, that you can differentiate again."
    ),
)
def test_create_graph_records_the_backward_pass():
    x = torch.tensor(2.0, requires_grad=True)
    (plain,) = torch.autograd.grad(x**3, x)
    assert plain.grad_fn is None and not plain.requires_grad
    (d1,) = torch.autograd.grad(x**3, x, create_graph=True)
    assert d1.grad_fn is not None
    (d2,) = torch.autograd.grad(d1, x)
    assert d1.item() == 12.0 and d2.item() == 12.0


@claim(
    LAB,
    "the first torch.autograd.grad ran without create_graph=True, so its gradient g is a",
)
def test_without_create_graph_the_second_grad_raises():
    """And the two kinds of message the hvp check tells apart: a gradient OF a tensor without a
    graph ('does not have a grad_fn'), or WITH RESPECT TO one outside the graph ('differentiated
    Tensor')."""
    xl = X.clone().requires_grad_()
    (g,) = torch.autograd.grad((xl**3).sum(), xl)
    assert g.grad_fn is None and not g.requires_grad  # a constant
    with pytest.raises(RuntimeError, match="does not have a grad_fn"):
        torch.autograd.grad((g * V).sum(), xl)
    with pytest.raises(RuntimeError, match="does not have a grad_fn"):  # xl without a graph
        torch.autograd.grad((X.detach() ** 3).sum(), X.detach())
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not require"):
        torch.autograd.grad((xl**3).sum(), X)
    with pytest.raises(RuntimeError, match="differentiated Tensor.* not have been used"):
        torch.autograd.grad((xl**3).sum(), [xl, X.clone().requires_grad_()])


@claim(
    LAB,
    (
        "So push the tangent $v$ **forward** through a reverse-mode gradient: "
        "`torch.func.jvp(torch.func.grad(f), (x,), (v,))`. This is **forward over reverse**. It "
        "needs no `create_graph`: the tangent `v` rides along through the forward and backward "
        "passes of `grad(f)` as they run, instead of a second backward pass over a recorded "
        "backward graph"
    ),
)
def test_forward_over_reverse_is_hv():
    A = torch.randn(3, 3, dtype=torch.float64)

    def f(t):
        return 0.5 * t @ A @ t + (t.sin() * t.roll(1)).sum()

    hv = torch.func.jvp(torch.func.grad(f), (X,), (V,))[1]
    assert torch.allclose(hv, torch.func.hessian(f)(X) @ V)
    # the second derivative is forward mode: a Function without a jvp cannot take part,
    # where reverse over reverse (create_graph=True) only needs its backward
    no_jvp = softsign_function(jvp=False)
    with pytest.raises(NotImplementedError, match="jvp function"):
        torch.func.jvp(torch.func.grad(lambda t: no_jvp.apply(t).sum()), (X,), (V,))
    xl = X.clone().requires_grad_()
    (g,) = torch.autograd.grad(no_jvp.apply(xl).sum(), xl, create_graph=True)
    (hv2,) = torch.autograd.grad((g * V).sum(), xl)
    assert torch.allclose(
        hv2, torch.func.hessian(lambda t: softsign_function().apply(t).sum())(X) @ V
    )


@claim(LAB, "`torch.func.hessian(f)` builds the whole matrix the same way, as `jacfwd(jacrev(f))`")
def test_hessian_is_jacfwd_of_jacrev():
    assert "jacfwd(jacrev(" in inspect.getsource(torch.func.hessian).replace(" ", "")

    def f(t):
        return (t**4).sum() + t[0] * t[1]

    assert torch.allclose(torch.func.hessian(f)(X), torch.func.jacfwd(torch.func.jacrev(f))(X))


@claim(LAB, "`hessian` is `jacfwd(jacrev(f))`")
def test_summary_hessian_is_jacfwd_of_jacrev():
    assert "jacfwd(jacrev(" in inspect.getsource(torch.func.hessian).replace(" ", "")


# ---------------------------------------------------------------- 6. Functions under torch.func


@claim(
    LAB,
    "Lab 9 wrote its Functions with a `forward(x)` and a `setup_context`, the style that "
    "`torch.func` supports, and mentioned the older one: a `forward(ctx, x)` that saves what the "
    "backward pass needs as it goes.",
)
def test_lab9_functions_are_in_the_func_style_and_work_under_func():
    from claims import SOLUTIONS

    lab9 = (SOLUTIONS / "lab09_hooks_func" / "lab09_hooks_func.py").read_text()
    assert "def forward(ctx" not in lab9 and "def setup_context(ctx, inputs, output)" in lab9
    linear = lab_class("lab09_hooks_func", "LinearFn")
    W, x = torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    g = torch.func.grad(lambda w: linear.apply(x, w).sum())(W)
    assert torch.allclose(g, torch.ones(5, 3, dtype=torch.float64).T @ x)


@claim(LAB, "Such a Function works with `backward()`, but `torch.func`'s transforms refuse it.")
def test_old_style_functions_work_with_backward_only():
    x = X.clone().requires_grad_()
    DoubleOldStyle.apply(x).sum().backward()
    assert torch.equal(x.grad, torch.full_like(X, 2.0))
    for transform in (
        lambda: torch.func.grad(lambda t: DoubleOldStyle.apply(t).sum())(X),
        lambda: torch.func.vmap(DoubleOldStyle.apply)(X[None]),
        lambda: torch.func.jvp(DoubleOldStyle.apply, (X,), (V,)),
    ):
        with pytest.raises(RuntimeError, match="must override the setup_context staticmethod"):
            transform()


@claim(LAB, "Here is what each missing piece costs, with the messages of torch 2.10 to 2.15")
def test_the_messages_of_each_missing_piece():
    with pytest.raises(RuntimeError, match="it must override the setup_context staticmethod"):
        torch.func.grad(lambda t: DoubleOldStyle.apply(t).sum())(X)
    no_vmap = softsign_function(vmap_rule=False)
    with pytest.raises(
        RuntimeError,
        match=(
            "does not have vmap support. Please override and implement the vmap "
            "staticmethod or set generate_vmap_rule=True"
        ),
    ):
        torch.func.vmap(no_vmap.apply)(torch.ones(3, 2))
    no_jvp = softsign_function(jvp=False)
    with pytest.raises(
        NotImplementedError,
        match=(
            "You must implement the jvp function for custom autograd.Function to use it "
            "with forward mode AD"
        ),
    ):
        torch.func.jvp(no_jvp.apply, (X,), (V,))


@claim(LAB, "`backward(ctx, grad_output)` as before (for `grad`, `vjp`, `jacrev`)")
def test_backward_serves_the_reverse_transforms():
    no_jvp = softsign_function(jvp=False)
    d = 1 / (1 + X.abs()) ** 2
    assert torch.allclose(torch.func.grad(lambda t: no_jvp.apply(t).sum())(X), d)
    assert torch.allclose(torch.func.vjp(no_jvp.apply, X)[1](V)[0], V * d)
    assert torch.allclose(torch.func.jacrev(no_jvp.apply)(X), torch.diag(d))


@claim(LAB, "`jvp(ctx, x_tangent)` returns the output's tangent (for `jvp`, `jacfwd`, forward AD)")
def test_jvp_serves_the_forward_transforms():
    fn = softsign_function()
    d = 1 / (1 + X.abs()) ** 2
    assert torch.allclose(torch.func.jvp(fn.apply, (X,), (V,))[1], V * d)
    assert torch.allclose(torch.func.jacfwd(fn.apply)(X), torch.diag(d))
    with fwAD.dual_level():
        assert torch.allclose(fwAD.unpack_dual(fn.apply(fwAD.make_dual(X, V))).tangent, V * d)
    no_jvp = softsign_function(jvp=False)
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="jvp function"):
        no_jvp.apply(fwAD.make_dual(X, V))


@claim(
    LAB,
    (
        "which lets `vmap` batch the Function by running your own `forward`, `setup_context`, "
        "`backward` and `jvp` once, on tensors that stand for the whole batch"
    ),
)
def test_generate_vmap_rule_runs_forward_once_on_a_batched_tensor():
    seen = []

    class Double(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            seen.append((torch._C._functorch.is_batchedtensor(x), tuple(x.shape)))
            return 2 * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad_output):
            return 2 * grad_output

    out = torch.func.vmap(Double.apply)(torch.ones(5, 2))
    assert seen == [(True, (2,))]  # once, on a tensor standing for 5 samples of shape (2,)
    assert torch.equal(out, torch.full((5, 2), 2.0))


@claim(LAB, "or a `vmap` staticmethod that you write")
def test_a_vmap_staticmethod_is_the_other_way():
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return 2 * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad_output):
            return 2 * grad_output

        @staticmethod
        def vmap(info, in_dims, x):
            return Double.apply(x), in_dims[0]

    assert torch.equal(torch.func.vmap(Double.apply)(torch.ones(5, 2)), torch.full((5, 2), 2.0))


@claim(
    LAB,
    (
        "In `jvp`, `ctx.saved_tensors` holds what `ctx.save_for_forward` saved, and in `backward` "
        "what `ctx.save_for_backward` saved: each sees only its own"
    ),
)
def test_saved_tensors_are_per_mode():
    def grad_of(fn):
        return torch.func.grad(lambda t: fn.apply(t).sum())(X)

    def jvp_of(fn):
        return torch.func.jvp(fn.apply, (X,), (V,))[1]

    only_backward = softsign_function(save_forward=False)
    grad_of(only_backward)
    with pytest.raises(ValueError, match="not enough values to unpack"):
        jvp_of(only_backward)
    only_forward = softsign_function(save_backward=False)
    jvp_of(only_forward)
    with pytest.raises(ValueError, match="not enough values to unpack"):
        grad_of(only_forward)
    both = softsign_function()
    assert torch.allclose(jvp_of(both), V / (1 + X.abs()) ** 2)


def _add_one(t: torch.Tensor) -> torch.Tensor:
    return t + 1


@claim(
    LAB,
    (
        "The first forward-mode derivative prepares some of PyTorch's rules with "
        "torch.jit.script, which warns that it is deprecated (a FutureWarning since torch 2.14; "
        "with torch 2.10 a DeprecationWarning, which Python hides)"
    ),
)
def test_first_forward_mode_use_warns_about_torch_jit_script():
    import torch._decomp.decompositions_for_jvp as jvp_decompositions

    # forward AD's decompositions are registered through torch.jit.script ...
    assert "torch.jit.script(decomp_fn)" in inspect.getsource(jvp_decompositions)
    # ... which warns that it is deprecated (asked here directly: in this process the
    # first forward-mode derivative may have happened already)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.script(_add_one)
    kinds = {w.category for w in caught if "`torch.jit.script` is deprecated" in str(w.message)}
    major, minor = map(int, torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) >= (2, 14):
        assert kinds == {FutureWarning}, kinds
    elif (major, minor) == (2, 10):
        assert kinds == {DeprecationWarning}, kinds
        # Python's default filters hide a DeprecationWarning raised inside torch
        with warnings.catch_warnings(record=True) as shown:
            warnings.resetwarnings()  # Python's defaults for DeprecationWarning:
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            torch.jit.script(_add_one)
        assert not any("torch.jit.script" in str(w.message) for w in shown)
    else:  # 2.11 to 2.13: the lab says nothing of them; one of the two
        assert kinds in ({FutureWarning}, {DeprecationWarning}), kinds


def test_the_lab_filters_that_warning_only():
    """The setup cell's filter (run from the lab's source) hides that warning, whichever its
    category, and nothing else."""
    import ast

    from claims import SOLUTIONS

    tree = ast.parse((SOLUTIONS / LAB / f"{LAB}.py").read_text(encoding="utf-8"))
    calls = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "warnings.filterwarnings"
    ]
    assert calls, "the lab no longer filters a warning"
    text = "`torch.jit.script` is deprecated. Please switch to `torch.compile`"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call in calls:
            eval(call, {"warnings": warnings})
        for category in (FutureWarning, DeprecationWarning):
            warnings.warn(text, category, stacklevel=1)
        warnings.warn("something else", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else"]


@claim(LAB, "dimension, so it sliced something all samples share, the parameters:")
def test_vmapping_the_parameters_too_is_a_size_error():
    model = DynamicNet(3, 5, 4, seed=0)
    params = {n: p.detach() for n, p in model.named_parameters()}
    xs, ys = torch.randn(6, 3), torch.randint(0, 4, (6,))

    def loss_one(p, x, y):
        out = torch.func.functional_call(model, p, (x.unsqueeze(0),), {"depth": 1})
        return F.nll_loss(out, y.unsqueeze(0))

    with pytest.raises(ValueError, match="same size in the mapped dimension"):
        torch.func.vmap(torch.func.grad(loss_one))(params, xs, ys)
    shared = torch.func.vmap(torch.func.grad(loss_one), in_dims=(None, 0, 0))(params, xs, ys)
    assert shared["input_linear.weight"].shape == (6, 5, 3)


# ---------------------------------------------------------------- the checks' hints


def catalogued_answers():
    """The variants of this lab's mistake catalogue (solutions/<lab>/mistakes.toml), as
    objects with .exercise, .why and .code (read here: graders' own reader costs imports)."""
    import tomllib
    from types import SimpleNamespace

    from claims import SOLUTIONS

    table = tomllib.loads((SOLUTIONS / LAB / "mistakes.toml").read_text(encoding="utf-8"))
    return [SimpleNamespace(**v) for v in table["variant"]]


def released_check(grade_id: str):
    """Run answer `code` and then the released visible check `grade_id` of lab 10 (the cell the
    student runs, hidden tests stripped) with the release's check helpers; return the sentence
    of the check that stopped it, or None when every check passed."""
    from claims import check_says

    def run(code: str):
        namespace = {"torch": torch, "F": F, "nn": nn, "fwAD": fwAD}
        namespace.update(os=__import__("os"), re=__import__("re"))
        return check_says(LAB, grade_id, [code], namespace)

    return run


def catalogued(exercise: str, why: str) -> str:
    """The code of lab 10's catalogued answer to `exercise` whose `why` starts so."""
    (code,) = [
        v.code for v in catalogued_answers() if v.exercise == exercise and v.why.startswith(why)
    ]
    return code


HVP = """
def hvp(f, x, v):
    xl = {leaf}
    {first}
    (hv,) = torch.autograd.grad(({g} * v).sum(), {wrt})
    return hv
"""
HVP_OK = {
    "leaf": "x.detach().requires_grad_()",
    "first": "(g,) = torch.autograd.grad(f(xl), xl, create_graph=True)",
    "g": "g",
    "wrt": "xl",
}


@pytest.mark.parametrize(
    "change, says",
    [
        ({}, None),
        (
            {"first": "(g,) = torch.autograd.grad(f(xl), xl)"},
            "the first torch.autograd.grad ran without create_graph=True",
        ),
        ({"leaf": "x.detach()"}, "f was called on a tensor that does not require grad"),
        (
            {"first": "f(xl).backward()\n    g = xl.grad"},
            "though f was called on a tensor that requires grad",
        ),
        ({"g": "g.detach()"}, "though f was called on a tensor that requires grad"),
        (
            {"first": "(g,) = torch.autograd.grad(f(xl), x, create_graph=True)"},
            "one of the tensors it differentiates with respect to does not require grad",
        ),
        (
            {"wrt": "x.detach().requires_grad_()"},  # a new leaf, which f never saw
            "one of the tensors it differentiates with respect to does not require grad",
        ),
    ],
)
def test_hvp_hints_name_the_cause_the_check_saw(change, says):
    """Each hvp error is told by what the check saw (f's input, the calls of autograd.grad),
    never a guess between causes: PyTorch's message alone is the same for several."""
    said = released_check("test_hvp")(HVP.format(**{**HVP_OK, **change}))
    assert said == says or (says and said and says in said), said
    for other in (
        "the first torch.autograd.grad ran without create_graph=True",
        "f was called on a tensor that does not require grad",
        "though f was called on a tensor that requires grad",
        "one of the tensors it differentiates",
    ):
        assert not said or other in says or other not in said, said


@pytest.mark.parametrize(
    "answer, says",
    [
        (
            catalogued("softsign", "saves x with save_for_backward only"),
            "In jvp it holds only what setup_context saved with ctx.save_for_forward",
        ),
        (
            lambda: lab_source_of_softsign().replace("        ctx.save_for_backward(x)\n", ""),
            "and setup_context saved no tensor for backward",
        ),
        (
            lambda: lab_source_of_softsign().replace("(x,) = inputs", "x = inputs"),
            "setup_context asks ctx to save something that is not a tensor (a tuple)",
        ),
        (
            catalogued("softsign", "a jvp staticmethod that hands over to the inherited"),
            "raised NotImplementedError, though Softsign has a jvp staticmethod of its own",
        ),
        (catalogued("softsign", "lab 9's style, forward(ctx, x)"), "has no setup_context"),
    ],
)
def test_softsign_hints_name_the_cause_the_check_saw(answer, says):
    """A Softsign with forward(x) and a setup_context that forgets save_for_backward is told
    so, not to write the setup_context it has; one that saves the tuple `inputs`, or whose
    jvp raises NotImplementedError, is told what the check saw, not PyTorch's message alone
    (which graded feedback shows as 'AssertionError: …')."""
    said = released_check("test_softsign")(answer() if callable(answer) else answer)
    assert said and says in said, said
    assert "without ctx, and setup_context" not in said or "has no setup_context" in says


def lab_source_of_softsign() -> str:
    """The lab's own Softsign (its solution), as text."""
    import ast

    from claims import SOLUTIONS

    source = (SOLUTIONS / LAB / f"{LAB}.py").read_text(encoding="utf-8")
    (node,) = [n for n in ast.parse(source).body if getattr(n, "name", None) == "Softsign"]
    return ast.get_source_segment(source, node)


@pytest.mark.parametrize(
    "why, says",
    [
        ("makes the dual tensor but calls f on the plain x", "f was called on a plain tensor only"),
        ("unpacks f's output after the with block", "though f was called on a dual tensor"),
    ],
)
def test_jvp_dual_hints_tell_a_plain_f_from_a_late_unpack(why, says):
    """Both give a tangent of None; the check tells them apart by what f was called on."""
    said = released_check("test_jvp_dual")(catalogued("jvp_dual", why))
    assert said and says in said, said
    assert "Either" not in said, said


def test_the_inherited_jvp_only_raises():
    with pytest.raises(NotImplementedError, match="You must implement the jvp function"):
        torch.autograd.Function.jvp(None, torch.ones(2))
