"""Claims of lab 5 (DynamicNet and its variants on MNIST), each checked on the installed torch
or, for the original notebook's figures, against that notebook (shared/seeds/002_*.txt). One
test per sentence; the sentence is quoted from the lab's source."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from claims import REPO, claim, lab_class
from torch import nn

LAB = "lab05_dynamicnet"
SEED_DOCUMENT = "002_d7da71155909ce65.txt"  # the "Dynamic Graphs" notebook


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def seed_document() -> str:
    """The original notebook's text; skips the test when shared/seeds/ is not beside the repo."""
    for folder in [REPO, *REPO.parents]:
        source = Path(folder, "shared", "seeds", SEED_DOCUMENT)
        if source.exists():
            return source.read_text(encoding="utf-8")
    pytest.skip("the course's source documents (shared/seeds/) are not beside this checkout")


def accuracies(block: str) -> list[int]:
    """The whole percentages of the 'Test set: ... Accuracy: n/10000 (p%)' lines of `block`."""
    return [int(p) for p in re.findall(r"Accuracy: \d+/10000 \((\d+)%\)", block)]


def original_runs() -> tuple[str, str]:
    """The two runs of the notebook: DynamicNet's, then the tree-like model's (from its cell)."""
    text = seed_document()
    split = text.index("tree like")
    return text[:split], text[split:]


DynamicNet = lab_class(LAB, "DynamicNet")


def count_nodes(tensor):
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    return len(seen)


# ------------------------------------------------------------------------------ the figures
# of the original notebook, quoted by the lab


@claim(LAB, "based on reports 84-89% for it), one bug at a time, measuring what each one costs")
def test_the_original_reports_84_to_89_percent_for_the_branching_model():
    _, tree = original_runs()
    found = accuracies(tree)
    assert found and min(found) == 84 and max(found) == 89, found


@claim(
    LAB,
    "Its table reports 84-89% for that model, where `DynamicNet` reached 95%.",
)
def test_the_original_reports_95_percent_for_dynamicnet_and_84_to_89_for_the_tree():
    dynamic, tree = original_runs()
    assert accuracies(dynamic)[-1] == 95
    assert (min(accuracies(tree)), max(accuracies(tree))) == (84, 89)


@claim(
    LAB,
    "The hyper-parameters are those of the original notebook this lab is based on: 100 hidden "
    "units, SGD with learning rate 0.01 and momentum 0.5, batches of 128, 8 epochs, seed 666.",
)
def test_the_hyper_parameters_are_the_original_notebooks():
    dynamic, _ = original_runs()
    for line in ("TRAIN_BATCH_SIZE = 128", "EPOCHS = 8", "LR = 0.01", "MOMENTUM = 0.5"):
        assert re.search(rf"^{re.escape(line)}\b", dynamic, re.M), line
    assert "seed = 666" in dynamic and "D_in, H, D_out = 784, 100, 10" in dynamic
    assert "optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)" in dynamic
    # and the lab trains with them
    source = (REPO / "solutions" / LAB / f"{LAB}.py").read_text(encoding="utf-8")
    assert "EPOCHS, BATCH, LR, MOMENTUM, SEED = 8, 128, 0.01, 0.5, 666" in source


@claim(LAB, "(one detour goes through 300 units)")
def test_the_tree_like_model_has_a_300_unit_layer():
    _, tree = original_runs()
    assert "D_in, H1, H2, D_out = 784, 100, 300, 10" in tree
    assert "torch.nn.Linear(H1, H2)" in tree


# ---------------------------------------------------------------------------- dynamic graphs


@claim(
    LAB,
    "the graph is recorded while ordinary Python runs, so a loop, an `if` or a random number "
    "can change it from one call to the next, and autograd follows whatever actually happened.",
)
def test_the_graph_follows_the_python_that_ran():
    torch.manual_seed(0)
    net = DynamicNet(6, 5, 3, seed=0)
    x = torch.randn(2, 6)
    sizes = {count_nodes(net(x, depth=d).sum()) for d in range(4)}
    assert len(sizes) == 4  # one graph per depth
    net.zero_grad()
    net(x, depth=0).sum().backward()
    assert net.middle_linear.weight.grad is None  # autograd followed the pass that ran


