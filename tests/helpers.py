"""What several test modules and tests/conftest.py use: the class report's small graded class,
and a lab's `complete` hand-in and the errors a run of it showed. No tests here."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import nbformat

from graders.build import build, source_notebook
from graders.course import REPO
from graders.demo import declared_class, student_notebook, write_class
from graders.grade import grade_class

# ---- the class report's class (tests/test_report.py; tests/test_browser.py opens it too)

REPORT_LABS = ["lab02_backprop", "lab03_accumulation"]  # the two fastest labs to grade
ODD = '<b>Ann & "O\'Neil" #1 50%?'  # a student folder name with HTML and URL characters
LATE, ON_TIME = "partial", "complete"  # lab02's hand-ins with a timestamp.txt


def grade_report_class(root: Path) -> Path:
    """A scratch course in `root` with REPORT_LABS built and a small class graded: their demo
    classes, plus a student with an odd name, a kernel that dies, a notebook that is not JSON
    and a late hand-in."""
    from nbgrader.api import Gradebook

    build(root=root, labs=REPORT_LABS, release=root / "labs")
    write_class(root, REPORT_LABS, root / "labs")
    submitted, lab = root / "submitted", REPORT_LABS[0]
    shutil.copytree(submitted / "no_retain_graph" / lab, submitted / ODD / lab)
    broken = submitted / ODD / REPORT_LABS[1] / f"{REPORT_LABS[1]}.ipynb"
    broken.parent.mkdir()
    broken.write_text('{"cells": [ this is not json')
    exiter = nbformat.read(submitted / "complete" / lab / f"{lab}.ipynb", as_version=4)
    answer = next(c for c in exiter.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = "import os\nos._exit(3)\n" + answer.source
    (submitted / "exiter" / lab).mkdir(parents=True)
    nbformat.write(exiter, submitted / "exiter" / lab / f"{lab}.ipynb")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(lab, duedate=datetime(2024, 1, 1, 12))
    (submitted / LATE / lab / "timestamp.txt").write_text("2024-01-02 15:30:00.000000 UTC")
    (submitted / ON_TIME / lab / "timestamp.txt").write_text("2023-12-31 12:00:00.000000 UTC")
    grade_class(root, labs=REPORT_LABS, workers=2, quiet=True)
    return root


# ---- a lab filled in, and what went wrong when it ran


def complete_notebook(lab: str):
    """The release of `lab` with every exercise answered as the demo class's `complete`."""
    release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    (student,) = [s for s in declared_class(lab) if s.name == "complete"]
    return student_notebook(student, release, source_notebook(lab))


def errors(nb) -> list[str]:
    """One line for each error output of a run notebook: its cell, the error and its value."""
    found = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                head = cell.source.splitlines()[0] if cell.source else ""
                found.append(f"cell {index} ({head[:60]!r}): {output.ename}: {output.evalue[:300]}")
    return found
