# @title Setup, run me first: installs what is missing, imports torch, defines check() and draw()
import base64
import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings

IN_COLAB = "google.colab" in sys.modules  # Colab imports it before the first cell runs


def install_missing(*packages):
    """pip-install those of `packages` that this Python cannot import (Colab lacks some).
    Never while nbgrader grades or validates: there a missing package is the grader's to fix."""
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if os.environ.get("NBGRADER_EXECUTION"):
        missing += [
            name for name in ("torch", "matplotlib") if importlib.util.find_spec(name) is None
        ]
        if missing:
            raise ModuleNotFoundError(
                f"This grading environment lacks {', '.join(missing)}: install "
                f"{'them' if len(missing) > 1 else 'it'} there "
                "(nothing is installed while grading)."
            )
    if missing:
        print("Installing", ", ".join(missing), "(once)...")
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--retries", "1", *missing]
        subprocess.run(pip, check=False)
        importlib.invalidate_caches()


install_missing("torchviz", "livelossplot", "tqdm")

import torch

# The torch versions this course is checked on, oldest and newest (pyproject.toml's range);
# the lab's first cell prints the version at hand.
TESTED_TORCH = ("2.10", "2.15")


def torch_range_note(version):
    """One sentence when torch `version` is outside TESTED_TORCH, else None."""
    have = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    low, high = (tuple(map(int, v.split("."))) for v in TESTED_TORCH)
    checked = f"the torch {TESTED_TORCH[0]} to {TESTED_TORCH[1]} these labs are checked on"
    if have < low:
        return (
            f"Note: torch {version} is older than {checked}: some printed messages and compiler "
            "results differ from what the text says, and a cell that needs a newer torch may "
            "fail; run the lab on, or install a newer torch."
        )
    if have > high:
        return (
            f"Note: torch {version} is newer than {checked}: a printed message or a compiler "
            "result may differ from what the text says."
        )
    return None


if torch_range_note(torch.__version__):
    print(torch_range_note(torch.__version__))

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)


# nbgrader sets NBGRADER_EXECUTION while it grades or validates: the labs' long runs are shorter.
GRADING = bool(os.environ.get("NBGRADER_EXECUTION"))


def _cell_frames(tb):
    """[("Cell In[7], line 4", function name)] for each frame of a traceback, outermost first:
    None for a frame outside the notebook's cells (all None outside IPython). IPython 8 and
    later number the cells (compile._filename_map); IPython 5 to 7 name a cell's code
    <ipython-input-7-...>, or ipykernel 6 a file in a folder ipykernel_<pid> (no number)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        shell = None
    cells = getattr(getattr(shell, "compile", None), "_filename_map", None)
    found = []
    while tb is not None:
        code, line = tb.tb_frame.f_code, tb.tb_lineno
        name = code.co_filename
        where = None
        if cells is not None and name in cells:
            where = f"Cell In[{cells[name]}], line {line}"
        elif cells is None and shell is not None:
            old = re.match(r"<ipython-input-(\d+)-", name)
            if old:
                where = f"Cell In[{old.group(1)}], line {line}"
            elif os.path.basename(os.path.dirname(name)).startswith("ipykernel_"):
                where = f"line {line} of a cell"
        found.append(None if where is None else (where, code.co_name))
        tb = tb.tb_next
    return found


class CheckFailed(AssertionError):
    """Raised by the self-checks with a message that says what is wrong. Jupyter shows that
    one sentence and the line of the check, not a traceback through `check`."""

    def _render_traceback_(self):
        cells = [frame for frame in _cell_frames(self.__traceback__) if frame]
        return [f"{type(self).__name__}: {self}" + (f" ({cells[0][0]})" if cells else "")]


class AnswerFailed(CheckFailed):
    """Raised by `your_code` when a demo stops at an error while it runs an exercise's answer."""


