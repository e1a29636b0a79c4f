"""How `make test` runs the tests in parallel without making a shared fixture twice: a
pytest-xdist scheduler, loaded by tests/conftest.py (`pytest_plugins`).

A fixture made once per module or session is made once in each worker that needs it, and
some take minutes (conftest's `graded` grades a class of every lab), so the tests that share
one must run in one worker. xdist's loadgroup groups tests by their `xdist_group` marks by
renaming each test in the worker: it sets `item._nodeid` to nodeid + "@group". pytest 9.2
keeps a test's id elsewhere (`_id`), so with xdist 3.8 the marks are ignored without a word.
So each worker writes down the groups of its tests (the same in every worker), and the
controller's scheduler reads them before it hands out work.

The order the work is handed out in: the groups and tests marked `slow` first, the biggest
group first, then the rest, which fills in around them. A long test handed out last would
run alone at the end while the other worker waits.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

GROUPS = "test_groups"  # workerinput's key: the folder the workers write the groups into
FOLDER = pytest.StashKey[Path]()
SLOW = "slow"  # the marker of the tests that grade a class or run a real client


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


@pytest.hookimpl(trylast=True)  # after the conftests have marked the tests
def pytest_collection_modifyitems(config, items):
    """In a worker: write down the groups, and which tests are slow."""
    folder = getattr(config, "workerinput", {}).get(GROUPS)
    if folder:
        written = {
            "groups": shared_fixture_groups(items),
            "slow": [item.nodeid for item in items if item.get_closest_marker(SLOW)],
        }
        path = Path(folder) / f"{config.workerinput['workerid']}.json"
        part = path.with_suffix(".part")
        part.write_text(json.dumps(written))
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
        slow: set[str] = set()

        def schedule(self):  # called once every worker has collected (and written)
            if not self.groups and FOLDER in config.stash:
                written = sorted(config.stash[FOLDER].glob("*.json"))
                if written:
                    found = json.loads(written[0].read_text())
                    self.groups, self.slow = found["groups"], set(found["slow"])
            super().schedule()

        def _assign_work_unit(self, node):
            """Before the first unit is handed out: the groups holding a slow test first,
            the biggest first (xdist's order puts the biggest group first, slow or not)."""
            if not getattr(self, "ordered", False):
                slow = {self._split_scope(nodeid) for nodeid in self.slow}
                queue = sorted(
                    self.workqueue.items(), key=lambda unit: (unit[0] not in slow, -len(unit[1]))
                )
                self.workqueue.clear()
                self.workqueue.update(queue)
                self.ordered = True
            super()._assign_work_unit(node)

        def _split_scope(self, nodeid: str) -> str:
            return self.groups.get(nodeid, nodeid)

    return SharedFixtureScheduling(config, log)


def pytest_unconfigure(config):
    if FOLDER in config.stash:
        shutil.rmtree(config.stash[FOLDER], ignore_errors=True)
