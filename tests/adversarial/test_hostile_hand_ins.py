"""Hostile hand-ins as files: any folder name (glob characters, a leading dash, not UTF-8, CSV
quoting), crowded folders and late timestamps are graded under their own name, on time or
late as plain nbgrader would say.
"""

from __future__ import annotations

import os
from datetime import datetime

import pytest
from hostile_class import (
    CSV_HOSTILE,
    LAB,
    NAMED,
    NAMES,
    course_copy,
    grades_csv,
    lateness,
    listed_rank,
)

from graders.grade import intake
from graders.grade.grade import grade_class


def test_late_submissions_are_late_as_plain_nbgrader_would_say(graded):
    root, _scores, report, _before = graded
    stamp, late = lateness(root, "forged_records")
    assert stamp == datetime(2024, 1, 2, 12) and late == 36 * 3600
    assert lateness(root, "complete") == (None, 0)  # no timestamp.txt: not late
    # a timestamp.txt nbgrader cannot read is ignored, with a note
    assert lateness(root, "links_everywhere") == (None, 0)
    notes = {p.where: p.reason for p in report.notes}
    assert "timestamp.txt (not a timestamp" in notes[f"submitted/links_everywhere/{LAB}"]


def test_a_crowded_folder_does_not_hide_a_late_timestamp(graded):
    root, _scores, _report, _before = graded
    folder = root / "submitted" / "class_stopper" / LAB
    if listed_rank(folder, "timestamp.txt") < intake.MAX_LISTED:
        pytest.skip("this filesystem lists timestamp.txt among the first entries")
    stamp, late = lateness(root, "class_stopper")
    assert stamp == datetime(2024, 1, 2, 12) and late == 36 * 3600


def test_any_folder_name_is_graded_under_its_own_name(named):
    root, report = named
    rows = {(r["student_id"], r["assignment"]): r for r in grades_csv(root)}
    for name in NAMES:
        assert report.scores[(name, LAB)] == 10, name
        assert float(rows[(name, LAB)]["score"]) == 10, name
        assert (root / "feedback" / name / LAB / f"{LAB}.html").is_file(), name
        assert (root / "autograded" / name / LAB / f"{LAB}.ipynb").is_file(), name
    assert report.scores[(CSV_HOSTILE, LAB)] == 10
    theirs = [p for p in report.problems if p.where.split("/")[1:2] in ([n] for n in NAMED)]
    assert not theirs, theirs


def test_grades_csv_keeps_one_row_per_student_whatever_the_name(named):
    root, _report = named
    rows = grades_csv(root)
    for name in NAMED:  # (the class's other students have rows of their own)
        assert [r["student_id"] for r in rows].count(name) == 1, name
    assert len({(r["student_id"], r["assignment"]) for r in rows}) == len(rows)
    row = next(r for r in rows if r["student_id"] == CSV_HOSTILE)
    assert float(row["score"]) == 10 and row["assignment"] == LAB


def test_a_folder_name_that_is_not_utf8_does_not_stop_the_class(pristine, tmp_path):
    root = course_copy(pristine, tmp_path / "course")
    (root / "submitted" / "no_notebook" / LAB).mkdir(parents=True)
    odd = os.path.join(os.fsencode(root / "submitted"), b"\xff\xfe-student", LAB.encode())
    os.makedirs(odd)
    with open(os.path.join(odd, f"{LAB}.ipynb".encode()), "w") as fh:
        fh.write("not a notebook")
    report = grade_class(root, labs=[LAB], workers=1, quiet=True, feedback=False)
    assert report.scores[("no_notebook", LAB)] == 0
    assert any("student" in p.where and p.where.startswith("submitted/") for p in report.problems)