class your_code:
    """`with your_code("hvp"):` around a demo's lines that run an exercise's answer: an error
    there (a wrong answer) stops the cell with one sentence naming the answer and the error,
    not a traceback through the demo. An exercise not done yet, and a check, say their own."""

    def __init__(self, *names):
        self.names = names

    def __enter__(self):
        return self

    def __exit__(self, etype, error, tb):
        if etype is None or not issubclass(etype, Exception):
            return False
        if issubclass(etype, (NotImplementedError, CheckFailed)):
            return False
        first = (str(error).strip().splitlines() or [""])[0][:200]
        names = " and ".join(f"`{name}`" for name in self.names)
        raise AnswerFailed(
            f"this demo stopped at an error while it ran your {names} ({etype.__name__}: "
            f"{first}): its check above says what to fix; call it in a cell of your own to see "
            "the whole traceback."
        ) from None


def _not_done_yet(shell, etype, value, tb, tb_offset=None):
    """An exercise's NotImplementedError (raised in a notebook cell) as one sentence; any
    other, such as PyTorch's, with its whole traceback."""
    frames = _cell_frames(tb)
    if not frames or frames[-1] is None:
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    elif frames[-1][1] == "<module>":
        stb = [f"NotImplementedError: {value} ({frames[-1][0]})"]
    else:
        where, name = frames[-1]
        stb = [
            f"NotImplementedError: `{name}` is not written yet ({where}: {value}) Write it in "
            "its exercise cell and run that cell, then this one."
        ]
    shell._showtraceback(etype, value, stb)


try:  # in Jupyter: an exercise not done yet says so in one sentence (not outside IPython)
    from IPython import get_ipython

    get_ipython().set_custom_exc((NotImplementedError,), _not_done_yet)
except Exception:
    pass


def check(condition, message):
    """Stop with a readable message when a self-check fails."""
    if not condition:
        raise CheckFailed(message)


def defined(name):
    """Whether the notebook has run the cell that defines `name` (the checks say which to run)."""
    return name in globals()


def attempt(fn, *args, **kwargs):
    """(fn(*args, **kwargs), None), or (None, "the error, in one line") when it raises: the
    checks then say in words which call failed. NotImplementedError (an exercise not answered
    yet) is let through, so the check stops where the student has work left."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        raise
    except Exception as error:
        lines = str(error).strip().splitlines()
        return None, type(error).__name__ + (f": {lines[0][:200]}" if lines else "")


WIDEST_PT = 675  # 900 px: a picture no wider than a notebook's output area
SMALLEST_SCALE = 0.6  # shrunk more, a graph's 14 pt labels are under 11 px: too small to read


def fit_width(svg, widest=WIDEST_PT):
    """The SVG drawn at most `widest` points wide (its height in proportion): Graphviz gives
    the natural size, which for a big graph is wider than the output area."""
    size = re.search(r'<svg width="([0-9.]+)pt" height="([0-9.]+)pt"', svg)
    if not size or float(size.group(1)) <= widest:
        return svg
    width, height = float(size.group(1)), float(size.group(2))
    fitted = f'<svg width="{widest}pt" height="{height * widest / width:.0f}pt"'
    return svg[: size.start()] + fitted + svg[size.end() :]


def show_figure(fig, alt):
    """Show a matplotlib figure as a picture no wider than the output area, with `alt`, a text
    alternative in words, and close it (so that Jupyter does not show it twice)."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=min(100, 800 / fig.get_figwidth()))
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    text = html.escape(alt, quote=True)
    try:
        from IPython.display import HTML, display
    except ImportError:  # plain Python: no notebook to show it in
        return print(f"(a picture: {alt})")
    display(HTML(f'<img alt="{text}" title="{text}" src="data:image/png;base64,{data}">'))


class GraphPicture:
    """An SVG drawing of a graph, with a text alternative; Jupyter, VS Code and Colab show it
    as a picture."""

    def __init__(self, svg, source, alt="a graph"):
        self.svg, self.source, self.alt = fit_width(svg), source, alt

    def _repr_svg_(self):
        return self.svg

    def _repr_html_(self):  # an <img> can carry the text alternative; an SVG output cannot
        data = base64.b64encode(self.svg.encode("utf-8")).decode("ascii")
        alt = html.escape(self.alt, quote=True)
        return f'<img alt="{alt}" title="{alt}" src="data:image/svg+xml;base64,{data}">'

    def save(self, path):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.svg)

    def __repr__(self):
        return f"<graph picture of {self.alt}: display it in a notebook, or .save('graph.svg')>"


