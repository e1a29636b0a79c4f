"""The instructor's course and every account's Jupyter configuration.

The instructor gets a copy of this repository's course (nbgrader_config.py, course.toml,
graders/, solutions/, labs/, assignments/) in ~/course, built there *as the instructor*
(nbgrader's source notebooks, the grader's reference records): the files and the gradebook are
the instructor's, mode 0700 at the home, and nothing of them is in the exchange. Each
account's ~/.jupyter says where the exchange is and which course it takes; the students'
JupyterLab has no formgrader and no "create assignment" toolbar.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
from pathlib import Path

from hub import REPO
from hub.accounts import as_user

# (assignments/: the instructor's own nbgrader assignments, where the course has them, which
# HUB_LABS may name beside the labs)
COPIED = [
    "nbgrader_config.py",
    "course.toml",
    "graders",
    "solutions",
    "labs",
    "data",
    "assignments",
]
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "cache", "MNIST", ".ipynb_checkpoints")
# as the instructor, in the course: build the labs, make the grader's reference records, and
# give the gradebook its roster with the students' names (nbgrader's `db student import`,
# in this process: one start of Python and nbgrader less)
BUILD = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from graders.build.build import build\n"
    "from graders.formats import gradebook\n"
    "from graders.sandbox.build_reference import prepare_references\n"
    "root, roster, labs = Path.cwd(), json.load(sys.stdin), sys.argv[1:]\n"
    "build(root=root, labs=labs)\n"
    "prepare_references(root, labs)\n"
    "with gradebook.opened(gradebook.of(root)) as gb:\n"
    "    for name, (first, last) in roster.items():\n"
    "        gb.update_or_create_student(name, first_name=first, last_name=last)\n"
)


def home(name: str) -> Path:
    return Path(pwd.getpwnam(name).pw_dir)


def _write(owner: str, path: Path, text: str) -> None:
    """Write a file in `owner`'s home, every folder on the way theirs."""
    entry = pwd.getpwnam(owner)
    base = home(owner)
    for folder in reversed(path.relative_to(base).parents):
        target = base / folder
        target.mkdir(exist_ok=True)
        os.chown(target, entry.pw_uid, entry.pw_gid)
    path.write_text(text)
    os.chown(path, entry.pw_uid, entry.pw_gid)


# the hub's addition to the course's nbgrader_config.py (its copy in the instructor's home):
# every autograde (the formgrader's button, `nbgrader autograde`, `make autograde`) ends by
# noting when the hand-in was handed in and how late (hub/lateness.py)
HUB_COURSE_CONFIG = """
# Added by `make hub` (hub/course.py): the graded notebook, so the formgrader's view of a
# submission and the student's feedback, opens with when it was handed in (the exchange's
# time) against the due date, how late, and the late penalty (hub/lateness.py).
c.Autograde.autograde_preprocessors.append("hub.lateness.LatenessNote")
# A lab enters the gradebook when it is released (hub.exchange.GradebookRelease), not when
# it is built: the formgrader's totals, grades.csv and the class report count only the labs
# the students were given. Building (`make build`'s code, the formgrader's Generate button)
# writes the source and release notebooks and leaves the gradebook alone (nbgrader's own
# `generate_assignment --no-db`).
c.GenerateAssignment.no_database = True
c.SaveCells.enabled = False
"""


def install_course(
    instructor: str, python: Path, labs: list[str], roster: dict[str, list[str]]
) -> Path:
    """Copy the course into the instructor's home and build `labs` there as the instructor;
    the gradebook's students: `roster`, each account's [first name, last name]."""
    entry = pwd.getpwnam(instructor)
    root = home(instructor) / "course"
    root.mkdir()
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=SKIPPED)
        elif source.exists():
            shutil.copy2(source, root / name)
    config = root / "nbgrader_config.py"
    config.write_text(config.read_text() + HUB_COURSE_CONFIG)
    for folder, dirs, files in os.walk(root):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, entry.pw_uid, entry.pw_gid)
    bindir = str(python.parent)
    result = as_user(
        instructor,
        [str(python), "-c", BUILD, *labs],
        input=json.dumps(roster),
        cwd=root,
        path=f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        env={"PYTHONPATH": str(root)},
    )
    if result.returncode != 0:
        raise SystemExit(f"building the course as {instructor} failed:\n{result.stderr[-3000:]}")
    return root


def nbgrader_config(course_id: str, exchange: Path, root: Path | None = None) -> str:
    lines = [
        "# Written by `make hub` (hub/course.py): the course and the exchange on this hub.",
        "c = get_config()  # noqa: F821",
        f"c.CourseDirectory.course_id = {course_id!r}",
        f"c.Exchange.root = {str(exchange)!r}",
        'c.ExchangeFactory.submit = "hub.exchange.PrivateSubmit"',
        'c.ExchangeFactory.release_feedback = "hub.exchange.PrivateReleaseFeedback"',
        'c.ExchangeFactory.collect = "hub.exchange.TrustedCollect"',
        'c.ExchangeFactory.release_assignment = "hub.exchange.GradebookRelease"',
    ]
    if root is not None:  # the instructor: nbgrader reads the course's own config from there
        lines.append(f"c.CourseDirectory.root = {str(root)!r}")
    return "\n".join(lines) + "\n"


COURSE_MAKEFILE = """\
# The course's commands on the hub (written by `make hub`, hub/course.py), in the
# instructor's terminal: grade the collected hand-ins, the class report and the grades CSV.
# ARGS go to the grader: make autograde ARGS="--lab lab01_graph --student dgl-student2"
PY := {python}
.PHONY: autograde report grades
autograde:
\t$(PY) -m graders.grade --root $(CURDIR) $(ARGS)
report grades:
\t$(PY) -m graders.report --root $(CURDIR)
"""


def configure_account(
    name: str, course_id: str, exchange: Path, root: Path | None, python: Path | None = None
) -> None:
    """~/.jupyter of one account: nbgrader's course and exchange, JupyterLab's settings; for a
    student (root None), no formgrader and no assignment-creation tools; for the instructor,
    the formgrader allowed inside JupyterLab's frame and the course's Makefile. The accounts'
    Python first on the PATH of their terminals."""
    jupyter = home(name) / ".jupyter"
    if python is not None:
        line = f'export PATH="{python.parent}:$PATH"  # make hub: the course\'s Python\n'
        for rc in (".bashrc", ".profile"):
            old = (home(name) / rc).read_text() if (home(name) / rc).exists() else ""
            if line not in old:
                _write(name, home(name) / rc, old + line)
    if root is not None:
        _write(name, root / "Makefile", COURSE_MAKEFILE.format(python=python or "python"))
        # nbgrader's menu opens the formgrader in a frame of JupyterLab (the same origin)
        csp = {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
        server = {"ServerApp": {"tornado_settings": csp}}
        _write(name, jupyter / "jupyter_server_config.json", json.dumps(server))
    _write(name, jupyter / "nbgrader_config.py", nbgrader_config(course_id, exchange, root))
    settings = jupyter / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    _write(name, settings / "notification.jupyterlab-settings", '{"fetchNews": "false"}\n')
    if root is None:
        disabled = {
            "@jupyter/nbgrader:formgrader": True,
            "@jupyter/nbgrader:create-assignment": True,
        }
        _write(
            name,
            jupyter / "labconfig" / "page_config.json",
            json.dumps({"disabledExtensions": disabled}),
        )
        server = {
            "ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": False}}
        }
        _write(name, jupyter / "jupyter_server_config.json", json.dumps(server))
