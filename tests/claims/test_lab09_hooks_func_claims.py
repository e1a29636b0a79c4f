"""Claims of lab 9 (hooks, saved tensors and memory, custom Functions, checkpointing, anomaly
detection), each checked against the installed torch. See tests/claims/claims.py."""

from __future__ import annotations

import contextlib
import math
import random
import warnings

import pytest
import torch
import torch.nn.functional as F
from claims import claim, lab_class, lab_function
from torch import nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential

LAB = "lab09_hooks_func"


DynamicNet = lab_class(LAB, "DynamicNet")


# the lab's own code, solutions included: these tests check what the lab's cells run
segmented_forward = lab_function(LAB, "segmented_forward", checkpoint=checkpoint)
distinct_saved_bytes = lab_function(LAB, "distinct_saved_bytes")
StableSoftplus = lab_class(LAB, "StableSoftplus")


def packed(fn):
    """The tensors pack is handed while fn() runs, and fn's output."""
    seen = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        out = fn()
    return seen, out


# ---------------------------------------------------------------- the model


@claim(LAB, "two models made with the same `seed` draw the same depths")
def test_same_seed_same_depths():
    x = torch.randn(2, 5)
    one, two = DynamicNet(5, 4, 3, max_depth=6, seed=7), DynamicNet(5, 4, 3, max_depth=6, seed=7)
    depths = []
    for model in (one, two):
        drawn = []
        for _ in range(8):
            model(x)
            drawn.append(model.last_depth)
        depths.append(drawn)
    assert depths[0] == depths[1] and len(set(depths[0])) > 1


# ---------------------------------------------------------------- 1. hooks


@claim(
    LAB,
    "The hook may look at it, store it, or return a new tensor, which autograd then uses in its "
    "place.",
)
def test_a_hook_may_replace_the_gradient():
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 20.0))


@claim(LAB, "It returns a *handle*; `handle.remove()` takes the hook off again.")
def test_handle_remove():
    x = torch.ones(2, requires_grad=True)
    calls = []
    handle = x.register_hook(lambda g: calls.append(1))
    (x * 2).sum().backward()
    handle.remove()
    (x * 2).sum().backward()
    assert len(calls) == 1


@claim(
    LAB,
    "Gradient clipping is no hook: `clip_grad_norm_` runs after `backward()`, because the norm it "
    "clips is that of all the gradients together.",
)
def test_clip_grad_norm_clips_the_norm_of_all_gradients():
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([0.0, 4.0])
    total = torch.nn.utils.clip_grad_norm_([a, b], max_norm=1.0)
    assert total.item() == pytest.approx(5.0)
    # one factor for all: each gradient alone had norm 3 and 4, both above 1
    assert torch.allclose(a.grad, torch.tensor([0.6, 0.0]), atol=1e-5)
    assert torch.allclose(b.grad, torch.tensor([0.0, 0.8]), atol=1e-5)


def chain(W, h, steps):
    for _ in range(steps):
        h = torch.tanh(W @ h)
    return h


@claim(
    LAB,
    "A hook on `W` itself is called **once**, with the gradient already summed over the three uses",
)
def test_hook_on_shared_leaf_fires_once_with_the_sum():
    W = torch.randn(3, 3, requires_grad=True)
    seen = []
    W.register_hook(lambda g: seen.append(g.clone()))
    chain(W, torch.randn(3, 1), 3).sum().backward()
    assert len(seen) == 1 and torch.equal(seen[0], W.grad)


@claim(LAB, "The hooks fire in backward order, the last step first")
def test_hooks_fire_in_backward_order():
    W = torch.randn(3, 3, requires_grad=True)
    h, fired = torch.randn(3, 1), []
    for step in range(1, 6):
        h = torch.tanh(W @ h)
        h.register_hook(lambda g, step=step: fired.append(step))
    h.sum().backward()
    assert fired == [5, 4, 3, 2, 1]


@claim(
    LAB,
    "A view such as `W.view_as(W)` or `W.expand_as(W)` (or a copy, `W * 1`) is a new tensor in "
    "the graph, with the same numbers as `W`",
)
def test_views_are_new_nodes_and_their_grads_add_up_in_W():
    W = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(3, 1, dtype=torch.float64)
    views = [W.view_as(W), W.expand_as(W), W * 1]
    for v in views:
        assert v is not W and v.grad_fn is not None and torch.equal(v, W)
        v.retain_grad()
    h = h0
    for v in views:
        h = torch.tanh(v @ h)
    h.sum().backward()
    assert torch.allclose(sum(v.grad for v in views), W.grad)
    copies = [W.detach().clone().requires_grad_() for _ in views]
    grads = torch.autograd.grad(chain_list(copies, h0).sum(), copies)
    assert all(torch.allclose(v.grad, g) for v, g in zip(views, grads, strict=True))


def chain_list(Ws, h):
    for W in Ws:
        h = torch.tanh(W @ h)
    return h


