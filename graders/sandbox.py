"""The kernel a submission is graded in: no network, a read-only world, limits.

While graders.grade runs nbgrader, nbgrader's Execute step is `SandboxedExecute`, whose
`SandboxKernelManager` runs each notebook's kernel inside bubblewrap:

* a new network namespace (no network) and a new PID namespace (a process the notebook
  forks cannot outlive the kernel), as an unprivileged user;
* the whole file system read-only, with the course repository, the temporary folder and
  the grading scratch area hidden; only the submission's own working folder and a private
  folder made fresh for the kernel are writable, so the gradebook, other students'
  submissions and the next student's kernel are out of reach;
* an address-space cap (a memory bomb raises MemoryError in its cell instead of taking the
  machine down), a cap on the size of any file the notebook writes, and a wall-clock budget
  for the whole notebook.

The kernel talks to nbgrader over Unix sockets (ipc transport), which work across the
network namespace. Where bubblewrap cannot run, grading stops with a
message instead of silently grading without a sandbox (see `available`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError
from nbgrader.preprocessors import Execute
from traitlets import Dict, default

KERNEL_SIDE = Path(__file__).resolve().parent / "kernel"  # grader_observe, for hidden tests
MEMORY_CAP_BYTES = 8 * 2**30  # address space; torch with dynamo maps about 4 GiB
FILE_CAP_BYTES = 64 * 2**20  # the largest file a notebook may write
KILL_GRACE_S = 60  # a kernel still running this long after its notebook's budget is killed
# torch threads of a graded kernel (and of the reference run, so both compute alike): the
# kernels run side by side, one per core, and more threads than cores make torch crawl
KERNEL_THREADS = 1
SETTINGS_ENV = "COURSE_SANDBOX"  # JSON settings from the grader to SandboxKernelManager


def available() -> str | None:
    """None when sandboxed kernels can run here, else why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: `apt-get install bubblewrap`"
    probe = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--unshare-user",
         "--perms", "0555", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc", "true"],
        capture_output=True, text=True,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {probe.stderr.strip()[:200]}"
    return None


def kernel_argv(
    command: list[str],
    workdir: Path,
    private: Path,
    hide: list[Path],
    readonly: list[Path],
    threads: int | None = None,
) -> list[str]:
    """`command` (the kernel's) run in the sandbox; `workdir` and `private` are writable."""
    argv = [
        shutil.which("prlimit") or "prlimit",
        f"--as={MEMORY_CAP_BYTES}",
        f"--fsize={FILE_CAP_BYTES}",
        shutil.which("bwrap") or "bwrap",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        # an unprivileged user inside: the hidden places below are read-only to it
        "--unshare-user", "--uid", "65534", "--gid", "65534",
        "--die-with-parent",
        # ipykernel polls its parent PID; inside the PID namespace its parent is bwrap's init
        "--unsetenv", "JPY_PARENT_PID",
        "--unsetenv", SETTINGS_ENV,
    ]  # fmt: skip
    for path in hide:
        argv += ["--perms", "0555", "--tmpfs", str(path)]
    for path in [*readonly, KERNEL_SIDE]:
        if path.exists():
            argv += ["--ro-bind", str(path), str(path)]
    for path in (workdir, private):
        argv += ["--bind", str(path), str(path)]
    for path in hide:  # the folders made to hold the binds above stay read-only too
        argv += ["--remount-ro", str(path)]
    argv += ["--setenv", "PYTHONPATH", str(KERNEL_SIDE), "--chdir", str(workdir)]
    if threads:
        argv += ["--setenv", "OMP_NUM_THREADS", str(threads)]
    # Scratch space of this kernel only. (torch, once imported by the grader itself, exports
    # TORCHINDUCTOR_CACHE_DIR under /tmp, which the kernel would inherit and cannot write.)
    scratch = {"TMPDIR": "tmp", "IPYTHONDIR": "ipython", "MPLCONFIGDIR": "matplotlib",
               "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}  # fmt: skip
    for name, sub in scratch.items():
        (private / sub).mkdir(exist_ok=True)
        argv += ["--setenv", name, str(private / sub)]
    return argv + command


class SandboxKernelManager(AsyncKernelManager):
    """Starts every kernel in a sandbox of its own.

    The kernel's working folder (the notebook's folder, which nbgrader passes as ``cwd``) is
    the one place it may write, beside a private folder made fresh for this kernel that
    holds its connection file, its Unix sockets and its TMPDIR. A kernel therefore cannot
    leave anything behind for the next student's kernel, even when one grading process
    grades several students. A kernel still running after the whole-notebook budget is killed, and
    the kill is written to the events file so the grader can say why.
    """

    sandbox = Dict(help="runtime, hide, readonly, threads, budget_s, events (graders.grade)")

    @default("sandbox")
    def _sandbox_default(self):
        return json.loads(os.environ.get(SETTINGS_ENV, "{}"))

    _watchdog: threading.Timer | None = None

    async def _async_pre_start_kernel(self, **kw):
        private = Path(tempfile.mkdtemp(prefix="kernel-", dir=self.sandbox["runtime"]))
        self.transport, self.ip = "ipc", str(private / "kernel")  # sockets cross namespaces
        self.connection_file = str(private / "connection.json")
        command, kw = await super()._async_pre_start_kernel(**kw)
        self._workdir = Path(kw.get("cwd") or os.getcwd()).resolve()
        argv = kernel_argv(
            command,
            self._workdir,
            private,
            hide=[Path(p) for p in self.sandbox.get("hide", [])],
            readonly=[Path(p) for p in self.sandbox.get("readonly", [])],
            threads=self.sandbox.get("threads"),
        )
        return argv, kw

    async def _async_post_start_kernel(self, **kw):
        await super()._async_post_start_kernel(**kw)
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
        with open(self.sandbox["events"], "a") as events:
            events.write(json.dumps({"workdir": str(self._workdir), "budget_s": budget}) + "\n")
        process.kill()  # bwrap; --die-with-parent takes the kernel with it

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False):
        if self._watchdog is not None:
            self._watchdog.cancel()
        await super()._async_shutdown_kernel(now=now, restart=restart)


