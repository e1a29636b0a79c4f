"""How nbgrader is run on the course (graders/config/nbgrader_cli.py), without running it: the
environment puts this Python's scripts first (nbgrader calls `alembic` by name), the in-process
PATH is put back even after an error, and the API factory loads the configuration once and
gives each call its own copy, the caller's changes and course folder merged in."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from graders.config import nbgrader_cli


def test_this_pythons_scripts_come_first_and_path_is_put_back(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    env = nbgrader_cli.nbgrader_env({"EXTRA": "1"})
    assert env["PATH"].split(os.pathsep)[:2] == [str(Path(sys.executable).parent), "/usr/bin"]
    assert env["EXTRA"] == "1" and "EXTRA" not in os.environ
    with pytest.raises(RuntimeError), nbgrader_cli.this_python_first():
        assert os.environ["PATH"] == env["PATH"]
        raise RuntimeError("nbgrader failed")
    assert os.environ["PATH"] == "/usr/bin"
    monkeypatch.delenv("PATH")
    with nbgrader_cli.this_python_first():
        assert os.environ["PATH"].startswith(str(Path(sys.executable).parent))
    assert "PATH" not in os.environ


def test_each_api_gets_its_own_copy_of_the_configuration(tmp_path):
    config = tmp_path / "nbgrader_config.py"
    config.write_text(
        "c = get_config()\nc.Execute.timeout = 120\nc.CourseDirectory.course_id = 'x'\n"
    )
    api_for = nbgrader_cli.make_api_factory(config)
    config.write_text("c = get_config()\nc.Execute.timeout = 1\n")  # loaded once: not read again
    first = api_for(str(tmp_path / "a"), {"Execute": {"timeout": 7}})
    second = api_for(str(tmp_path / "b"), {})
    assert first.config.Execute.timeout == 7 and second.config.Execute.timeout == 120
    assert first.coursedir.root == str(tmp_path / "a") and second.coursedir.root == str(
        tmp_path / "b"
    )
    assert second.config.CourseDirectory.course_id == "x"
