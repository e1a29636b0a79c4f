"""A class run's inputs (graders/grade/inputs.py): the hand-ins are graded longest lab first."""

from __future__ import annotations

import json

from graders.config.course import LABS


def test_labs_whose_solution_ran_longest_are_graded_first(course, graded, tmp_path):
    """`make build` times each lab's solution run; a class run starts with the longest labs,
    so it does not end on one long notebook while the other workers wait."""
    from graders.grade.inputs import longest_first
    from graders.grade.intake import HandIn

    for lab in LABS:
        saved = json.loads((course / "build" / "reference" / f"{lab}.json").read_text())
        assert saved["seconds"] > 0, lab
    reference = tmp_path / "build" / "reference"
    reference.mkdir(parents=True)
    for lab, seconds in (("short", 2.0), ("long", 9.5), ("middle", 4.0)):
        (reference / f"{lab}.json").write_text(json.dumps({"seconds": seconds}))
    (reference / "damaged.json").write_text("{not json")
    labs = ("short", "damaged", "long", "middle")
    found = [HandIn(student, lab, b"") for student in ("a", "b") for lab in labs]
    order = [(h.student, h.lab) for h in longest_first(found, tmp_path)]
    expected = ["long", "middle", "short", "damaged"]  # a lab never timed: last, as found
    assert order == [(student, lab) for lab in expected for student in ("a", "b")]
