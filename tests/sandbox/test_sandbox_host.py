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


# what shadow's useradd hands out as subordinate ids (login.defs' defaults), and systemd's
# containers' range: on a typical server, rootless containers' users own ids in them
SUBORDINATE_DEFAULTS = range(100_000, 600_100_001)
SYSTEMD_CONTAINERS = range(524_288, 1_879_048_192)


def test_kernel_and_warm_process_ids_are_no_one_elses(tmp_path, monkeypatch):
    """A kernel's host user, and the warm process's, never own what a host user's rootless
    containers or an account own: the ranges lie past the ones handed out by default, and
    what this machine hands out all the same (/etc/subuid, /etc/subgid, its users and
    groups) is never drawn, nor mapped into a warm process's namespace."""
    ranges = (sandbox_argv.KERNEL_UIDS, sandbox_argv.ZYGOTE_UIDS)
    for ids in ranges:
        for taken in (SUBORDINATE_DEFAULTS, SYSTEMD_CONTAINERS):
            assert ids.start >= taken.stop or ids.stop <= taken.start, (ids, taken)
        assert ids.stop <= 2**31  # ids past it are negative to some tools
    assert sandbox_argv.KERNEL_UIDS.stop <= sandbox_argv.ZYGOTE_UIDS.start
    # a machine whose rootless containers hold most of both ranges, and an account in them
    kernels, warm = (ids.start for ids in ranges)
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text(f"alice:{kernels}:{len(ranges[0]) - 7}\nnot a line\nbob:{warm}:1000\n")
    subgid.write_text(f"alice:{ranges[0].stop - 3}:100\n")
    monkeypatch.setattr(sandbox_argv, "SUBID_FILES", (str(subuid), str(subgid)))
    monkeypatch.setattr("pwd.getpwall", lambda: [type("U", (), {"pw_uid": warm + 1000})])
    sandbox_argv.taken_ids.cache_clear()
    try:
        kernel_free = {kernels + len(ranges[0]) - n for n in (7, 6, 5, 4)}
        drawn = {sandbox_argv.draw_id(sandbox_argv.KERNEL_UIDS) for _ in range(400)}
        assert drawn == kernel_free
        assert all(sandbox_argv.draw_id(sandbox_argv.ZYGOTE_UIDS) >= warm + 1001 for _ in range(50))
        lines = sandbox_argv.user_map(warm + 5000).splitlines()
        assert lines == [f"0 {warm + 5000} 1", f"{min(kernel_free)} {min(kernel_free)} 4"]
        # every id of the range held: no kernel is started as someone else
        subuid.write_text(f"alice:{kernels}:{len(ranges[0])}\n")
        sandbox_argv.taken_ids.cache_clear()
        with pytest.raises(RuntimeError, match="no free host id"):
            sandbox_argv.draw_id(sandbox_argv.KERNEL_UIDS)
    finally:
        sandbox_argv.taken_ids.cache_clear()  # the machine's own, for the tests after
