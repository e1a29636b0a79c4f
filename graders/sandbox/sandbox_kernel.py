"""nbgrader's kernel manager for the grading sandbox (graders/sandbox/sandbox.py says what the
sandbox allows): `SandboxKernelManager` starts each notebook's kernel in a sandbox of its own
(forked from the warm process, graders/sandbox/zygote.py, or alone in bubblewrap,
graders/sandbox/sandbox_argv.py), watches it against the notebook's budget, and throws its host
side away (graders/sandbox/sandbox_host.py) when it is gone. `Settings` is what the grader tells
the sandbox about one notebook; `write_kernelspec` the kernelspec the grader's scratch course
uses."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TypedDict

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from traitlets import Dict, default

from graders.formats import events, timings
from graders.formats.timings import Phase
from graders.sandbox import sandbox_host, zygote
from graders.sandbox.sandbox_argv import (
    KERNEL_THREADS,
    KERNEL_UIDS,
    draw_id,
    kernel_argv,
    matplotlib_font_list,
)

KILL_GRACE_S = 60  # a kernel still running this long after its notebook's budget is killed
SOCKETS_WAIT_S = 120  # the longest a kernel may take to make its sockets (nbclient waits 60 s)


class Settings(TypedDict, total=False):
    """What the grader (graders.grade.task) tells the sandbox about one notebook; all optional."""

    runtime: str  # folder for the kernels' private runtime folders
    readonly: list[str]  # host folders the kernel may read (the course data)
    files: list[str]  # read-only files put beside the notebook (a lab's data)
    env: dict[str, str]  # variables added to the kernel's environment
    threads: int  # torch threads (default KERNEL_THREADS)
    budget_s: float  # the whole notebook's budget: flat, instead of the per-lab budgets
    flat: bool  # the per-cell timeout and `budget_s` as given, not the per-lab budgets
    events: str  # file: a kernel killed over its budget is written here
    timings: str  # file: the seconds each kernel took to start are written here
    kernelspecs: str  # folder of kernelspecs found before the environment's (write_kernelspec)
    fork: bool  # may the kernel be forked from the warm process (SandboxedExecute.fork_kernels)


class SandboxKernelManager(AsyncKernelManager):
    """Starts every kernel in a sandbox of its own.

    The private folder holds the connection file and the Unix sockets; it is made fresh for
    this kernel (an unguessable name) and removed after it. The working folder is a tmpfs
    inside the sandbox. A kernel still running after the whole-notebook budget is killed,
    and the kill is written to the events file so the grader can say why.
    """

    sandbox = Dict(help="a Settings (graders.grade.task), given by SandboxedExecute").tag(
        config=True
    )

    @default("kernel_spec_manager")
    def _kernelspecs_of_the_settings(self) -> KernelSpecManager:
        """The environment's kernelspecs, after the folder the settings name (`kernelspecs`):
        how the grader's scratch course gives its own, without JUPYTER_PATH."""
        manager = KernelSpecManager(data_dir=self.data_dir)
        if self.sandbox.get("kernelspecs"):
            manager.kernel_dirs = [self.sandbox["kernelspecs"], *manager.kernel_dirs]
        return manager

    _watchdog: threading.Timer | None = None
    _private: Path | None = None
    _groups: list[Path] = []
    _handed: socket.socket | None = None  # a forked kernel's connection, until its stub has it

    async def _async_pre_start_kernel(self, **kw):
        self._start_clock = time.monotonic()
        runtime = sandbox_host.runtime_root(self.sandbox.get("runtime"))
        private = Path(tempfile.mkdtemp(prefix="kernel-", dir=runtime))
        self._private = private
        uid = None
        self._mounted = False
        if os.getuid() == 0:  # a host user of its own, that owns nothing
            uid = draw_id(KERNEL_UIDS)
            self._mounted = sandbox_host.mount_tmpfs(
                private, uid
            )  # the one host folder it writes: capped
            os.chown(private, uid, uid)
        private.chmod(0o700)
        self.transport, self.ip = "ipc", str(private / "kernel")  # sockets cross namespaces
        self.connection_file = str(private / "connection.json")
        command, kw = await super()._async_pre_start_kernel(**kw)
        # a signal would end bubblewrap, not interrupt the cell: interrupts go by message,
        # whichever kernelspec nbgrader found (plain `nbgrader autograde` uses the default)
        self.kernel_spec.interrupt_mode = "message"
        if uid is not None:
            os.chown(self.connection_file, uid, uid)
        self._groups = sandbox_host.memory_groups().make(f"grading-{private.name}")
        readonly = [Path(p) for p in self.sandbox.get("readonly", [])]
        files = [Path(p) for p in self.sandbox.get("files", [])]
        threads = self.sandbox.get("threads", KERNEL_THREADS)
        env = self.sandbox.get("env", {})
        warm = None
        if uid is not None and zygote.usable(private, command, self.sandbox.get("fork", True)):
            warm = zygote.for_folders(readonly)
        if warm is not None:  # forked from the warm process (graders/sandbox/zygote.py)
            connection = command[command.index("-f") + 1]
            argv, started_as, self._handed = warm.hand_over(
                private, connection, uid, threads, env, files, self._groups
            )
            kw.update(started_as)  # the stub: the warm process's host user, never root
        else:
            argv = kernel_argv(
                command, private, readonly=readonly, threads=threads, env=env, uid=uid,
                group=self._groups, files=files, fonts=self._font_list(private),
            )  # fmt: skip
        kw.pop("cwd", None)  # never nbgrader's autograded folder
        kw["stdout"] = kw["stderr"] = subprocess.DEVNULL  # its words reach us as messages only
        kw["env"] = {}  # the sandbox sets the kernel's environment (an allow-list)
        return argv, kw

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw):
        try:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        finally:
            self._close_handed()

    def _close_handed(self) -> None:
        """This process's copy of a forked kernel's connection: once the stub has its own
        (or did not start), the stub's end is the only one, and the kernel ends with it."""
        if self._handed is not None:
            self._handed.close()
            self._handed = None

    @staticmethod
    def _font_list(private: Path) -> Path | None:
        """A copy of matplotlib's font list of its own, beside its sockets."""
        given = matplotlib_font_list()
        if given is None:
            return None
        name, data = given
        fonts = private / name
        fonts.write_bytes(data)
        fonts.chmod(0o444)
        return fonts

    async def _async_post_start_kernel(self, **kw):
        await super()._async_post_start_kernel(**kw)
        started_in = time.monotonic() - getattr(self, "_start_clock", time.monotonic())
        if getattr(self, "_mounted", False):
            await self._seal_sockets()
        if self.sandbox.get("timings"):
            timings.add(Path(self.sandbox["timings"]), Phase.KERNEL_START, started_in)
        budget = self.sandbox.get("budget_s")
        if budget:  # SandboxedExecute interrupts at the budget; this is for a kernel that hangs
            budget += KILL_GRACE_S
            self._watchdog = threading.Timer(budget, self._over_budget, args=(budget,))
            self._watchdog.daemon = True
            self._watchdog.start()

    async def _seal_sockets(self) -> None:
        """Once the kernel has made its sockets, its private folder is made read-only (for
        everyone: the tmpfs itself), before any client of the grader connects and so before
        any cell runs: the grader's clients reconnect to those paths whenever a connection
        drops, and would follow a link the kernel put in place of a socket, as root, to any
        socket of the host. Connecting to a socket needs no write, so nothing else changes."""
        ports = (self.shell_port, self.iopub_port, self.stdin_port, self.control_port,
                 self.hb_port)  # fmt: skip
        sockets = [Path(f"{self.ip}-{port}") for port in ports]
        deadline = time.monotonic() + SOCKETS_WAIT_S
        while not all(path.is_socket() for path in sockets):
            process = getattr(self.provisioner, "process", None)
            if time.monotonic() > deadline or process is None or process.poll() is not None:
                return  # it did not start: nbclient says so, and it is thrown away
            await asyncio.sleep(0.005)
        sandbox_host.seal_tmpfs(self._private)

    def _over_budget(self, budget: float) -> None:
        process = getattr(self.provisioner, "process", None)
        if process is None or process.poll() is not None:
            return
        if self.sandbox.get("events"):
            kill = events.Kill(str(self._private), budget, budget - KILL_GRACE_S)
            events.append(self.sandbox["events"], kill)
        process.kill()  # bwrap (--die-with-parent), or a forked kernel's stub: either
        # way the kernel goes with it

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False):
        """Killed at once: everything the notebook said has arrived by then, and a polite
        shutdown_request costs a second or more per hand-in (the interpreter tearing torch
        down) for nothing; the sandbox is thrown away whole."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        try:
            await super()._async_shutdown_kernel(now=True, restart=restart)
        finally:
            self._throw_away()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        """What nbclient calls, instead of a shutdown, when the kernel has already ended by
        itself (killed for its memory or its budget, or by its own code)."""
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:
            self._throw_away()

    def _throw_away(self) -> None:
        """The sandbox's host side, once the kernel is gone: its cgroups, the mount and the
        private folder (links in it are removed, never followed). Safe to call twice."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._close_handed()
        sandbox_host.MemoryGroups.remove(self._groups)
        if self._private is not None:
            if getattr(self, "_mounted", False):
                subprocess.run(["umount", "-l", str(self._private)], capture_output=True)
                self._mounted = False
            shutil.rmtree(self._private, ignore_errors=True)

    async def _async_wait(self, pollinterval: float = 0.01) -> None:
        """Until the killed kernel has ended: polled every 10 ms, not jupyter_client's 100 ms
        (a tenth of a second a hand-in, spent waiting)."""
        await super()._async_wait(pollinterval=pollinterval)

    # jupyter_client binds these to its own coroutine functions at class creation, so the
    # overrides above must be named here too, or nbclient's calls never reach them
    shutdown_kernel = _async_shutdown_kernel
    cleanup_resources = _async_cleanup_resources


def write_kernelspec(jupyter_dir: Path) -> Path:
    """A ``python3`` kernelspec of this Python under jupyter_dir/kernels (the folder the
    settings' `kernelspecs` name); interrupts go by message, since a signal would stop at
    bubblewrap."""
    spec = jupyter_dir / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (grading sandbox)",
                "language": "python",
                "interrupt_mode": "message",
                "metadata": {"debugger": False},
            },
            indent=1,
        )
    )
    return spec
