"""The adversarial suites share one graded hostile class (`graded`), graded with feedback,
that also holds the hand-ins under hostile names and the leaking notebooks (`named`: the same
run, seen by those names), and the built course they copy (`pristine`): each made once per
session, so tests/conftest.py keeps their tests on one xdist worker."""

from __future__ import annotations

import copy
from contextlib import contextmanager

import hostile_class
import pytest
from attacks_leaks import LEAK_HISTORY, LEAK_HOOKS, LEAK_THROUGH_THE_JUDGE
from hostile_class import (
    CELL_TIMEOUT,
    CSV_HOSTILE,
    DUE,
    FIRST,
    LAB,
    NAMES,
    SECRET,
    SECRET_NAME,
    complete_and_blank,
    course_copy,
    make_class,
    prepend,
    set_due_date,
    snapshot,
    write_notebook,
)

from graders.build.build import build
from graders.build.demo import write_class
from graders.grade.grade import grade_class
from graders.sandbox.build_reference import prepare_references


@contextmanager
def frozen():
    """Builds and demo classes read the frozen lab 2 while this lasts."""
    import graders.build.build
    import graders.build.demo

    patch = pytest.MonkeyPatch()
    source = lambda lab: hostile_class.FROZEN / lab / f"{lab}.py"  # noqa: E731
    patch.setattr(graders.build.build, "lab_source", source)
    patch.setattr(graders.build.demo, "SOLUTIONS", hostile_class.FROZEN)
    patch.setattr(hostile_class, "lab_source", source)
    try:
        yield
    finally:
        patch.undo()


@pytest.fixture(autouse=True)
def frozen_lab():
    """Every test of tests/adversarial/ reads the frozen lab 2 (the fixtures below do too)."""
    with frozen():
        yield


@pytest.fixture(scope="session")
def pristine(tmp_path_factory):
    """A built course (source, release, gradebook, reference records), copied by each run."""
    with frozen():
        root = tmp_path_factory.mktemp("pristine")
        build(root=root, labs=[LAB], release=root / "labs")
        prepare_references(root, [LAB], workers=2)
        return root


@pytest.fixture(scope="session")
def graded(pristine, tmp_path_factory):
    with frozen():
        root = course_copy(pristine, tmp_path_factory.mktemp("adversarial"))
        write_class(root, [LAB], root / "labs")  # the demo class too: the "other students"
        paths = {
            "gradebook": root / "gradebook.db",
            "other": root / "submitted" / "complete" / LAB / f"{LAB}.ipynb",
        }
        scores = make_class(root, paths)
        write_named(root)
        set_due_date(root, DUE)
        before = snapshot(root)
        mp = pytest.MonkeyPatch()
        mp.setenv(SECRET_NAME, SECRET)  # in the grader's own environment while it grades
        try:
            report = grade_class(root, labs=[LAB], workers=2, cell_timeout=CELL_TIMEOUT, quiet=True)
        finally:
            mp.undo()
        return root, scores, report, before


def write_named(root):
    """Hand-ins under hostile folder names (10 each, complete), a notebook that prints the
    hidden tests' code everywhere it can (10), and one that has the judge quote it (8)."""
    complete, _blank = complete_and_blank(root)
    for name in [*NAMES, CSV_HOSTILE]:
        write_notebook(root, name, copy.deepcopy(complete))
    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, LEAK_HOOKS)
    prepend(nb, "fresh_gradients", LEAK_HISTORY)
    write_notebook(root, "leaks_hidden_code", nb)
    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, LEAK_THROUGH_THE_JUDGE)
    write_notebook(root, "leaks_through_the_judge", nb)


@pytest.fixture(scope="session")
def named(graded):
    """The class graded with feedback, for the hand-ins `write_named` adds to it (one class
    run for both: a run of its own cost 46-49 s of CI)."""
    root, _scores, report, _before = graded
    return root, report
