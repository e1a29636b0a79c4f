"""The rule that ties each lab's prose to the claims tests (tests/claims/claims.py).

Every measured-looking figure in a lab's markdown (a decimal, a percentage, a figure with a
unit of time, memory or speed-up) stands inside a sentence that a claims test quotes. A figure
that the student's own machine measures does not belong in prose at all: a cell prints it.
"""

from __future__ import annotations

import importlib
import re

import jupytext
import pytest
from claims import QUOTED, SOLUTIONS, normalise

from graders.build import includes
from graders.config.course import LABS

UNIT = (
    r"(?:%|\s?(?:s|ms|µs|us|ns|MiB|KiB|GiB|MB|KB|GB|kB|bytes)(?![\w-])"
    r"|\s?[x×](?![\w-])(?!\s*\d))"
)
# a decimal (not a version such as 2.14.1), or a figure with a unit; not a shape such as 3 x 3
FIGURE = re.compile(r"(?<![\w.])(?:\d[\d,]*(?:\.\d+)?" + UNIT + r"|\d+\.\d+(?![.\d]))")
CODE = re.compile(r"`[^`]*`|\$[^$]*\$")  # code and formulas: what they say, not what was run


def figures(lab: str) -> list[tuple[str, str, int]]:
    """(figure, its markdown cell's normalised text, where) for every figure in `lab`'s prose."""
    notebook = jupytext.reads(includes.lab_text(lab), fmt="py:percent")  # fragments too
    found = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            text = normalise(cell.source)
            prose = CODE.sub(lambda m: " " * len(m.group()), text)
            found += [(m.group(), text, m.start()) for m in FIGURE.finditer(prose)]
    return found


@pytest.fixture(scope="module")
def quoted() -> dict[str, list[str]]:
    for path in sorted(SOLUTIONS.parent.joinpath("tests", "claims").glob("test_*_claims.py")):
        importlib.import_module(path.stem)
    by_lab: dict[str, list[str]] = {}
    for lab, quote in QUOTED:
        by_lab.setdefault(lab, []).append(quote)
    return by_lab


@pytest.mark.parametrize("lab", LABS)
def test_every_figure_in_the_prose_is_claimed(lab, quoted):
    unclaimed = []
    for figure, text, at in figures(lab):
        spans = [
            (start, start + len(quote))
            for quote in quoted.get(lab, [])
            for start in [m.start() for m in re.finditer(re.escape(quote), text)]
        ]
        if not any(start <= at < end for start, end in spans):
            unclaimed.append(f"{figure!r} in '…{text[max(0, at - 70) : at + 30]}…'")
    assert not unclaimed, (
        f"{lab} states {len(unclaimed)} figure(s) that no claims test quotes: let a cell print "
        "each measured figure, or quote its sentence in tests/claims/ with a test that checks "
        "it on the installed torch:\n" + "\n".join(unclaimed)
    )


def test_the_rule_finds_figures():
    """The pattern catches what was pasted before and leaves shapes and counts alone."""
    text = "took 0.2045 s, 95.09% and 4.645 MiB, 3x faster; a 3 x 3 matrix, 2 points, lab 4, 0.5"
    text += " on torch 2.14.1"
    found = [m.group() for m in FIGURE.finditer(text)]
    assert found == ["0.2045 s", "95.09%", "4.645 MiB", "3x", "0.5"]