@claim(
    LAB,
    "`register_full_backward_hook(fn)` calls `fn(module, grad_input, grad_output)` once per call "
    "during the backward pass, with the gradients with respect to that call's inputs and outputs "
    "(not its parameters).",
)
def test_full_backward_hook_once_per_call_inputs_only():
    layer = nn.Linear(4, 4)
    calls, forwards = [], []
    layer.register_forward_hook(lambda m, inp, out: forwards.append(len(inp)))
    layer.register_full_backward_hook(lambda m, gi, go: calls.append((len(gi), len(go))))
    h = torch.randn(2, 4, requires_grad=True)
    for _ in range(3):
        h = torch.relu(layer(h))
    h.sum().backward()
    assert forwards == [1, 1, 1]  # the forward hook: after every call, with the inputs
    assert calls == [(1, 1)] * 3  # one grad_input: the input x, no entry for weight or bias


@claim(LAB, "For a linear layer, the weight's gradient from one call is `grad_output.T @ input`")
def test_linear_weight_grad_is_grad_output_T_input():
    layer = nn.Linear(4, 3)
    x = torch.randn(5, 4)
    out = layer(x)
    v = torch.randn(5, 3)
    out.backward(v)
    assert torch.allclose(layer.weight.grad, v.T @ x, atol=1e-6)


@claim(
    LAB,
    "So one ordinary `backward()` can give per-sample gradients, if hooks collect the pieces",
)
def test_module_hooks_give_per_sample_gradients():
    torch.manual_seed(0)
    net = DynamicNet(6, 5, 3, seed=0)
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    inputs, gouts = [], []
    net.middle_linear.register_forward_hook(lambda m, i, o: inputs.append(i[0].detach()))
    net.middle_linear.register_full_backward_hook(lambda m, gi, go: gouts.append(go[0]))
    F.nll_loss(net(x, depth=2), y).backward()
    gouts.reverse()
    per_sample = sum(torch.einsum("ni,nj->nij", g, i) for g, i in zip(gouts, inputs, strict=True))
    assert torch.allclose(per_sample.sum(0), net.middle_linear.weight.grad, atol=1e-6)
    for n in range(4):
        net.zero_grad()
        (F.nll_loss(net(x[n : n + 1], depth=2), y[n : n + 1]) / 4).backward()
        assert torch.allclose(per_sample[n], net.middle_linear.weight.grad, atol=1e-6)


@claim(LAB, "a forgotten hook fires in every later pass.")
def test_forgotten_module_hook_keeps_firing():
    layer = nn.Linear(2, 2)
    calls = []
    layer.register_forward_hook(lambda m, i, o: calls.append(1))
    for _ in range(3):
        layer(torch.randn(1, 2))
    assert len(calls) == 3


# ---------------------------------------------------------------- 2. saved tensors


@claim(LAB, "a graph holds on to tensors until `backward()` frees them")
def test_backward_frees_saved_tensors():
    a = torch.randn(3, requires_grad=True)
    e = a.exp()
    assert torch.equal(e.grad_fn._saved_result, e)
    e.sum().backward()
    with pytest.raises(RuntimeError, match="freed"):
        e.grad_fn._saved_result  # noqa: B018


@claim(LAB, "`exp` keeps its output, `a * b` keeps both factors.")
def test_exp_keeps_output_mul_keeps_both():
    a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    seen, out = packed(lambda: a.exp())
    assert len(seen) == 1 and torch.equal(seen[0], out)
    seen, _ = packed(lambda: a * b)
    assert len(seen) == 2 and {id(t) for t in seen} == {id(a), id(b)}


@claim(
    LAB,
    "what `pack` returns is stored instead; when backward needs the tensor, it calls "
    "`unpack(stored)`",
)
def test_pack_result_is_stored_and_unpacked():
    a = torch.randn(3, requires_grad=True)
    stored = []

    def unpack(box):
        stored.append(box)
        return box["t"]

    with torch.autograd.graph.saved_tensors_hooks(lambda t: {"t": t}, unpack):
        e = a.exp()
    e.sum().backward()
    assert len(stored) == 1 and isinstance(stored[0], dict)


@claim(
    LAB,
    "`a * 2` keeps the 2 (its node reads it as a zero-dimensional tensor, `grad_fn._saved_other`), "
    "but as a *wrapped number*, which autograd stores as it is, outside the hooks. Multiply by "
    "`torch.tensor(2.0)` instead, and that tensor goes through `pack` like any other.",
)
def test_python_number_is_a_wrapped_number_outside_the_hooks():
    a = torch.randn(4, requires_grad=True)
    seen, out = packed(lambda: a * 2)
    assert seen == []
    kept = out.grad_fn._saved_other
    assert kept.dim() == 0 and kept.item() == 2
    for op in (lambda: a * 2.0, lambda: a / 2.0, lambda: a.mul(3)):
        assert packed(op)[0] == []
    two = torch.tensor(2.0)
    seen, _ = packed(lambda: a * two)
    assert len(seen) == 1 and seen[0] is two


