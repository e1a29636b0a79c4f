"""Running nbgrader's own command line on the course (build, export), configured by the
course's nbgrader_config.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from graders.course import REPO


def nbgrader_env(env: dict | None = None) -> dict[str, str]:
    """The environment of a process that runs nbgrader on this course (cwd: REPO)."""
    env = dict(os.environ, **(env or {}))
    # nbgrader calls the `alembic` script of its own environment by name.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def nbgrader(
    *args: str, root: Path = REPO, timeout: float | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the nbgrader CLI on the course in `root`, configured by REPO/nbgrader_config.py."""
    cmd = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={root}"]
    return subprocess.run(
        cmd, cwd=REPO, env=nbgrader_env(env), capture_output=True, text=True, timeout=timeout
    )
