"""Shared fixtures: one scratch course with every lab built, made once per test session."""

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
