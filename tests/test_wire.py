"""What crosses between the instructor's side and a task (graders/wire.py): a task's timings
file is summed by phase, and a line that is not a timing (or a missing file) costs nothing."""

from __future__ import annotations

from graders import wire


def test_timings_are_summed_by_phase_and_bad_lines_skipped(tmp_path):
    file = tmp_path / "timings.jsonl"
    assert wire.read_timings(file) == {}  # nothing measured yet
    wire.add_timing(file, "kernel_start", 0.5)
    wire.add_timing(file, "checks", 0.25)
    wire.add_timing(file, "kernel_start", 1.0)  # a second kernel
    with open(file, "a") as fh:
        fh.write("not json\n" + '{"phase": "checks"}\n' + '{"phase": "x", "seconds": "y"}\n')
    assert wire.read_timings(file) == {"kernel_start": 1.5, "checks": 0.25}
