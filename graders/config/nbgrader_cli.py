"""Running nbgrader on a course, configured by the course's nbgrader_config.py: its own
command line (export, the tests' commands), or its Python API in this process (the build's
generate_assignment, a grading task's autograde and generate_feedback)."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
from pathlib import Path

from graders.config.course import REPO


def nbgrader_env(env: dict | None = None) -> dict[str, str]:
    """The environment of a process that runs nbgrader on this course (cwd: REPO)."""
    env = dict(os.environ, **(env or {}))
    # nbgrader calls the `alembic` script of its own environment by name.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@contextlib.contextmanager
def this_python_first():
    """PATH as `nbgrader_env` gives it, while nbgrader runs in this process (its API: it
    calls its `alembic` by name when it makes a gradebook)."""
    saved = os.environ.get("PATH")
    os.environ["PATH"] = nbgrader_env()["PATH"]
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = saved


def nbgrader(
    *args: str, root: Path = REPO, timeout: float | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the nbgrader CLI on the course in `root`, configured by REPO/nbgrader_config.py."""
    cmd = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={root}"]
    return subprocess.run(
        cmd, cwd=REPO, env=nbgrader_env(env), capture_output=True, text=True, timeout=timeout
    )


def make_api_factory(config_file: Path):
    """`api_for(root, changes)`: nbgrader's Python API on the course in `root`, configured by
    the course's nbgrader_config.py (loaded once) plus `changes`."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import Config, PyFileConfigLoader

    base = PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config()

    def api_for(root: str, changes: dict):
        config = copy.deepcopy(base)
        config.merge(Config(changes))
        config.CourseDirectory.root = root
        return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)

    return api_for
