"""grading-log.jsonl: one line per hand-in graded, appended by the class run (graders.grade)
and read by it (to resume) and by the class report (graders.report.report_data).

A line is a `LogEntry`: who and which lab, the key of the inputs it was graded from, when,
whether grading succeeded, the seconds of each phase (`graders.formats.timings.Phase`, and
the task's total), each test cell's verdict (a `graders.formats.verdict.Verdict`, kept as
its JSON) and why it needs a human look. A regrade appends a line; the latest line of a
(student, lab) is the one that counts. `append` is the one writer and `read` the one reader:
a line that is not a JSON object naming a student and a lab is left out, and said so; a
verdict that is not one is left out of its line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from graders.formats.verdict import Verdict, Verdicts

GRADING_LOG = "grading-log.jsonl"


class LogEntry(TypedDict):
    student: str
    lab: str
    key: str | None  # graders.grade.inputs.hand_in_key of what was graded; None: never graded
    graded_at: str  # %Y-%m-%dT%H:%M:%S%z
    ok: bool
    timings: dict[str, float]  # seconds, by phase (graders.formats.timings.Phase) and "total"
    verdicts: Verdicts  # by grade_id
    problems: list[str]  # why it needs a human look
    ignored: list[str]  # other files of the hand-in, not graded (at most 20)


def path(root: Path) -> Path:
    return root / GRADING_LOG


def append(root: Path, entry: LogEntry) -> None:
    with open(path(root), "a", encoding="utf-8") as log:
        verdicts = {gid: v.as_json() for gid, v in entry["verdicts"].items()}
        log.write(json.dumps({**entry, "verdicts": verdicts}) + "\n")


def read(root: Path) -> tuple[list[LogEntry], list[str]]:
    """Every line that can be read, in the order written, and what could not be read."""
    entries, problems = [], []
    try:
        text = path(root).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], [f"no {GRADING_LOG}: verdicts, timings and problems are not known"]
    except OSError as error:
        return [], [f"{GRADING_LOG} could not be read ({error})"]
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
            str(entry["student"]), str(entry["lab"])
            entry["verdicts"] = _verdicts(entry.get("verdicts"))
        except (ValueError, KeyError, TypeError) as error:
            problems.append(f"{GRADING_LOG} line {number} left out ({error})")
            continue
        entries.append(entry)
    return entries, problems


def _verdicts(raw: object) -> Verdicts:
    """The verdicts of a line, each that is one (none where the line has none)."""
    found = {}
    for grade_id, value in (raw or {}).items() if isinstance(raw, dict) else ():
        verdict = Verdict.from_json(value)
        if verdict is not None:
            found[str(grade_id)] = verdict
    return found


def latest(entries: list[LogEntry]) -> dict[tuple[str, str], LogEntry]:
    """The latest line of each (student, lab): a regrade's line comes later."""
    return {(e["student"], e["lab"]): e for e in entries}
