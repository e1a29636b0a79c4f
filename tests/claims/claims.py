"""Claims are code: each sentence a lab states about PyTorch is quoted by a test that checks it.

A claims test is an ordinary test decorated with `@claim(lab, sentence)`:

    @claim("lab06_dynamic_training", "LBFGS is the exception: it moves such a parameter")
    def test_lbfgs_moves_a_parameter_without_grad():
        ...  # asserts the behaviour against the installed torch

The decorator records the quote and makes the test fail first if the lab no longer says it
(so a reworded sentence cannot leave a stale test behind). The quote is matched against the
lab's text source with its comment marks and line breaks taken away (`lab_text`).

`tests/claims/test_claims_cover_the_labs.py` holds the rule that ties the prose to these tests:
every measured-looking figure in a lab's markdown (a decimal, a percentage, a figure with a
unit) stands in a sentence that some claims test quotes. A figure that is measured on the
student's machine belongs in a cell's output instead, where the student sees their own.
"""

from __future__ import annotations

import ast
import functools
import math
import random
import re
from pathlib import Path

from graders.build import includes

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions"

# (lab, normalised sentence) of every claims test imported so far
QUOTED: list[tuple[str, str]] = []


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@functools.cache
def lab_text(lab: str) -> str:
    """The whole text source of `lab` (its shared fragments included), comment marks and
    line breaks taken away."""
    source = includes.lab_text(lab)
    lines = (re.sub(r"^\s*# ?", "", line) for line in source.splitlines())
    return normalise(" ".join(lines))


def claim(lab: str, sentence: str):
    """Mark a test as the check of `sentence` in `lab`'s text."""
    quote = normalise(sentence)
    QUOTED.append((lab, quote))

    def decorate(test):
        @functools.wraps(test)
        def checked(*args, **kwargs):
            assert quote in lab_text(lab), (
                f"{lab} no longer says {quote!r}: update the quote of {test.__name__} "
                "to the lab's new sentence, and its assertions to what that sentence claims"
            )
            return test(*args, **kwargs)

        checked.claim = (lab, quote)
        return checked

    return decorate


def _lab_definitions(lab: str, name: str, names: dict):
    """Run the top-level class or function `name` of `lab`'s text source (with the lab's classes
    it derives from) in a namespace of torch, nn, F, random, math and `names`; return it."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    path = SOLUTIONS / lab / f"{lab}.py"
    text = path.read_text(encoding="utf-8")
    kinds = (ast.ClassDef, ast.FunctionDef)
    # the lab's own definitions, and those of the shared fragments it includes (from their
    # own file, so that tracebacks and compilers quote the right lines)
    code = [name for name, _ in includes.included(text) if name.endswith(".py")]
    sources = [(path, text)] + [(includes.COMMON / name, None) for name in code]
    found, origin = {}, {}
    for file, content in sources:
        for node in ast.parse(content or file.read_text(encoding="utf-8")).body:
            if isinstance(node, kinds):
                found[node.name], origin[node.name] = node, str(file)
    if name not in found:
        raise LookupError(f"{lab} defines no top-level class or function {name!r}")
    wanted, order = [name], []
    while wanted:
        node = found[wanted.pop()]
        order.insert(0, node)
        if isinstance(node, ast.ClassDef):
            wanted += [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in found]
    namespace = {"torch": torch, "nn": nn, "F": F, "random": random, "math": math, **names}
    for node in order:  # each from its file, so tracebacks and compilers quote its lines
        module = ast.Module(body=[node], type_ignores=[])
        exec(compile(module, origin[node.name], "exec"), namespace)
    return namespace[name]


def lab_class(lab: str, name: str, **names):
    """The class `name` as `lab`'s text source defines it (with the lab's classes it derives
    from), so that a claims test runs the lab's own code, not a copy that may drift. `names`:
    what else the class reads besides torch, nn, F, random and math."""
    return _lab_definitions(lab, name, names)


def lab_function(lab: str, name: str, **names):
    """The top-level function `name` as `lab`'s text source defines it (a solution included),
    for the same reason as lab_class. `names`: what else it reads besides torch, nn, F, random
    and math, say `checkpoint=checkpoint`."""
    return _lab_definitions(lab, name, names)


CHECK_HELPERS = {"check", "defined", "attempt", "CheckFailed", "_cell_frames"}


def released_cells(lab: str) -> dict[str, str]:
    """The source of each cell of `lab`'s release (labs/), by its grade_id."""
    import json

    cells = json.loads((REPO / "labs" / lab / f"{lab}.ipynb").read_text())["cells"]
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"]) for c in cells}


def check_says(lab: str, grade_id: str, codes: list[str], namespace: dict) -> str | None:
    """Run, in `namespace`, the release's check helpers (its setup cell's `check`, `defined`,
    `attempt`), then each of `codes` (earlier cells, the answer), then the released visible
    check `grade_id` (the cell a student runs: hidden tests stripped). The sentence of the
    check that stopped it, or None when every check passed."""
    cells = released_cells(lab)
    helpers = [
        node
        for node in ast.parse(cells["setup"]).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in CHECK_HELPERS
    ]
    exec(compile(ast.Module(body=helpers, type_ignores=[]), "setup", "exec"), namespace)
    for code in codes:
        exec(code, namespace)
    try:
        exec(cells[grade_id], namespace)
    except namespace["CheckFailed"] as failed:
        return str(failed)
    return None
