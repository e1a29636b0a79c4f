"""Claims of lab 8 (under the hood: a NumPy autograd; torch.compile and control flow).

Each test quotes one sentence of the lab and checks it on the installed torch. The compiler
tests compile tiny functions with backend="eager" or a backend that keeps the graphs, so the
file runs in a few seconds.
"""

from __future__ import annotations

import inspect
import logging
import random
import warnings

import pytest
import torch
from claims import claim, lab_class
from torch import nn

LAB = "lab08_under_the_hood"
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)


DynamicNet = lab_class(LAB, "DynamicNet")


def graphs_of(fn, *args, **kwargs):
    """The graphs torch.compile hands to its backend for fn(*args)."""
    kept = []

    def keep(graph_module, example_inputs):
        kept.append(graph_module)
        return graph_module.forward

    torch.compiler.reset()
    torch.compile(fn, backend=keep)(*args, **kwargs)
    return kept


def torch_release() -> tuple[int, int]:
    """The installed torch's (major, minor): what a version-dependent sentence depends on."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def dynamicnet_report():
    """torch._dynamo.explain of DynamicNet: its graphs, breaks and the break reasons."""
    from torch._dynamo import explain

    torch.compiler.reset()
    net = DynamicNet(4, 6, 3, seed=0)
    return net, explain(net)(torch.randn(5, 4))


def depth_of(net, x, y):
    return [d for d in range(net.max_depth + 1) if torch.allclose(y, net(x, depth=d))]


def grow(x, w):
    while x.norm() < 10:
        x = x + torch.relu(x @ w) + 0.5
    return x


def grow_while(x, w):
    (x,) = torch.while_loop(lambda x: x.norm() < 10, lambda x: (x + torch.relu(x @ w) + 0.5,), (x,))
    return x


def branchy(x, w1, w2):
    if x.sum() > 0:
        return torch.tanh(x @ w1)
    return torch.relu(x @ w2)


def branchy_cond(x, w1, w2):
    return torch.cond(
        x.sum() > 0,
        lambda x, a, b: torch.tanh(x @ a),
        lambda x, a, b: torch.relu(x @ b),
        (x, w1, w2),
    )


# ------------------------------------------------------------------ part A: PyTorch's graph
@claim(
    LAB,
    "PyTorch links graph *nodes* instead: `grad_fn.next_functions` holds the parents' nodes "
    "(a leaf's is an `AccumulateGrad` node), not their tensors; a tensor that a backward "
    "formula needs is kept on the node as a *saved tensor*",
)
def test_next_functions_hold_nodes_and_saved_tensors_hold_tensors():
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    t = a * 2
    out = t * b
    parents = [node for node, _ in out.grad_fn.next_functions]
    assert not any(isinstance(p, torch.Tensor) for p in parents)
    assert parents[0] is t.grad_fn
    assert type(parents[1]).__name__ == "AccumulateGrad" and parents[1].variable is b
    assert torch.equal(out.grad_fn._saved_self, t) and torch.equal(out.grad_fn._saved_other, b)


@claim(LAB, "which raises the same error PyTorch raises when you go backwards twice")
def test_second_backward_raises_runtime_error():
    w = torch.tensor(2.0, requires_grad=True)
    y = w**3
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


@claim(LAB, "like PyTorch, two backward passes accumulate")
def test_two_backward_passes_accumulate():
    w = torch.tensor(2.0, requires_grad=True)
    y = w**3
    y.backward(retain_graph=True)
    y.backward()
    assert w.grad.item() == 24.0


@claim(LAB, "Gradients of intermediate tensors stay in your dict and are dropped, as in PyTorch")
def test_intermediate_grads_are_dropped_unless_retained():
    u = torch.tensor(2.0, requires_grad=True)
    mid, kept = u * 3, u * 3
    kept.retain_grad()
    with pytest.warns(UserWarning):
        (mid * kept).backward()
        assert mid.grad is None
    assert kept.grad is not None


@claim(LAB, "(x^2 + y)\\,z$ at $(-2, 2, 3)$ should give $(-12, 3, 6)$")
def test_lab2_function_gradients():
    x, y, z = (torch.tensor(v, requires_grad=True) for v in (-2.0, 2.0, 3.0))
    ((x**2 + y) * z).backward()
    assert [x.grad.item(), y.grad.item(), z.grad.item()] == [-12.0, 3.0, 6.0]


@claim(LAB, "relu exactly at 0 (PyTorch's gradient there is 0)")
def test_relu_gradient_at_zero_is_zero():
    a = torch.zeros(3, requires_grad=True)
    torch.relu(a).sum().backward()
    assert torch.equal(a.grad, torch.zeros(3))


# ------------------------------------------------------------------ part B: the compiler
@claim(LAB, "In DynamicNet the graph stops at the `for` line")
def test_dynamicnet_breaks_at_the_loop():
    """On every torch of the range the graph ends at the loop (the one break reason names that
    line); what follows differs by version (test_second_graph_is_unrolled_for_the_drawn_depth)."""
    _, report = dynamicnet_report()
    assert len(report.break_reasons) == 1
    assert "range(depth)" in report.break_reasons[0].user_stack[-1].line
    first = report.graphs[0]
    names = [getattr(n.target, "__name__", "") for n in first.graph.nodes]
    assert names.count("linear") == 1  # the input layer only: the graph stops before the loop


@claim(
    LAB,
    "With torch 2.14.1, the version this lab was written with, it does: every compiled call "
    "runs the depth of the first throw, and nothing warns. TorchDynamo made the draw "
    "`self.rng.randint(0, 3)` once, while tracing the first call, and kept the number; the "
    "model's `rng` is not called again. Torch 2.10 does the same; torch 2.15 calls the `rng` "
    "on every call, as eager mode does.",
)
def test_compiled_dynamicnet_freezes_its_random_random_draw():
    torch.compiler.reset()
    net, x = DynamicNet(4, 6, 3, seed=1), torch.randn(5, 4)
    draws = random.Random(1)
    expected = [draws.randint(0, 3) for _ in range(7)]
    assert len(set(expected)) > 1  # eager draws differ
    compiled = torch.compile(net, backend="eager")
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        depths = [depth_of(net, x, compiled(x)) for _ in range(6)]
    frozen = depths == [[expected[0]]] * 6 and net.rng.randint(0, 3) == expected[1]
    anew = depths == [[d] for d in expected[:6]] and net.rng.randint(0, 3) == expected[6]
    assert not any("jit" not in str(w.message) for w in caught)  # nothing warns
    if torch_release() in ((2, 10), (2, 14)):
        assert frozen, depths  # the rng was drawn from once only
    elif torch_release() >= (2, 15):
        assert anew, depths  # the rng is called on every call
    else:  # 2.11 to 2.13: the lab says nothing of them; one of the two
        assert frozen or anew, depths


@claim(
    LAB,
    "`random.randint(0, 3)` is drawn anew on every call, and `x * random.randint(0, 3)` "
    "compiles into one graph",
)
def test_module_random_is_redrawn_and_kept_in_one_graph():
    def scaled(x):
        return x * random.randint(0, 3)

    assert len(graphs_of(scaled, torch.ones(1))) == 1
    torch.compiler.reset()
    compiled = torch.compile(scaled, backend="eager")
    random.seed(0)
    got = [compiled(torch.ones(1)).item() for _ in range(12)]
    random.seed(0)
    assert got == [float(random.randint(0, 3)) for _ in range(12)]


@claim(
    LAB,
    "One graph per depth, and no break: the compiler specialises a graph on the value of a "
    "Python `int` argument, guards on it, and compiles again (a *recompilation*) when a call "
    "brings a value it has no graph for; after that each depth reuses its own graph.",
)
def test_depth_argument_one_graph_per_value():
    net, x = DynamicNet(4, 6, 3, seed=0), torch.randn(5, 4)
    kept, ran = [], []

    def keep(graph_module, example_inputs):
        number = len(kept)
        kept.append(graph_module)
        return lambda *args: ran.append(number) or graph_module.forward(*args)

    torch.compiler.reset()
    compiled = torch.compile(net, backend=keep)
    with torch.no_grad():
        for d in [0, 1, 2, 3, 2, 0, 3, 1]:
            ran.clear()
            assert torch.allclose(compiled(x, depth=d), net(x, depth=d))
            assert len(ran) == 1  # one graph per call: no break
    assert len(kept) == 4


@claim(LAB, "`fullgraph=True` turns every graph break into an error")
def test_fullgraph_turns_a_break_into_an_error():
    w = torch.randn(4, 2)
    torch.compiler.reset()
    with pytest.raises(Exception, match="(?i)data-dependent|graph break|unsupported"):
        torch.compile(branchy, backend="eager", fullgraph=True)(torch.randn(5, 4), w, w)
    assert len(graphs_of(branchy, torch.randn(5, 4), w, w)) >= 2  # without it: a break


@claim(LAB, "its condition is a tensor, known only when the data is there")
def test_grow_breaks_the_graph():
    """On every torch of the range the compiler cannot keep the loop in one graph: with
    fullgraph=True it refuses it. (Before torch 2.15 the graph breaks at the condition and
    more graphs hold the body; since 2.15 the one graph is the condition and the loop runs in
    Python: the lab prints the count, `grow: N graphs`, rather than stating it.)"""
    torch.compiler.reset()
    with pytest.raises(Exception, match="(?i)data-dependent"):
        torch.compile(grow, backend="eager", fullgraph=True)(torch.randn(1, 4), torch.eye(4))


@claim(
    LAB,
    "and two functions of the same operands that return tensors of the **same shape and dtype**",
)
def test_cond_branches_must_agree_in_shape():
    with pytest.raises(Exception):  # noqa: B017 (the class is internal)
        torch.cond(torch.tensor(True), lambda x: x, lambda x: x[:1], (torch.randn(3),))


@claim(LAB, "Both branches are traced into the graph; which one runs is decided at run time.")
def test_cond_keeps_both_branches_in_one_graph():
    w1, w2 = torch.randn(4, 2), torch.randn(4, 2)
    (graph,) = graphs_of(branchy_cond, torch.randn(5, 4), w1, w2)
    assert len(list(graph.named_children())) == 2
    torch.compiler.reset()
    compiled = torch.compile(branchy_cond, backend="eager", fullgraph=True)
    for x in (torch.rand(5, 4), -torch.rand(5, 4)):
        assert torch.allclose(compiled(x, w1, w2), branchy(x, w1, w2))


@claim(
    LAB,
    "Its documentation calls it a *prototype* feature, with limited support for input and "
    "output types.",
)
def test_cond_documentation_says_prototype():
    doc = " ".join(torch.cond.__doc__.split())
    assert "prototype feature" in doc and "limited support for input and output types" in doc


@claim(LAB, "`torch.where` takes a 0-d boolean tensor as its condition")
def test_where_takes_a_0d_condition():
    got = torch.where(torch.tensor(False), torch.ones(2, 3), torch.zeros(2, 3))
    assert torch.equal(got, torch.zeros(2, 3))


@claim(LAB, "`torch.export.export` traces **non-strict** by default")
def test_export_is_non_strict_by_default():
    assert inspect.signature(torch.export.export).parameters["strict"].default is False


@claim(LAB, "it runs your Python code once, as in eager mode")
def test_non_strict_export_runs_forward_once():
    class Counted(nn.Module):
        calls = 0

        def forward(self, x):
            Counted.calls += 1
            return x * 2

    torch.export.export(Counted(), (torch.randn(2),))
    assert Counted.calls == 1


@claim(LAB, "so exporting `branchy` stops with an error, in both modes")
def test_exporting_branchy_fails_in_both_modes():
    class Branchy(nn.Module):
        def forward(self, x):
            return branchy(x, torch.ones(4, 2), torch.ones(4, 2))

    for strict in (False, True):
        with pytest.raises(Exception):  # noqa: B017 (the classes differ between the modes)
            torch.export.export(Branchy(), (torch.randn(5, 4),), strict=strict)


@claim(
    LAB,
    "export DynamicNet without `strict`: its die is thrown once, and no error says so "
    "(with `strict=True`, export refuses it).",
)
def test_export_bakes_dynamicnet_depth_and_strict_refuses():
    net, x = DynamicNet(4, 6, 3, seed=0), torch.randn(5, 4)
    program = torch.export.export(net, (x,))
    layers = [n for n in program.graph.nodes if n.target is torch.ops.aten.linear.default]
    module = program.module()
    for _ in range(4):  # the same depth every time, the one baked into the program
        assert depth_of(net, x, module(x)) == [len(layers) - 2]
    with pytest.raises(Exception):  # noqa: B017 (an internal assertion on 2.14.1)
        torch.export.export(DynamicNet(4, 6, 3, seed=0), (x,), strict=True)


@claim(LAB, "`branchy_cond` exports, its `cond` node holding both branches")
def test_branchy_cond_exports_with_a_cond_node():
    class BranchyCond(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w2 = nn.Parameter(torch.randn(4, 2)), nn.Parameter(torch.randn(4, 2))

        def forward(self, x):
            return branchy_cond(x, self.w1, self.w2)

    module = torch.export.export(BranchyCond(), (torch.randn(5, 4),)).graph_module
    conds = [n for n in module.graph.nodes if "cond" in str(n.target)]
    assert len(conds) == 1 and len(list(module.named_children())) == 2


@claim(
    LAB,
    "the branch that did not run gives its weight a gradient of zeros, where eager "
    "`branchy` gives `None`",
)
def test_cond_gives_zeros_where_eager_gives_none():
    w1, w2 = torch.randn(4, 2, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    x = torch.rand(5, 4)
    (g_cond,) = torch.autograd.grad(branchy_cond(x, w1, w2).sum(), [w2])
    assert torch.equal(g_cond, torch.zeros(4, 2))
    (g_eager,) = torch.autograd.grad(branchy(x, w1, w2).sum(), [w2], allow_unused=True)
    assert g_eager is None


@claim(LAB, "the compiler unrolled all `max_steps` steps, and every call runs them all")
def test_bounded_loop_is_unrolled():
    def bounded(x, w, max_steps=5):
        for _ in range(max_steps):
            x = torch.where(x.norm() < 10, x + torch.relu(x @ w) + 0.5, x)
        return x

    (graph,) = graphs_of(bounded, torch.randn(1, 4), torch.randn(4, 4))
    names = [getattr(n.target, "__name__", "") for n in graph.graph.nodes]
    assert names.count("where") == 5


@claim(LAB, "Its documentation calls it a *prototype* feature that does not support training yet.")
def test_while_loop_documentation():
    doc = " ".join(torch.while_loop.__doc__.split())
    assert "prototype feature" in doc and "doesn't support training" in doc


@claim(LAB, "Outside `torch.compile`, it compiles its functions itself on the first call")
def test_eager_while_loop_compiles_on_first_call():
    from torch._dynamo.utils import counters

    torch.compiler.reset()
    counters.clear()
    w = torch.randn(4, 4) * 0.3
    x = torch.randn(1, 4)
    assert torch.allclose(grow_while(x, w), grow(x, w))
    assert counters["stats"]["unique_graphs"] >= 1


@claim(
    LAB,
    "the compiler keeps the whole loop as **one** operation of the graph, with the "
    "condition and the body as subgraphs",
)
def test_while_loop_is_one_operation_with_two_subgraphs():
    (graph,) = graphs_of(grow_while, torch.randn(1, 4), torch.randn(4, 4) * 0.3)
    names = [
        getattr(n.target, "__name__", str(n.target))
        for n in graph.graph.nodes
        if n.op == "call_function"
    ]
    assert names.count("while_loop") == 1
    assert len(list(graph.named_children())) == 2


@claim(
    LAB,
    "`torch.while_loop(lambda x: x.norm() < 10, lambda x: (x + torch.relu(x @ w) + 0.5,), "
    "(x,))` is `grow` in one graph",
)
def test_grow_while_is_grow_in_one_graph():
    x, w = torch.randn(1, 4), torch.randn(4, 4) * 0.3
    torch.compiler.reset()
    with pytest.raises(Exception, match="(?i)data-dependent"):  # the Python loop is no graph
        torch.compile(grow, backend="eager", fullgraph=True)(x, w)
    assert len(graphs_of(grow_while, x, w)) == 1
    torch.compiler.reset()
    compiled = torch.compile(grow_while, backend="eager", fullgraph=True)
    assert torch.allclose(compiled(x, w), grow(x, w), atol=1e-6)


@pytest.mark.parametrize(
    "body, condition",
    [
        (lambda x: (torch.cat([x, x + 0.5]),), lambda x: x.norm() < 10),  # the state grows
        (lambda x: (x + 0.5,), lambda x: 10 - x.norm()),  # a float condition
    ],
)
@claim(LAB, "Break its rules and it refuses")
def test_while_loop_refuses_a_growing_state_or_a_float_condition(body, condition):
    with pytest.raises(Exception):  # noqa: B017 (the class is internal)
        torch.while_loop(condition, body, (torch.randn(1, 4),))


@claim(
    LAB,
    "with torch 2.10 to 2.15 its gradient of a `w` that the body reads from outside is wrong, "
    "and nothing warns (it comes out right when the carried `x` requires a gradient too).",
)
def test_while_loop_gradient_of_a_closed_over_weight():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 4, generator=gen), torch.randn(4, 4, generator=gen) * 0.3
    w = w.requires_grad_()
    (want,) = torch.autograd.grad(grow(x, w).sum(), w)
    (got,) = torch.autograd.grad(grow_while(x, w).sum(), w)
    assert (got - want).abs().max() > 1.0
    xr = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(grow(xr, w).sum(), w)
    (got,) = torch.autograd.grad(grow_while(xr, w).sum(), w)
    assert torch.allclose(got, want, atol=1e-5)


@claim(LAB, "It is `None` for a leaf, like `grad_fn`.")
def test_a_leaf_has_no_grad_fn():
    leaf = torch.randn(2, requires_grad=True)
    assert leaf.grad_fn is None and (leaf * 2).grad_fn is not None


@claim(LAB, "`no_grad()` switches it off, like `torch.no_grad()`")
def test_no_grad_records_no_graph():
    w = torch.randn(2, requires_grad=True)
    with torch.no_grad():
        out = torch.tanh(w * 2)
    assert out.grad_fn is None and not out.requires_grad


@claim(LAB, "The gradient of the bias is then the sum of those 5 uses")
def test_broadcast_bias_gradient_is_the_sum_over_rows():
    bias = torch.zeros(3, requires_grad=True)
    grad = torch.randn(5, 3)
    (torch.ones(5, 3) + bias).backward(grad)
    assert torch.allclose(bias.grad, grad.sum(0))


@claim(
    LAB,
    "With torch 2.14 and 2.15, a second graph holds the rest, unrolled for the depth that was "
    "drawn; with torch 2.10 there is no second graph: the compiler gives up on the rest of "
    "`forward`, which runs as plain Python.",
)
def test_second_graph_is_unrolled_for_the_drawn_depth():
    net, report = dynamicnet_report()
    x = torch.randn(5, 4)
    kept = report.graphs
    unrolled = len(kept) == 2 and report.graph_break_count == 1
    if unrolled:
        second = kept[1]
        linears = [n for n in second.graph.nodes if getattr(n.target, "__name__", "") == "linear"]
        assert len(linears) == net.last_depth + 1  # the middle layers and the output layer
    else:  # one graph, the input layer; the rest ran as Python, and its result is right
        assert len(kept) == 1 and report.graph_count == 1 and report.graph_break_count == 0
        torch.compiler.reset()
        compiled = torch.compile(net, backend="eager")
        with torch.no_grad():
            y = compiled(x)
            assert torch.allclose(y, net(x, depth=net.last_depth))
    if torch_release() >= (2, 14):
        assert unrolled
    elif torch_release() == (2, 10):
        assert not unrolled


@claim(LAB, "In eager mode it returns a tensor with a `grad_fn` all the same")
def test_eager_while_loop_output_has_a_grad_fn():
    w = (torch.randn(4, 4) * 0.3).requires_grad_()
    assert grow_while(torch.randn(1, 4), w).grad_fn is not None


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(record)


def warnings_logged(run):
    """The records torch's compiler logs at WARNING or above while `run()` runs."""
    logger = logging.getLogger("torch._dynamo")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        run()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return handler.seen


