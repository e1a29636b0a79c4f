"""How a sandboxed kernel ends, under plain nbgrader as under `make autograde`.

* A cell that runs past its timeout is interrupted and the notebook goes on, whichever
  kernelspec nbgrader found: plain `nbgrader autograde` uses the environment's default
  one, whose interrupt is a signal, and a signal would end bubblewrap and the kernel with
  it (every later cell then fails, and the two ways of grading would disagree).
* When the notebook has run, the kernel is killed, not asked to shut down (that costs a
  second or more a hand-in), and nothing of it is left: no process, no private folder, no
  mount, no cgroup. The same holds for a kernel that ends by itself mid-notebook (a
  hand-in that kills its own kernel, or one killed for its memory or its budget), which
  nbclient never asks its manager to shut down.
* A grader killed outright (a lost Dask worker) cannot throw its kernel away: the next task
  on the machine finds its scratch folder by a claim no process holds and removes it, with
  the kernel's mount, cgroups and any of its processes still running; it follows no link
  and leaves live graders' folders alone.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import running_with, stream_text
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

from graders.config.course import REPO
from graders.grade import task
from graders.sandbox import sandbox, sandbox_host, sandbox_kernel

pytestmark = [
    pytest.mark.skipif(sandbox.available() is not None, reason="needs bubblewrap"),
    pytest.mark.timeout(300),
]


def run(nb, tmp_path, manager=sandbox_kernel.SandboxKernelManager, **options) -> NotebookClient:
    """Run `nb` with nbgrader's settings (interrupt on timeout) in the sandbox; the client."""
    client = NotebookClient(
        nb,
        allow_errors=True,
        interrupt_on_timeout=True,
        kernel_manager_class=manager,
        resources={"metadata": {"path": str(tmp_path)}},
        **options,
    )
    client.execute()
    return client


def test_a_cell_past_its_timeout_is_interrupted_under_the_default_kernelspec(tmp_path, monkeypatch):
    monkeypatch.delenv("JUPYTER_PATH", raising=False)  # nbgrader's own: the default spec
    nb = new_notebook(
        cells=[
            new_code_cell("import time\nwhile True:\n    time.sleep(0.01)"),
            new_code_cell("print('after the loop', 6 * 7)"),
        ]
    )
    run(nb, tmp_path, timeout=5)
    assert [o.get("ename") for o in nb.cells[0].outputs] == ["KeyboardInterrupt"]
    assert "after the loop 42" in stream_text(nb.cells[1])


def recorded():
    """A sandbox kernel manager class that keeps each manager it makes (`made`) and each
    polite shutdown_request it sends (`asked`)."""
    made, asked = [], []

    class Recorded(sandbox_kernel.SandboxKernelManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        async def _async_request_shutdown(self, restart: bool = False):
            asked.append(restart)
            await super()._async_request_shutdown(restart=restart)

    return Recorded, made, asked


def assert_nothing_left(manager) -> None:
    """No private folder, mount, process or cgroup of the kernel is left on the host."""
    private = manager._private
    assert private is not None and not private.exists()
    assert str(private) not in Path("/proc/mounts").read_text()
    # the kernel's command line names its connection file, in its private folder
    assert running_with(str(private)) == []
    if sandbox_host.memory_groups().why_not is None:
        assert manager._groups  # where cgroups can be made, the kernel had its own
    assert all(not group.exists() for group in manager._groups)


def test_a_kernel_that_has_run_its_notebook_leaves_nothing_behind(tmp_path, monkeypatch):
    manager_class, made, asked = recorded()
    nb = new_notebook(cells=[new_code_cell("print('ran', 6 * 7)")])
    run(nb, tmp_path, manager=manager_class, timeout=60)
    assert "ran 42" in stream_text(nb.cells[0])
    (manager,) = made
    assert asked == []  # killed, never asked
    assert_nothing_left(manager)


def test_a_kernel_that_ends_by_itself_leaves_nothing_behind(tmp_path, monkeypatch):
    manager_class, made, _ = recorded()
    nb = new_notebook(
        cells=[new_code_cell("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")]
    )
    with pytest.raises(DeadKernelError):
        run(nb, tmp_path, manager=manager_class, timeout=60)
    (manager,) = made
    assert_nothing_left(manager)


def test_a_runtime_folder_too_deep_for_a_socket_still_runs_the_kernel(tmp_path, monkeypatch):
    """A Unix socket's path holds 107 bytes; a deep temporary folder (as on some clusters)
    must not stop every kernel with ZMQ's 'File name too long'."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    manager_class, made, _ = recorded()
    nb = new_notebook(cells=[new_code_cell("print('ran', 6 * 7)")])
    settings = Config({"SandboxKernelManager": {"sandbox": {"runtime": str(deep)}}})
    run(nb, tmp_path, manager=manager_class, timeout=60, config=settings)
    assert "ran 42" in stream_text(nb.cells[0])
    (manager,) = made
    assert deep not in manager._private.parents  # the machine's own runtime folder instead


# A grader that starts one sandboxed kernel in a claimed scratch folder laid out as
# graders.grade.task lays it out, says where, and waits to be killed.
GRADER_THAT_WAITS = """
import asyncio, json, os, sys, time
from graders.grade import task
from graders.sandbox import sandbox_kernel
scratch, _claim = task._claim_scratch()
runtime = scratch / "task-1" / "runtime"
runtime.mkdir(parents=True)
runtime.chmod(0o711)
manager = sandbox_kernel.SandboxKernelManager(sandbox={"runtime": str(runtime)})


async def start():  # until the kernel answers: its processes are then all started
    await manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=120)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    finally:
        client.stop_channels()


