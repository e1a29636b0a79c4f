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


def test_an_instructors_assignment_is_ordered_by_all_its_notebooks_reference_times(tmp_path):
    """An instructor's assignment has a reference file per notebook (build/reference/<name>.json
    for the notebook named after it, <name>/<notebook>.json for the others): its time is their
    sum, so a long quiz of short notebooks is not graded last as if never timed."""
    from graders.grade.inputs import longest_first
    from graders.grade.intake import HandIn

    where = references.folder(tmp_path)
    for lab, names in (("quiz", ("a", "b", "c")), ("lab", ("lab",))):
        (tmp_path / "labs" / lab).mkdir(parents=True)
        for name in names:
            (tmp_path / "labs" / lab / f"{name}.ipynb").write_text("{}")
    for lab, name, seconds in (("quiz", "a", 3.0), ("quiz", "b", 3.0), ("quiz", "c", 3.0)):
        path = references.path(where, lab, name)  # 3 x 3 s, none named after the assignment
        path.parent.mkdir(parents=True, exist_ok=True)
        references.write(path, ReferenceFile(observations={}, seconds=seconds))
    references.write(references.path(where, "lab"), ReferenceFile(observations={}, seconds=5.0))
    found = [HandIn("s", "lab", b""), HandIn("s", "quiz", b"")]
    assert [h.lab for h in longest_first(found, tmp_path)] == ["quiz", "lab"]
