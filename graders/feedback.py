"""Feedback from a template: the student's notebook as text, and the grader's own sentences.

nbgrader's feedback is the autograded notebook as HTML. `TemplateFeedback` runs inside
``nbgrader generate_feedback`` (see nbgrader_config.py) and keeps of it only what the grader
trusts:

* the text and code of the notebook (the student's own answers, the released cells);
* each test cell's visible checks, with its hidden regions removed, and, as its only output,
  the judge's sentence (graders/verdict.py): passed, or which check failed and why;
* no output the kernel wrote, in any cell: a hostile kernel could print the hidden tests'
  code there (an event hook sees every cell's source), or HTML and script.

So a student reads which check failed and what to fix, never the hidden tests, the
reference's values or anything another notebook wrote.
"""

from __future__ import annotations

import nbformat
from jinja2 import BytecodeCache
from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.utils import is_grade, is_solution

from graders.verdict import VERDICT

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
            verdict = cell.metadata.get(VERDICT)
            verdict = verdict if isinstance(verdict, dict) else {}
            sentence = verdict.get("sentence")
            if not isinstance(sentence, str):
                sentence = "Not graded by this course's grader: see your instructor."
            name = "stdout" if verdict.get("kind") == "passed" else "stderr"
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


class CachedHTMLExporter(HTMLExporter):
    """nbconvert's HTMLExporter (generate_feedback's), its templates compiled once per
    process (graders.task names it as ``GenerateFeedback.exporter_class``): the same page."""

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = TEMPLATE_CODE
        return environment
