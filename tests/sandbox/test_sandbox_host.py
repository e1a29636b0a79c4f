"""The host side of the sandbox (graders/sandbox/sandbox_host.py): the cgroups that cap one kernel's
processes together are made with their limits, and removed. (How a kernel's mount, cgroups
and processes go when it ends, or when its grader is killed: tests/test_sandbox.py.)

These run as root, as the grader does where it can make cgroups."""

from __future__ import annotations

import pytest

from graders.sandbox import sandbox_argv, sandbox_host


def test_the_memory_groups_set_their_limits():
    groups = sandbox_host.memory_groups()
    if groups.why_not:
        pytest.skip(groups.why_not)
    made = groups.make("grading-test-limits")
    try:
        assert made
        texts = {p.name: {f.name: f.read_text().strip() for f in p.iterdir() if f.is_file()
                          and f.name in ("memory.max", "memory.limit_in_bytes", "pids.max")}
                 for p in made}  # fmt: skip
        values = {v for group in texts.values() for v in group.values()}
        assert str(sandbox_argv.PROCESS_CAP) in values
        assert any(int(v) <= sandbox_argv.GROUP_MEMORY_BYTES for v in values if v.isdigit())
    finally:
        sandbox_host.MemoryGroups.remove(made)
    assert not any(p.exists() for p in made)
