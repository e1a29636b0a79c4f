"""The cap on what a graded notebook may print (graders/sandbox/limits.py): text is cut per output
with a note of how much, rich data is dropped past a byte budget per cell, and a traceback keeps
its last 50 lines."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_output

from graders.sandbox.limits import CapOutputSize


def test_long_text_is_cut_and_large_data_dropped():
    cap = CapOutputSize(max_chars=100, max_data_bytes=1_000)
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [
        new_output("stream", name="stdout", text="x" * 250),
        new_output("display_data", data={"text/plain": "y" * 600}),
        new_output("display_data", data={"text/plain": "z" * 600}),  # over the cell's budget
        new_output("error", ename="E", evalue="e" * 150, traceback=[str(i) for i in range(80)]),
    ]
    cell, _ = cap.preprocess_cell(cell, {}, 0)
    text, kept, dropped, error = cell.outputs
    assert text.text.startswith("x" * 100) and "150 characters over the limit of 100" in text.text
    assert kept.data["text/plain"] == "y" * 600
    assert dropped.output_type == "stream" and "600-byte output was dropped" in dropped.text
    assert error.traceback == [str(i) for i in range(30, 80)] and len(error.evalue) < 200


def test_markdown_and_short_outputs_are_left_alone():
    cap = CapOutputSize()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [new_output("stream", name="stdout", text="short\n")]
    assert cap.preprocess_cell(cell, {}, 0)[0].outputs[0].text == "short\n"
    md = nbformat.v4.new_markdown_cell("# title")
    assert cap.preprocess_cell(md, {}, 0)[0] is md
