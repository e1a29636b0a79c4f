"""The class report end to end on a class of three built through the format owners (a small
nbgrader gradebook, graders/formats/gradebook.py; the grading log's typed entries and
verdicts, graders/formats/gradelog.py and verdict.py), no graded class: what it reads
(report_data), the typed rows it computes (report_numbers), the lab sections and charts
(report_labs, report_charts) and the page's other sections (report_page)."""

from __future__ import annotations

import csv
import json

import pytest
from helpers import small_gradebook

from graders.formats import gradebook, gradelog
from graders.formats.verdict import Kind, Verdict
from graders.report import report_numbers
from graders.report.report import build_report
from graders.report.report_data import read_course


def small_class(root):
    """lab1 (checks t1: 2 points, t2: 3 points): ada full marks, bob fails t2, cy flagged."""
    small_gradebook(root)
    release = {"cells": [{"metadata": {"nbgrader": {"grade_id": g}}} for g in ("t2", "t1")]}
    (root / "labs" / "lab1").mkdir(parents=True)
    (root / "labs" / "lab1" / "lab1.ipynb").write_text(json.dumps(release))
    scores = {"ada": (2.0, 3.0), "bob": (2.0, 0.0), "cy": (0.0, 0.0)}
    with gradebook.opened(gradebook.of(root)) as gb:
        for student, (t1, t2) in scores.items():
            gb.add_student(student)
            submission = gb.add_submission("lab1", student)
            for grade in submission.notebooks[0].grades:
                grade.auto_score = {"t1": t1, "t2": t2}[grade.name]
            submission.notebooks[0].flagged = student == "cy"
        gb.db.commit()
    wrong = Verdict(Kind.HIDDEN, "t2 gives 0 for a 1x1 input.")
    for nth, student in enumerate(scores):
        verdicts = {"t1": Verdict(Kind.PASSED, ""), "t2": Verdict(Kind.PASSED, "")}
        if student != "ada":
            verdicts["t2"] = wrong
        gradelog.append(
            root,
            gradelog.LogEntry(
                student=student, lab="lab1", key="k",
                graded_at=f"2026-05-01T10:00:{20 + 5 * nth}+0000",
                ok=student != "cy", timings={"queue": 0.5, "total": 20.0, "merge": 0.5},
                verdicts=verdicts, problems=["the kernel died"] if student == "cy" else [],
                ignored=[],
            ),
        )  # fmt: skip


@pytest.mark.filterwarnings("ignore:.*not in session")  # nbgrader's add_submission
def test_the_reports_rows_are_typed_computed_from_the_class_and_shown(tmp_path):
    small_class(tmp_path)
    course = read_course(tmp_path)
    lab = course.labs["lab1"]
    assert [key for key, _ in lab.cells] == ["t2", "t1"]  # the release's order
    rates = report_numbers.pass_rates(lab)
    assert rates == [
        report_numbers.PassRate("t2", 3.0, 1, 3, 1 / 3),
        report_numbers.PassRate("t1", 2.0, 2, 3, 2 / 3),
    ]
    bins = report_numbers.histogram(lab)
    assert [(b.score_from, b.hand_ins) for b in bins if b.hand_ins] == [(0, 1), (2, 1), (5, 1)]
    (group,) = report_numbers.failures(course, lab)["t2"]
    assert group == report_numbers.FailureGroup(
        "hidden", "t2 gives 0 for a 1x1 input.", 2, ["bob", "cy"]
    )
    (look,) = report_numbers.human_look(course)
    assert look == report_numbers.HumanLook("cy", "lab1", "killed", "the kernel died")
    (run,) = report_numbers.runs(course.log_lines)
    assert run.hand_ins == 3 and run.wall_s == 31.0  # from 10:00:20 less 21 s to 10:00:30
    # and the page and its tables show those rows
    built = build_report(tmp_path)
    page = built.index.read_text()
    assert "1 need a human look" in page and "t2 gives 0 for a 1x1 input." in page
    assert page.count("data:image/png;base64,") >= 3  # histogram, pass rates, times
    tables = {p.name: list(csv.reader(p.open())) for p in built.csvs}
    assert tables["needs-a-human-look.csv"][1][:4] == ["cy", "lab1", "killed", "the kernel died"]
    wide = list(csv.reader(built.wide_csv.open()))
    assert wide[0] == ["student_id", "lab1 (max 5)", "total (max 5)"]
    assert wide[1:] == [["ada", "5", "5"], ["bob", "2", "2"], ["cy", "0", "0"]]
