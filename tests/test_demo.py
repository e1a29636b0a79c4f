"""The demo class (graders/demo.py, each lab's demo.toml), graded by the real grader, gets
exactly its declared scores."""

from __future__ import annotations

import csv

from test_catalogue import counted, failure_sentences

from graders.course import LABS
from graders.demo import declared_class, score_mismatches


def test_no_demo_failure_points_into_a_checks_own_code(graded):
    """Every failed check of the demo class is told by a check's own sentence (or a hidden
    check's), never by "stopped at line N" of the check's code (tests/test_catalogue.py)."""
    students, _packs, report = graded
    found = failure_sentences(report, [(s.name, s.lab) for s in students])
    print(f"demo failure sentences: {counted(found)}")
    assert found["check"], "no failure sentence worded by a check: was anything graded?"
    assert not found["code"], f"{counted(found)}:\n" + "\n".join(found["code"])


def test_demo_class_gets_its_declared_scores(course, graded):
    students, _packs, report = graded
    assert not report.problems, report.problems
    assert score_mismatches(students, report.scores) == []
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
