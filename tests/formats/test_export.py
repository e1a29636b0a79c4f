"""grades.csv (graders/formats/export.py): a class run exports it in its own process
(`export_grades`), byte for byte what `nbgrader export` writes with the course's
configuration, odd student names included."""

from __future__ import annotations

from datetime import datetime

import pytest

from graders.config.course import REPO
from graders.config.nbgrader_cli import nbgrader
from graders.formats.export import export_grades


@pytest.mark.filterwarnings("ignore:.*not in session")  # nbgrader's add_submission
def test_the_export_in_process_is_nbgraders_own(tmp_path):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", "dynamic-graphs") as gb:
        gb.add_assignment("lab_a", duedate=datetime(2026, 1, 2, 3, 4))
        gb.add_assignment("lab_b")
        for name in ("ada", 'comma, "quote"', "line\nbreak"):
            gb.add_student(name, first_name="F", last_name=name.upper())
        gb.add_submission("lab_a", "ada", timestamp=datetime(2026, 1, 2, 5, 0))
        gb.add_submission("lab_b", 'comma, "quote"')
    result = nbgrader("export", f"--to={tmp_path / 'cli.csv'}", root=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    export_grades(tmp_path, tmp_path / "here.csv", REPO / "nbgrader_config.py")
    expected = (tmp_path / "cli.csv").read_bytes()
    assert expected.count(b"\n") > 6  # a header and six rows, one with a line break in it
    assert (tmp_path / "here.csv").read_bytes() == expected
