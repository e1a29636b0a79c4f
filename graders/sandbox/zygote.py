"""Kernels forked from a warm process: the grader's side.

Every kernel started alone pays the same seconds before a hand-in's first line runs (the
interpreter, ipykernel, ``import torch``, torch._dynamo on the first optimizer step: about
3.6-4.4 s on a 2-core machine, `python benchmarks/kernel_start.py`), roughly 40% of a class
run's CPU. A root grader pays it once per grading process instead: `Zygote` starts a warm
process (graders/kernel/grading_zygote.py) inside a sandbox of the kernels' own allow-list
(graders/sandbox/sandbox_argv.py, `zygote_argv`), and `SandboxKernelManager`
(graders/sandbox/sandbox_kernel.py) asks it for a fork of each kernel, then starts a stub
(`STUB_SCRIPT`) that waits for it. The forked kernel gets, before its first cell, what
bubblewrap gives a kernel started alone: its own namespaces, tmpfs folders, cgroups, rlimits,
user and no capabilities (the warm process's docstring lists them);
graders/sandbox/sandbox.py's docstring says what a kernel sees.

The warm process holds no privilege of the host's: it runs in a user namespace of its own
(`_user_namespace`), as that namespace's root, which is an unprivileged host user drawn for
it (graders/sandbox/sandbox_argv.py, ZYGOTE_UIDS), never host root; the kernels' own host users are
the only others mapped there. Its capabilities (ZYGOTE_CAPS) are over its namespaces only:
files the host's root owns are not its own, and no process of that namespace, the warm
process included, may make another user namespace (its limit is 0 there). The stub of each
kernel (`STUB_SCRIPT`) is never host root: this grading process hands the
kernel's mounts and cgroups over itself (`Zygote.hand_over`), and starts the stub as the
warm process's host user, with no capability, holding only its end of the connection.

Only a root grader forks kernels (a kernel's own host user needs root to give), and only
when its private folder is under /tmp (the forked kernel makes that path in its own /tmp);
otherwise, or when the warm process cannot start (it says why, once, in the log), each
kernel is started alone in bubblewrap as before. ``c.SandboxedExecute.fork_kernels = False``
(the sandbox's settings: `fork`) turns it off.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from functools import cache
from pathlib import Path

from graders.sandbox.sandbox_argv import (
    FILE_CAP_BYTES,
    MEMORY_CAP_BYTES,
    PROCESS_CAP,
    SCRATCH,
    SHM_BYTES,
    WORKDIR_BYTES,
    ZYGOTE_UIDS,
    available,
    bound_under_tmp,
    draw_id,
    ipykernel_command,
    kernel_env,
    kernel_side,
    matplotlib_font_list,
    user_map,
    zygote_argv,
)

LOG = logging.getLogger("graders.sandbox")
STUB = "zygote_stub"  # the stub's name on its command line (its shell's $0)
# The stub of each forked kernel: the process nbgrader's kernel manager starts, watches and
# kills, as it would a kernel. It holds its end of the connection to the warm process (over
# which the grader has already asked for the kernel: `Zygote.hand_over`) and waits; it ends
# with the kernel's exit status when the kernel ends, and when it is killed the kernel is
# killed (the warm process sees the connection close). A shell, not Python: it runs as an
# unprivileged user, who may not reach this Python (under /root, say); it starts nothing.
STUB_SCRIPT = """IFS= read -r said
case $said in
-[0-9]|-[0-9][0-9]) exit $((128 - said)) ;;
[0-9]|[0-9][0-9]|[0-9][0-9][0-9]) exit $((said & 255)) ;;
esac
exit 1"""
PREFIX = "grading-zygote-"  # its folder (socket, log, font list) under the temporary folder
STARTUP_S = 120  # the warm process's imports take seconds; past this, kernels start alone


class Zygote:
    """One warm process (and its sandbox), for the kernels of this grading process that see
    the same read-only folders. It ends when this process ends (its lifeline closes)."""

    def __init__(self, readonly: tuple[Path, ...]) -> None:
        _remove_abandoned()
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIX))  # 0700, the grader's
        self._claim = open(self.folder / "claim", "w")  # noqa: SIM115 - held while it lives
        fcntl.flock(self._claim, fcntl.LOCK_EX)
        self.socket = str(self.folder / "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.socket)
        listener.listen(128)
        lifeline, self._lifeline = os.pipe()
        keep = json.dumps(bound_under_tmp(list(readonly)))
        command = [sys.executable, "-m", "grading_zygote", str(listener.fileno()), str(lifeline)]
        self.uid = draw_id(ZYGOTE_UIDS)
        userns = fonts = None
        log = open(self.folder / "log", "ab")  # noqa: SIM115 - what set-up of a kernel failed
        try:
            _stub_runs(self.uid)
            userns = _user_namespace(self.uid)
            fonts = _font_list()
            # its binds are staged over its folder, in a mount namespace of its own
            argv = zygote_argv([*command, keep], list(readonly), fonts, userns, self.folder)
            passed = [listener.fileno(), lifeline, userns]
            self.process = subprocess.Popen(
                argv,
                pass_fds=passed + ([fonts[1]] if fonts else []),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env={},
            )
        finally:
            log.close()
            for fd in (lifeline, userns, fonts[1] if fonts else None):
                if fd is not None:
                    os.close(fd)
            listener.close()  # its only holder is the warm process: if it ends, no one waits
        said = ""
        if select.select([self.process.stdout], [], [], STARTUP_S)[0]:  # its imports: seconds
            said = self.process.stdout.readline().decode(errors="replace").strip()
        else:
            self.process.kill()
            said = f"it did not start within {STARTUP_S} s"
        self.process.stdout.close()
        if said != "ready":
            self.close()
            raise RuntimeError(said or f"it ended with status {self.process.wait()}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self._lifeline is None:
            return
        os.close(self._lifeline)
        self._lifeline = None
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)
        self._claim.close()

    def hand_over(
        self,
        private: Path,
        connection_file: str,
        uid: int,
        threads: int | None,
        env: dict[str, str],
        files: list[Path],
        groups: list[Path],
    ) -> tuple[list[str], dict, socket.socket]:
        """Ask the warm process for one kernel, and give it what only the host's root can:
        the kernel's folders as detached mounts (its private runtime folder; each of the
        lab's files read-only) and its cgroups opened for joining, all as descriptors over
        the warm process's socket. This (root) grading process does it itself, so that the
        stub that stands for the kernel (`STUB_SCRIPT`) never runs as root:
        its command line, the Popen arguments that start it as the warm process's own
        unprivileged host user with no capability, and the connection (the stub's, once it
        has started: close this process's copy then, or the kernel ends with it)."""
        request = {
            "uid": uid,
            "connection_file": connection_file,
            "threads": threads,
            "env": kernel_env(threads, env),
            "scratch": list(SCRATCH),
            "sizes": {"tmp": WORKDIR_BYTES, "shm": SHM_BYTES, "workdir": WORKDIR_BYTES},
            "limits": {
                "RLIMIT_AS": MEMORY_CAP_BYTES,
                "RLIMIT_FSIZE": FILE_CAP_BYTES,
                "RLIMIT_NPROC": PROCESS_CAP,  # a host user of its own: its count alone
                "RLIMIT_CORE": 0,
            },
            "private": str(private),
            "private_fd": 0,
        }
        detached = kernel_side("grading_zygote").detached
        fds: list[int] = []
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not inherited but by the stub
        try:
            fds.append(detached(str(private), readonly=False, noexec=True))
            request["files"] = []
            for path in files:  # in the kernel's working folder, by name
                request["files"].append([path.name, len(fds)])
                fds.append(detached(str(path), readonly=True))
            request["groups"] = []
            for folder in groups:
                request["groups"].append(len(fds))
                fds.append(os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            conn.connect(self.socket)
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
        except BaseException:
            conn.close()
            raise
        finally:
            for fd in fds:
                os.close(fd)
        started_as = {"stdin": conn.fileno(), "user": self.uid, "group": self.uid,
                      "extra_groups": []}  # fmt: skip
        return _stub(str(private)), started_as, conn


def _stub(private: str) -> list[str]:
    """The stub's command line: no new privileges (it could not gain any: it execs nothing
    after its shell), its connection its standard input; `private`, the kernel's private
    folder, is an argument of its own so that graders/sandbox/sandbox_host.py finds it by
    its command line, as it finds bubblewrap's."""
    setpriv = shutil.which("setpriv") or "setpriv"
    return [setpriv, "--no-new-privs", "--", "/bin/sh", "-c", STUB_SCRIPT, STUB, private]


def _stub_runs(uid: int) -> None:
    """That the stub runs as the warm process's host user (`Zygote.hand_over`), its programs
    found: its trial reads a connection that says "0"."""
    said, given = socket.socketpair()
    said.sendall(b"0\n")
    said.close()
    try:
        tried = subprocess.run(_stub("-"), stdin=given, user=uid, group=uid, extra_groups=[],
                               capture_output=True, env={}, cwd="/", timeout=STARTUP_S)  # fmt: skip
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"its stub did not run: {error}") from None
    finally:
        given.close()
    if tried.returncode != 0:
        said = (tried.stderr.decode(errors="replace").strip().splitlines() or ["no word"])[-1]
        raise RuntimeError(f"its stub cannot run as an unprivileged user ({said})")


def _font_list() -> tuple[str, int] | None:
    """matplotlib's font list (graders/sandbox/sandbox_argv.py, `matplotlib_font_list`): its name
    and a descriptor to read it from, for the warm process's own working folder (it reads it as
    it imports matplotlib, and gives each kernel a copy of it)."""
    given = matplotlib_font_list()
    if given is None:
        return None
    name, data = given
    fd = os.memfd_create("fonts")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return name, fd


def _user_namespace(root: int) -> int:
    """A new user namespace whose root is host user `root` and whose other users are the
    kernels' (`user_map`), limited to no user namespace inside it: a descriptor of it. A
    process unshares it and waits; this (root) process writes its maps, and its root, as
    the warm process will be, sets its limit."""
    holder = subprocess.Popen(
        [shutil.which("unshare") or "unshare", "--user", "--", "/bin/sh", "-c",
         "echo made && read -r _"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={},
    )  # fmt: skip
    userns = None
    try:
        if holder.stdout.readline() != b"made\n":
            said = holder.stderr.read().decode(errors="replace").strip()
            raise RuntimeError(f"no user namespace of its own: {said[:200]}")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w") as fh:  # noqa: PTH123
                fh.write(user_map(root))
        userns = os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        limit = "echo 0 > /proc/sys/user/max_user_namespaces"
        capped = subprocess.run(
            [shutil.which("nsenter") or "nsenter", f"--user=/proc/self/fd/{userns}", "--",
             "/bin/sh", "-c", limit],
            pass_fds=(userns,), capture_output=True, env={},
        )  # fmt: skip
        if capped.returncode != 0:
            said = capped.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"its user namespaces not limited: {said[:200]}")
        return userns
    except BaseException:
        if userns is not None:
            os.close(userns)
        raise
    finally:
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()
        holder.stderr.close()


def _remove_abandoned() -> None:
    """The folders of warm processes whose grader was killed: their claim is held by no one
    (the system drops a dead process's lock). Links are removed, never followed."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
            continue
        try:
            with open(folder / "claim", "r+") as claim:  # noqa: PTH123
                fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (a live grader's), or not made yet: left alone
            continue
        shutil.rmtree(folder, ignore_errors=True)


_zygotes: dict[tuple, Zygote] = {}
_refused: dict[tuple, str] = {}
_lock = threading.Lock()


@atexit.register
def _close_all() -> None:
    """At this process's end (a killed one closes the lifelines all the same)."""
    for key, zygote in list(_zygotes.items()):
        if key[0] == os.getpid():
            zygote.close()


@cache
def _mounts_travel() -> str | None:
    """None where a mount can be handed to another namespace by descriptor (open_tree and
    mount_setattr: Linux 5.12 and later), else why not (said once)."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            os.close(kernel_side("grading_zygote").detached(folder, readonly=True))
        except OSError as error:
            LOG.warning("kernels start alone (slower): %s", error)
            return str(error)
    return None


def usable(private: Path, command: list[str], fork: bool = True) -> bool:
    """Whether this kernel can be forked: a root grader, bubblewrap, mounts that travel by
    descriptor, its private folder under /tmp, the ipykernel command nbgrader's kernelspec
    gives, and not switched off (`fork`: the sandbox's settings)."""
    return (
        fork
        and os.getuid() == 0
        and available() is None
        and Path("/tmp") in private.parents
        and ipykernel_command(command)
        and _mounts_travel() is None
    )


def _identity(folder: Path) -> tuple[int, int] | None:
    try:
        seen = folder.stat()
    except OSError:
        return None
    return seen.st_dev, seen.st_ino


def for_folders(readonly: list[Path]) -> Zygote | None:
    """This process's warm process for kernels that see `readonly`, started the first time;
    None where it cannot start (said once)."""
    # a folder made or replaced since a warm process started is not what that one binds: its
    # identity is in the key, so such a kernel gets a warm process that sees it as it is now
    folders = tuple(sorted(set(readonly)))
    key = (os.getpid(), folders, tuple(_identity(p) for p in folders))
    with _lock:
        zygote = _zygotes.get(key)
        if zygote is not None and zygote.alive():
            return zygote
        if key in _refused:
            return None
        if zygote is not None:
            LOG.warning("the warm kernel process ended (status %s): starting another",
                        zygote.process.poll())  # fmt: skip
            zygote.close()
        try:
            _zygotes[key] = Zygote(key[1])
        except (OSError, RuntimeError) as error:
            _refused[key] = str(error)
            LOG.warning("kernels start alone (slower): no warm process to fork them (%s)", error)
            return None
        return _zygotes[key]
