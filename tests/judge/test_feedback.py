"""Feedback (graders/judge/feedback.py): the page is the template, the notebook's text and the
judge's sentences, never a kernel's outputs or a hidden test."""

from __future__ import annotations

import copy
import html
import importlib
import json
from pathlib import Path

import nbformat

from graders.config.course import LABS, REPO, lab_source
from graders.judge.feedback import TemplateFeedback


def hidden_lines(lab: str) -> list[str]:
    """Lines of the lab's hidden tests that appear nowhere in what students are given."""
    released = (REPO / "labs" / lab / f"{lab}.ipynb").read_text()
    lines, inside = [], False
    for line in lab_source(lab).read_text().splitlines():
        if "BEGIN HIDDEN TESTS" in line or "END HIDDEN TESTS" in line:
            inside = "BEGIN" in line
        elif inside and len(line.strip()) > 20 and json.dumps(line.strip())[1:-1] not in released:
            lines.append(line.strip())
    return lines


def test_feedback_never_shows_hidden_tests(course, graded):
    """Runs after the demo class was graded: no feedback page holds hidden test code."""
    pages = list((course / "feedback").glob("*/*/*.html"))
    assert pages, "no feedback was written"
    for page in pages:
        text = html.unescape(page.read_text())
        lab = page.parent.name
        assert "HIDDEN TESTS" not in text, page
        leaked = [line for line in hidden_lines(lab) if line in text]
        assert not leaked, f"{page} shows hidden test code: {leaked[:2]}"
    assert any(hidden_lines(lab) for lab in LABS), "the leak check has nothing to look for"


def test_feedback_is_the_template_not_the_kernels_outputs():
    """A test cell shows its visible checks and the judge's sentence; no cell shows what the
    kernel printed (an event hook could print hidden code there)."""
    source = "\n".join(
        [
            "### BEGIN HIDDEN TESTS",
            "def _helper(): pass",
            "### END HIDDEN TESTS",
            "_v = 1",
            "check(_v == 2, 'visible')",
            "### BEGIN HIDDEN TESTS",
            "from grader_observe import observe",
            "### END HIDDEN TESTS",
        ]
    )
    test = nbformat.v4.new_code_cell(source)
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1, "solution": False}
    test.metadata["verdict"] = {"kind": "visible", "sentence": "A visible check failed: visible"}
    test.outputs = [nbformat.v4.new_output("stream", name="stdout", text="HIDDEN CODE")]
    answer = nbformat.v4.new_code_cell("x = 1")
    answer.outputs = [nbformat.v4.new_output("stream", name="stdout", text="HIDDEN CODE")]
    nb = nbformat.v4.new_notebook(cells=[answer, test])
    nb, _ = TemplateFeedback().preprocess(nb, {})
    assert nb.cells[2].source == "_v = 1\ncheck(_v == 2, 'visible')"
    assert [o.text for o in nb.cells[2].outputs] == ["A visible check failed: visible\n"]
    assert nb.cells[1].outputs == []
    assert "HIDDEN CODE" not in json.dumps(nb)


def feedback_page(exporter_class, nb) -> str:
    """The feedback page of `nb` as nbgrader's generate_feedback makes it (its template and
    preprocessors), by `exporter_class`."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from traitlets.config import Config

    formgrader = Path(importlib.import_module("nbgrader").__file__).parent / "server_extensions"
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    config.HTMLExporter.extra_template_basedirs = [str(formgrader / "formgrader" / "templates")]
    css = formgrader / "formgrader" / "static" / "node_modules" / "bootstrap" / "dist" / "css"
    config.HTMLExporter.extra_template_paths = [str(css)]
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader.score = 0
    resources = {"nbgrader": {"notebook": "lab", "score": 0, "max_score": 1, "late_penalty": 0}}
    resources["config_dir"] = str(Path.home() / ".no-jupyter-config")  # no custom CSS
    nb, resources = TemplateFeedback().preprocess(nb, resources)
    nb, resources = CSSHTMLHeaderPreprocessor().preprocess(nb, resources)
    return exporter_class(config=config).from_notebook_node(nb, resources)[0]


def test_the_cached_exporter_writes_nbconverts_page_and_compiles_once():
    """graders.judge.feedback.CachedHTMLExporter (a class run's generate_feedback): nbconvert's
    HTMLExporter's page (once BeautifulSoup has written out its elements, as nbconvert's own
    last pass does), and a second exporter compiles no template. A page where that last pass
    changes something (an image without alt text) is nbconvert's own, byte for byte."""
    import jinja2
    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter

    from graders.judge.feedback import CachedHTMLExporter

    nb = nbformat.read(REPO / "labs" / LABS[0] / f"{LABS[0]}.ipynb", as_version=4)
    compiled = []
    original = jinja2.Environment.compile

    def counting(self, *args, **kwargs):
        compiled.append(args[1] if len(args) > 1 else kwargs.get("name"))
        return original(self, *args, **kwargs)

    jinja2.Environment.compile = counting
    try:
        plain = feedback_page(HTMLExporter, nb)
        assert compiled  # nbconvert's own exporter compiles its templates every time
        compiled.clear()
        first = feedback_page(CachedHTMLExporter, nb)
        compiled.clear()
        second = feedback_page(CachedHTMLExporter, nb)
    finally:
        jinja2.Environment.compile = original
    assert compiled == []
    assert first == second
    assert str(BeautifulSoup(first, features="html.parser")) == plain
    assert '<span class="kn">import</span>' in first  # the code cells are highlighted

    nb.cells.insert(1, nbformat.v4.new_markdown_cell('A diagram: <IMG src="graph.png">'))
    plain = feedback_page(HTMLExporter, nb)
    assert feedback_page(CachedHTMLExporter, nb) == plain
    assert 'alt="No description has been provided for this image"' in plain


def test_the_kept_highlighting_is_capped_and_is_what_pygments_gives(monkeypatch):
    """A class of long, all-different cells cannot make a grading worker keep more than the
    cap; what is kept for a source is its own highlighting, and an over-long cell is not kept."""
    from nbconvert.filters.highlight import Highlight2HTML

    from graders.judge import feedback

    monkeypatch.setattr(feedback, "HIGHLIGHTS", feedback._Highlights())
    monkeypatch.setattr(feedback, "HIGHLIGHTS_MAX_CHARS", 200_000)
    plain = Highlight2HTML(pygments_lexer="ipython3")
    kept = feedback._RememberedHighlight(Highlight2HTML(pygments_lexer="ipython3"))
    sources = [f"x_{i} = {i}\n" + "y = [1, 2, 3]  # a comment\n" * 60 for i in range(60)]
    for source in sources:
        assert kept(source) == plain(source)
        assert feedback.HIGHLIGHTS.chars <= 200_000
    assert 0 < len(feedback.HIGHLIGHTS.kept) < len(sources)
    assert kept(sources[-1]) == plain(sources[-1])  # kept, and still its own
    before = len(feedback.HIGHLIGHTS.kept)
    assert kept("z = 1\n" * 5_000) == plain("z = 1\n" * 5_000)
    assert len(feedback.HIGHLIGHTS.kept) == before  # over HIGHLIGHT_MAX_CHARS: not kept