class SandboxedExecute(Execute):
    """nbgrader's Execute, with each kernel in the sandbox and a budget for the whole notebook
    when the grader asks for them (graders.grade sets COURSE_SANDBOX); a plain
    ``nbgrader autograde`` is unchanged.

    The budget shortens the per-cell timeout as it runs out. The cell running when it ends
    gets a timeout error that names the budget, and the cells after it are not run (an error
    saying so), so the checks that finished in time keep their points. The same holds for a
    cell that ignores the interrupt after its own time limit: the notebook is graded up to
    there instead of failing as a whole.
    """

    def __init__(self, *args, **kwargs):
        self._settings = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
        if self._settings:
            kwargs.setdefault("kernel_manager_class", SandboxKernelManager)
        super().__init__(*args, **kwargs)
        self._deadline = self._stuck = None

    def preprocess(self, nb, resources=None, km=None):
        budget = self._settings.get("budget_s")
        self._deadline = time.monotonic() + budget if budget else None
        self._stuck = None  # why the kernel can run nothing more
        return super().preprocess(nb, resources, km)

    def _left(self) -> float:
        return self._deadline - time.monotonic()

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        if self._deadline is None:
            return timeout
        left = max(1, math.ceil(self._left()))
        return left if timeout is None else min(timeout, left)

    def preprocess_cell(self, cell, resources, index):
        if not self._settings or cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, index)
        if self._deadline is not None and self._left() <= 0:
            used_up = f"not run: {self._budget()} was used up"
            cell.outputs = [_error("NotebookBudgetExceeded", used_up)]
            return cell, resources
        if self._stuck:
            cell.outputs = [_error("KernelUnresponsive", f"not run: {self._stuck}")]
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except CellTimeoutError:  # interrupted, and still busy: nothing more can run in it
            self._stuck = f"cell {index} did not stop when the kernel was interrupted"
            cell.outputs.append(_error("KernelUnresponsive", self._stuck + " after its time limit"))
        if self._deadline is not None and self._left() <= 0:
            for output in cell.outputs:
                if output.get("ename") in ("CellTimeoutError", "KernelUnresponsive"):
                    output.ename = "NotebookBudgetExceeded"
                    output.evalue = f"{self._budget()} ran out while this cell was running"
                    output.traceback = [f"NotebookBudgetExceeded: {output.evalue}"]
        return cell, resources

    def _budget(self) -> str:
        return f"the whole-notebook budget of {self._settings['budget_s']:g} s"


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