@claim(
    LAB,
    "A graph break logs nothing at WARNING (a data-dependent `if`, a `print`, a `while` on a "
    "tensor: the graph just ends there); the compiler's own warnings, such as reaching its "
    "recompile limit, are silenced here",
)
def test_graph_breaks_log_no_warning_but_the_recompile_limit_does(capsys):
    def breaks(x, w):
        if x.sum() > 0:
            x = x * 2
        print("a print breaks the graph")
        return grow(x, w)  # a while on a tensor

    kept = []
    seen = warnings_logged(lambda: kept.extend(graphs_of(breaks, torch.randn(3), torch.eye(3))))
    # the `if` and the `print` end a graph on every torch of the range, the `while` before 2.15
    assert len(kept) >= 2 and seen == []

    def scaled(x, n):
        return x * n

    torch.compiler.reset()
    compiled = torch.compile(scaled, backend="eager", dynamic=False)
    limit = torch._dynamo.config.recompile_limit
    seen = warnings_logged(lambda: [compiled(torch.ones(2), n) for n in range(limit + 2)])
    assert any("recompile_limit" in r.getMessage() for r in seen)
    assert all(r.name.startswith("torch._dynamo") for r in seen)


# ---------------------------------------------------------------- the checks' hints


def catalogued_answers():
    """The variants of this lab's mistake catalogue (solutions/<lab>/mistakes.toml), as
    objects with .exercise, .why and .code (read here: graders' own reader costs imports)."""
    import tomllib
    from types import SimpleNamespace

    from claims import SOLUTIONS

    table = tomllib.loads((SOLUTIONS / LAB / "mistakes.toml").read_text(encoding="utf-8"))
    return [SimpleNamespace(**v) for v in table["variant"]]