@claim(LAB, "the whole batch goes through in one call: one matrix product per layer")
def test_a_batch_through_a_linear_layer_is_one_matrix_product():
    layer = nn.Linear(8, 8)
    out = layer(torch.randn(512, 8))
    assert type(out.grad_fn).__name__ == "AddmmBackward0" and count_nodes(out) <= 4


# -------------------------------------------------------------------------------- DynamicNet


@claim(LAB, "`self.rng.randint(0, self.max_depth)` (`randint` includes both ends)")
def test_randint_includes_both_ends():
    rng = random.Random(0)
    assert {rng.randint(0, 3) for _ in range(200)} == {0, 1, 2, 3}


@claim(LAB, "the same seed gives the same depths")
def test_the_same_seed_gives_the_same_depths():
    x = torch.randn(2, 784)
    depths = []
    for _ in range(2):
        net = DynamicNet(seed=11)
        depths.append([(net(x), net.last_depth)[1] for _ in range(20)])
    assert depths[0] == depths[1] and len(set(depths[0])) > 1


@claim(LAB, "`x` may be a batch of images of shape `(batch, 1, 28, 28)`)")
def test_flatten_1_turns_images_into_rows_of_784():
    assert torch.randn(5, 1, 28, 28).flatten(1).shape == (5, 784)
    assert torch.randn(5, 784).flatten(1).shape == (5, 784)  # a flat batch stays as it is


@claim(LAB, "these log-probabilities are what `F.nll_loss` expects")
def test_nll_loss_of_log_softmax_is_cross_entropy():
    scores, target = torch.randn(6, 10), torch.randint(0, 10, (6,))
    loss = F.nll_loss(F.log_softmax(scores, dim=1), target)
    torch.testing.assert_close(loss, F.cross_entropy(scores, target))
    # and it reads them as they are: on raw scores it is something else
    assert not torch.isclose(F.nll_loss(scores, target), loss)


def shared_and_copies(depth=3):
    torch.manual_seed(1)
    net = DynamicNet(12, 6, 4)
    x, y = torch.randn(5, 12), torch.randint(0, 4, (5,))
    F.nll_loss(net(x, depth=depth), y).backward()
    copies = [net.middle_linear.weight.detach().clone().requires_grad_() for _ in range(depth)]
    h = F.relu(net.input_linear(x))
    for w in copies:
        h = F.relu(F.linear(h, w, net.middle_linear.bias))
    F.nll_loss(F.log_softmax(net.output_linear(h), dim=1), y).backward()
    return net, copies


@claim(
    LAB,
    "one parameter, used three times in the graph, gets three contributions added up by "
    "autograd, exactly as if the graph had three copies of the weight.",
)
def test_a_weight_used_three_times_gets_the_sum_of_three_gradients():
    net, copies = shared_and_copies(3)
    assert not torch.allclose(copies[0].grad, copies[2].grad)  # three different contributions
    torch.testing.assert_close(net.middle_linear.weight.grad, sum(c.grad for c in copies))


@claim(
    LAB,
    "A layer used several times gets the **sum** of its uses' gradients; a layer not used in a "
    "pass keeps `.grad` at `None`.",
)
def test_summary_shared_layer_sums_and_unused_layer_keeps_none():
    net, copies = shared_and_copies(2)
    torch.testing.assert_close(net.middle_linear.weight.grad, copies[0].grad + copies[1].grad)
    net.zero_grad(set_to_none=True)
    F.nll_loss(net(torch.randn(3, 12), depth=0), torch.tensor([0, 1, 2])).backward()
    assert net.middle_linear.weight.grad is None and net.input_linear.weight.grad is not None


