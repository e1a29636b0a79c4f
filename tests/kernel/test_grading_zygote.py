"""The warm process's own helpers (graders/kernel/grading_zygote.py) that need no namespace:
the mount table it copies the kernel's root from, read as the kernel sees it (a blank or a
backslash in a mount point is escaped there); and what a forked kernel draws afresh, so that
no two kernels share the warm process's random state. Forking, mounts and privileges are
tested with real kernels in tests/sandbox/test_zygote.py."""

from __future__ import annotations

import io
import multiprocessing
import random

import torch

from graders.sandbox.sandbox_argv import kernel_side

zygote = kernel_side("grading_zygote")

MOUNTINFO = (
    b"22 1 0:21 / / rw,relatime - overlay overlay rw\n"
    b"35 22 0:30 / /data/my\\040course rw - tmpfs tmpfs rw\n"
    b"36 22 0:31 / /tmp/back\\134slash rw - tmpfs tmpfs rw\n"
    b"37 35 0:32 / /data/my\\040course rw - tmpfs tmpfs rw\n"
)


def test_the_mount_table_is_read_with_its_escapes_and_the_topmost_mount(monkeypatch):
    monkeypatch.setattr(zygote, "open", lambda *_: io.BytesIO(MOUNTINFO), raising=False)
    assert zygote._mount_points() == {
        "/": (22, 1),
        "/data/my course": (37, 35),  # mounted over: the topmost mount is the one seen
        "/tmp/back\\slash": (36, 22),
    }
    monkeypatch.undo()
    assert "/" in zygote._mount_points()  # this process's own table reads too


def test_a_forked_kernel_draws_its_random_state_afresh():
    key = multiprocessing.current_process().authkey
    try:
        random.seed(0)
        torch.manual_seed(0)
        zygote._reseed()
        assert random.random() != random.Random(0).random()
        assert torch.initial_seed() != 0
        assert multiprocessing.current_process().authkey != key
    finally:
        multiprocessing.current_process().authkey = key
        torch.seed()
