"""Intake on hostile hand-in folders, without grading: only the notebook's bytes and
timestamp.txt are taken, nothing is followed or waited on, and nothing is dropped silently.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest

from graders.config.course import REPO
from graders.grade import intake

LAB = "lab02_backprop"
RELEASE = REPO / "labs" / LAB / f"{LAB}.ipynb"
LATE = "2024-01-02 12:00:00.000000 UTC"


def hand_in(root: Path, student: str = "s") -> Path:
    folder = root / "submitted" / student / LAB
    folder.mkdir(parents=True)
    shutil.copyfile(RELEASE, folder / f"{LAB}.ipynb")
    return folder


def crowd(folder: Path, count: int) -> None:
    for i in range(count):
        (folder / f"junk-{i:05d}").write_bytes(b"x")


@pytest.fixture
def listed_last(monkeypatch):
    """A filesystem that lists the given name after everything else (ext4's hash order can
    do this to any name; here it is made certain)."""
    real = os.scandir
    last: set[str] = set()

    @contextlib.contextmanager
    def scandir(path="."):
        with real(path) as it:
            entries = sorted(it, key=lambda e: e.name in last)
        yield iter(entries)

    monkeypatch.setattr(intake.os, "scandir", scandir)
    return last


def test_links_pipes_and_odd_files_are_never_followed_nor_waited_on(tmp_path):
    folder = hand_in(tmp_path)
    os.mkfifo(folder / "pipe")
    (folder / "dangling").symlink_to("/nonexistent/target")
    (folder / "everything").symlink_to("/")
    os.mkfifo(folder / "timestamp.txt")
    started = time.monotonic()
    got = intake.take("s", LAB, folder, "here")
    assert time.monotonic() - started < 2
    assert isinstance(got, intake.HandIn) and got.notebook == RELEASE.read_bytes()
    assert got.timestamp is None
    assert got.ignored == [
        "dangling",
        "everything",
        "pipe",
        "timestamp.txt (not a timestamp nbgrader can read)",
    ]

    (folder / f"{LAB}.ipynb").unlink()
    os.mkfifo(folder / f"{LAB}.ipynb")
    got = intake.take("s", LAB, folder, "here")
    assert isinstance(got, intake.Problem) and "not a regular file" in got.reason
    (folder / f"{LAB}.ipynb").unlink()
    (folder / f"{LAB}.ipynb").symlink_to(RELEASE)
    got = intake.take("s", LAB, folder, "here")
    assert isinstance(got, intake.Problem) and "symbolic link" in got.reason
    assert (got.student, got.lab) == ("s", LAB)  # recorded as 0, by name


def test_a_timestamp_that_is_a_link_is_not_read(tmp_path):
    folder = hand_in(tmp_path)
    (tmp_path / "elsewhere.txt").write_text(LATE)
    (folder / "timestamp.txt").symlink_to(tmp_path / "elsewhere.txt")
    got = intake.take("s", LAB, folder, "here")
    assert got.timestamp is None
    assert got.ignored == ["timestamp.txt (not a timestamp nbgrader can read)"]


def test_timestamp_is_read_however_many_files_are_beside_it(tmp_path, listed_last):
    folder = hand_in(tmp_path)
    (folder / "timestamp.txt").write_text(LATE)
    crowd(folder, intake.MAX_LISTED + 10)
    listed_last.add("timestamp.txt")
    got = intake.take("s", LAB, folder, "here")
    assert isinstance(got, intake.HandIn)
    assert got.timestamp == LATE


def test_a_lab_folder_among_many_entries_is_never_dropped_silently(tmp_path, listed_last):
    hand_in(tmp_path, "crowded")
    crowd(tmp_path / "submitted" / "crowded", intake.MAX_LISTED + 10)
    listed_last.add(LAB)
    found, problems = intake.discover(tmp_path, [LAB])
    named = [h for h in found if (h.student, h.lab) == ("crowded", LAB)]
    named += [p for p in problems if (p.student, p.lab) == ("crowded", LAB)]
    assert named


def test_an_assignment_of_several_notebooks_loses_only_the_one_that_cannot_be_read(tmp_path):
    """An instructor's assignment (several notebooks, none named after it): each released
    notebook is taken; one that is a link, broken or missing is left out with why (it is
    graded 0, as nbgrader grades a notebook not handed in), the others are graded; a
    notebook not of the release is ignored like any other file."""
    folder = tmp_path / "submitted" / "s" / "quiz"
    folder.mkdir(parents=True)
    shutil.copyfile(RELEASE, folder / "one.ipynb")
    (folder / "two.ipynb").symlink_to(RELEASE)
    (folder / "three.ipynb").write_text("{not json")
    shutil.copyfile(RELEASE, folder / "extra.ipynb")
    names = ["four", "one", "three", "two"]
    got = intake.take("s", "quiz", folder, "here", names)
    assert isinstance(got, intake.HandIn)
    assert got.notebooks == {"one": RELEASE.read_bytes()} and got.notebook == RELEASE.read_bytes()
    assert got.left_out[0] == "four.ipynb: not handed in"
    assert got.left_out[1].startswith("three.ipynb: not a valid notebook file")
    assert got.left_out[2] == "two.ipynb: the notebook is a symbolic link (not followed)"
    assert got.ignored == ["extra.ipynb"]
    (folder / "one.ipynb").unlink()
    none = intake.take("s", "quiz", folder, "here", names)
    assert isinstance(none, intake.Problem) and none.student == "s"
    assert none.reason.startswith("expected four.ipynb, one.ipynb, three.ipynb, two.ipynb, found")