@claim(LAB, "used with `F.linear(h, w, model.middle_linear.bias)`)")
def test_f_linear_with_the_layers_weight_and_bias_is_the_layer():
    layer, h = nn.Linear(7, 4), torch.randn(3, 7)
    torch.testing.assert_close(F.linear(h, layer.weight, layer.bias), layer(h))


@claim(LAB, "(A copy made with .clone() alone is not a leaf, so its .grad")
def test_a_clone_of_a_parameter_is_not_a_leaf_and_gets_no_grad():
    w = nn.Linear(3, 3).weight
    alone = w.clone().requires_grad_()
    detached = w.detach().clone().requires_grad_()
    (alone.sum() + detached.sum()).backward()
    assert not alone.is_leaf and detached.is_leaf and detached.grad is not None
    with pytest.warns(UserWarning, match="is not a leaf Tensor"):
        assert alone.grad is None
    assert w.grad is not None  # the clone's gradient went on into the parameter itself


@claim(
    LAB,
    "At depth 0 the middle layer is not in the graph, so its .grad should stay None.",
)
def test_at_depth_zero_the_middle_layer_gets_no_grad():
    net = DynamicNet(10, 6, 3)
    F.nll_loss(net(torch.randn(4, 10), depth=0), torch.tensor([0, 1, 2, 0])).backward()
    assert net.middle_linear.weight.grad is None and net.middle_linear.bias.grad is None
    assert net.output_linear.weight.grad is not None


# --------------------------------------------------------------------------- eval / no_grad


@claim(
    LAB,
    "`model.eval()` changes how some **layers** behave: `nn.Dropout` stops dropping units and "
    "`nn.BatchNorm1d` normalises with its running statistics instead of the batch's",
)
def test_eval_changes_dropout_and_batchnorm():
    torch.manual_seed(0)
    drop, ones = nn.Dropout(0.5), torch.ones(100)
    assert (drop(ones) == 0).any()
    assert torch.equal(drop.eval()(ones), ones)
    norm, x = nn.BatchNorm1d(3), torch.randn(8, 3) * 5 + 2
    train_out = norm(x)  # normalised with the batch's statistics (and updates the running ones)
    torch.testing.assert_close(train_out.mean(0), torch.zeros(3), atol=1e-5, rtol=0)
    norm.eval()
    expected = (x - norm.running_mean) / torch.sqrt(norm.running_var + norm.eps)
    torch.testing.assert_close(norm(x), expected * norm.weight + norm.bias)


@claim(LAB, "(our models have no such layer;")
def test_eval_changes_nothing_in_a_model_without_dropout_or_batchnorm():
    net, x = DynamicNet(10, 6, 3), torch.randn(4, 10)
    train_out = net(x, depth=2)
    torch.testing.assert_close(net.eval()(x, depth=2), train_out)


@claim(
    LAB,
    "`torch.no_grad()` stops autograd from **recording the graph**: no `grad_fn`, no tensors "
    "saved for backward; it changes no layer.",
)
def test_no_grad_records_no_graph_and_changes_no_layer():
    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    saved = []
    with (
        torch.no_grad(),
        torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t),
    ):
        out = layer(torch.ones(4, 8))
    assert out.grad_fn is None and not out.requires_grad and saved == []
    assert layer.training and (out == 0).any()  # dropout still drops: the layer is unchanged


@claim(
    LAB,
    "the seed fixes the first weights, the order of the batches and every draw",
)
def test_a_seed_fixes_weights_batch_order_and_depths():
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        net = DynamicNet(20, 6, 3)
        net.rng = random.Random(5)
        order = torch.randperm(50, generator=torch.Generator().manual_seed(5))
        depths = [(net(torch.ones(1, 20)), net.last_depth)[1] for _ in range(10)]
        runs.append((net.input_linear.weight.clone(), order, depths))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]


# ---------------------------------------------------------------------------- the branching


