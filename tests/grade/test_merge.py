"""Merge (graders/grade/merge.py): one task's result goes into the course's gradebook under the
student's real name, capped at each cell's points, and its files are written from bytes,
never through a link; a hand-in that could not be graded is kept as 0 and flagged."""

from __future__ import annotations

from helpers import small_gradebook

from graders.formats import gradebook
from graders.formats.wire import Result
from graders.grade import merge


def result(**autos) -> Result:
    grades = {
        name: {"auto_score": auto, "manual_score": None, "extra_credit": None,
               "needs_manual_grade": False}
        for name, auto in autos.items()
    }  # fmt: skip
    return Result(
        ok=True,
        scores={
            "timestamp": "2024-01-02T10:00:00",
            "notebooks": {"lab1": {"late_penalty": None, "grades": grades, "comments": {}}},
        },
        autograded={"lab1": '{"cells": []}'},
        feedback={"lab1": "<p>feedback</p>"},
    )


def scores(root) -> dict:
    with gradebook.opened(gradebook.of(root)) as gb:
        sub = gb.find_submission("lab1", "a b*")
        (nb,) = sub.notebooks
        return {g.name: g.auto_score for g in nb.grades} | {"flagged": nb.flagged}


def test_a_result_is_merged_under_the_real_name_capped_at_each_cells_points(tmp_path):
    small_gradebook(tmp_path)
    merge.merge(tmp_path, "a b*", "lab1", result(t1=2.0, t2=99.0))  # t2 claims too much
    assert scores(tmp_path) == {"t1": 2.0, "t2": 3.0, "flagged": False}
    graded = tmp_path / "autograded" / "a b*" / "lab1" / "lab1.ipynb"
    page = tmp_path / "feedback" / "a b*" / "lab1" / "lab1.html"
    assert graded.read_text() == '{"cells": []}' and page.read_text() == "<p>feedback</p>"
    merge.merge(tmp_path, "a b*", "lab1", result(t1=0.0))  # a regrade: t2 not graded, 0
    assert scores(tmp_path) == {"t1": 0.0, "t2": 0.0, "flagged": False}


def test_a_failure_is_kept_as_zero_and_flagged_and_nothing_stale_stays(tmp_path):
    small_gradebook(tmp_path)
    merge.merge(tmp_path, "a b*", "lab1", result(t1=2.0, t2=3.0))
    merge.record_failure(tmp_path, "a b*", "lab1")
    assert scores(tmp_path) == {"t1": 0.0, "t2": 0.0, "flagged": True}
    assert not (tmp_path / "autograded" / "a b*" / "lab1").exists()
    assert not (tmp_path / "feedback" / "a b*" / "lab1").exists()


def test_files_are_never_written_through_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "course"
    root.mkdir()
    (root / "feedback").symlink_to(elsewhere, target_is_directory=True)
    written = merge.write_file(root, "feedback", "ann", "lab1", "lab1.html", b"page")
    assert written == root / "feedback" / "ann" / "lab1" / "lab1.html"
    assert not (root / "feedback").is_symlink() and written.read_bytes() == b"page"
    assert list(elsewhere.iterdir()) == []


def test_the_hand_ins_timestamp_and_secret_go_beside_its_feedback_never_a_link(tmp_path):
    """nbgrader's release_feedback reads timestamp.txt and submission_secret.txt beside each
    feedback page (its own autograde copies them from the collected hand-in); a link there,
    or an oversized file, is not followed."""
    small_gradebook(tmp_path)
    handed_in = tmp_path / "submitted" / "a b*" / "lab1"
    handed_in.mkdir(parents=True)
    (handed_in / "timestamp.txt").write_text("2024-01-02 10:00:00.000000 UTC")
    (tmp_path / "elsewhere.txt").write_text("not the student's")
    (handed_in / "submission_secret.txt").symlink_to(tmp_path / "elsewhere.txt")
    merge.merge(tmp_path, "a b*", "lab1", result(t1=2.0))
    for kind in ("autograded", "feedback"):
        beside = tmp_path / kind / "a b*" / "lab1"
        assert (beside / "timestamp.txt").read_text() == "2024-01-02 10:00:00.000000 UTC"
        assert not (beside / "submission_secret.txt").exists()  # a link: not followed
    (handed_in / "submission_secret.txt").unlink()
    (handed_in / "submission_secret.txt").write_text("ab" * 64)
    merge.merge(tmp_path, "a b*", "lab1", result(t1=2.0))
    page = tmp_path / "feedback" / "a b*" / "lab1"
    assert (page / "submission_secret.txt").read_text() == "ab" * 64
