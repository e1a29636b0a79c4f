"""An instructor's own nbgrader assignment grades in this course as nbgrader grades it.

The acceptance test of issue 50: nbgrader's documentation course (``ps1``: problem1 and
problem2 and the documentation's hand-ins bitdiddle and hacker) and nbgrader's own test-suite
notebooks (``quiz``: ``test`` and ``open_relative_file`` with the ``data.txt`` it reads, a hand-in
of ``test-no-metadata`` in place of ``test``), both shipped inside the installed nbgrader,
are put in assignments/ of a scratch course, built by `graders.build` (as `make build`),
and graded twice: by nbgrader's own command line in the course folder (autograde,
generate_feedback, export) and by `make autograde` (graders.grade, in a copy of the built
course). Every cell's score is compared with a plain nbgrader course (no course
configuration) graded by the same nbgrader, and must be equal, the README's deliberate
differences aside (none of which these notebooks meet: they write nothing to stderr in a
test cell). One course, one run of each; slow (it grades hand-ins).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import nbgrader
import pytest

from graders.build.build import build
from graders.config.nbgrader_cli import nbgrader_env
from graders.judge.overwrite import MALFORMED
from graders.sandbox.build_reference import prepare_references

pytestmark = pytest.mark.slow

NBG = Path(nbgrader.__file__).parent
DOCS = NBG / "docs" / "source" / "user_guide"
FILES = NBG / "tests" / "apps" / "files"
REPO = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ["ps1", "quiz"]


def own_assignments(own: Path) -> None:
    (own / "ps1").mkdir(parents=True)
    for name in ("problem1.ipynb", "problem2.ipynb", "jupyter.png"):
        shutil.copy(DOCS / "source" / "ps1" / name, own / "ps1" / name)
    (own / "quiz").mkdir()
    for name in ("test.ipynb", "open_relative_file.ipynb", "data.txt", "jupyter.png"):
        shutil.copy(FILES / name, own / "quiz" / name)


def hand_ins(root: Path) -> None:
    for student in ("bitdiddle", "hacker"):
        shutil.copytree(DOCS / "submitted" / student / "ps1", root / "submitted" / student / "ps1")
    for student, test in (("good", "test.ipynb"), ("nometa", "test-no-metadata.ipynb")):
        folder = root / "submitted" / student / "quiz"
        folder.mkdir(parents=True)
        shutil.copy(FILES / test, folder / "test.ipynb")
        shutil.copy(FILES / "open_relative_file.ipynb", folder / "open_relative_file.ipynb")


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    """nbgrader's own command line, started in the course folder (its configuration)."""
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=root,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def cell_scores(root: Path) -> dict[tuple[str, str, str, str], float]:
    """(student, assignment, notebook, cell) -> score, from nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    found = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                for nb in sub.notebooks:
                    for grade in nb.grades:
                        key = (sub.student.id, assignment.name, nb.name, grade.name)
                        found[key] = float(grade.score or 0)
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The plain course, the course graded by nbgrader's command line, and by make autograde;
    and the seconds each took."""
    base = tmp_path_factory.mktemp("any-assignment")
    own_assignments(base / "own")
    seconds = {}

    plain = base / "plain"  # nbgrader alone: source/ as its documentation lays it out
    (plain / "source").mkdir(parents=True)
    for assignment in ASSIGNMENTS:
        shutil.copytree(base / "own" / assignment, plain / "source" / assignment)
    (plain / "nbgrader_config.py").write_text("c = get_config()\n")
    hand_ins(plain)
    mark = time.monotonic()
    for assignment in ASSIGNMENTS:
        assert cli(plain, "generate_assignment", assignment).returncode == 0
        assert cli(plain, "autograde", assignment).returncode == 0
    seconds["plain"] = time.monotonic() - mark

    course = base / "course"  # this course: assignments/ -> make build
    course.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    mark = time.monotonic()
    build(root=course, labs=ASSIGNMENTS, release=course / "labs", own=base / "own")
    prepare_references(course, ASSIGNMENTS)
    seconds["build"] = time.monotonic() - mark
    again = base / "again"  # the same built course, for make autograde
    shutil.copytree(course, again)
    hand_ins(course)
    hand_ins(again)

    mark = time.monotonic()
    runs = {}
    for assignment in ASSIGNMENTS:
        runs[assignment] = cli(course, "autograde", assignment)
        runs[f"feedback {assignment}"] = cli(course, "generate_feedback", assignment)
    runs["export"] = cli(course, "export")
    seconds["nbgrader"] = time.monotonic() - mark

    mark = time.monotonic()
    runs["make autograde"] = subprocess.run(
        [sys.executable, "-m", "graders.grade", "--root", str(again)],
        cwd=REPO,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds["make autograde"] = time.monotonic() - mark
    print("seconds:", {k: round(v, 1) for k, v in seconds.items()})
    return plain, course, again, runs


def test_every_cell_scores_as_plain_nbgrader_with_either_command(graded):
    plain, course, again, runs = graded
    for name, run in runs.items():
        assert run.returncode == 0, f"{name}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    expected = cell_scores(plain)
    assert len(expected) == 2 * 9 + 2 * 7  # ps1: 9 graded cells; quiz: 6 + 1
    assert cell_scores(course) == expected
    assert cell_scores(again) == expected
    # nbgrader's own notebooks meet what the issue found wrong: a file beside the notebook
    assert expected[("good", "quiz", "open_relative_file", "open_file")] == 10
    assert expected[("nometa", "quiz", "open_relative_file", "open_file")] == 10
    assert expected[("good", "quiz", "test", "correct_squares")] == 1


def test_feedback_and_export_exist_for_every_hand_in(graded):
    _, course, again, _ = graded
    for root in (course, again):
        grades = (root / "grades.csv").read_text()
        for student, assignment, names in (
            ("bitdiddle", "ps1", ["problem1", "problem2"]),
            ("hacker", "ps1", ["problem1", "problem2"]),
            ("good", "quiz", ["open_relative_file", "test"]),
            ("nometa", "quiz", ["open_relative_file", "test"]),
        ):
            assert f"{assignment}," in grades and student in grades
            for name in names:
                page = root / "feedback" / student / assignment / f"{name}.html"
                assert page.is_file(), page


def test_a_notebook_without_nbgrader_metadata_costs_that_notebook_only(graded):
    _, course, _, _ = graded
    scores = cell_scores(course)
    assert sum(v for k, v in scores.items() if k[:3] == ("nometa", "quiz", "test")) == 0
    page = (course / "feedback" / "nometa" / "quiz" / "test.html").read_text()
    assert "This notebook could not be graded." in page
    graded_nb = nbformat.read(course / "autograded" / "nometa" / "quiz" / "test.ipynb", 4)
    assert graded_nb.cells[0].source == MALFORMED


def test_validate_in_the_course_agrees_with_autograde_on_stderr(tmp_path):
    """A passing check that writes to stderr: autograde gives it its points (the judge), and
    `nbgrader validate` in the course folder says it passes (plain nbgrader's validate, run
    outside the course, says it fails: what the README says of a student's laptop)."""
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import sys\nprint('a warning', file=sys.stderr)\nassert 1 + 1 == 2",
                metadata={
                    "nbgrader": {
                        "grade": True,
                        "grade_id": "t",
                        "locked": True,
                        "points": 1,
                        "schema_version": 3,
                        "solution": False,
                        "task": False,
                    }
                },
            )  # fmt: skip
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    path = tmp_path / "stderr.ipynb"
    nbformat.write(nb, path)
    inside = cli(course, "validate", str(path))
    assert "Success! Your notebook passes all the tests." in inside.stdout + inside.stderr
    outside = cli(tmp_path, "validate", str(path))  # no nbgrader_config.py there
    assert "Success!" not in outside.stdout + outside.stderr
