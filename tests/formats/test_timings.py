"""A hand-in's timings (graders/formats/timings.py): one list of phases, timings.csv's columns
in its order; the task's timings file summed by phase, a line that is not a timing (or a
missing file) costing nothing; clock times kept apart from the durations."""

from __future__ import annotations

import time

from graders.formats import timings
from graders.formats.timings import PHASES, Phase


def test_the_phases_are_timings_csvs_columns_in_order():
    assert [p.value for p in PHASES] == [
        "queue", "intake", "kernel_start", "execution", "checks", "feedback", "merge",
    ]  # fmt: skip


def test_timings_are_summed_by_phase_and_bad_lines_skipped(tmp_path):
    file = tmp_path / "timings.jsonl"
    assert timings.read(file) == {}  # nothing measured yet
    timings.add(file, Phase.KERNEL_START, 0.5)
    timings.add(file, Phase.CHECKS, 0.25)
    timings.add(file, Phase.KERNEL_START, 1.0)  # a second kernel
    with open(file, "a") as fh:
        fh.write("not json\n" + '{"phase": "checks"}\n' + '{"phase": "x", "seconds": "y"}\n')
        fh.write('{"phase": "started_at", "seconds": 5}\n')  # no phase: never a duration
    read = timings.read(file)
    assert read == {"kernel_start": 1.5, "checks": 0.25}
    assert all(isinstance(phase, Phase) for phase in read)


def test_when_a_phase_first_ended_is_read_back(tmp_path):
    file = tmp_path / "timings.jsonl"
    assert timings.first_end(file, Phase.KERNEL_START) is None  # no file yet
    before = time.time()
    timings.add(file, Phase.CHECKS, 0.1)
    assert timings.first_end(file, Phase.KERNEL_START) is None  # that phase never ended
    timings.add(file, Phase.KERNEL_START, 0.5)
    first = timings.first_end(file, Phase.KERNEL_START)
    timings.add(file, Phase.KERNEL_START, 0.5)
    with open(file, "a") as fh:
        fh.write('{"phase": "kernel_start", "seconds": 1}\n')  # no "at": skipped
    assert before <= first <= time.time()
    assert timings.first_end(file, Phase.KERNEL_START) == first  # the first of the two kernels
