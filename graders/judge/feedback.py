"""Feedback from a template: the student's notebook as text, and the grader's own sentences.

nbgrader's feedback is the autograded notebook as HTML. `TemplateFeedback` runs inside
``nbgrader generate_feedback`` (see nbgrader_config.py) and keeps of it only what the grader
trusts:

* the text and code of the notebook (the student's own answers, the released cells);
* each test cell's visible checks, with its hidden regions removed, and, as its only output,
  the judge's sentence (graders/formats/verdict.py): passed, or which check failed and why;
* no output the kernel wrote, in any cell: a hostile kernel could print the hidden tests'
  code there (an event hook sees every cell's source), or HTML and script.

So a student reads which check failed and what to fix, never the hidden tests, the
reference's values or anything another notebook wrote.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict

import nbformat
from jinja2 import BytecodeCache
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.utils import is_grade, is_solution

from graders.formats.verdict import VERDICT, Verdict

NOT_JUDGED = "Not graded by this course's grader: see your instructor."
NOTE = (
    "**Feedback.** Each check below says whether it passed, or what it found wrong. "
    "The outputs of your cells are not repeated here: run your notebook to see them."
)


class TemplateFeedback(ClearHiddenTests):
    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(NOTE))
        return nb, resources

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "code":
            return cell, resources
        if is_grade(cell) and not is_solution(cell):
            if self.begin_test_delimeter in cell.source:
                self._remove_hidden_test_region(cell)
            verdict = Verdict.from_metadata(cell.metadata.get(VERDICT), cell_index)
            sentence = verdict.sentence if verdict else NOT_JUDGED
            name = "stdout" if verdict and verdict.passed else "stderr"
            cell.outputs = [nbformat.v4.new_output("stream", name=name, text=sentence + "\n")]
        else:
            cell.outputs = []
        cell.execution_count = None
        return cell, resources


class _TemplateCode(BytecodeCache):
    """Jinja's compiled templates, kept in this process: a grading worker makes a new HTML
    exporter for every hand-in's feedback page, and each would compile the same nine
    templates again (about a fifth of generate_feedback's time). A template whose source
    changed is compiled again (Jinja checks its checksum)."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


TEMPLATE_CODE = _TemplateCode()


# A code cell's highlighted HTML, by (source, language, the lexer's options): most cells of a
# lab are the same in every hand-in (the released cells, the test cells), and Pygments took
# about a quarter of a feedback page's time. A result depends on its key alone, so what one
# hand-in's cells put here is what another's identical cells would get anyway. At most
# HIGHLIGHTS_MAX_CHARS held (the least recently used go first), whatever a class hands in;
# a source over HIGHLIGHT_MAX_CHARS is highlighted every time.
HIGHLIGHTS_MAX_CHARS = 32 * 2**20  # every released code cell of the course: about 5 MB
HIGHLIGHT_MAX_CHARS = 20_000


class _Highlights:
    """The kept results, least recently used first, and their size in characters (one lock:
    the formgrader may make two pages at once)."""

    def __init__(self) -> None:
        self.kept: OrderedDict[tuple, str] = OrderedDict()
        self.chars = 0
        self._lock = threading.Lock()

    def get(self, key: tuple, make) -> str:
        with self._lock:
            html = self.kept.get(key)
            if html is not None:
                self.kept.move_to_end(key)
                return html
        html = make()
        with self._lock:
            if key not in self.kept:
                self.kept[key] = html
                self.chars += len(key[0]) + len(html)
            while self.chars > HIGHLIGHTS_MAX_CHARS and self.kept:
                (source, *_), old = self.kept.popitem(last=False)
                self.chars -= len(source) + len(old)
        return html


HIGHLIGHTS = _Highlights()


class _RememberedHighlight:
    """nbconvert's highlight_code filter (`Highlight2HTML`), its results kept (HIGHLIGHTS)."""

    def __init__(self, highlight: Highlight2HTML) -> None:
        self._highlight = highlight
        self._options = json.dumps(highlight.extra_formatter_options, sort_keys=True)

    def __call__(self, source, language=None, metadata=None):
        magics = (metadata or {}).get("magics_language")
        if len(source) > HIGHLIGHT_MAX_CHARS or not isinstance(magics, (str, type(None))):
            return self._highlight(source, language, metadata)
        language = language or self._highlight.pygments_lexer
        key = (source, language, magics, self._options)
        return HIGHLIGHTS.get(key, lambda: self._highlight(source, language, metadata))


# What nbconvert's HTMLExporter changes after rendering, by parsing the whole page again with
# BeautifulSoup (about half of a feedback page's time): an <img> without alt text gets one,
# and JupyterLab's cell and output wrappers get a tabindex. The feedback template (nbgrader's,
# on nbconvert's classic one) has no such wrapper, and its images carry alt text; a page that
# may hold either (a student's own HTML) is made by nbconvert's exporter itself.
_IMG = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
_ALT = re.compile(r"\salt\s*=", re.IGNORECASE)
_LAB_WRAPPERS = ("jp-Cell-inputWrapper", "jp-OutputArea-output")


def needs_nbconvert_pass(html: str) -> bool:
    """Whether nbconvert's pass after rendering could change `html`."""
    return any(name in html for name in _LAB_WRAPPERS) or any(
        not _ALT.search(tag) for tag in _IMG.findall(html)
    )


class CachedHTMLExporter(HTMLExporter):
    """nbconvert's HTMLExporter (generate_feedback's; graders.grade.task names it as
    ``GenerateFeedback.exporter_class``), faster: its templates compiled once per process,
    each code cell's highlighting remembered, and nbconvert's pass over the rendered page
    (parse, add alt text and tabindex, write out again) made only where it could change the
    page. The page is nbconvert's, up to how BeautifulSoup writes out the same elements
    (tests/test_feedback.py)."""

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = TEMPLATE_CODE
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        given = resources
        # HTMLExporter.from_notebook_node, with the highlighting remembered and no soup
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        highlight = self.filters.get(
            "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)
        )
        if isinstance(highlight, Highlight2HTML):
            highlight = _RememberedHighlight(highlight)
        resources = self._init_resources(resources)
        data_type = WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources
        )
        self.register_filter("highlight_code", highlight)
        self.register_filter("filter_data_type", data_type)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        if needs_nbconvert_pass(html):
            return super().from_notebook_node(nb, given, **kw)
        return html, resources
