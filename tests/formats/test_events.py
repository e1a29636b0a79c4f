"""The sandbox's events file (graders/formats/events.py), owned by one typed record: what the
kernel manager appends is what the task reads back, and the sentence says which budget a
killed kernel ran past; a missing or damaged file still gives a sentence, never a traceback."""

from __future__ import annotations

import json

from graders.formats import events
from graders.formats.events import Kill


def test_a_kill_is_written_and_read_back_as_the_same_record(tmp_path):
    file = tmp_path / "events.jsonl"
    first, second = Kill("/tmp/kernel-a", 150.0, 90.0), Kill("/tmp/kernel-b", 70.0, 10.5)
    events.append(file, first)
    events.append(str(file), second)
    assert events.read(file) == [first, second]
    assert events.reason(file) == "the whole-notebook budget of 90 s"


def test_a_damaged_or_missing_file_still_gives_a_sentence(tmp_path):
    file = tmp_path / "events.jsonl"
    kill = json.dumps({"kernel": "k", "budget_s": 150, "notebook_s": 90})
    for damaged in ("", "not json\n", "[1]\n", '{"notebook_s": "long"}\n', '{"other": 1}\n'):
        file.write_text(damaged)
        assert events.read(file) == [], damaged
        assert events.reason(file) == "the whole-notebook budget", damaged
        file.write_text(damaged + kill + "\n")  # a cut line before a whole one: the whole one
        assert events.reason(file) == "the whole-notebook budget of 90 s", damaged
    assert events.read(tmp_path / "missing.jsonl") == []
    assert events.reason(tmp_path / "missing.jsonl") == "the whole-notebook budget"
