"""Shared fixtures: one scratch course with every lab built, made once per test session, and
its demo class and mistake catalogue graded once, locally; the class report's small class.
How `make test` runs the tests in parallel without making such a fixture twice is
tests/xdist_groups.py; the `slow` marker (pyproject.toml) is `make test-fast`'s line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.build import build
from graders.course import LABS

pytest_plugins = ["xdist_groups"]  # tests/xdist_groups.py: the tests that share a fixture


@pytest.fixture(scope="session")
def course(tmp_path_factory) -> Path:
    """A scratch nbgrader course (source, release, gradebook) built from solutions/."""
    root = tmp_path_factory.mktemp("course")
    build(root=root, labs=LABS, release=root / "labs")
    return root


@pytest.fixture(scope="session")
def graded(course):
    """The demo class and the mistake catalogue of every lab, graded in one class run."""
    from graders.catalogue import write_packs
    from graders.demo import write_class
    from graders.grade import grade_class

    students = write_class(course, LABS, course / "labs")
    packs = [pack for lab in LABS for pack in write_packs(course, lab, course / "labs")]
    report = grade_class(course, labs=LABS, workers=2, quiet=True)
    return students, packs, report


@pytest.fixture(scope="session")
def report_course(tmp_path_factory) -> Path:
    """tests/test_report.py's small graded class, which tests/test_browser.py opens too."""
    from helpers import grade_report_class

    return grade_report_class(tmp_path_factory.mktemp("report-course"))


GRADED = {"course", "graded", "report_course"}  # a built course or a graded class: minutes


def pytest_collection_modifyitems(items):
    """A test that asks for one of these fixtures is slow, marked or not: `make test-fast`
    (`-m "not slow"`) never grades a class."""
    for item in items:
        if GRADED & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
