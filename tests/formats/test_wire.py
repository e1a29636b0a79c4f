"""What crosses between the instructor's side and a task (graders/formats/wire.py): the
sandbox's events file says, in words, which budget a killed kernel ran past; a missing or
damaged file still gives a sentence, never a traceback."""

from __future__ import annotations

import json

from graders.formats import wire


def test_the_budget_a_killed_kernel_ran_past_is_said(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"notebook_s": 90.0}) + "\n" + json.dumps({"other": 1}) + "\n")
    assert wire.kill_reason(events) == "the whole-notebook budget of 90 s"
    for damaged in ("", "not json\n", "[1]\n", '{"notebook_s": "long"}\n'):
        events.write_text(damaged)
        assert wire.kill_reason(events) == "the whole-notebook budget", damaged
    assert wire.kill_reason(tmp_path / "missing.jsonl") == "the whole-notebook budget"
