"""`make hub`: the course on a real JupyterHub on this machine (docs/hub.md).

One concern per module: `accounts` (the Unix users), `runtime` (the accounts' Python, which
holds nothing of the course, the view a student's server runs in, and the proxy),
`exchange` (nbgrader's exchange folder; submit and release_feedback tightened so that a
student reads nothing of another's; collect deciding who handed in and when), `course`
(the instructor's course and each account's Jupyter configuration), `cli` (start, stop,
destroy, the roster, backup and restore: `python -m hub`), and
`jupyterhub_config.py` (JupyterHub's configuration, read from the state `cli` writes).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Everything of the term outside the accounts' homes lives here; `make hub-destroy` removes it.
STATE = Path(os.environ.get("COURSE_HUB_STATE", "/srv/dgl-hub"))
PREFIX = "dgl-"  # every Unix account and group the hub creates starts with this
MARK = "dynamic-graphs course hub account"  # their GECOS field: how hub-stop knows them
INSTRUCTOR = f"{PREFIX}instructor"


def student_names(count: int) -> list[str]:
    return [f"{PREFIX}student{i}" for i in range(1, count + 1)]


def course_id(config: Path = REPO / "nbgrader_config.py") -> str:
    """The course id that nbgrader_config.py sets (the exchange's folder is named after it)."""
    found = re.search(
        r"^c\.CourseDirectory\.course_id\s*=\s*[\"']([^\"']+)", config.read_text(), re.M
    )
    if not found:
        raise SystemExit(f"{config} sets no c.CourseDirectory.course_id: the hub needs one")
    return found.group(1)
