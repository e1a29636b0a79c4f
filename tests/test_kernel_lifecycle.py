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
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_code_cell, new_notebook

from graders import sandbox

pytestmark = [
    pytest.mark.skipif(sandbox.available() is not None, reason="needs bubblewrap"),
    pytest.mark.timeout(300),
]


def run(nb, tmp_path, manager=sandbox.SandboxKernelManager, **options) -> NotebookClient:
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


def text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_a_cell_past_its_timeout_is_interrupted_under_the_default_kernelspec(tmp_path, monkeypatch):
    monkeypatch.delenv("JUPYTER_PATH", raising=False)  # nbgrader's own: the default spec
    monkeypatch.delenv(sandbox.SETTINGS_ENV, raising=False)
    nb = new_notebook(
        cells=[
            new_code_cell("import time\nwhile True:\n    time.sleep(0.01)"),
            new_code_cell("print('after the loop', 6 * 7)"),
        ]
    )
    run(nb, tmp_path, timeout=5)
    assert [o.get("ename") for o in nb.cells[0].outputs] == ["KeyboardInterrupt"]
    assert "after the loop 42" in text(nb.cells[1])


def running_with(fragment: str) -> list[str]:
    """The processes whose command line holds `fragment`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fragment in fh.read().decode(errors="replace"):
                    found.append(pid)
        except OSError:  # it ended meanwhile
            continue
    return found


def recorded():
    """A sandbox kernel manager class that keeps each manager it makes (`made`) and each
    polite shutdown_request it sends (`asked`)."""
    made, asked = [], []

    class Recorded(sandbox.SandboxKernelManager):
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
    if sandbox.memory_groups().why_not is None:
        assert manager._groups  # where cgroups can be made, the kernel had its own
    assert all(not group.exists() for group in manager._groups)


def test_a_kernel_that_has_run_its_notebook_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.delenv(sandbox.SETTINGS_ENV, raising=False)
    manager_class, made, asked = recorded()
    nb = new_notebook(cells=[new_code_cell("print('ran', 6 * 7)")])
    run(nb, tmp_path, manager=manager_class, timeout=60)
    assert "ran 42" in text(nb.cells[0])
    (manager,) = made
    assert asked == []  # killed, never asked
    assert_nothing_left(manager)


def test_a_kernel_that_ends_by_itself_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.delenv(sandbox.SETTINGS_ENV, raising=False)
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
    monkeypatch.setenv(sandbox.SETTINGS_ENV, json.dumps({"runtime": str(deep)}))
    manager_class, made, _ = recorded()
    nb = new_notebook(cells=[new_code_cell("print('ran', 6 * 7)")])
    run(nb, tmp_path, manager=manager_class, timeout=60)
    assert "ran 42" in text(nb.cells[0])
    (manager,) = made
    assert deep not in manager._private.parents  # the machine's own runtime folder instead
