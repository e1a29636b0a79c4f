"""One class run's outcome (graders/grade/class_run.py), built from the typed records of
graders/formats (verdicts, durations by phase): the first limit a notebook hit, timings.csv
(one column per phase, in the phases' order; the total leaves out the wait in the queue),
the summary line and the score table. No class is graded."""

from __future__ import annotations

import csv

from graders.formats.timings import PHASES, TOTAL, Phase
from graders.formats.verdict import Kind, Verdict
from graders.grade.class_run import TIMINGS, ClassRun, limit_hit, summary, table, write_timings


def test_the_first_limit_in_the_notebooks_order_is_named_with_its_cell():
    verdicts = {
        "test_late": Verdict(Kind.LIMIT, "Not graded to the end: the memory cap.", cell=12),
        "test_early": Verdict(Kind.LIMIT, "Not graded to the end: its time budget.", cell=4),
        "test_ok": Verdict(Kind.PASSED, "Passed.", cell=2),
    }
    assert limit_hit(verdicts) == (
        "its time budget (in test_early); graded up to there, see its feedback"
    )
    assert limit_hit({"test_ok": verdicts["test_ok"]}) is None


def test_timings_csv_has_a_column_per_phase_and_the_total_leaves_out_the_queue(tmp_path):
    run = ClassRun(graded=2, wall_s=12.4)
    run.timings[("bob", "lab2")] = {Phase.INTAKE: 0.5, Phase.EXECUTION: 3.25, TOTAL: 9.0}
    run.timings[("ann", "lab1")] = {
        Phase.QUEUE: 10.0, Phase.INTAKE: 1.0, Phase.KERNEL_START: 2.0, Phase.EXECUTION: 4.0,
        Phase.CHECKS: 0.5, Phase.FEEDBACK: 1.5, Phase.MERGE: 0.25, TOTAL: 9.0,
    }  # fmt: skip
    write_timings(tmp_path, run)
    with open(tmp_path / TIMINGS, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["student", "lab", *[p.value for p in PHASES], "total"]
    assert rows[1] == ["ann", "lab1", "10.0", "1.0", "2.0", "4.0", "0.5", "1.5", "0.25", "9.25"]
    assert rows[2] == ["bob", "lab2", "0.0", "0.5", "0.0", "3.25", "0.0", "0.0", "0.0", "3.75"]
    line = summary(run)
    assert line.startswith("graded 2 hand-in(s) in 12s; summed over hand-ins: queue 10s,")
    assert "kernel start 2s" in line and "execution 7s" in line


def test_the_table_shows_each_students_score_or_a_dash():
    run = ClassRun(
        scores={("ann", "lab01_graph"): 7.5, ("bob", "lab02_backprop"): 3.0},
        max_scores={"lab01_graph": 10.0, "lab02_backprop": 6.0},
    )
    assert table(run, ["lab01_graph", "lab02_backprop", "lab03_other"]).splitlines() == [
        "student    lab01    lab02",
        "(max)         10        6",
        "ann          7.5        -",
        "bob            -        3",
    ]