@claim(
    LAB, "Inside the `with` block, a tensor an operation saves for backward goes through `pack(t)`"
)
def test_saved_tensors_go_through_pack():
    a = torch.randn(4, requires_grad=True)
    for fn, n in ((a.sin, 1), (a.relu, 1), (a.sum, 0)):
        assert len(packed(fn)[0]) == n


@claim(
    LAB,
    "the output of a ReLU is saved by the ReLU and again by the next layer, as its input) and "
    "because the middle layer saves its **weight** once per use",
)
def test_relu_output_saved_twice_and_weight_once_per_use():
    net = DynamicNet(6, 5, 3, seed=0)
    x = torch.randn(2, 6)
    seen, _ = packed(lambda: net(x, depth=2))
    weight = net.middle_linear.weight
    uses_of_weight = [t for t in seen if t.untyped_storage().data_ptr() == weight.data_ptr()]
    assert len(uses_of_weight) == 2
    ptrs = [t.untyped_storage().data_ptr() for t in seen]
    assert sum(ptrs.count(p) == 2 for p in set(ptrs) if p != weight.data_ptr()) >= 2


@claim(
    LAB,
    "Each extra use fills three slots: the ReLU saves its output, the next layer saves the same "
    "tensor as its input, and the middle layer saves its weight. Of those, only the ReLU's output "
    "is new memory: the distinct line steps up by one activation per use",
)
def test_each_use_three_slots_one_new_activation():
    net = DynamicNet(6, 5, 3, max_depth=4, seed=0)
    params = list(net.parameters())
    x = torch.randn(7, 6)
    slots = [len(packed(lambda d=d: net(x, depth=d))[0]) for d in range(4)]
    assert [b - a for a, b in zip(slots, slots[1:], strict=False)] == [3, 3, 3]
    kept = [distinct_saved_bytes(net, x, d, leave_out=params)[1] for d in range(4)]
    assert [b - a for a, b in zip(kept, kept[1:], strict=False)] == [7 * 5 * 4] * 3


@claim(LAB, "float16 keeps 11 significant bits, about three decimal digits")
def test_float16_has_11_significant_bits():
    assert torch.finfo(torch.float16).eps == 2.0**-10  # 10 stored bits and the implicit one
    assert math.floor(11 * math.log10(2)) == 3


@claim(LAB, "Storing the saved tensors in half precision halves what they take")
def test_half_pack_halves_the_bytes():
    a = torch.randn(10, requires_grad=True)
    sizes = []

    def pack(t):
        half = t.to(torch.float16)
        sizes.append((t.nbytes, half.nbytes))
        return half

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t.float()):
        e = a.exp()
    e.sum().backward()
    assert sizes == [(40, 20)] and not torch.equal(a.grad, a.detach().exp())


@claim(
    LAB,
    "For a tensor that is on the CPU already it saves nothing at all: `t.cpu()` returns `t` "
    "itself, and so `save_on_cpu`'s pack hands back the very tensor it was given",
)
def test_save_on_cpu_packs_a_cpu_tensor_as_itself():
    t = torch.randn(3)
    assert t.cpu() is t
    _, kept = torch.autograd.graph.save_on_cpu().pack_hook(t)
    assert kept is t


@claim(
    LAB,
    "comes from a version counter: a saved tensor remembers its version, and backward compares.",
)
def test_version_counter():
    a = torch.tensor(1.0, requires_grad=True)
    e = a.exp()
    assert e._version == 0
    e.add_(1)
    assert e._version == 1
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        e.backward()


def exp_then_add_one(hooks):
    a = torch.tensor(1.0, requires_grad=True)
    with hooks:
        e = a.exp()
    e.add_(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "nothing warns": a warning would fail the test
        e.sum().backward()
    return a.grad.item()


@claim(
    LAB,
    "But a tensor saved **while a saved-tensor hook is active** is not checked at all",
)
def test_hooks_switch_off_the_version_check():
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        exp_then_add_one(contextlib.nullcontext())
    same = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    assert exp_then_add_one(same) == pytest.approx(math.e + 1, abs=1e-4)


@claim(
    LAB,
    "With `pack` returning `t` itself, or with `save_on_cpu` on a CPU tensor, the gradient comes "
    "out as $e + 1$ instead of $e$, and nothing warns.",
)
def test_identity_hooks_and_save_on_cpu_give_e_plus_one():
    same = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    assert exp_then_add_one(same) == pytest.approx(math.e + 1, abs=1e-4)
    cpu = torch.autograd.graph.save_on_cpu()
    assert exp_then_add_one(cpu) == pytest.approx(math.e + 1, abs=1e-4)


@claim(
    LAB,
    "either `pack` stores a copy (then an in-place change cannot reach it, and the last line is "
    "right)",
)
def test_copying_pack_gives_the_true_gradient():
    copy = torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)
    assert exp_then_add_one(copy) == pytest.approx(math.e, abs=1e-4)


# ---------------------------------------------------------------- 3. autograd.Function


