"""A class run's inputs: what every grading task shares (a `wire.Course`), what each
hand-in's grade depends on (its key), what a resumed run leaves as it is, and the order the
hand-ins are graded in. graders/grade.py uses them; the reference files are
graders/references.py's, the grading log graders/gradelog.py's, the gradebook
graders/gradebook.py's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from graders.config.course import REPO
from graders.formats import gradebook, gradelog, references
from graders.formats.wire import Course
from graders.grade.intake import HandIn


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def course_inputs(root: Path, labs: list[str], labs_only: Path) -> Course:
    """What every task of the class shares, as data (no shared file system is assumed)."""
    where = references.folder(root)
    observed = {lab: references.observations(references.path(where, lab)) for lab in labs}
    timings = {lab: _timing(references.path(where, lab)) for lab in labs}
    releases, files = {}, {}
    for lab in labs:
        folder = root / "labs" / lab
        releases[lab] = (folder / f"{lab}.ipynb").read_text(encoding="utf-8")
        files[lab] = {
            p.name: p.read_bytes()
            for p in sorted(folder.iterdir())
            if p.is_file() and not p.is_symlink() and p.suffix != ".ipynb"
        }
    return Course(
        config=(REPO / "nbgrader_config.py").read_text(),
        gradebook=labs_only.read_bytes(),
        references=observed,
        releases=releases,
        files=files,
        timings=timings,
    )


def _timing(file: Path) -> dict:
    """The solution's times in a reference file, as its task's copy keeps them (the per-lab
    time budgets, graders/budgets.py); {} where it has none (flat limits)."""
    timed = references.timing(file)
    if timed is None:
        return {}
    return {"version": references.VERSION, "cells": timed[0], "seconds": timed[1]}


def longest_first(hand_ins: list[HandIn], root: Path) -> list[HandIn]:
    """The hand-ins in the order to grade them: the labs whose solution took longest to run
    (`make build` timed it, build/reference/<lab>.json) first, so that a class run does not
    end on one long notebook while the other workers wait; otherwise as found."""
    where = references.folder(root)  # a lab timed by no build yet: 0, in the order found
    seconds = {
        lab: references.seconds(references.path(where, lab)) for lab in {h.lab for h in hand_ins}
    }
    return sorted(hand_ins, key=lambda h: -seconds[h.lab])


def hand_in_key(hand_in: HandIn, course: Course) -> str:
    """What a grade depends on: the notebook, the release and the reference records."""
    lab = hand_in.lab
    made_of = [hand_in.notebook, hand_in.timestamp or "", course["releases"][lab]]
    made_of.append(json.dumps(course["references"][lab], sort_keys=True))
    return _sha("\n".join(_sha(part) for part in made_of))


def already_graded(root: Path, labs: list[str]) -> set[tuple[str, str]]:
    with gradebook.opened(gradebook.of(root)) as gb:
        return {
            (sub.student.id, assignment.name)
            for assignment in gb.assignments
            if assignment.name in labs
            for sub in assignment.submissions
        }


def not_graded_yet(root: Path, hand_ins: list[HandIn], keys: dict, labs: list[str]) -> list[HandIn]:
    """The hand-ins not graded yet from the same inputs (their key in the log, their
    submission in the gradebook): what a resumed run grades."""
    log = gradelog.latest(gradelog.read(root)[0])
    in_book = already_graded(root, labs)
    done = {k for k, key in keys.items() if k in in_book and log.get(k, {}).get("key") == key}
    return [h for h in hand_ins if (h.student, h.lab) not in done]


def expected_count(root: Path, hand_ins: list[HandIn], labs: list[str], force: bool) -> int:
    """How many hand-ins this run will likely grade, known before the references are checked
    (from the reference files as they are): the size of the local cluster to start at once.
    A guess only; the run grades what the checked references say."""
    if force:
        return len(hand_ins)
    try:
        where = references.folder(root)
        course = {
            "releases": {
                lab: (root / "labs" / lab / f"{lab}.ipynb").read_text(encoding="utf-8")
                for lab in labs
            },
            "references": {
                lab: references.observations(references.path(where, lab)) for lab in labs
            },
        }
        keys = {(h.student, h.lab): hand_in_key(h, course) for h in hand_ins}
        return len(not_graded_yet(root, hand_ins, keys, labs))
    except Exception:  # noqa: BLE001 - missing or damaged: the references step remakes them
        return len(hand_ins)
