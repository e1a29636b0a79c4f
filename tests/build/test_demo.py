"""The demo class (graders/build/demo.py, each lab's demo.toml), graded by the real grader, gets
exactly its declared scores. `make demo` grades each student by itself; here complete and
blank are, and every other demo student is folded into a hand-in of the mistake catalogue
whose answer cells it leaves alone (tests/helpers.py): that hand-in must lose exactly the
points its students and variants declare."""

from __future__ import annotations

import csv

from test_catalogue import counted, failure_sentences

from graders.build.demo import declared_class, score_mismatches
from graders.config.course import LABS


def demo_hand_ins(graded) -> list[tuple[str, str]]:
    """(student, lab) of every graded hand-in that holds a demo student."""
    alone, folded, _run = graded
    return [(s.name, s.lab) for s in alone] + [(f.name, f.lab) for f in folded if f.students]


def test_no_demo_failure_points_into_a_checks_own_code(graded):
    """Every failed check of the demo class is told by a check's own sentence (or a hidden
    check's), never by "stopped at line N" of the check's code (tests/test_catalogue.py)."""
    report = graded[2]
    found = failure_sentences(report, demo_hand_ins(graded))
    print(f"demo failure sentences: {counted(found)}")
    assert found["check"], "no failure sentence worded by a check: was anything graded?"
    assert not found["code"], f"{counted(found)}:\n" + "\n".join(found["code"])


def test_demo_class_gets_its_declared_scores(course, graded):
    alone, folded, report = graded
    assert not report.problems, report.problems
    assert score_mismatches(alone, report.scores) == []
    wrong = [line for f in folded if f.students and (line := f.mismatch(report))]
    assert not wrong, "\n".join(wrong)
    # every demo student graded once: by itself or in one hand-in
    for lab in LABS:
        declared = {s.name: s.score for s in declared_class(lab)}
        placed = [s.name for s in alone if s.lab == lab]
        placed += [s.name for f in folded if f.lab == lab for s in f.students]
        assert sorted(placed) == sorted(declared), lab
        # every lab's demo class is complete: full marks, nothing, part, a crash, two mistakes
        assert {"complete", "blank", "partial", "crash"} <= set(declared), lab
        assert len(declared) >= 6, f"{lab}: the demo class needs at least two named mistakes"
        assert declared["complete"] == report.max_scores[lab] > 0
        assert declared["blank"] == 0
    # grades.csv (nbgrader export) and one feedback page per hand-in
    with open(course / "grades.csv") as fh:
        rows = {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(fh)}
    for s in alone:
        assert rows[(s.name, s.lab)] == s.score
    for key, score in report.scores.items():
        assert rows[key] == score
        student, lab = key
        assert (course / "feedback" / student / lab / f"{lab}.html").is_file()
