"""The hidden tests and other students' work stay hidden: whatever a kernel prints, hooks or
has the judge quote, no feedback page, graded notebook or sentence carries them.
"""

from __future__ import annotations

import html

from hostile_class import CSV_HOSTILE, LAB, NAMED, NAMES, hidden_lines, outputs, scan_for_leaks

from graders.build.demo import declared_class


def test_nothing_leaked_between_students_or_out_of_the_hidden_tests(graded):
    root, scores, _report, _before = graded
    owners = set(scores) | {s.name for s in declared_class(LAB)} | set(NAMED)
    # (the judge's sentence of leaks_through_the_judge: its own test below)
    assert scan_for_leaks(root, owners, unless="leaks_through_the_judge") == []


def test_feedback_shows_no_hidden_code_whatever_the_kernel_printed(named):
    root, report = named
    assert report.scores[("leaks_hidden_code", LAB)] == 10
    # the kernel had the hidden code in hand, and printed it (the instructors' graded copy
    # keeps what answer cells printed; test cells hold only the judge's sentence)
    printed = outputs(root, "leaks_hidden_code")
    assert any(line in printed for line in hidden_lines(LAB))
    assert "BEFORE Wh = torch.ones(3, 3" in printed  # a plain cell's source, from the hook
    assert "BEFORE" not in outputs(root, "leaks_hidden_code", tests=True)
    page = root / "feedback" / "leaks_hidden_code" / LAB / f"{LAB}.html"
    shown = html.unescape(page.read_text())
    assert "Passed." in shown
    for printed_line in ("BEFORE Wh = torch.ones(3, 3", "AFTER _Wh = torch.randn", "HISTORY \n"):
        assert printed_line not in shown
    owners = {*NAMES, CSV_HOSTILE, "leaks_hidden_code", "leaks_through_the_judge"}
    assert scan_for_leaks(root, owners, unless="leaks_through_the_judge") == []


def test_the_judges_sentence_carries_no_hidden_code(named):
    root, report = named
    assert report.scores[("leaks_through_the_judge", LAB)] == 8  # its forged check fails
    page = root / "feedback" / "leaks_through_the_judge" / LAB / f"{LAB}.html"
    shown = html.unescape(page.read_text())
    leaked = [line for line in hidden_lines(LAB) if line in shown]
    assert leaked == []
