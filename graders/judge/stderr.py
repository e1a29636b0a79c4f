"""Output to stderr never costs points in this course (a warning, a progress bar, logging):
only a failed check does. The judge (graders/judge/judge.py) replaces a test cell's outputs by its
verdict, so autograde and feedback never count stderr. ``nbgrader validate`` counts a graded
cell's stderr as a failure (as plain nbgrader's autograde does), and its list of steps is not
a setting: `teach_validate`, called by nbgrader_config.py, adds `NeverCosts` after its Execute
step, so that validate (the command, and the Validate button of a course that reads this
configuration) says what the grade will be.

Why not nbgrader's configuration: in nbgrader 0.9.6 nothing configurable reaches it.
``Validator.preprocessors`` is a List without ``config=True`` (traitlets ignores a setting of
it); the configurable hooks of its Execute step (nbclient's, which a ``c.Validator.Execute``
section would reach) cannot do it either: nbgrader's Execute defines ``on_cell_executed`` as a
method, which hides that trait; ``on_cell_complete`` runs before the cell's outputs are
reset; ``on_notebook_complete`` is called by nbclient's async setup only, not by the
``setup_kernel`` that nbconvert's ``preprocess`` uses. What is changed is the default of that
one trait, in a process that read this course's configuration (nbgrader's commands run in
the course folder, the formgrader of this course); the steps nbgrader lists stay first, in
their order."""

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
    """nbgrader's Validator runs `NeverCosts` after its own steps, and `Unmarked`
    (graders/judge/overwrite.py: a notebook autograde grades 0 for want of nbgrader's metadata
    fails, with the sentence of its feedback) (once per process)."""
    from nbgrader.validator import Validator

    from graders.judge.overwrite import Unmarked

    trait = Validator.class_traits()["preprocessors"]
    (steps,) = trait.default_args
    added = [step for step in (NeverCosts, Unmarked) if step not in steps]
    if added:
        trait.default_args = ([*steps, *added],)
