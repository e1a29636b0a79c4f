"""Feedback that says which hidden test failed and why, without showing its code.

nbgrader's feedback is the autograded notebook as HTML, so hidden tests (restored into the
test cells at grading time) would be shown to the student, both in the cell and in the code
lines of a traceback. `HideHiddenTests` runs inside `nbgrader generate_feedback` (see
nbgrader_config.py): it removes the hidden regions from each test cell and reduces a failed
test cell's traceback to its last line (the error and its message), saying whether the
failure came from a visible check or from a hidden test.
"""

from __future__ import annotations

import re

from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.utils import is_grade

ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")


def hidden_lines(source: str, begin: str, end: str) -> set[int]:
    """1-based numbers of the lines in hidden regions, markers included (a test cell may have
    more than one: helpers other test cells need come first, before the visible checks)."""
    hidden, inside = set(), False
    for number, line in enumerate(source.split("\n"), 1):
        if begin in line:
            inside = True
        if inside:
            hidden.add(number)
        if end in line:
            inside = False
    return hidden


def failing_line(traceback: list[str]) -> int | None:
    """The line of the test cell itself where the error was raised (the first cell frame)."""
    for frame in traceback:
        match = CELL_LINE.search(ANSI.sub("", frame))
        if match:
            return int(match.group(1))
    return None


class HideHiddenTests(ClearHiddenTests):
    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "code" or not is_grade(cell):
            return cell, resources
        hidden = hidden_lines(cell.source, self.begin_test_delimeter, self.end_test_delimeter)
        if hidden:
            self._remove_hidden_test_region(cell)
        for output in cell.get("outputs", []):
            if output.output_type != "error":
                continue
            line = failing_line(output.get("traceback", []))
            where = "a hidden test" if line in hidden else "a visible check"
            message = f"{output.ename}: {output.evalue}" if output.evalue else output.ename
            output.traceback = [f"This part failed in {where}.", message]
        return cell, resources
