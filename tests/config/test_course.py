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


def test_the_data_root_is_an_nbgrader_setting_not_an_environment_variable(monkeypatch, tmp_path):
    """c.CourseData.root (documented with help=) names the data root; the grader prepares the
    data there and gives it to the kernels as their own $COURSE_DATA_ROOT. The grader's own
    environment names nothing (it used to be read from $COURSE_DATA_ROOT)."""
    from traitlets.config import Config

    from data import mnist
    from graders.config import course

    prepared = []
    monkeypatch.setattr(mnist, "prepare", lambda root: prepared.append(root))
    monkeypatch.setenv("COURSE_DATA_ROOT", str(tmp_path / "from-the-environment"))
    configured = course.configured_data_root(Config({"CourseData": {"root": str(tmp_path)}}))
    assert configured == tmp_path
    assert course.configured_data_root(Config()) == course.REPO / "data" / "cache"
    assert course.prepare_data(["lab05_dynamicnet"], configured) == {
        "COURSE_DATA_ROOT": str(tmp_path)
    }
    assert course.prepare_data(["lab01_graph"], configured) == {}  # no lab that reads data
    assert prepared == [tmp_path]
    monkeypatch.setattr(course, "REPO", tmp_path)  # a course whose nbgrader_config.py sets it
    (tmp_path / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseData.root = '{tmp_path / 'd'}'\n"
    )
    assert course.configured_data_root() == tmp_path / "d"
    assert "COURSE_DATA_ROOT" in course.CourseData.class_traits()["root"].help
