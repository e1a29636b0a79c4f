"""The kernel lies about its results: it replaces run_cell, patches comparisons, forges
observe or the display of records, reads frames, returns objects equal to anything. Every
such hand-in gets exactly its declared score, and no verdict is decided in the kernel.
"""

from __future__ import annotations

from hostile_class import HOSTILE, LAB, TEST_CELLS, cell, graded_notebook


def test_every_adversary_gets_exactly_its_declared_score(graded):
    _root, scores, report, _before = graded
    assert set(HOSTILE) <= set(scores)
    got = {name: report.scores.get((name, LAB)) for name in scores}
    assert got == scores


def test_the_verdict_cannot_be_read_or_forged_from_the_kernel(graded):
    """The hidden code ran (or was skipped by the student) and every check was judged
    outside the kernel: records with a tolerance of their own, rewritten, cleared and shown
    again, or missing, all fail; the visible checks the tricks passed count for nothing."""
    root, _scores, report, _before = graded
    for student in ("reads_the_verdict", "forged_records", "event_hooks"):
        verdicts = report.verdicts[(student, LAB)]
        assert set(verdicts) == set(TEST_CELLS), student
        kinds = {g: v.kind for g, v in verdicts.items()}
        assert "passed" not in kinds.values(), (student, verdicts)
        # every visible check passed: it is the hidden records that failed
        assert "visible" not in kinds.values(), (student, verdicts)
    kinds = {g: v.kind for g, v in report.verdicts[("event_hooks", LAB)].items()}
    sentences = {g: v.sentence for g, v in report.verdicts[("event_hooks", LAB)].items()}
    # the hidden code dropped by a transformer, or its observe calls removed: no records
    for grade_id in TEST_CELLS[:3]:
        assert "did not get as far" in sentences[grade_id], sentences[grade_id]
    # re-recorded with a tolerance of its own: the reference's tolerance decides
    for grade_id in TEST_CELLS[3:]:
        assert kinds[grade_id] == "hidden" and "did not get as far" not in sentences[grade_id]
    # the forged module and display were used: their records reached the judge, and failed
    graded_nb = graded_notebook(root, "forged_records")
    for grade_id in TEST_CELLS:
        assert cell(graded_nb, grade_id).outputs[0].ename == "CheckFailed"
