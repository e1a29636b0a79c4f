"""The host's side of the sandbox: what a kernel leaves on the machine and how it goes away.

* `MemoryGroups`: the cgroups (v2, else v1 memory+pids) that cap one kernel's processes
  together, made and removed per kernel;
* the kernel's private runtime folder: where it is made (`runtime_root`, short enough for
  Unix sockets) and, for a root grader, the small tmpfs mounted on it;
* `release_abandoned`: the processes, mount and cgroups of a kernel whose grader was killed
  outright (graders.grade.task finds such kernels by their scratch folder's unheld claim);
* `protections_missing`: what this machine cannot give, said once per class run.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import secrets
import signal
import subprocess
import tempfile
import time
from functools import cache
from pathlib import Path

from graders.sandbox.sandbox_argv import (
    FILE_CAP_BYTES,
    GROUP_MEMORY_BYTES,
    MEMORY_CAP_BYTES,
    PRIVATE_BYTES,
    PROCESS_CAP,
    available,
    kernel_side,
)

LOG = logging.getLogger("graders.sandbox")
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32


class MemoryGroups:
    """cgroups that cap one kernel's processes together (memory, tmpfs included, and count).

    cgroup v2 where the grader may make groups in its own part of the tree (systemd gives a
    user one), else cgroup v1's memory and pids controllers where writable (a root grader in
    most containers), else none: `why_not` says so."""

    def __init__(self) -> None:
        self.v2 = self._v2_base()
        self.v1 = None if self.v2 else self._v1_bases()
        self.why_not = None
        if not self.v2 and not self.v1:
            self.why_not = (
                "no writable cgroup (v2 or v1 memory+pids) for the kernels: memory is capped "
                f"per process ({MEMORY_CAP_BYTES // 2**30} GiB of address space) and "
                f"processes by RLIMIT_NPROC, not for all of a kernel's processes together"
            )

    @staticmethod
    def _v2_base() -> Path | None:
        try:
            own = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        line = next((row for row in own if row.startswith("0::")), None)
        if line is None:
            return None
        base = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
        controllers = base / "cgroup.controllers"
        try:
            if not {"memory", "pids"} <= set(controllers.read_text().split()):
                return None
            probe = base / f"grading-probe-{secrets.token_hex(4)}"
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return None
        return base

    @staticmethod
    def _v1_bases() -> dict[str, Path] | None:
        bases = {}
        for controller in ("memory", "pids"):
            root = Path("/sys/fs/cgroup") / controller
            try:
                probe = root / f"grading-probe-{secrets.token_hex(4)}"
                probe.mkdir()
                probe.rmdir()
            except OSError:
                return None
            bases[controller] = root
        return bases

    def make(self, name: str) -> list[Path]:
        """New groups for one kernel, limits set; [] when there are none to make."""
        made = []
        try:
            if self.v2:
                group = self.v2 / name
                group.mkdir()
                made.append(group)
                (group / "memory.max").write_text(str(GROUP_MEMORY_BYTES))
                (group / "memory.swap.max").write_text("0")
                (group / "pids.max").write_text(str(PROCESS_CAP))
            elif self.v1:
                memory = self.v1["memory"] / name
                memory.mkdir()
                made.append(memory)
                (memory / "memory.limit_in_bytes").write_text(str(GROUP_MEMORY_BYTES))
                swap = memory / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(GROUP_MEMORY_BYTES))
                pids = self.v1["pids"] / name
                pids.mkdir()
                made.append(pids)
                (pids / "pids.max").write_text(str(PROCESS_CAP))
        except OSError as error:
            LOG.warning("could not make the kernel's cgroup (%s): rlimits only", error)
            self.remove(made)
            return []
        return made

    def named(self, name: str) -> list[Path]:
        """The groups `make(name)` makes, whether or not they exist."""
        if self.v2:
            return [self.v2 / name]
        return [base / name for base in (self.v1 or {}).values()]

    @staticmethod
    def remove(groups: list[Path]) -> None:
        for group in groups:
            for _ in range(500):  # the last processes take a few ms to leave; 5 s at most
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


@cache
def memory_groups() -> MemoryGroups:
    return MemoryGroups()


def protections_missing() -> list[str]:
    """The protections this machine cannot give (said once per class run)."""
    missing = []
    if available():
        missing.append(available())
    if memory_groups().why_not:
        missing.append(memory_groups().why_not)
    if not kernel_side("grading_guard").supported():
        missing.append(
            f"no seccomp filter on {platform.machine()}: the keyring, user namespaces, mounts "
            "and ptrace are not refused in kernels "
            "(graders/kernel/grading_guard.py knows x86_64 and aarch64)"
        )
    if os.getuid() != 0:
        missing.append(
            "the kernel's runtime folder (its connection file and sockets) is a host folder "
            "with no size cap when the grader is not root; files there are capped at "
            f"{FILE_CAP_BYTES // 2**20} MB each"
        )
    return missing


def mount_tmpfs(folder: Path, uid: int) -> bool:
    """Make `folder` a small tmpfs owned by `uid` (root only); False where that fails."""
    options = f"size={PRIVATE_BYTES},mode=0700,uid={uid},gid={uid},nodev,nosuid,noexec"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    return done.returncode == 0


def seal_tmpfs(folder: Path) -> bool:
    """Make the tmpfs `mount_tmpfs` mounted on `folder` read-only, in every mount namespace
    it is bound in (root only); False where that fails."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    done = libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", flags, None)
    if done != 0:
        LOG.warning("could not make %s read-only: errno %s", folder, ctypes.get_errno())
    return done == 0