def graph_summary(tensor):
    """In words, for a picture's text alternative: how many nodes, of which operations."""
    roots = list(tensor) if isinstance(tensor, (tuple, list)) else [tensor]
    seen, todo, counts = set(), [getattr(t, "grad_fn", None) for t in roots], {}
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        counts[type(node).__name__] = counts.get(type(node).__name__, 0) + 1
        todo.extend(next_node for next_node, _ in node.next_functions)
    if not seen:
        return "a tensor with no graph"
    common = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
    named = ", ".join(f"{n} {name}" for name, n in common)
    more = ", ..." if len(counts) > len(common) else ""
    return f"the autograd graph: {len(seen)} nodes ({named}{more})"


def _dot_programs():
    """Graphviz's `dot`, then graphviz-pure (`pip install graphviz-pure`), where installed."""
    here = os.path.dirname(sys.executable)  # a virtual environment's bin/, maybe not on PATH
    found = [shutil.which("dot"), shutil.which("graphviz-pure")]
    found += [shutil.which(name, path=here) for name in ("dot", "graphviz-pure")]
    return list(dict.fromkeys(p for p in found if p))


def graph_text(tensor, params=None, limit=40):
    """The graph behind `tensor` as text: one numbered line per node, with its inputs."""
    names = {id(value): name for name, value in (params or {}).items()}
    roots = list(tensor) if isinstance(tensor, (tuple, list)) else [tensor]
    number, order, todo = {}, [], [getattr(t, "grad_fn", None) for t in roots]
    while todo:
        node = todo.pop(0)
        if node is None or node in number:
            continue
        number[node] = len(order) + 1
        order.append(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    lines = []
    for t in roots:
        head = getattr(t, "grad_fn", None)
        shape = tuple(getattr(t, "shape", ()))
        what = f"[{number[head]}]" if head is not None else "no grad_fn (a leaf, or no graph)"
        lines.append(f"tensor {shape} <- {what}")
    for node in order[:limit]:
        label = type(node).__name__
        leaf = getattr(node, "variable", None)
        if leaf is not None:
            name = names.get(id(leaf))
            label += f" (leaf {name + ' ' if name else ''}{tuple(leaf.shape)})"
        inputs = [f"[{number[n]}]" for n, _ in node.next_functions if n is not None]
        lines.append(f"  [{number[node]}] {label}" + (" <- " + ", ".join(inputs) if inputs else ""))
    if len(order) > limit:
        lines.append(f"  ... and {len(order) - limit} more nodes")
    return "\n".join(lines)


def _tensors(value):
    """The tensors in `value` (a tensor, or tuples and lists of them), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


class calls_of:
    """`with calls_of(model.cell) as calls:` records each call of a module (the tensors in and
    out, with a forward hook), so that `draw(t, calls=calls)` draws each call as one box."""

    def __init__(self, module, name="cell"):
        self.module, self.name, self.calls = module, name, []

    def __enter__(self):
        def hook(module, args, output):
            self.calls.append((_tensors(args), _tensors(output)))

        self.handle = self.module.register_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False


def calls_source(tensor, calls, params=None):
    """Graphviz source of the graph behind `tensor` with each call that `calls` (a calls_of)
    recorded drawn as one box: the nodes its outputs reach before its inputs or a leaf."""
    owner = {}
    for number, (inputs, outputs) in enumerate(calls.calls, 1):
        stop = {t.grad_fn for t in inputs if t.grad_fn is not None}
        todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node is None or node in stop or node in owner or hasattr(node, "variable"):
                continue
            owner[node] = number
            todo.extend(next_node for next_node, _ in node.next_functions)
    sizes = {}
    for number in owner.values():
        sizes[number] = sizes.get(number, 0) + 1
    names = {id(value): name for name, value in (params or {}).items()}
    roots = list(tensor) if isinstance(tensor, (tuple, list)) else [tensor]
    lines = [
        "digraph {",
        "  node [shape=box style=filled fillcolor=white fontname=Courier fontsize=12 height=0.2]",
    ]
    boxes, edges, walked = set(), set(), set()
    todo = [t.grad_fn for t in roots if t.grad_fn is not None]

    def key(node):
        return f"call{owner[node]}" if node in owner else f"n{id(node)}"

    while todo:
        node = todo.pop()
        if node in walked:
            continue
        walked.add(node)
        if key(node) not in boxes:
            boxes.add(key(node))
            leaf = getattr(node, "variable", None)
            if node in owner:
                label = f"{calls.name} call {owner[node]}\\n({sizes[owner[node]]} operations)"
                lines.append(f'  {key(node)} [label="{label}" fillcolor=moccasin]')
            elif leaf is not None:
                label = f"{names.get(id(leaf), '')}\\n{tuple(leaf.shape)}"
                lines.append(f'  {key(node)} [label="{label}" fillcolor=lightblue]')
            else:
                lines.append(f'  {key(node)} [label="{type(node).__name__}"]')
        for next_node, _ in node.next_functions:
            if next_node is None:
                continue
            todo.append(next_node)
            edge = (key(next_node), key(node))
            if edge[0] != edge[1] and edge not in edges:
                edges.add(edge)
                lines.append(f"  {edge[0]} -> {edge[1]}")
    for number, root in enumerate(roots):
        lines.append(f'  root{number} [label="{tuple(root.shape)}" fillcolor=darkolivegreen1]')
        if root.grad_fn is not None:
            lines.append(f"  {key(root.grad_fn)} -> root{number}")
    return "\n".join([*lines, "}"])


def _render(source):
    """The SVG that the first working dot program makes of Graphviz `source`, or None."""
    for program in _dot_programs():
        run = subprocess.run(
            [program, "-Tsvg"], input=source.encode(), capture_output=True, timeout=60
        )
        if run.returncode == 0 and b"<svg" in run.stdout:
            return run.stdout.decode("utf-8", "replace")
    return None


def _too_big(svg, widest=WIDEST_PT):
    """Whether the SVG, fitted to the output area, would be too small to read."""
    size = re.search(r'<svg width="([0-9.]+)pt"', svg)
    return bool(size) and float(size.group(1)) * SMALLEST_SCALE > widest


def draw(tensor, calls=None, **options):
    """Draw the graph behind `tensor`: a picture (torchviz + Graphviz), else a text drawing.
    With `calls` (a calls_of), each recorded call of its module is one box."""
    try:
        from torchviz import make_dot
    except ImportError as error:
        missing = getattr(error, "name", None) or "torchviz"
        why = (
            "`pip install setuptools` (torchviz imports distutils)"
            if missing == "distutils"
            else f"`pip install {missing}`"
        )
    except Exception as error:  # a broken torchviz install
        why = f"torchviz failed to import: {type(error).__name__}"
    else:
        why = "`pip install graphviz-pure`, or install Graphviz (`apt install graphviz`)"
        try:
            if calls is not None:
                source = calls_source(tensor, calls, options.get("params"))
                alt = (
                    f"{graph_summary(tensor)}, drawn with each of the {len(calls.calls)} "
                    f"calls of the {calls.name} as one box"
                )
            else:
                graph = make_dot(tensor, **options)
                graph.node_attr["fontname"] = "Courier"  # a font graphviz-pure can measure too
                source, alt = graph.source, graph_summary(tensor)
            svg = _render(source)
            if svg is not None and _too_big(svg):
                return print(
                    f"({alt}: too big a graph to read as a picture in the output area; draw a "
                    "smaller part of it.)"
                )
            if svg is not None:
                return GraphPicture(svg, source, alt)
        except Exception as error:  # a drawing is never worth a traceback
            why = f"see the error: {type(error).__name__}: {str(error)[:80]}"
    try:
        print(graph_text(tensor, options.get("params")))
    except Exception as error:
        print(f"No drawing: {type(error).__name__}: {str(error)[:80]}")
    print(f"(A text drawing of the graph. For a picture: {why}.)")
    return None