def test_matmul_shape_error_is_told_as_shapes_that_do_not_fit():
    """A matmul closure without its transposes raises numpy's ValueError; the released check
    says so in words (its text alone, not in the judge's list, reaches graded feedback as
    'ValueError: …'), and a right closure passes."""
    import ast
    import contextlib
    import itertools
    import math
    import os
    import re

    import numpy as np
    from claims import check_says, released_cells

    cells = released_cells(LAB)
    # the helpers that the test cell of exercise 1 defines (_torch_grads, _same), not its checks
    defs = ast.unparse(
        [n for n in ast.parse(cells["test_elementwise_ops"]).body if isinstance(n, ast.FunctionDef)]
    )

    def said(answer: str) -> str | None:
        namespace = {"np": np, "torch": torch, "contextlib": contextlib, "math": math}
        namespace.update(itertools=itertools, inspect=inspect, os=os, re=re)
        codes = [cells["engine"], cells["elementwise_ops"], answer, defs]
        return check_says(LAB, "test_matrix_ops", codes, namespace)

    with pytest.raises(ValueError, match="mismatch in its core dimension"):
        np.ones((3, 4)) @ np.ones((2, 4))
    variants = {v.why: v.code for v in catalogued_answers() if v.exercise == "matrix_ops"}
    wrong = variants["matmul without the transposes: shapes do not match (an error)"]
    assert "the closure raised a ValueError, arrays whose shapes do not fit" in said(wrong)
    right = [c for w, c in variants.items() if w.startswith("np.broadcast_to for total")]
    assert said(right[0]) is None
