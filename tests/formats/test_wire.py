"""What crosses between the instructor's side and a task (graders/formats/wire.py): a task's timings
file is summed by phase, and a line that is not a timing (or a missing file) costs nothing."""

from __future__ import annotations

from graders.formats import wire


def test_timings_are_summed_by_phase_and_bad_lines_skipped(tmp_path):
    file = tmp_path / "timings.jsonl"
    assert wire.read_timings(file) == {}  # nothing measured yet
    wire.add_timing(file, "kernel_start", 0.5)
    wire.add_timing(file, "checks", 0.25)
    wire.add_timing(file, "kernel_start", 1.0)  # a second kernel
    with open(file, "a") as fh:
        fh.write("not json\n" + '{"phase": "checks"}\n' + '{"phase": "x", "seconds": "y"}\n')
    assert wire.read_timings(file) == {"kernel_start": 1.5, "checks": 0.25}


def test_when_a_phase_first_ended_is_read_back(tmp_path):
    import time

    file = tmp_path / "timings.jsonl"
    assert wire.first_end(file, "kernel_start") is None  # no file yet
    before = time.time()
    wire.add_timing(file, "checks", 0.1)
    assert wire.first_end(file, "kernel_start") is None  # that phase never ended
    wire.add_timing(file, "kernel_start", 0.5)
    first = wire.first_end(file, "kernel_start")
    wire.add_timing(file, "kernel_start", 0.5)
    with open(file, "a") as fh:
        fh.write('{"phase": "kernel_start", "seconds": 1}\n')  # no "at": skipped
    assert before <= first <= time.time()
    assert wire.first_end(file, "kernel_start") == first  # the first of the two kernels