def _mount_points() -> set[bytes]:
    """Where something is mounted, as this process sees it (mountinfo escapes blanks)."""
    try:
        lines = Path("/proc/self/mountinfo").read_bytes().splitlines()
    except OSError:
        return set()
    unescape = re.compile(rb"\\([0-7]{3})")
    return {
        unescape.sub(lambda m: bytes([int(m[1], 8)]), line.split()[4])
        for line in lines
        if len(line.split()) > 4
    }


def _sandboxes_of(private: Path, groups: list[Path]) -> set[int]:
    """The processes of the kernel whose private folder is `private`: its bubblewrap (which
    binds that folder) or its stub (a forked kernel's, graders/sandbox/zygote.py), both
    naming it as an argument the kernel cannot change, and whatever is in its cgroups."""
    found = set()
    argument = b"\0" + os.fsencode(private) + b"\0"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if argument in b"\0" + fh.read():
                    found.add(int(pid))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    for group in groups:
        try:
            found.update(int(p) for p in (group / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            continue
    return found - {os.getpid()}


def release_abandoned(private: Path) -> None:
    """The host side of a kernel whose grader was killed outright (SIGKILL, a lost Dask
    worker) and so could not throw it away. bubblewrap's --die-with-parent usually ends the
    kernel with its grader, but not always (in tests, a grader killed just after starting
    its kernel left the inner sandbox running): so any process of it still running is
    killed, then its private tmpfs is unmounted and its cgroups removed. graders.grade.task finds
    such kernels; their folders it removes itself."""
    groups = memory_groups().named(f"grading-{private.name}")
    for pid in _sandboxes_of(private, groups):
        try:
            os.kill(pid, signal.SIGKILL)  # a sandbox's init: the whole sandbox ends with it
        except OSError:
            continue
    if os.fsencode(private) in _mount_points():
        subprocess.run(["umount", "-l", str(private)], capture_output=True)
    MemoryGroups.remove(groups)


# A Unix socket's path holds at most 107 bytes: the kernel's are <runtime>/kernel-<8>/kernel-<n>
SOCKET_PATH_MAX = 107
SOCKET_TAIL = len("/kernel-xxxxxxxx/kernel-99")


def _private_root() -> Path:
    """The folder under which each kernel gets its private runtime folder."""
    root = Path(tempfile.gettempdir()) / f"grading-kernels-{os.getuid()}"
    root.mkdir(mode=0o711, exist_ok=True)
    return root


def runtime_root(asked: str | None) -> Path:
    """The runtime folder asked for, where its path leaves room for the kernel's sockets
    (a deep temporary folder, as on some clusters, would not), else the machine's own."""
    for root in ([Path(asked)] if asked else []) + [_private_root()]:
        if len(os.fsencode(root)) + SOCKET_TAIL <= SOCKET_PATH_MAX:
            return root
    raise RuntimeError(
        f"the temporary folder {tempfile.gettempdir()} has too long a path for the kernel's "
        f"sockets (a socket's path holds {SOCKET_PATH_MAX} bytes): set TMPDIR to a shorter one"
    )
