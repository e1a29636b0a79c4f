"""The class report's numbers (graders/report/report_numbers.py), computed without a gradebook."""

from __future__ import annotations

import pytest


def test_runs_are_told_apart_in_the_log():
    """A run's wall time runs from its first hand-in's start (graded_at less queue wait and
    grading time) to its last graded_at; a regrade later on is a run of its own."""
    from graders.report.report_numbers import runs

    def line(at: str, **timings) -> dict:
        return {
            "student": "s",
            "lab": "l",
            "graded_at": f"2024-05-01T{at}+0000",
            "timings": timings,
        }

    found = runs(
        [
            line("10:00:00"),  # intake refused a hand-in: logged before the run starts
            line("10:00:20", queue=0.1, total=15, merge=0.2),
            line("10:00:25", queue=0.2, total=20, merge=0.2),
            line("10:00:40", queue=15.5, merge=0.2),  # its worker died: no total
            line("10:00:50", queue=20.5, total=25, merge=0.2),
            line("11:00:10", queue=0.1, total=9, merge=0.2),  # one student regraded
        ]
    )
    assert [(r.hand_ins, r.wall_s) for r in found] == [(5, 50.0), (1, pytest.approx(9.3))]
    assert found[0].sum_s == pytest.approx(15.2 + 20.2 + 25.2)
