"""A cap on what a graded notebook may print: nbgrader's LimitOutput counts lines, so one
100 MB line, or a thousand large images, would still land in the gradebook's notebook and
the feedback. `CapOutputSize` runs after execution (see nbgrader_config.py)."""

from __future__ import annotations

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

NOTE = "\n... [output cut by the grader: {n:,} characters over the limit of {limit:,}]\n"


class CapOutputSize(NbGraderPreprocessor):
    max_chars = Integer(20_000, help="characters of text kept per output").tag(config=True)
    max_data_bytes = Integer(2_000_000, help="bytes of rich data kept per cell").tag(config=True)

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_chars:
            return text
        return text[: self.max_chars] + NOTE.format(
            n=len(text) - self.max_chars, limit=self.max_chars
        )

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        budget = self.max_data_bytes
        kept = []
        for output in cell.outputs:
            if output.output_type == "stream":
                output.text = self._cut(output.text)
            elif output.output_type == "error":
                output.evalue = self._cut(output.evalue)
                output.traceback = [self._cut(line) for line in output.traceback[-50:]]
            elif "data" in output:
                size = sum(len(str(v)) for v in output.data.values())
                if size > budget:
                    dropped = f"[a {size:,}-byte output was dropped by the grader]\n"
                    kept.append(new_output("stream", name="stdout", text=dropped))
                    continue
                budget -= size
            kept.append(output)
        cell.outputs = kept
        return cell, resources
