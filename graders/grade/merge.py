"""Merge: one task's result into the course, under the student's real name.

The course's gradebook is nbgrader's (so its export and formgrader read it as usual); results
are merged one at a time, on the grader's side, with nbgrader's Gradebook API. The graded
notebook and the feedback page are written from the task's bytes to
autograded/<student>/<lab>/ and feedback/<student>/<lab>/, never copied from a folder.
"""

from __future__ import annotations

import os
import shutil
import warnings
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from graders.formats import gradebook
from graders.formats.wire import Result


@contextmanager
def fresh_submission(root: Path, student: str, lab: str, timestamp=None):
    """nbgrader's gradebook with a new, empty submission of `lab` by `student` (any earlier
    one removed); committed when the block ends."""
    from nbgrader.api import MissingEntry
    from sqlalchemy.exc import SAWarning

    with warnings.catch_warnings():
        # nbgrader's add_submission trips a harmless SQLAlchemy autoflush warning
        warnings.simplefilter("ignore", SAWarning)
        with gradebook.opened(gradebook.of(root)) as gb:
            gb.update_or_create_student(student)
            try:
                gb.remove_submission(lab, student)
            except MissingEntry:
                pass
            yield gb.add_submission(lab, student, timestamp=timestamp)
            gb.db.commit()


def write_file(root: Path, kind: str, student: str, lab: str, name: str, data: bytes) -> Path:
    """root/kind/<student>/<lab>/name, replacing what was there, never through a link."""
    base = root / kind
    folder = base / student / lab
    for path in (base, base / student, folder):
        if path.is_symlink():
            path.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    if os.path.realpath(folder) != os.path.join(os.path.realpath(base), student, lab):
        raise RuntimeError(f"{folder} is not inside {base}")
    target = folder / name
    partial = folder / f".{name}.partial"
    partial.write_bytes(data)
    partial.replace(target)
    return target


def merge(root: Path, student: str, lab: str, result: Result) -> None:
    """Grades, graded notebook and feedback of one successful task."""

    scores = result["scores"]
    stamp = datetime.fromisoformat(scores["timestamp"]) if scores.get("timestamp") else None
    with fresh_submission(root, student, lab, stamp) as submission:
        for nb in submission.notebooks:
            graded = scores["notebooks"].get(nb.name, {})
            nb.late_submission_penalty = graded.get("late_penalty")
            for grade in nb.grades:
                got = graded.get("grades", {}).get(grade.name)
                if got is None:  # not graded: nothing is given for it
                    grade.auto_score, grade.needs_manual_grade = 0.0, False
                    continue
                auto = got["auto_score"]
                grade.auto_score = None if auto is None else min(auto, grade.max_score)
                grade.manual_score = got["manual_score"]
                grade.extra_credit = got["extra_credit"]
                grade.needs_manual_grade = got["needs_manual_grade"]
            for comment in nb.comments:
                comment.auto_comment = graded.get("comments", {}).get(comment.name)
    for name, text in result["autograded"].items():
        write_file(root, "autograded", student, lab, f"{name}.ipynb", text.encode())
    for name, html in (result.get("feedback") or {}).items():
        write_file(root, "feedback", student, lab, f"{name}.html", html.encode())
    # nbgrader's release_feedback reads feedback/<student>/<lab>/timestamp.txt and
    # submission_secret.txt (the name of the student's feedback page in the exchange), which
    # its own autograde and generate_feedback copy from the collected hand-in: the same here
    for name in ("timestamp.txt", "submission_secret.txt"):
        kept = root / "submitted" / student / lab / name
        if kept.is_file() and not kept.is_symlink() and kept.stat().st_size < 4096:
            for kind in ("autograded", "feedback"):
                write_file(root, kind, student, lab, name, kept.read_bytes())


def record_failure(root: Path, student: str, lab: str) -> None:
    """A hand-in that could not be graded is kept in the gradebook: zero, and flagged for a
    human look (the reason is in the grading summary), never silently dropped."""
    with fresh_submission(root, student, lab) as submission:
        for nb in submission.notebooks:
            nb.flagged = True
            for grade in nb.grades:
                grade.auto_score = 0.0
                grade.needs_manual_grade = False
    for kind in ("autograded", "feedback"):  # nothing stale of an earlier grading stays
        folder = root / kind / student / lab
        if folder.is_symlink():
            folder.unlink()
        elif folder.is_dir():
            shutil.rmtree(folder)
