"""When a hand-in was handed in, against the due date: where the instructor and the student
read it.

nbgrader keeps the time of each hand-in (the collected copy's timestamp.txt, which
`hub.exchange.TrustedCollect` writes with the exchange's own record, never the student's)
and the lab's due date, and counts the seconds late; it shows neither anywhere unless the
course sets a late penalty (the formgrader lists the time only). `LatenessNote`, the last
step of autograde, puts one note at the top of the graded notebook: when it was handed in,
the due date, how late, and the penalty the course's `LateSubmissionPlugin` gave (none by
default). The formgrader's view of the submission shows the graded notebook, and the
student's feedback is made from it, so both read the same note; an autograde again (after
the due date changes, say) writes it again, as nbgrader computes its penalty again.
"""

from __future__ import annotations

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor

MARK = "course-hub-lateness"  # the note's cell metadata: a cell so marked is replaced


def duration(seconds: float) -> str:
    """3 d 4 h, 2 h 5 min, 3 min 20 s, 12 s: the two largest units."""
    left = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
    return " ".join(parts[:2])


def when(stamp) -> str:
    return f"{stamp:%Y-%m-%d %H:%M:%S} UTC"  # nbgrader's gradebook keeps UTC


def note(timestamp, duedate, seconds_late: float, penalty: float | None) -> str:
    if timestamp is None:
        return "**Handed in:** no time recorded for this hand-in."
    text = f"**Handed in** {when(timestamp)} (the time the course's exchange recorded). "
    if duedate is None:
        return text + "This lab has no due date."
    if seconds_late <= 0:
        return text + f"**On time**: the due date is {when(duedate)}."
    text += f"**Late by {duration(seconds_late)}**: the due date is {when(duedate)}. "
    if penalty:
        return text + f"Late penalty: {penalty:g} point(s) taken off the score."
    return text + "Late penalty: none (the course sets none)."


class LatenessNote(NbGraderPreprocessor):
    """autograde's last step: the lateness note at the top of the graded notebook."""

    def preprocess(self, nb, resources):
        # one note, ours: any cell marked as one (an earlier autograde's, or a student's
        # forgery of it) is removed first
        nb.cells = [c for c in nb.cells if not c.get("metadata", {}).get(MARK)]
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            try:
                submission = gb.find_submission(info["assignment"], info["student"])
                graded = gb.find_submission_notebook(
                    info["notebook"], info["assignment"], info["student"]
                )
            except MissingEntry:
                return nb, resources
            text = note(
                submission.timestamp,
                submission.duedate,
                submission.total_seconds_late,
                graded.late_submission_penalty,
            )
        cell = nbformat.v4.new_markdown_cell(text)
        cell.metadata[MARK] = True
        if nb.get("nbformat_minor", 5) < 5:  # cell ids came with nbformat 4.5
            cell.pop("id", None)
        nb.cells.insert(0, cell)
        return nb, resources
