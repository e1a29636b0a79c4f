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
def graded(course, tmp_path_factory):
    """The demo class of every lab graded as `make demo` grades it (feedback included), then
    the mistake catalogue of every lab as `python -m graders.catalogue check` grades it
    (scores only: no feedback pages). Returns the students, the packs and one ClassRun
    holding both runs."""
    from helpers import reference_cache, share_references

    from graders.catalogue import write_packs
    from graders.demo import write_class
    from graders.grade import grade_class

    share_references(course, LABS, reference_cache(tmp_path_factory))
    students = write_class(course, LABS, course / "labs")
    demo = grade_class(course, labs=LABS, workers=2, quiet=True)
    packs = [pack for lab in LABS for pack in write_packs(course, lab, course / "labs")]
    names = sorted({pack.name for pack in packs})
    catalogue = grade_class(
        course, labs=LABS, workers=2, quiet=True, feedback=False, students=names
    )
    report = catalogue  # its scores and maxima are read back from the whole gradebook
    report.problems = demo.problems + catalogue.problems
    report.notes = demo.notes + catalogue.notes
    report.timings = {**demo.timings, **catalogue.timings}
    report.verdicts = {**demo.verdicts, **catalogue.verdicts}
    report.graded += demo.graded
    return students, packs, report


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
