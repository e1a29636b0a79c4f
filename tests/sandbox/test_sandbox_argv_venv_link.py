"""A grader whose Python environment is reached through a link (``.venv -> /elsewhere/venv``,
as a checkout often has it) grades as one reached directly: the kernel is started through the
path the grader was started through, so the sandbox must show the environment there too, not
only where the link leads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graders.config.course import REPO
from graders.sandbox import sandbox

pytestmark = [
    pytest.mark.skipif(sandbox.available() is not None, reason="needs bubblewrap"),
    pytest.mark.timeout(300),
]

# Runs one notebook in a sandboxed kernel, started through the kernelspec the grader writes
# (graders.grade.task does the same), and prints what the cell printed or why it did not run.
GRADER = """
import json, os, sys
from pathlib import Path
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from graders.sandbox import sandbox_kernel
jupyter = Path(sys.argv[1])
sandbox_kernel.write_kernelspec(jupyter)
os.environ["JUPYTER_PATH"] = str(jupyter)
nb = new_notebook(cells=[new_code_cell("import sys\\nprint('ran', 6 * 7, sys.prefix)")])
client = NotebookClient(nb, timeout=60, allow_errors=True, kernel_name="python3",
                        kernel_manager_class=sandbox_kernel.SandboxKernelManager)
try:
    client.execute()
    out = "".join(o.get("text", "") for o in nb.cells[0].outputs)
except Exception as error:
    out = f"{type(error).__name__}: {error}"
print(json.dumps({"prefix": sys.prefix, "out": out}))
"""


def test_a_grader_started_through_a_linked_environment_runs_its_kernels(tmp_path):
    real = Path(sys.prefix).resolve()
    link = tmp_path / "venv"
    link.symlink_to(real, target_is_directory=True)
    python = link / "bin" / Path(sys.executable).name
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [str(python), "-c", GRADER, str(tmp_path / "jupyter")],
        env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["prefix"] == str(link)  # the grader did run through the link
    assert "ran 42" in seen["out"], seen["out"]
