"""Shared fixtures: one scratch course with every lab built, made once per test session, and
its demo class and mistake catalogue graded once, locally."""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.build import build
from graders.course import LABS


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