@claim(
    LAB,
    "Layers that a pass did not touch are not in its graph, so after `backward()` their `.grad` "
    "is still `None`",
)
def test_untouched_layers_keep_grad_none():
    used, unused = nn.Linear(4, 4), nn.Linear(4, 4)
    used(torch.randn(2, 4)).sum().backward()
    assert used.weight.grad is not None and unused.weight.grad is None


@claim(
    LAB,
    "`log_softmax` normalises over all 100 of them, `nll_loss` takes each digit's entry at its "
    "label (one of the units 0 to 9), and `argmax` may pick any of the 100, so a prediction of "
    "unit 42 is simply wrong.",
)
def test_with_100_units_nll_loss_picks_the_labels_entry_of_a_softmax_over_100():
    torch.manual_seed(0)
    hidden = torch.randn(4, 100)
    hidden[:, 42] += 10  # unit 42 dominates
    labels = torch.tensor([0, 3, 9, 7])
    out = F.log_softmax(hidden, dim=1)
    torch.testing.assert_close(out.exp().sum(1), torch.ones(4))  # over all 100 units
    loss = F.nll_loss(out, labels)
    torch.testing.assert_close(loss, -out[torch.arange(4), labels].mean())
    # the first 10 alone would give another loss: the other 90 units count through the softmax
    assert not torch.isclose(loss, F.nll_loss(F.log_softmax(hidden[:, :10], dim=1), labels))
    assert (out.argmax(1) == 42).all()  # never one of the 10 labels


@claim(
    LAB,
    'Scores below zero become exactly 0, so the model cannot say "certainly not a 7" with a '
    "negative score, and a row of zeros becomes a uniform guess after `log_softmax`.",
)
def test_relu_clips_scores_and_a_zero_row_is_uniform():
    scores = torch.tensor([[-2.0, -1.0, -0.1], [0.0, 0.0, 0.0]])
    assert (F.relu(scores) == 0).all()
    torch.testing.assert_close(
        F.log_softmax(F.relu(scores), dim=1), torch.full((2, 3), -torch.log(torch.tensor(3.0)))
    )


@claim(
    LAB,
    "With a ReLU on the scores, a score that went below 0 passes back no gradient, so nothing "
    "pushes it up again",
)
def test_a_clipped_score_gets_no_gradient_even_when_it_is_the_label():
    pre = torch.tensor([[-1.0, 2.0, 0.5]], requires_grad=True)
    F.nll_loss(F.log_softmax(F.relu(pre), dim=1), torch.tensor([0])).backward()
    assert pre.grad[0, 0] == 0  # the label's own score, below 0: nothing pushes it up
    assert pre.grad[0, 1] > 0  # the others still get pushed down


@claim(
    LAB,
    "A ReLU before `log_softmax` forbids negative scores and passes no gradient back below 0;",
)
def test_summary_relu_forbids_negative_scores_and_their_gradient():
    pre = torch.tensor([[-0.5, 1.0]], requires_grad=True)
    post = F.relu(pre)
    assert post.min() >= 0
    F.log_softmax(post, dim=1)[0, 0].backward()
    assert pre.grad[0, 0] == 0


# ----------------------------------------------------------------------- data-dependent loops


@claim(
    LAB,
    "A `while` loop on a one-element tensor is legal Python (`while` calls `bool()` on it, which "
    "reads its value), so it is legal PyTorch.",
)
def test_while_on_a_one_element_tensor_reads_its_value():
    h, steps = torch.ones(3, 4), 0
    while h.norm(dim=1).mean() < 10:
        h = h * 2
        steps += 1
    assert steps == 3  # norms 2, 4, 8, 16
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(torch.ones(2) < 3)  # several elements: no single truth value


@claim(
    LAB,
    "or activations that never grow (a middle layer whose weights are all zero, say) keep the "
    "loop running forever.",
)
def test_a_zero_weight_layer_gives_the_same_activations_every_step():
    layer = nn.Linear(5, 5)
    with torch.no_grad():
        layer.weight.zero_()
    h1 = F.relu(layer(torch.randn(3, 5)))
    h2 = F.relu(layer(h1))
    assert torch.equal(h1, h2)  # the norm never changes: only a bound ends such a loop


