"""nbgrader's exchange for the hub: the folder, with the permissions nbgrader documents and
two steps tightened so that no student reads or changes another's hand-in or feedback.

nbgrader's own layout (docs: "Exchange", jupyter/nbgrader exchange/default/):

    exchange/                 drwxrwxrwt  root        anyone may add a course; the sticky bit
                                                      (ours) stops renaming another's
    exchange/<course>/        drwxr-xr-x  instructor
      outbound/               drwxr-xr-x  instructor  released labs, readable by every student
      inbound/                drwx-wx-wx  instructor  students add hand-ins, cannot list them
                              + setgid (nbgrader's), + sticky (ours)
      feedback/               drwx--x--x  instructor  students read theirs by its hashed name

What nbgrader leaves open, and the two classes below close:

* `submit` makes each hand-in folder mode 0777 and its files 0644 ("hidden from other users
  by the timestamp" and a random suffix): whoever learns the name can read and change it.
  `PrivateSubmit` makes them 0750/0640. inbound/ is setgid, so they belong to the
  instructor's group, which reads them; other students read nothing.
* `release_feedback` writes feedback/<hash>.html 0644 (the hash of a secret that only the
  student's own cache holds). `PrivateReleaseFeedback` gives each page to the student's own
  group, mode 0640: the student reads it, the others do not.

Both are nbgrader's classes with a step added, chosen in nbgrader_config.py through
`c.ExchangeFactory` (hub/course.py writes it).
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import re
from pathlib import Path

from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import notebook_hash

ROOT_MODE = 0o1777
COURSE_MODE = 0o755
MODES = {"outbound": 0o755, "inbound": 0o3733, "feedback": 0o711}


def make_exchange(root: Path, course: str, instructor: str) -> Path:
    """The exchange folder and the course's three folders, owned by the instructor, made
    before any student can take the course's name."""
    entry = pwd.getpwnam(instructor)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(ROOT_MODE)
    path = root / course
    path.mkdir()
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(COURSE_MODE)
    for name, mode in MODES.items():
        (path / name).mkdir()
        os.chown(path / name, entry.pw_uid, entry.pw_gid)
        (path / name).chmod(mode)
    return path


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit, then the hand-in readable by its owner and the instructor only."""

    def copy_files(self):
        super().copy_files()
        dest = Path(self.inbound_path) / self.assignment_filename
        for folder, dirs, files in os.walk(dest):
            for name in files:
                os.chmod(Path(folder) / name, 0o640)
            for name in dirs:
                os.chmod(Path(folder) / name, 0o2750)
        os.chmod(dest, 0o2750)


class PrivateReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's release_feedback, then each page readable by its student's group only."""

    def copy_files(self):
        super().copy_files()
        pattern = re.escape(os.path.sep).join(
            [
                self.coursedir.format_path(
                    self.coursedir.feedback_directory,
                    "(?P<student_id>.*)",
                    self.coursedir.assignment_id,
                    escape=True,
                ),
                "(?P<notebook_id>.*).html",
            ]
        )
        for html in glob.glob(os.path.join(self.src_path, "*.html")):
            found = re.match(pattern, html)
            if found is None:
                continue
            student, notebook = found.group("student_id"), found.group("notebook_id")
            folder = os.path.dirname(html)
            with open(os.path.join(folder, "submission_secret.txt")) as fh:
                secret = fh.read()
            page = (
                Path(self.dest_path) / f"{notebook_hash(secret=secret, notebook_id=notebook)}.html"
            )
            if not page.exists():
                continue
            try:
                os.chown(page, -1, grp.getgrnam(student).gr_gid)
                page.chmod(0o640)
            except (KeyError, PermissionError) as error:
                page.chmod(0o600)  # closed rather than open to every student
                self.log.error(
                    "Feedback for %s kept from every student (%s): the instructor must be in "
                    "a group of the student's name",
                    student,
                    error,
                )