error = asyncio.run(start())
print(json.dumps({"private": str(manager._private), "groups": [str(g) for g in manager._groups],
                  "error": error}))
sys.stdout.flush()
time.sleep(600)
"""


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_grader_killed_outright_leaves_nothing_after_the_next_sweep():
    """A Dask worker lost mid-task (SIGKILL) cannot throw its kernel away: the next task on
    the machine finds its scratch folder by its unheld claim and removes it, with the
    kernel's mount and cgroups; a live grader's folder is left alone, however old."""
    root = Path(tempfile.mkdtemp(prefix="sw-", dir="/tmp"))  # short: the kernel's sockets
    env = dict(os.environ, TMPDIR=str(root), PYTHONPATH=str(REPO))
    grader = subprocess.Popen(
        [sys.executable, "-c", GRADER_THAT_WAITS], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        started = json.loads(grader.stdout.readline())
        assert started["error"] is None, f"the kernel did not start: {started['error']}"
        private, groups = Path(started["private"]), [Path(g) for g in started["groups"]]
        scratch = private.parent.parent.parent
        assert scratch.parent == root and running_with(str(private))
        if os.getuid() == 0:
            assert str(private) in Path("/proc/mounts").read_text()
        assert all(group.exists() for group in groups)
        (claim,) = root.glob(f"*{task.CLAIM_SUFFIX}")
        age(claim, 3600)
        assert task.sweep_abandoned(str(root)) == []  # its grader holds the claim
        assert scratch.is_dir() and running_with(str(private))
    finally:
        grader.kill()
        grader.wait()
    assert task.sweep_abandoned(str(root)) == [scratch]
    assert running_with(str(private)) == []
    assert not scratch.exists() and not claim.exists()
    assert str(private) not in Path("/proc/mounts").read_text()
    assert all(not group.exists() for group in groups)
    assert list(root.glob("course-*")) == []
    shutil.rmtree(root)


def test_the_sweep_follows_no_link_and_spares_what_is_not_a_dead_graders(tmp_path):
    outside = tmp_path / "instructor"
    outside.mkdir()
    (outside / "solutions.ipynb").write_text("secret")
    root = tmp_path / "tmp"
    root.mkdir()
    # a dead grader's folder whose parts are links to the instructor's folder
    dead = root / "course-dead0000"
    (dead / "task-1" / "runtime").mkdir(parents=True)
    (dead / "task-1" / "runtime" / "kernel-link0000").symlink_to(outside)
    (dead / "task-2").symlink_to(outside)
    (dead / "notebook.ipynb").symlink_to(outside / "solutions.ipynb")
    (root / f"course-dead0000{task.CLAIM_SUFFIX}").write_text("")
    # a claim that is a link, one just being made, and a live grader's old one
    (root / "course-link0000").mkdir()
    (root / f"course-link0000{task.CLAIM_SUFFIX}").symlink_to(outside / "solutions.ipynb")
    (root / "course-new00000").mkdir()
    (root / f"course-new00000{task.CLAIM_SUFFIX}").write_text("")
    (root / "course-live0000").mkdir()
    live = root / f"course-live0000{task.CLAIM_SUFFIX}"
    live.write_text("")
    for claim in root.glob(f"*{task.CLAIM_SUFFIX}"):
        if claim.name != f"course-new00000{task.CLAIM_SUFFIX}":
            age(claim, 3600)
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert task.sweep_abandoned(str(root)) == [dead]
    finally:
        os.close(fd)
    assert (outside / "solutions.ipynb").read_text() == "secret"
    kept = {"course-link0000", "course-new00000", "course-live0000"}
    assert {p.name for p in root.iterdir()} == kept | {k + task.CLAIM_SUFFIX for k in kept}


def started_by(process: subprocess.Popen, argument: str, seconds: float = 30) -> None:
    """Wait until /proc shows `argument` among the process's arguments."""
    deadline = time.monotonic() + seconds
    while argument.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0"):
        assert time.monotonic() < deadline, f"{process.args} did not start"
        time.sleep(0.01)


def test_the_sweep_ends_a_dead_graders_sandbox_that_outlived_it(tmp_path):
    """--die-with-parent does not always take the sandbox with its grader: whatever still
    runs with the dead kernel's private folder as its argument (its bubblewrap) is ended."""
    root = tmp_path / "tmp"
    private = root / "course-dead0000" / "task-1" / "runtime" / "kernel-left0000"
    private.mkdir(parents=True)
    (root / f"course-dead0000{task.CLAIM_SUFFIX}").write_text("")
    age(root / f"course-dead0000{task.CLAIM_SUFFIX}", 3600)
    wait = "import time; time.sleep(600)"
    left = subprocess.Popen([sys.executable, "-c", wait, "--bind", str(private), str(private)])
    other = subprocess.Popen([sys.executable, "-c", wait, "--bind", f"{private}0"])
    try:
        for process in (left, other):  # a process's arguments show once its exec is done:
            started_by(process, "--bind")  # Popen returns a moment before, on a busy machine
        assert task.sweep_abandoned(str(root)) == [root / "course-dead0000"]
        assert left.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None  # another folder's: left alone
    finally:
        left.kill()
        other.kill()
        other.wait()
