# Setup: works in JupyterLab, VS Code and Colab. Installs what is missing, and only that.
import importlib.util
import os
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

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)


# nbgrader sets NBGRADER_EXECUTION while it grades or validates: the labs' long runs are shorter.
GRADING = bool(os.environ.get("NBGRADER_EXECUTION"))


class CheckFailed(AssertionError):
    """Raised by the self-checks with a message that says what is wrong."""


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


class GraphPicture:
    """An SVG drawing of a graph; Jupyter, VS Code and Colab show it as a picture."""

    def __init__(self, svg, source):
        self.svg, self.source = svg, source

    def _repr_svg_(self):
        return self.svg

    def save(self, path):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.svg)

    def __repr__(self):
        return "<graph picture: display it in a notebook, or .save('graph.svg')>"


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


def draw(tensor, **options):
    """Draw the graph behind `tensor`: a picture (torchviz + Graphviz), else a text drawing."""
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
            graph = make_dot(tensor, **options)
            graph.node_attr["fontname"] = "Courier"  # a font graphviz-pure can measure too
            source = graph.source
            for program in _dot_programs():
                run = subprocess.run(
                    [program, "-Tsvg"], input=source.encode(), capture_output=True, timeout=60
                )
                if run.returncode == 0 and b"<svg" in run.stdout:
                    return GraphPicture(run.stdout.decode("utf-8", "replace"), source)
        except Exception as error:  # a drawing is never worth a traceback
            why = f"see the error: {type(error).__name__}: {str(error)[:80]}"
    try:
        print(graph_text(tensor, options.get("params")))
    except Exception as error:
        print(f"No drawing: {type(error).__name__}: {str(error)[:80]}")
    print(f"(A text drawing of the graph. For a picture: {why}.)")
    return None
