"""Shared fixtures: one scratch course with every lab built, made once per test session, and
its demo class and mistake catalogue graded once, locally. And how `make test` runs the tests
in parallel without making such a fixture twice (the end of this file).
"""

from __future__ import annotations

import json
import shutil
import tempfile
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


@pytest.fixture(scope="session")
def report_course(tmp_path_factory) -> Path:
    """The report's small graded class (tests/helpers.py), which tests/test_report.py reads
    and tests/clients/test_browser.py opens."""
    from helpers import report_class

    return report_class(tmp_path_factory)


# ---------------------------------------------------------------------- in parallel
# `make test` runs the tests on pytest-xdist workers (`-n auto --dist loadgroup`). A fixture
# made once per module or session is made once in each worker that needs it, and some take
# minutes (`graded`: 10 to 20), so the tests that share one must run in one worker. xdist's
# loadgroup groups tests by their `xdist_group` marks by renaming each test in the worker: it
# sets `item._nodeid` to nodeid + "@group". pytest 9.2 keeps a test's id elsewhere (`_id`),
# so with xdist 3.8 the marks are ignored without a word. So each worker writes down the
# groups of its tests (the same in every worker), and the controller's scheduler reads them
# before it hands out work.

GROUPS = "test_groups"  # workerinput's key: the folder the workers write the groups into
FOLDER = pytest.StashKey[Path]()


def shared_fixture_groups(items) -> dict[str, str]:
    """nodeid -> group, for each test that shares a fixture made once per module or session
    with other tests, directly or through a chain of them; a group is named after one of its
    fixtures. The other tests are in no group: they go wherever a worker is free."""
    joined: dict[str, str] = {}

    def group_of(key: str) -> str:
        while joined.setdefault(key, key) != key:
            key = joined[key]
        return key

    shared = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        shared[item.nodeid] = keys = [
            f"{fixture.baseid}::{name}"
            for name, definitions in (info.name2fixturedefs.items() if info else ())
            for fixture in definitions[-1:]  # the definition this test gets
            if fixture.scope != "function" and fixture.baseid  # pytest's own have no baseid
        ]
        for key in keys[1:]:
            joined[group_of(key)] = group_of(keys[0])
    return {nodeid: group_of(keys[0]) for nodeid, keys in shared.items() if keys}


def pytest_collection_modifyitems(config, items):
    """In a worker: write down the groups."""
    folder = getattr(config, "workerinput", {}).get(GROUPS)
    if folder:
        path = Path(folder) / f"{config.workerinput['workerid']}.json"
        part = path.with_suffix(".part")
        part.write_text(json.dumps(shared_fixture_groups(items)))
        part.replace(path)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """In the controller, for each worker it starts: where to write the groups."""
    if FOLDER not in node.config.stash:
        node.config.stash[FOLDER] = Path(tempfile.mkdtemp(prefix="pytest-groups-"))
    node.workerinput[GROUPS] = str(node.config.stash[FOLDER])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """In the controller: loadgroup, with the groups the workers wrote down."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        groups: dict[str, str] = {}

        def schedule(self):  # called once every worker has collected (and written)
            if not self.groups and FOLDER in config.stash:
                written = sorted(config.stash[FOLDER].glob("*.json"))
                self.groups = json.loads(written[0].read_text()) if written else {}
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return self.groups.get(nodeid, nodeid)

    return SharedFixtureScheduling(config, log)


def pytest_unconfigure(config):
    if FOLDER in config.stash:
        shutil.rmtree(config.stash[FOLDER], ignore_errors=True)
