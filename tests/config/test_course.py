"""Where things are (graders/config/course.py): the labs are the text sources under solutions/
in the course's order, an instructor's assignment is a folder holding a notebook, and a name
that is not a lab is refused in one line that lists the labs."""

from __future__ import annotations

from graders.config.course import (
    LABS,
    SOLUTIONS,
    lab_source,
    notebooks,
    own_assignments,
    unknown_labs,
)


def test_the_labs_are_the_text_sources_in_order():
    assert LABS == sorted(LABS) and len(LABS) >= 11
    assert all(lab_source(lab) == SOLUTIONS / lab / f"{lab}.py" for lab in LABS)
    assert all(lab_source(lab).is_file() for lab in LABS)


def test_an_assignment_is_a_folder_holding_a_notebook(tmp_path):
    assert own_assignments(tmp_path / "missing") == []
    for name in ("quiz", "ps1", ".hidden", "empty"):
        (tmp_path / name).mkdir()
    (tmp_path / "quiz" / "quiz.ipynb").write_text("{}")
    (tmp_path / "ps1" / "part2.ipynb").write_text("{}")
    (tmp_path / "ps1" / "part1.ipynb").write_text("{}")
    (tmp_path / "ps1" / "data.csv").write_text("1")
    (tmp_path / ".hidden" / "x.ipynb").write_text("{}")
    (tmp_path / "loose.ipynb").write_text("{}")
    assert own_assignments(tmp_path) == ["ps1", "quiz"]
    assert notebooks(tmp_path / "ps1") == ["part1", "part2"]
    assert notebooks(tmp_path / "missing") == []


def test_a_name_that_is_not_a_lab_is_refused_in_one_line():
    assert unknown_labs(LABS[:2]) is None
    said = unknown_labs([LABS[0], "lab99_nothing", "lab00_none"])
    assert said == f"no such lab: lab00_none, lab99_nothing (labs: {', '.join(LABS)})"
