"""A class run's inputs (graders/grade/inputs.py): the hand-ins are graded longest lab first
(the reference files written through their owner, graders/formats/references.py: no graded
class needed), and a task gets the release's files."""

from __future__ import annotations

from graders.config.course import LABS
from graders.formats import references
from graders.formats.references import ReferenceFile


def test_make_build_timed_every_labs_solution(course, graded):
    """What the grading order below rests on: `make build` timed each lab's solution run."""
    for lab in LABS:
        assert references.seconds(references.path(references.folder(course), lab)) > 0, lab


def test_labs_whose_solution_ran_longest_are_graded_first(tmp_path):
    """A class run starts with the labs whose solution ran longest, so it does not end on one
    long notebook while the other workers wait; a lab never timed comes last, as found."""
    from graders.grade.inputs import longest_first
    from graders.grade.intake import HandIn

    where = references.folder(tmp_path)
    for lab, seconds in (("short", 2.0), ("long", 9.5), ("middle", 4.0)):
        references.write(
            references.path(where, lab), ReferenceFile(observations={}, seconds=seconds)
        )
    references.path(where, "damaged").write_text("{not json")
    labs = ("short", "damaged", "long", "middle")
    found = [HandIn(student, lab, b"") for student in ("a", "b") for lab in labs]
    order = [(h.student, h.lab) for h in longest_first(found, tmp_path)]
    expected = ["long", "middle", "short", "damaged"]  # a lab never timed: last, as found
    assert order == [(student, lab) for lab in expected for student in ("a", "b")]


def test_the_released_files_are_every_regular_file_at_any_depth_and_no_link(tmp_path):
    """What a class run gives every kernel of an instructor's assignment: the release's files
    and folders at any depth, by path; never a link (in a folder or not), a notebook or a
    cache, as plain nbgrader's autograde copies the source's files beside a hand-in."""
    from graders.grade.inputs import released_files

    release = tmp_path / "quiz"
    (release / "data" / "deep" / "__pycache__").mkdir(parents=True)
    (release / "quiz.ipynb").write_text("{}")
    (release / "data.txt").write_text("top")
    (release / "data" / "deep" / "values.txt").write_text("1 2 3")
    (release / "data" / "deep" / "inner.ipynb").write_text("{}")
    (release / "data" / "deep" / "__pycache__" / "m.pyc").write_bytes(b"x")
    (release / "data" / "deep" / "link").symlink_to("/etc/hostname")
    (release / "linked").symlink_to(release / "data")
    assert released_files(release) == {"data.txt": b"top", "data/deep/values.txt": b"1 2 3"}
