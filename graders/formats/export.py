"""nbgrader's CSV export, with every field quoted as CSV needs (nbgrader_config.py sets it as
``ExportApp.plugin_class``): nbgrader's own plugin joins fields with commas as they are, so a
student id with a comma, a quote or a line break would break its row, or forge another."""

from __future__ import annotations

import csv

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin

KEYS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
        "raw_score", "late_submission_penalty", "score", "max_score"]  # fmt: skip


class QuotedCsvExport(CsvExportPlugin):
    """The same columns and values as nbgrader's CsvExportPlugin, written by the csv module."""

    def export(self, gradebook: Gradebook) -> None:
        students = {str(s) for s in self.student}
        assignments = {str(a) for a in self.assignment}
        with open(self.to or "grades.csv", "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow(KEYS)
            for assignment in gradebook.assignments:
                if assignments and assignment.name not in assignments:
                    continue
                for student in gradebook.students:
                    if students and student.id not in students:
                        continue
                    row = {
                        "assignment": assignment.name,
                        "duedate": assignment.duedate,
                        "student_id": student.id,
                        "last_name": student.last_name,
                        "first_name": student.first_name,
                        "email": student.email,
                        "max_score": assignment.max_score,
                    }
                    try:
                        sub = gradebook.find_submission(assignment.name, student.id)
                    except MissingEntry:
                        row |= {"timestamp": "", "raw_score": 0.0, "score": 0.0,
                                "late_submission_penalty": 0.0}  # fmt: skip
                    else:
                        penalty = sub.late_submission_penalty
                        row |= {"timestamp": sub.timestamp, "raw_score": sub.score,
                                "late_submission_penalty": penalty,
                                "score": max(0.0, sub.score - penalty)}  # fmt: skip
                    out.writerow(["" if row[k] is None else str(row[k]) for k in KEYS])


def export_grades(root, to, config_file) -> None:
    """What ``nbgrader export --to=TO`` does on the course at `root`, in this process (no
    second Python that imports nbgrader again): the exporter `config_file` names
    (``ExportApp.plugin_class``, nbgrader's CSV plugin by default) on the course's gradebook."""
    from pathlib import Path

    from nbgrader.apps import ExportApp
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config_file = Path(config_file)
    config = PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config()
    config.CourseDirectory.root = str(root)
    config.ExportPlugin.to = str(to)
    app = ExportApp(config=config)  # its plugin_class, as the command line resolves it
    coursedir = CourseDirectory(config=config)
    plugin = app.plugin_class(config=config)
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        plugin.export(gb)