@claim(
    LAB,
    "It runs with recording switched off: the operations inside it leave no nodes, and "
    "`MyFunction.apply(x, ...)` puts one node, `MyFunctionBackward`, in the graph instead.",
)
def test_forward_runs_without_recording():
    inside = {}

    class MyFunction(torch.autograd.Function):
        @staticmethod
        def forward(x):
            y = x * 2
            inside["grad enabled"], inside["y has grad_fn"] = torch.is_grad_enabled(), y.grad_fn
            return y.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g

    y = MyFunction.apply(torch.ones(2, requires_grad=True))
    assert inside == {"grad enabled": False, "y has grad_fn": None}
    assert type(y.grad_fn).__name__ == "MyFunctionBackward"
    assert y.grad_fn.next_functions[0][0].__class__.__name__ == "AccumulateGrad"


class LinearFn(torch.autograd.Function):
    needs = []

    @staticmethod
    def forward(x, W):
        return x @ W.T

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad_output):
        x, W = ctx.saved_tensors
        LinearFn.needs.append(ctx.needs_input_grad)
        grad_x = grad_output @ W if ctx.needs_input_grad[0] else None
        grad_W = grad_output.T @ x if ctx.needs_input_grad[1] else None
        return grad_x, grad_W


@claim(
    LAB,
    "`backward(ctx, grad_output)` returns one gradient per input of `forward` (`None` for an "
    "input that needs none; `ctx.needs_input_grad` says which ones do).",
)
def test_needs_input_grad_and_one_gradient_per_input():
    W = torch.randn(3, 4, requires_grad=True)
    LinearFn.apply(torch.randn(5, 4), W).sum().backward()
    assert LinearFn.needs[-1] == (False, True) and W.grad is not None

    class TooFew(LinearFn):
        @staticmethod
        def backward(ctx, grad_output):
            return (grad_output,)

    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients"):
        TooFew.apply(torch.randn(5, 4), W).sum().backward()


@claim(
    LAB,
    "The older, combined style, a `forward(ctx, x, ...)` that takes `ctx` first and saves as it "
    "goes, still works, but `torch.func`'s transforms (lab 10) accept only a Function with a "
    "`setup_context`.",
)
def test_combined_style_works_but_not_under_torch_func():
    class Old(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.exp()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.exp()

    x = torch.randn(3, requires_grad=True)
    Old.apply(x).sum().backward()
    assert torch.allclose(x.grad, x.detach().exp())
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda t: Old.apply(t).sum())(x.detach())
    assert torch.allclose(
        torch.func.grad(lambda t: StableSoftplus.apply(t).sum())(x.detach()), torch.sigmoid(x)
    )


@claim(
    LAB,
    "For `y = x @ W.T`, $v^\\top J$ is `grad_output @ W` for `x` and `grad_output.T @ x` for `W`",
)
def test_backward_is_a_vector_jacobian_product():
    W = torch.randn(3, 4, dtype=torch.float64)
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(5, 3, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda t: t @ W.T, x.detach())
    (vjp,) = torch.autograd.grad(LinearFn.apply(x, W), x, v)
    assert torch.allclose(vjp, torch.einsum("ab,abcd->cd", v, J))
    assert torch.allclose(vjp, v @ W)
    Wl = W.clone().requires_grad_()
    (gW,) = torch.autograd.grad(LinearFn.apply(x.detach(), Wl), Wl, v)
    assert torch.allclose(gW, v.T @ x.detach())


