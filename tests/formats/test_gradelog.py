"""grading-log.jsonl (graders/formats/gradelog.py): what the class run appends is what it and the
report read back; a line that is not a hand-in's is left out and said so, never a traceback."""

from __future__ import annotations

import json

from graders.formats import gradelog
from graders.formats.gradelog import GRADING_LOG, LogEntry
from graders.formats.verdict import Kind, Verdict


def entry(student: str, lab: str, key: str, ok: bool = True) -> LogEntry:
    return LogEntry(
        student=student,
        lab=lab,
        key=key,
        graded_at="2024-05-01T10:00:00+0000",
        ok=ok,
        timings={"total": 1.5},
        verdicts={"t1": Verdict(Kind.PASSED, "Passed.", cell=3)},
        problems=[],
        ignored=[],
    )


def test_what_is_appended_is_read_back_in_order_and_the_latest_line_counts(tmp_path):
    gradelog.append(tmp_path, entry("ann", "lab1", "k1", ok=False))
    gradelog.append(tmp_path, entry("bob", "lab1", "k2"))
    gradelog.append(tmp_path, entry("ann", "lab1", "k3"))  # a regrade
    entries, problems = gradelog.read(tmp_path)
    assert problems == []
    assert [e["key"] for e in entries] == ["k1", "k2", "k3"]
    latest = gradelog.latest(entries)
    assert latest[("ann", "lab1")]["key"] == "k3" and latest[("ann", "lab1")]["ok"] is True
    assert set(latest) == {("ann", "lab1"), ("bob", "lab1")}
    assert entries[0]["verdicts"] == {"t1": Verdict(Kind.PASSED, "Passed.", cell=3)}


def test_a_verdict_that_is_not_one_is_left_out_of_its_line(tmp_path):
    line = json.loads(json.dumps(entry("ann", "lab1", "k"), default=Verdict.as_json))
    line["verdicts"]["t2"] = {"kind": "won", "sentence": "All points."}
    line["verdicts"]["t3"] = "passed"
    gradelog.path(tmp_path).write_text(json.dumps(line) + "\n")
    (read,), problems = gradelog.read(tmp_path)
    assert problems == [] and set(read["verdicts"]) == {"t1"}


def test_lines_that_are_not_a_hand_ins_are_left_out_by_number(tmp_path):
    good = json.dumps(entry("ann", "lab1", "k"), default=Verdict.as_json)
    lines = [good, "{not json", "[1, 2]", json.dumps({"student": "x"}), "", good]
    (tmp_path / GRADING_LOG).write_text("\n".join(lines) + "\n", encoding="utf-8")
    entries, problems = gradelog.read(tmp_path)
    assert len(entries) == 2
    assert [p.split(" left out")[0] for p in problems] == [
        f"{GRADING_LOG} line 2",
        f"{GRADING_LOG} line 3",
        f"{GRADING_LOG} line 4",
    ]


def test_no_log_is_said_in_words(tmp_path):
    entries, problems = gradelog.read(tmp_path)
    assert entries == [] and problems == [
        f"no {GRADING_LOG}: verdicts, timings and problems are not known"
    ]
