"""The kernel keyring, which no namespace covers (graders/kernel/grading_guard.py): a grading
kernel, forked from the warm process or started alone in bubblewrap, can neither add, read
nor clear a key (add_key, keyctl: EPERM), and does not hold the grader's session keyring:
a key the grader keeps there is not even listed to it. Without this, a hand-in could leave
a key for a later one, or read or wipe the grader's.

The same filter refuses what a grading kernel has no use for and a hostile one would start
from: a user namespace (unshare, or clone with a CLONE_NEW* flag: the way around locked
mounts), setns, mounts, ptrace and reading another process's memory, bpf, perf_event_open,
io_uring... each one, called from a real kernel, answers EPERM (clone3 ENOSYS, so that the C
library falls back to clone), and the kernel still forks and starts threads."""

from __future__ import annotations

import ctypes
import json
import os
import platform

import pytest
from helpers import forked, printed_line, sandbox_client

from graders.sandbox import sandbox
from graders.sandbox.sandbox_argv import kernel_side

guard = kernel_side("grading_guard")
pytestmark = [
    pytest.mark.skipif(sandbox.available() is not None, reason="needs bubblewrap"),
    pytest.mark.skipif(not guard.supported(), reason=f"{platform.machine()}: no filter"),
    pytest.mark.timeout(300),
]
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
KEYCTL_GET_KEYRING_ID, KEYCTL_CLEAR = 0, 7

# what a hand-in tries: a key for a later kernel, the session keyring's id, clearing it
TRY_KEYS = """
import ctypes, errno, json
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def _call(*args):
    done = _libc.syscall(*args)
    return [done, errno.errorcode.get(ctypes.get_errno(), "") if done < 0 else ""]
print("KEYS " + json.dumps({
    "add_key": _call(ADD_KEY, b"user", b"for-a-later-kernel", b"PLANTED", 7, -4),
    "keyctl": _call(KEYCTL, 0, -3, 0),
    "clear": _call(KEYCTL, 7, -3),
    "listed": open("/proc/keys").read(),
}))
"""

# each refused call, with arguments no kernel would act on (-1: a bad descriptor, address or
# request) in case it were allowed; then clone with a new user namespace (and CLONE_THREAD
# without CLONE_SIGHAND, which the kernel itself refuses, so no process is ever made), clone3,
# and what a kernel must still do
TRY_CALLS = """
import ctypes, errno, json, os, threading
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def _errno(*args):
    done = _libc.syscall(*[ctypes.c_long(a) for a in args])
    return errno.errorcode.get(ctypes.get_errno(), "?") if done < 0 else "done"
_tried = {name: _errno(nr, *[-1] * 6) for name, nr in REFUSED.items()}
_tried["clone: a new user namespace"] = _errno(CLONE, 0x10000000 | 0x10000, 0, 0, 0, 0)
_tried["unshare: a new user namespace"] = _errno(UNSHARE, 0x10000000)
_tried["clone3"] = _errno(435, 0, 0)
_child = os.fork()
if _child == 0:
    os._exit(7)
_thread = threading.Thread(target=lambda: None)
_thread.start()
_thread.join()
print("CALLS " + json.dumps({"tried": _tried, "forked": os.waitpid(_child, 0)[1] >> 8}))
"""


def grader_session_key() -> str:
    """A key in a new session keyring of this process (the grader), like a login's token."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    _, add_key, _, keyctl = guard.SYSCALLS[platform.machine()]
    assert libc.syscall(keyctl, 1, None) >= 0  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
    name = f"grader-secret-{os.getpid()}"
    key = libc.syscall(add_key, b"user", name.encode(), b"TOKEN", 5, KEY_SPEC_SESSION_KEYRING)
    assert key >= 0, ctypes.get_errno()
    return name


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "alone"])
def test_a_kernel_has_no_keyring_nor_namespace_nor_mount_nor_ptrace(tmp_path, monkeypatch, fork):
    if fork and os.getuid() != 0:
        pytest.skip("only a root grader forks kernels")
    secret = grader_session_key()
    _, add_key, _, keyctl = guard.SYSCALLS[platform.machine()]
    code = TRY_KEYS.replace("ADD_KEY", str(add_key)).replace("KEYCTL", str(keyctl))
    machine = platform.machine()
    calls = TRY_CALLS.replace("REFUSED", repr(guard.refused(machine)))
    calls = calls.replace("CLONE", str(guard.CLONE[machine]))
    calls = calls.replace("UNSHARE", str(guard.REFUSED[machine]["unshare"]))
    client = sandbox_client(tmp_path, [code, calls], fork=fork)
    client.execute()
    assert forked(client) == fork
    tried = json.loads(printed_line(client.nb.cells[0], "KEYS"))
    for call in ("add_key", "keyctl", "clear"):
        assert tried[call] == [-1, "EPERM"], (call, tried[call])
    assert secret not in tried["listed"], "the kernel sees the grader's session keyring"
    calls = json.loads(printed_line(client.nb.cells[1], "CALLS"))
    assert calls["forked"] == 7  # fork, and threads, as before
    refused = {name: said for name, said in calls["tried"].items() if name != "clone3"}
    assert len(refused) >= 40 and set(refused.values()) == {"EPERM"}, refused
    assert calls["tried"]["clone3"] == "ENOSYS"