@claim(
    LAB,
    "A tensor saved through it is a saved tensor like those of section 2: the saved-tensor hooks "
    "see it (so packing and checkpointing work on it), and, when no hook is active, lab 4's "
    "version check guards it. A tensor stuck on `ctx` as an attribute gets neither: change it in "
    "place, and backward computes with the new values without a word.",
)
def test_save_for_backward_versus_ctx_attribute():
    class Attr(StableSoftplus):
        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.x = inputs[0]

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * torch.sigmoid(ctx.x)

    base = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    assert len(packed(lambda: StableSoftplus.apply(base * 1))[0]) == 1
    assert packed(lambda: Attr.apply(base * 1))[0] == []
    x = base * 1
    y = StableSoftplus.apply(x)
    with torch.no_grad():
        x.add_(10)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    x = base * 1
    y = Attr.apply(x)
    with torch.no_grad():
        x.add_(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y.sum().backward()
    assert torch.allclose(base.grad, torch.sigmoid(base.detach() + 10))


@claim(
    LAB,
    "`ctx.mark_non_differentiable(t)`, in `setup_context`, declares an output that has no "
    "gradient (a mask, say; it comes out with `requires_grad=False`, and backward receives zeros "
    "for it), and integer outputs are non-differentiable anyway.",
)
def test_mark_non_differentiable():
    got = {}

    class ClampWithMask(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.clamp(-1, 1), (x.abs() > 1).to(x.dtype)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(output[1])
            ctx.save_for_backward(output[1])

        @staticmethod
        def backward(ctx, grad_y, grad_mask):
            got["grad_mask"] = grad_mask
            (mask,) = ctx.saved_tensors
            return grad_y * (1 - mask)

    x = torch.tensor([-2.0, 0.5, 3.0], requires_grad=True)
    y, mask = ClampWithMask.apply(x)
    assert y.requires_grad and not mask.requires_grad
    y.sum().backward()
    assert torch.equal(got["grad_mask"], torch.zeros(3))

    class Sort(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.sort()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, gv, gi):
            return gv

    values, indices = Sort.apply(x)
    assert values.requires_grad and not indices.requires_grad


@claim(LAB, "in float32, $e^x$ is infinite from some $x$ on (the cell prints where)")
def test_float32_exp_overflows():
    assert torch.isinf(torch.exp(torch.tensor(89.0))) and torch.isfinite(
        torch.exp(torch.tensor(88.0))
    )


@claim(
    LAB,
    "which `torch.sigmoid` computes without overflow; $e^x / (1 + e^x)$ would give `inf / inf`, "
    "which is `nan`, for large `x`.",
)
def test_sigmoid_is_stable_and_the_ratio_is_nan():
    x = torch.tensor([200.0, -200.0])
    assert torch.equal(torch.sigmoid(x), torch.tensor([1.0, 0.0]))
    e = torch.exp(x)
    assert torch.isnan(e / (1 + e))[0]


@claim(LAB, "$\\sigma(x) = 1 - e^{-y}$, which `-torch.expm1(-y)` computes accurately.")
def test_sigmoid_from_the_output():
    x = torch.linspace(-30, 30, 61, dtype=torch.float64)
    y = F.softplus(x)
    assert torch.allclose(-torch.expm1(-y), torch.sigmoid(x), rtol=1e-12, atol=0)


@claim(
    LAB,
    "`torch.autograd.gradcheck(fn, inputs)` compares backward with finite differences of forward "
    "(in float64: in float32 the differences are too coarse).",
)
def test_gradcheck_in_float64_not_float32():
    x64 = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(StableSoftplus.apply, (x64,))
    x32 = x64.detach().float().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not torch.autograd.gradcheck(StableSoftplus.apply, (x32,), raise_exception=False)

    class Wrong(StableSoftplus):
        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * 1.01 * torch.sigmoid(ctx.saved_tensors[0])

    assert not torch.autograd.gradcheck(Wrong.apply, (x64,), raise_exception=False)


@claim(
    LAB,
    "Your backward is made of differentiable tensor operations, so it passes. A backward that "
    "cannot be differentiated (it calls numpy, say) should be decorated with "
    "`@once_differentiable`: it then runs without recording, and a second differentiation raises "
    "an error instead of giving a wrong answer.",
)
def test_gradgradcheck_and_once_differentiable():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(StableSoftplus.apply, (x,))

    seen = {}

    class Once(StableSoftplus):
        @staticmethod
        @once_differentiable
        def backward(ctx, grad_output):
            seen["grad enabled"] = torch.is_grad_enabled()
            return StableSoftplus.backward(ctx, grad_output)

    assert not torch.autograd.gradgradcheck(Once.apply, (x,), raise_exception=False)
    v = torch.ones_like(x, requires_grad=True)
    (g,) = torch.autograd.grad(Once.apply(x), x, v, create_graph=True)
    assert seen["grad enabled"] is False
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


# ---------------------------------------------------------------- 4. checkpointing


def counting(model):
    calls = []
    model.middle_linear.register_forward_hook(lambda m, i, o: calls.append(torch.is_grad_enabled()))
    return calls


@claim(
    LAB,
    "runs `fn(*args)` and keeps only its inputs (torch 2.10 also keeps an empty tensor of its "
    "own: no memory); whatever `fn` would have saved is thrown away, and during the backward "
    "pass `fn` runs **again** to recompute it",
)
def test_checkpoint_keeps_inputs_and_reruns():
    x, y = torch.randn(6, requires_grad=True), torch.randn(6, requires_grad=True)
    calls = []

    def fn(a, b):
        calls.append(1)
        return (a * b).sin().exp()

    seen, out = packed(lambda: checkpoint(fn, x, y, use_reentrant=False))
    inputs = [t for t in seen if t is x or t is y]
    own = [t for t in seen if t is not x and t is not y]
    assert len(calls) == 1 and len(inputs) == 2  # the inputs, each once; nothing fn saves
    assert all(t.numel() == 0 for t in own)  # anything else holds no memory
    major, minor = map(int, torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) == (2, 10):
        assert len(own) == 1  # checkpoint's own empty tensor
    elif (major, minor) >= (2, 14):
        assert own == []  # only the inputs
    out.sum().backward()
    assert len(calls) == 2
    want = ((x * y).sin().exp() * (x * y).cos() * y).detach()
    assert torch.allclose(x.grad, want)


@claim(LAB, "Torch 2.10 to 2.15 warn if you do not choose, and still run.")
def test_checkpoint_without_use_reentrant_warns():
    x = torch.randn(3, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = checkpoint(torch.sin, x)
    assert torch.allclose(out, x.sin())
    assert any("use_reentrant" in str(w.message) for w in caught)


def setting(depth=4, batch=3, hidden=5):
    torch.manual_seed(0)
    net = DynamicNet(6, hidden, 3, max_depth=depth, seed=0)
    return net, list(net.parameters()), torch.randn(batch, 6), batch * hidden * 4


@claim(
    LAB,
    "the checkpoints keep exactly what the plain pass kept, and every use still runs twice.",
)
def test_one_checkpoint_per_use_saves_nothing():
    net, params, x, _ = setting()

    def per_use(model, x, depth):
        h = F.relu(model.input_linear(x.flatten(1)))
        for _ in range(depth):
            h = checkpoint(lambda t: F.relu(model.middle_linear(t)), h, use_reentrant=False)
        return F.log_softmax(model.output_linear(h), dim=1)

    _, plain = distinct_saved_bytes(net, x, 4, leave_out=params)
    calls = counting(net)
    out, kept = distinct_saved_bytes(per_use, net, x, 4, leave_out=params)
    out.sum().backward()
    assert kept == plain and len(calls) == 8


@claim(LAB, "Memory drops only when a checkpoint spans **several** uses")
def test_memory_drops_with_longer_segments():
    net, params, x, activation = setting()
    _, plain = distinct_saved_bytes(net, x, 4, leave_out=params)
    kept = [
        distinct_saved_bytes(segmented_forward, net, x, 4, k, leave_out=params)[1]
        for k in (1, 2, 4)
    ]
    assert kept == [plain - 3 * activation, plain - 2 * activation, plain]


@claim(
    LAB,
    "does something similar for an `nn.Sequential`, but runs its last segment without a "
    "checkpoint.",
)
def test_checkpoint_sequential_leaves_the_last_segment_plain():
    layers = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(4)]
    calls = []
    for layer in layers:
        layer[0].register_forward_hook(lambda m, i, o: calls.append(1))
    x = torch.randn(2, 4, requires_grad=True)
    out = checkpoint_sequential(nn.Sequential(*layers), 2, x, use_reentrant=False)
    assert len(calls) == 4
    out.sum().backward()
    assert len(calls) == 6  # only the first segment's two layers ran again


@claim(LAB, "Backward recomputes one segment at a time, the last first")
def test_segments_are_recomputed_one_at_a_time_last_first():
    net, _, x, _ = setting(depth=6)
    events = []
    net.middle_linear.register_forward_hook(
        lambda m, i, o: events.append("rerun") if torch.is_grad_enabled() and events else None
    )

    def run(h, uses, name):
        for _ in range(uses):
            h = F.relu(net.middle_linear(h))
        return h

    h = F.relu(net.input_linear(x))
    outs = []
    for name in ("first", "second", "third"):
        h = checkpoint(run, h, 2, name, use_reentrant=False)
        outs.append(h)
        h.register_hook(lambda g, name=name: events.append(f"gradient of {name}"))
    events.append("backward")
    net.output_linear(h).sum().backward()
    assert events == [
        "backward",
        "gradient of third",
        "rerun",
        "rerun",
        "gradient of second",
        "rerun",
        "rerun",
        "gradient of first",
        "rerun",
        "rerun",
    ]


@claim(
    LAB,
    "Every segment count reruns each use of the middle layer once (the reruns column equals the "
    "depth)",
)
def test_every_segment_count_reruns_each_use_once():
    net, _, x, _ = setting(depth=6)
    calls = counting(net)
    for k in range(1, 7):
        calls.clear()
        segmented_forward(net, x, 6, k).sum().backward()
        assert len(calls) == 12


@claim(
    LAB,
    "The forward keeps one activation per segment (its input) and the last segment's output, and "
    "the backward holds one segment's activations on top while it recomputes it: with $k$ "
    "segments of a depth $n$, about $k + n/k$ activations, smallest near $k = \\sqrt{n}$",
)
def test_kept_and_high_water_mark():
    n = 9
    net, params, x, activation = setting(depth=n)
    _, base = distinct_saved_bytes(segmented_forward, net, x, n, 1, leave_out=params)
    high = {}
    for k in range(1, n + 1):
        _, kept = distinct_saved_bytes(segmented_forward, net, x, n, k, leave_out=params)
        assert kept == base + (k - 1) * activation  # one more segment input per segment
        largest = max(i * n // k - (i - 1) * n // k for i in range(1, k + 1))
        h = torch.randn(3, 5, requires_grad=True)

        def run(h, uses):
            for _ in range(uses):
                h = F.relu(net.middle_linear(h))
            return h

        _, segment = distinct_saved_bytes(run, h, largest, leave_out=[*params, h])
        assert segment == largest * activation
        high[k] = kept + segment
    lowest = min(high.values())
    assert [k for k, v in high.items() if v == lowest] == [round(math.sqrt(n))]


# ---------------------------------------------------------------- 5. anomaly detection


def scaled_activation(x):
    t = torch.tanh(x)
    t.mul_(3)
    return t


@claim(
    LAB,
    "Lab 4's version-counter error says *what* went wrong, and even names the operation whose "
    "saved output was changed (`Tanh` below; `TanhBackward0` on torch 2.10), but not *where* in "
    "your code",
)
def test_version_error_names_the_node_not_the_line():
    x = torch.randn(5, requires_grad=True)
    with pytest.raises(RuntimeError) as error:
        scaled_activation(x * 2).sum().backward()
    text = str(error.value)
    name = "TanhBackward0" if torch.__version__.startswith("2.10.") else "Tanh"
    assert f"output 0 of {name}," in text and "modified by an inplace operation" in text
    assert "torch.tanh" not in text and "scaled_activation" not in text


@claim(
    LAB,
    "autograd records, for every node, the Python stack of the forward call that created it.",
)
def test_anomaly_mode_records_a_traceback_per_node():
    x = torch.randn(3, requires_grad=True)
    y = x.exp()
    assert "traceback_" not in y.grad_fn.metadata
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            y = x.exp()
            z = y.sin()
    assert "y = x.exp()" in "".join(y.grad_fn.metadata["traceback_"])
    assert "z = y.sin()" in "".join(z.grad_fn.metadata["traceback_"])


@claim(
    LAB,
    "When backward fails, it issues a **warning** with that stack before raising the error: "
    '"Error detected in TanhBackward0. Traceback of forward call that caused the error:", then '
    "the frames, the innermost (the line that created the node) last.",
)
def test_anomaly_warning_text():
    x = torch.randn(5, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError), torch.autograd.detect_anomaly():
            scaled_activation(x * 2).sum().backward()
    texts = [str(w.message) for w in caught if str(w.message).startswith("Error detected in")]
    assert len(texts) == 1
    assert texts[0].startswith(
        "Error detected in TanhBackward0. Traceback of forward call that caused the error:"
    )
    code = [line.strip() for line in texts[0].splitlines() if line.strip()]
    code = [
        line
        for line in code
        if not line.startswith(("File ", "(Triggered")) and set(line) - set("^~ ")
    ]
    assert code[-1] == "t = torch.tanh(x)"


@claim(
    LAB,
    "Anomaly mode stores a stack for every node, and checks every gradient that backward computes "
    "for `nan`",
)
def test_anomaly_mode_catches_nan_gradients():
    x = torch.tensor([-1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = x.sqrt()  # nan
        y.backward()  # without anomaly mode: no error
        with (
            pytest.raises(RuntimeError, match="returned nan values"),
            torch.autograd.detect_anomaly(),
        ):
            x.sqrt().backward()


@claim(
    LAB,
    "Autograd does not check it (a float64 tensor for a float32 one goes through unnoticed), and "
    "gradients are only as exact as what `unpack` returns.",
)
def test_unpack_result_is_not_checked_for_dtype():
    a = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t.double()):
        e = a.exp()
    e.sum().backward()  # no error
    assert a.grad.dtype == torch.float32
    b = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t * 2):
        f = b.exp()
    f.sum().backward()
    assert torch.allclose(b.grad, 2 * b.detach().exp())  # the wrong tensor, used as it is


# ---------------------------------------------------------------- checkpointing a dynamic graph


def _tanh_steps(layer, h, depth, scale):
    for _ in range(depth):
        h = torch.tanh(layer(h)) * scale
    return h


@claim(
    LAB,
    "`checkpoint` saves torch's random state and restores it for the recomputation (dropout "
    "draws the same mask again), but not Python's `random`, which `DynamicNet` draws its depth "
    "from.",
)
def test_checkpoint_restores_torchs_random_state_not_pythons():
    layer = nn.Linear(8, 8)
    x = torch.randn(4, 8)

    def dropped(h):
        return F.dropout(layer(h), 0.5, training=True)

    torch.manual_seed(3)
    plain = torch.autograd.grad(dropped(x).sum(), layer.weight)[0]
    torch.manual_seed(3)
    out = checkpoint(dropped, x, use_reentrant=False)
    assert torch.equal(torch.autograd.grad(out.sum(), layer.weight)[0], plain)
    draws = []
    rng = random.Random(0)

    def drawing(h):
        draws.append(rng.random())
        return torch.tanh(layer(h))

    torch.autograd.grad(checkpoint(drawing, x, use_reentrant=False).sum(), layer.weight)
    assert len(draws) == 2 and draws[0] != draws[1]  # drawn again, another number
    net = DynamicNet(4, 4, 2, max_depth=3, seed=0)
    assert isinstance(net.rng, random.Random)


@claim(
    LAB,
    "where the recomputation saves other tensors, backward raises a `CheckpointError`; where it "
    "saves tensors of the same shapes, the gradient is computed from activations the forward "
    "pass never had, without a word.",
)
def test_a_draw_inside_a_checkpoint_raises_or_silently_changes_the_gradient():
    layer = nn.Linear(8, 8)
    x = torch.randn(4, 8)

    def inside(h, rng):
        return _tanh_steps(layer, h, rng.randint(1, 3), rng.uniform(0.5, 1.5))

    def grad(out):
        return torch.autograd.grad(out.sum(), layer.weight)[0]

    seen = set()
    for seed in range(20):
        plain = grad(inside(x, random.Random(seed)))
        try:
            got = grad(checkpoint(inside, x, random.Random(seed), use_reentrant=False))
            seen.add("right" if torch.allclose(got, plain) else "wrong")
        except CheckpointError:
            seen.add("error")
        rng = random.Random(seed)  # the fix: draw outside, pass the draw in
        depth, scale = rng.randint(1, 3), rng.uniform(0.5, 1.5)
        fixed = checkpoint(_tanh_steps, layer, x, depth, scale, use_reentrant=False)
        assert torch.allclose(grad(fixed), plain)
    assert seen == {"right", "wrong", "error"}


@claim(LAB, "the recomputation only refills saved tensors; the graph is the forward's own")
def test_recomputation_refills_saved_tensors_in_the_forwards_graph():
    layer = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    scales = iter([2.0, 5.0])  # forward multiplies by 2, the recomputation by 5

    def scaled(h):
        return torch.tanh(layer(h)) * next(scales)

    got = torch.autograd.grad(checkpoint(scaled, x, use_reentrant=False).sum(), layer.weight)[0]
    expected = torch.autograd.grad((torch.tanh(layer(x)) * 2.0).sum(), layer.weight)[0]
    assert torch.allclose(got, expected)  # the graph's own factor 2, not the rerun's 5


# ---------------------------------------------------------------- the checks' hints


def catalogued_answers():
    """The variants of this lab's mistake catalogue (solutions/<lab>/mistakes.toml), as
    objects with .exercise, .why and .code (read here: graders' own reader costs imports)."""
    import tomllib
    from types import SimpleNamespace

    from claims import SOLUTIONS

    table = tomllib.loads((SOLUTIONS / LAB / "mistakes.toml").read_text(encoding="utf-8"))
    return [SimpleNamespace(**v) for v in table["variant"]]


def released_check(grade_id: str, answer: str, *before: str) -> str | None:
    """Run the release's cells `before` (by grade id), answer code `answer`, then the released
    visible check `grade_id` (hidden tests stripped) with the release's check helpers; return
    the sentence of the check that stopped it, or None when every check passed."""
    from claims import check_says, released_cells

    cells = released_cells(LAB)
    namespace = {"torch": torch, "F": F, "nn": nn, "random": random, "checkpoint": checkpoint}
    namespace.update(os=__import__("os"), re=__import__("re"))
    return check_says(LAB, grade_id, [*(cells[b] for b in before), answer], namespace)


@pytest.mark.parametrize(
    "why, says",
    [
        ("detaches the input layer's output", "some parameters have no gradient"),
        ("saves memory with torch.no_grad() instead", "some parameters have no gradient"),
        ("the checkpointed function reads h from the loop", "recomputed other activations"),
    ],
)
def test_segmented_forward_hints_tell_a_cut_graph_from_a_wrong_recomputation(why, says):
    """A graph cut by detach() or no_grad() (gradients missing) is not told to look at the
    recomputation, nor a wrong recomputation (gradients differ) at a cut."""
    (code,) = [
        v.code
        for v in catalogued_answers()
        if v.exercise == "segmented_forward" and v.why.startswith(why)
    ]
    said = released_check("test_segmented_forward", code, "dynamic_net", "distinct_saved_bytes")
    assert said and says in said, said
    other = {"some parameters have no gradient", "recomputed other activations"} - {says}
    assert not any(o in said for o in other), said


PER_USE_NO_BACKWARD = """
def per_use_grads(W, h0, k):
    grads = [None] * k
    h = h0
    for i in range(k):
        W_i = W.view_as(W)
        W_i.register_hook(lambda g, i=i: grads.__setitem__(i, g))
        h = torch.tanh(W_i @ h)
    return grads
"""


@pytest.mark.parametrize(
    "why, says",
    [
        ("late binding", "though a backward pass ran: no hook wrote them"),
        ("off by one: the first use multiplies by W itself", "though a backward pass ran"),
        (None, "no gradient reached W: no backward pass ran"),
    ],
)
def test_per_use_grads_hints_tell_a_missing_backward_from_hooks_that_wrote_elsewhere(why, says):
    """Entries left None are told apart by whether a backward pass ran (a gradient reached W):
    'did you call backward()?' only when none did."""
    code = PER_USE_NO_BACKWARD
    if why:
        (code,) = [
            v.code
            for v in catalogued_answers()
            if v.exercise == "per_use_grads" and v.why.startswith(why)
        ]
    said = released_check("test_per_use_grads", code, "dynamic_net")
    assert said and says in said, said
