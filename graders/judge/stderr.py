"""Output to stderr never costs points in this course (a warning, a progress bar, logging):
only a failed check does. The judge (graders/judge.py) replaces a test cell's outputs by its
verdict, so autograde and feedback never count stderr. ``nbgrader validate`` counts a graded
cell's stderr as a failure (as plain nbgrader's autograde does), and its list of steps is not
a setting: `teach_validate`, called by nbgrader_config.py, adds `NeverCosts` after its Execute
step, so that validate (the command, and the Validate button of a course that reads this
configuration) says what the grade will be."""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor
from nbgrader.utils import is_grade


class NeverCosts(Preprocessor):
    """Drops what graded cells wrote to stderr."""

    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") == "code" and is_grade(cell):
            cell.outputs = [
                o for o in cell.get("outputs", [])
                if not (o.get("output_type") == "stream" and o.get("name") == "stderr")
            ]  # fmt: skip
        return cell, resources


def teach_validate() -> None:
    """nbgrader's Validator runs `NeverCosts` after its own steps (once per process)."""
    from nbgrader.validator import Validator

    trait = Validator.class_traits()["preprocessors"]
    (steps,) = trait.default_args
    if NeverCosts not in steps:
        trait.default_args = ([*steps, NeverCosts],)
