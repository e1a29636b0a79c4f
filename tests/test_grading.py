"""Grading a class with nbgrader: the demo class gets exactly its declared scores, and bad
input is reported by name while the rest of the class is still graded and exported."""

from __future__ import annotations

import csv
import html
import json
import shutil
import subprocess
import sys

import nbformat

from graders.build import build
from graders.course import LABS, REPO, lab_source
from graders.demo import compare, declared_class, write_class
from graders.grade import grade_class


def test_demo_class_gets_its_declared_scores(course):
    students = write_class(course, LABS, course / "labs")
    report = grade_class(course, labs=LABS, workers=2, quiet=True)
    assert not report.problems, report.problems
    assert compare(students, report.scores) == []
    # every lab's demo class is complete: full marks, nothing, part, a crash, two mistakes
    for lab in LABS:
        declared = {s.name: s.score for s in declared_class(lab)}
        assert {"complete", "blank", "partial", "crash"} <= set(declared), lab
        assert len(declared) >= 6, f"{lab}: the demo class needs at least two named mistakes"
        assert declared["complete"] == report.max_scores[lab] > 0
        assert declared["blank"] == 0
    # grades.csv (nbgrader export) and one feedback page per submission
    with open(course / "grades.csv") as fh:
        rows = {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(fh)}
    for s in students:
        assert rows[(s.name, s.lab)] == s.score
        assert (course / "feedback" / s.name / s.lab / f"{s.lab}.html").is_file()


def hidden_lines(lab: str) -> list[str]:
    """Lines of the lab's hidden tests that appear nowhere in what students are given."""
    released = (REPO / "labs" / lab / f"{lab}.ipynb").read_text()
    lines, inside = [], False
    for line in lab_source(lab).read_text().splitlines():
        if "BEGIN HIDDEN TESTS" in line or "END HIDDEN TESTS" in line:
            inside = "BEGIN" in line
        elif inside and len(line.strip()) > 20 and json.dumps(line.strip())[1:-1] not in released:
            lines.append(line.strip())
    return lines


def test_feedback_never_shows_hidden_tests(course):
    """Runs after the demo class was graded: no feedback page holds hidden test code."""
    pages = list((course / "feedback").glob("*/*/*.html"))
    assert pages, "no feedback was written"
    for page in pages:
        text = html.unescape(page.read_text())
        lab = page.parent.name
        assert "HIDDEN TESTS" not in text, page
        leaked = [line for line in hidden_lines(lab) if line in text]
        assert not leaked, f"{page} shows hidden test code: {leaked[:2]}"
    assert any(hidden_lines(lab) for lab in LABS), "the leak check has nothing to look for"


def test_bad_submissions_are_reported_and_the_rest_is_graded(tmp_path):
    lab = "lab02_backprop"
    build(root=tmp_path, labs=[lab], release=tmp_path / "labs")
    good = next(s for s in declared_class(lab) if s.name == "complete")
    write_class(tmp_path, [lab], tmp_path / "labs")
    for student in {s.name for s in declared_class(lab)} - {good.name}:
        shutil.rmtree(tmp_path / "submitted" / student)
    broken = tmp_path / "submitted" / "broken_json" / lab / f"{lab}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [ this is not json')
    before = broken.read_bytes()
    exiter = nbformat.read(tmp_path / "submitted" / good.name / lab / f"{lab}.ipynb", as_version=4)
    answer = next(c for c in exiter.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = "import os\nos._exit(3)\n" + answer.source
    (tmp_path / "submitted" / "exiter" / lab).mkdir(parents=True)
    nbformat.write(exiter, tmp_path / "submitted" / "exiter" / lab / f"{lab}.ipynb")
    stray = tmp_path / "submitted" / "wrong_lab" / "lab99_nope"
    stray.mkdir(parents=True)
    (stray / "lab99_nope.ipynb").write_text("{}")

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graders.grade",
            "--root",
            str(tmp_path),
            "--lab",
            lab,
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"submitted/broken_json/{lab}/{lab}.ipynb: not a valid notebook file" in result.stdout
    assert "submitted/wrong_lab/lab99_nope: there is no lab named 'lab99_nope'" in result.stdout
    assert broken.read_bytes() == before, "a submitted file was modified"
    with open(tmp_path / "grades.csv") as fh:
        rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(fh)}
    assert float(rows[("complete", lab)]["score"]) == good.score
    # a kernel that dies is kept, with zero, and named in the summary
    assert float(rows[("exiter", lab)]["score"]) == 0.0
    assert f"submitted/exiter/{lab}: the kernel died" in result.stdout
