"""Shared fixtures: one scratch course with every lab built, made once per test session, and
its demo class and mistake catalogue graded once, locally; the class report's small class.
How `make test` runs the tests in parallel without making such a fixture twice is
tests/xdist_groups.py; the `slow` marker (pyproject.toml) is `make test-fast`'s line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.build.build import build
from graders.config.course import LABS

pytest_plugins = ["xdist_groups"]  # tests/xdist_groups.py: the tests that share a fixture


@pytest.fixture(scope="session")
def course(tmp_path_factory) -> Path:
    """A scratch nbgrader course (source, release, gradebook) built from solutions/."""
    root = tmp_path_factory.mktemp("course")
    build(root=root, labs=LABS, release=root / "labs")
    return root


@pytest.fixture(scope="session")
def graded(course, tmp_path_factory):
    """The demo class and the mistake catalogue of every lab, graded in one class run as
    `make autograde` grades (feedback included): the demo students complete and blank by
    themselves, every other demo student and every catalogued answer folded into as few
    hand-ins as their answer cells allow (tests/helpers.py, `write_test_class`). Returns the
    students graded by themselves, the folded hand-ins and the ClassRun."""
    from helpers import reference_cache, share_references, write_test_class

    from graders.grade.grade import grade_class

    share_references(course, LABS, reference_cache(tmp_path_factory))
    alone, folded = [], []
    for lab in LABS:
        students, hand_ins = write_test_class(course, lab, course / "labs")
        alone += students
        folded += hand_ins
    run = grade_class(course, labs=LABS, workers=2, quiet=True)
    return alone, folded, run


@pytest.fixture(scope="session")
def report_course(tmp_path_factory) -> Path:
    """The report's small graded class (tests/helpers.py), which tests/test_report.py reads
    and tests/clients/test_browser.py opens."""
    from helpers import report_class

    return report_class(tmp_path_factory)


GRADED = {"course", "graded", "report_course"}  # a built course or a graded class: minutes
# Suites whose every test grades hand-ins or runs a real client (browser, Dask, nbgrader's
# commands, the formgrader) or a fresh virtual environment.
SLOW_SUITES = ("adversarial", "clients", "student/test_laptop.py")


def pytest_collection_modifyitems(config, items):
    """A test that asks for one of these fixtures, or lives in one of these suites, is slow,
    marked or not: `make test-fast` (`-m "not slow"`) never grades a class."""
    tests = Path(__file__).parent
    for item in items:
        where = (
            Path(item.path).relative_to(tests).as_posix()
            if tests in Path(item.path).parents
            else ""
        )
        slow = GRADED & set(getattr(item, "fixturenames", ())) or where.startswith(SLOW_SUITES)
        if slow and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