@claim(LAB, "the mean over the batch of the rows' L2 norms, `h.norm(dim=1).mean()`")
def test_norm_dim_1_is_each_rows_l2_norm():
    h = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    assert h.norm(dim=1).tolist() == [5.0, 1.0] and h.norm(dim=1).mean() == 3.0
    assert h.norm() != h.norm(dim=1).mean()  # the norm of the whole matrix is another thing


# ---------------------------------------------------------------------------------- saving


class LoopNet(nn.Module):
    """Another class with DynamicNet's parameter names, and a different forward."""

    def __init__(self, hidden=6):
        super().__init__()
        self.input_linear = nn.Linear(10, hidden)
        self.middle_linear = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, 3)

    def forward(self, x):
        return self.output_linear(F.relu(self.input_linear(x)))


@claim(LAB, "A `state_dict` holds parameters by **name**; it knows nothing about `forward`.")
def test_a_state_dict_is_names_to_tensors_and_loads_into_another_class(tmp_path):
    source = DynamicNet(10, 6, 3, seed=0)
    state = source.state_dict()
    assert list(state) == [
        f"{layer}.{p}"
        for layer in ("input_linear", "middle_linear", "output_linear")
        for p in ("weight", "bias")
    ]
    torch.save(state, tmp_path / "w.pt")
    other = LoopNet()
    other.load_state_dict(torch.load(tmp_path / "w.pt"))
    assert all(torch.equal(other.state_dict()[k], v) for k, v in state.items())


@claim(
    LAB,
    "A `state_dict` is just named tensors: it loads into any module with the same names and "
    "shapes.",
)
def test_summary_state_dict_needs_the_same_names_and_shapes():
    state = DynamicNet(10, 6, 3).state_dict()
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    LoopNet().load_state_dict(state)  # same names and shapes: loads
    with pytest.raises(RuntimeError, match="size mismatch"):
        LoopNet(hidden=7).load_state_dict(state)


def with_output_relu(model):
    model.output_linear = nn.Sequential(model.output_linear, nn.ReLU())
    return model


class BranchingNet(nn.Module):
    def __init__(self, d_in=784, hidden=100, wide=300, d_out=10, seed=None):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_wide = nn.Linear(hidden, wide)
        self.middle_back = nn.Linear(wide, hidden)
        self.middle_same = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, d_out)
        self.rng = random.Random(seed)


class OtherForward(BranchingNet):
    def forward(self, x, coin=None):
        return self.output_linear(self.input_linear(x))


@claim(
    LAB,
    "All three share `BranchingNet.__init__`, so for each seed they start from the same weights.",
)
def test_subclasses_sharing_init_start_from_the_same_weights_under_one_seed():
    made = []
    for make in (BranchingNet, OtherForward, lambda: with_output_relu(OtherForward())):
        torch.manual_seed(4)
        made.append(list(make().parameters()))
    for params in made[1:]:
        assert all(torch.equal(a, b) for a, b in zip(made[0], params, strict=True))


@claim(LAB, "(The original notebook put a ReLU there;")
def test_the_original_dynamicnet_put_a_relu_before_log_softmax():
    dynamic, _ = original_runs()
    assert "x = relu(self.output_linear(x))\n        return F.log_softmax(x, dim=1)" in dynamic


@claim(LAB, "it changes no layer. Neither implies the other.")
def test_eval_and_no_grad_are_independent():
    torch.manual_seed(0)
    layer, ones = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)), torch.ones(4, 8)
    with torch.no_grad():
        out = layer(ones)  # no graph, but still in training mode: dropout drops
    assert out.grad_fn is None and layer.training and (out == 0).any()
    out = layer.eval()(ones)  # eval mode, no no_grad: nothing dropped, and a graph recorded
    assert out.grad_fn is not None and torch.equal(out, layer[0](ones))
