"""An instructor's own nbgrader assignment grades in this course as nbgrader grades it.

The acceptance test of issue 50: nbgrader's documentation course (``ps1``: problem1 and
problem2 and the documentation's hand-ins bitdiddle and hacker) and nbgrader's own test-suite
notebooks (``quiz``: ``test`` and ``open_relative_file`` with the ``data.txt`` it reads, a hand-in
of ``test-no-metadata`` in place of ``test``), both shipped inside the installed nbgrader,
are put in assignments/ of a scratch course, built by `graders.build` (as `make build`),
and graded twice: by nbgrader's own command line in the course folder (autograde,
generate_feedback, export) and by `make autograde` (graders.grade's class run: intake,
neutral ids, the sandbox, the Dask engine; in a copy of the built course). Every cell's
score is compared with a plain nbgrader course (no course configuration) graded by the same
nbgrader through its API, and must be equal, the README's deliberate differences aside.

The quiz also has a notebook of this test's own, ``deep``, whose check reads a file two folders
down the release (``data/deep/values.txt``): released folders reach every kernel. A hostile
hand-in (``forger``, graded in this course only) forges ``data.txt`` and that file, links
``data/deep/link`` to /etc/hostname, hands in no ``test`` notebook, and its solution tries to
pass the check by rewriting the released file: in a plain nbgrader course that write works
(the course's deliberate difference: released files are read-only here).

nbgrader's test-suite notebooks that are hand-ins of an assignment (`EDGE`): test.ipynb's older
formats of metadata (v0, v1, v2, v0 with a cell's grade_id gone), a newer one, one without
metadata or with a task cell the release lacks, one with its outputs; submitted-unchanged.ipynb
(the source, as nbgrader's autograde tests use it) and its changed copies, cheat attempts and
changed cell types; test-hidden-tests, validating-environment-variable and side-effects handed
in as they are; nbgrader's AUTOTEST notebooks (an assignment ``autotest`` of autotest-simple,
-hashed, -multi and -hidden with nbgrader's autotests.yml beside them: its tests are made by
generate_assignment, in `make build` as in plain nbgrader) and their changed, unchanged, wrong
and right hand-ins. Where plain nbgrader cannot grade a hand-in (`PLAIN_CANNOT`), each cell must
score as the same notebook without what stops it scores in plain nbgrader (the README says so).
The EDGE hand-ins are graded by nbgrader's command line and, a few (`CLASS_RUN_EDGE`, and why
only those), by `make autograde` too. Of some (`VALIDATED`) the course's validate must fail the
cells autograde takes points from and no other; every feedback page lists each cell with the
gradebook's score.
Left out of the class, and why: infinite-loop*, timeout (nbgrader's time limits, which the
course replaces by budgets; tests/sandbox/test_build_reference.py); validation-zero-points
(validate only);
the tests/preprocessors notebooks other than the two changed cell types and test_taskcell
(one-cell fixtures of nbgrader's steps: metadata generate_assignment rejects, one manually
graded cell, or no nbgrader cell); tests/ui-tests (copies of the above for the browser);
the documentation's release/, autograded/ and downloaded/ (what its commands make of ps1).

One course, one run of each (the plain course in this process, through nbgrader's API, as
the course's runs are compared with it); `make report` and the formgrader's views read the
class run's course. Slow (it grades hand-ins).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import nbgrader
import pytest

from graders.build.build import build
from graders.config.nbgrader_cli import make_api_factory, nbgrader_env, this_python_first
from graders.judge.overwrite import MALFORMED, MALFORMED_ID
from graders.sandbox.build_reference import prepare_references

pytestmark = pytest.mark.slow

NBG = Path(nbgrader.__file__).parent
DOCS = NBG / "docs" / "source" / "user_guide"
FILES = NBG / "tests" / "apps" / "files"
REPO = Path(__file__).resolve().parent.parent
TESTS = NBG / "tests" / "preprocessors" / "files"
ASSIGNMENTS = ["ps1", "quiz", "nbtests", "autotest"]
AUTOTEST = ["simple", "hashed", "multi", "hidden"]  # nbgrader's autotest-<name>.ipynb
# nbgrader's test-suite notebooks that are an assignment's hand-ins, each as nbgrader's own tests
# hand it in: (student, assignment, notebook handed in, nbgrader's file). The quiz's `test` is
# test.ipynb; its other formats and broken copies are handed in, each by a student, who also
# hands in open_relative_file where that shows a broken notebook costs that notebook only
# (`COMPANION`; the others alone: a kernel less each). nbtests' `p1` is submitted-unchanged.ipynb
# (as nbgrader's autograde tests use it), its changed copies and
# cheat attempts each a student's; `hidden`, `env` and `side` are handed in as they are.
EDGE = [
    ("output", "quiz", "test", FILES / "test-with-output.ipynb"),
    ("v2", "quiz", "test", FILES / "test-v2.ipynb"),
    ("v1", "quiz", "test", FILES / "test-v1.ipynb"),
    ("v0", "quiz", "test", FILES / "test-v0.ipynb"),
    ("v0invalid", "quiz", "test", FILES / "test-v0-invalid.ipynb"),
    ("nometaauto", "quiz", "test", FILES / "test-no-metadata-autotest.ipynb"),
    ("toonew", "quiz", "test", FILES / "too-new.ipynb"),
    ("taskcell", "quiz", "test", TESTS / "test_taskcell.ipynb"),
    ("unchanged", "nbtests", "p1", FILES / "submitted-unchanged.ipynb"),
    ("unchanged", "nbtests", "hidden", FILES / "test-hidden-tests.ipynb"),
    ("unchanged", "nbtests", "env", FILES / "validating-environment-variable.ipynb"),
    ("unchanged", "nbtests", "side", FILES / "side-effects.ipynb"),
    ("changed", "nbtests", "p1", FILES / "submitted-changed.ipynb"),
    ("cheat", "nbtests", "p1", FILES / "submitted-cheat-attempt.ipynb"),
    ("cheat2", "nbtests", "p1", FILES / "submitted-cheat-attempt-alternative.ipynb"),
    ("gradechanged", "nbtests", "p1", FILES / "submitted-grade-cell-changed.ipynb"),
    ("lockedchanged", "nbtests", "p1", FILES / "submitted-locked-cell-changed.ipynb"),
    ("answertype", "nbtests", "p1", TESTS / "submitted-answer-cell-type-changed.ipynb"),
    ("gradetype", "nbtests", "p1", TESTS / "submitted-grade-cell-type-changed.ipynb"),
    # nbgrader's AUTOTEST notebooks, handed in as its autograde tests hand them in (of its
    # unchanged ones those whose cells may score unanswered; simple's and hashed's cannot)
    *(("unchanged", "autotest", n, FILES / f"autotest-{n}-unchanged.ipynb") for n in AUTOTEST[2:]),
    *(("changed", "autotest", n, FILES / f"autotest-{n}-changed.ipynb") for n in AUTOTEST[:3]),
    ("changed", "autotest", "hidden", FILES / "autotest-hidden-changed-wrong.ipynb"),
    ("right", "autotest", "hidden", FILES / "autotest-hidden-changed-right.ipynb"),
]
COMPANION = {"v0invalid", "toonew", "taskcell"}
VALUES = "1 2 3\n"  # data/deep/values.txt, as released

SOLUTION = """def total():
    ### BEGIN SOLUTION
    with open("data/deep/values.txt") as f:
        return sum(int(x) for x in f.read().split())
    ### END SOLUTION"""
CHECK = '''with open("data/deep/values.txt") as f:
    expected = sum(int(x) for x in f.read().split())
assert total() == expected, "total() should be the sum of the numbers in data/deep/values.txt"'''
# the hostile hand-in: a wrong answer, made "right" by rewriting the file the check reads
CHEAT = """def total():
    try:
        with open("data/deep/values.txt", "w") as f:
            f.write("99")
    except OSError:
        pass
    return 99"""


def deep_notebook(solution: str = SOLUTION) -> nbformat.NotebookNode:
    def meta(grade_id, **kw):
        return {"nbgrader": {"grade_id": grade_id, "schema_version": 3, **kw}}

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                solution, metadata=meta("total", grade=False, locked=False, solution=True)
            ),
            nbformat.v4.new_code_cell(
                CHECK, metadata=meta("check_total", grade=True, locked=True, points=1,
                                     solution=False)
            ),
        ]
    )  # fmt: skip
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return nb


def own_assignments(own: Path) -> None:
    (own / "ps1").mkdir(parents=True)
    for name in ("problem1.ipynb", "problem2.ipynb", "jupyter.png"):
        shutil.copy(DOCS / "source" / "ps1" / name, own / "ps1" / name)
    (own / "quiz" / "data" / "deep").mkdir(parents=True)
    for name in ("test.ipynb", "open_relative_file.ipynb", "data.txt", "jupyter.png"):
        shutil.copy(FILES / name, own / "quiz" / name)
    nbformat.write(deep_notebook(), own / "quiz" / "deep.ipynb")
    (own / "quiz" / "data" / "deep" / "values.txt").write_text(VALUES)
    (own / "nbtests").mkdir()
    for name, source in (
        ("p1", "submitted-unchanged"),
        ("hidden", "test-hidden-tests"),
        ("env", "validating-environment-variable"),
        ("side", "side-effects"),
    ):
        shutil.copy(FILES / f"{source}.ipynb", own / "nbtests" / f"{name}.ipynb")  # fmt: skip
    (own / "autotest").mkdir()  # its templates beside the notebooks, as nbgrader allows
    shutil.copy(FILES / "autotests.yml", own / "autotest" / "autotests.yml")
    for name in AUTOTEST:
        shutil.copy(FILES / f"autotest-{name}.ipynb", own / "autotest" / f"{name}.ipynb")


def hand_ins(root: Path, own: Path, *, forger: bool, edge=lambda student, assignment: True,
             companions: bool = True) -> None:  # fmt: skip
    for student in ("bitdiddle", "hacker"):
        shutil.copytree(DOCS / "submitted" / student / "ps1", root / "submitted" / student / "ps1")
    folder = root / "submitted" / "good" / "quiz"
    shutil.copytree(own / "quiz", folder)  # the whole release, as students hand it in
    folder = root / "submitted" / "nometa" / "quiz"  # and one notebook more than the broken one
    folder.mkdir(parents=True)
    shutil.copy(FILES / "test-no-metadata.ipynb", folder / "test.ipynb")
    shutil.copy(own / "quiz" / "open_relative_file.ipynb", folder)
    for student, assignment, name, file in EDGE:
        if not edge(student, assignment):
            continue
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(file, folder / f"{name}.ipynb")
        if student in COMPANION and companions:
            shutil.copy(own / "quiz" / "open_relative_file.ipynb", folder)
    if forger:
        folder = root / "submitted" / "forger" / "quiz"
        (folder / "data" / "deep").mkdir(parents=True)
        shutil.copy(FILES / "open_relative_file.ipynb", folder)
        nbformat.write(deep_notebook(CHEAT), folder / "deep.ipynb")
        (folder / "data.txt").write_text("forged: one line")  # the check wants 4 lines
        (folder / "data" / "deep" / "values.txt").write_text("99")
        (folder / "data" / "deep" / "link").symlink_to("/etc/hostname")


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


def cell_scores(root: Path, field: str = "score") -> dict[tuple[str, str, str, str], float]:
    """(student, assignment, notebook, cell) -> score (or the grade's other `field`:
    max_score, auto_score: None where the cell is graded by hand), from nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    found = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                for nb in sub.notebooks:
                    for grade in nb.grades:
                        key = (sub.student.id, assignment.name, nb.name, grade.name)
                        value = getattr(grade, field)
                        found[key] = value if field == "auto_score" else float(value or 0)
    return found


def plain_nbgrader(plain: Path) -> None:
    """nbgrader alone, with no configuration (source/ as its documentation lays it out),
    through its API in this process: what `nbgrader generate_assignment` and `nbgrader
    autograde` do in a course folder whose nbgrader_config.py says nothing."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(plain)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    failed = {}
    with this_python_first():
        for assignment in ASSIGNMENTS:
            assert api.generate_assignment(assignment)["success"]
            for student in sorted(p.parent.name for p in plain.glob(f"submitted/*/{assignment}")):
                done = api.autograde(assignment, student)
                if not done["success"] and "nbgrader update" in done.get("log", ""):
                    # what nbgrader's message asks of the instructor: `nbgrader update` on the
                    # hand-in (an older format of its metadata), then autograde again
                    if nbgrader_update(plain / "submitted" / student / assignment):
                        done = api.autograde(assignment, student)
                if not done["success"]:
                    failed[(student, assignment)] = done.get("log", "")
    return failed


def nbgrader_update(folder: Path) -> bool:
    """`nbgrader update <folder>` (its UpdateApp's steps, in this process): False where it
    fails (metadata it cannot read: too new, or invalid once upgraded)."""
    from nbgrader.nbgraderformat import MetadataValidator, write

    try:
        for path in sorted(folder.glob("*.ipynb")):
            nb = MetadataValidator().upgrade_notebook_metadata(nbformat.read(path, 4))
            write(nb, str(path))
    except Exception:  # noqa: BLE001 - nbgrader's ValidationError, SchemaTooNewError, ...
        return False
    return True


# Hand-ins a student validates (nbgrader's Validate button, `nbgrader validate`) before handing
# them in, in the course folder: one of each kind of EDGE (outputs, answers partly right, the
# validating environment variable, a changed test cell, a changed cell type, no metadata, a
# hidden autotest failed, autotests of several kinds); each is a kernel more (CI time).
VALIDATED = [("output", "quiz", "test"), ("changed", "nbtests", "p1"),
             ("unchanged", "nbtests", "env"), ("cheat", "nbtests", "p1"),
             ("answertype", "nbtests", "p1"), ("nometa", "quiz", "test"),
             ("changed", "autotest", "hidden"), ("changed", "autotest", "multi")]  # fmt: skip


def validate(course: Path) -> dict:
    """What nbgrader's Validate button (its validate_assignment server extension) says of
    each of `VALIDATED` in the course folder: its Validator, configured by the course's
    nbgrader_config.py, in this process (`nbgrader validate`, the same Validator, pays a
    process start: the stderr test below runs it)."""
    from nbgrader.validator import Validator
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    found = {}
    with this_python_first():
        for student, assignment, name in VALIDATED:
            path = course / "submitted" / student / assignment / f"{name}.ipynb"
            found[(student, assignment, name)] = Validator(config=config).validate(str(path))
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The plain course, the course graded by nbgrader's command line, and by make autograde
    (its output); and the seconds each took."""
    return grade_all(tmp_path_factory.mktemp("any-assignment"))


def grade_all(base: Path):
    own = base / "own"
    own_assignments(own)
    seconds = {}

    plain = base / "plain"
    (plain / "source").mkdir(parents=True)
    for assignment in ASSIGNMENTS:
        shutil.copytree(own / assignment, plain / "source" / assignment)
    hand_ins(plain, own, forger=False, companions=False)  # plain drops their assignments whole
    mark = time.monotonic()
    runs = {"plain": plain_nbgrader(plain)}
    seconds["plain"] = time.monotonic() - mark

    course = base / "course"  # this course: assignments/ -> make build
    course.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    mark = time.monotonic()
    build(root=course, labs=ASSIGNMENTS, release=course / "labs", own=own)
    prepare_references(course, ASSIGNMENTS)
    seconds["build"] = time.monotonic() - mark
    again = base / "again"  # the same built course, for make autograde
    shutil.copytree(course, again)
    hand_ins(course, own, forger=True)
    hand_ins(again, own, forger=True, edge=lambda *hand_in: hand_in in CLASS_RUN_EDGE)

    mark = time.monotonic()
    runs |= {
        "autograde": cli(course, "autograde", "*"),  # every assignment, as its docs allow
        "generate_feedback": cli(course, "generate_feedback", "*"),
        "export": cli(course, "export"),
    }
    seconds["nbgrader"] = time.monotonic() - mark

    mark = time.monotonic()
    runs["validate"] = validate(course)
    seconds["validate"] = time.monotonic() - mark

    mark = time.monotonic()
    runs["make autograde"] = subprocess.run(
        [sys.executable, "-m", "graders.grade", "--root", str(again), "--workers", "1"],
        cwd=REPO,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds["make autograde"] = time.monotonic() - mark
    cpu = os.times()
    seconds["cpu"] = cpu.user + cpu.system + cpu.children_user + cpu.children_system
    print("seconds:", {k: round(v, 1) for k, v in seconds.items()})
    return plain, course, again, runs


# Hand-ins plain nbgrader cannot grade (it drops the student's whole assignment, 0 for each
# cell), and the hand-in each must score as, cell for cell (the README's deliberate difference):
# the same notebook without what stops plain nbgrader. taskcell: test.ipynb with a task cell
# the release does not have; v0invalid: test-v0 with a cell's grade_id gone; answertype and
# gradetype: submitted-unchanged with a cell's type changed (nbgrader changes it back, but
# validates it against a newer format than the notebook's and fails); toonew: a notebook of a
# newer format, none of whose cells is the release's: 0, with a sentence (`MALFORMED`).
PLAIN_CANNOT = {
    ("taskcell", "quiz"): "good",
    ("v0invalid", "quiz"): "v0",
    ("answertype", "nbtests"): "unchanged",
    ("gradetype", "nbtests"): "unchanged",
    ("toonew", "quiz"): None,
}
# The EDGE hand-ins `make autograde` grades as well: a changed cell type (which a class run
# once recorded as 0 while exiting 0), a malformed notebook beside a good one (a notebook with
# no grade to merge) and hidden autotests (the release lacks them; the scratch course's
# gradebook has them). The others are graded in plain nbgrader and by nbgrader's command line
# only: a class run grades each hand-in with nbgrader's autograde in a scratch course that
# reads the same nbgrader_config.py (the same sanitizing steps and judge), after putting back
# the released metadata with the same function as the sanitizing step
# (graders.judge.overwrite.restore): what grading them again would add is seconds (CI time).
CLASS_RUN_EDGE = {("answertype", "nbtests"), ("gradetype", "nbtests"), ("toonew", "quiz"),
                  ("right", "autotest")}  # fmt: skip


def in_class_run(student: str, assignment: str) -> bool:
    return (student, assignment) in CLASS_RUN_EDGE or not any(
        (s, a) == (student, assignment) for s, a, _, _ in EDGE
    )


def test_every_cell_scores_as_plain_nbgrader_with_either_command(graded):
    plain, course, again, runs = graded
    assert set(runs["plain"]) == set(PLAIN_CANNOT), sorted(runs["plain"])
    for name, run in runs.items():
        if name in ("plain", "validate"):
            continue
        assert run.returncode == 0, f"{name}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    found = cell_scores(plain)
    expected = {k: v for k, v in found.items() if (k[0], k[1]) not in PLAIN_CANNOT}
    assert len(expected) == 149  # every graded cell of every hand-in plain nbgrader grades
    cells = {(a, n, c) for _, a, n, c in expected}  # every student has a row for each
    for (student, assignment), twin in PLAIN_CANNOT.items():
        for notebook, cell in ((n, c) for a, n, c in cells if a == assignment):
            if notebook in ("test", "p1"):  # as the notebook without what stops plain nbgrader
                score = found[(twin, assignment, notebook, cell)] if twin else 0.0
            else:  # its other notebooks as usual: the one handed in full marks, the others 0
                score = 10.0 if notebook == "open_relative_file" else 0.0
            expected[(student, assignment, notebook, cell)] = score
    for root in (course, again):
        scores = cell_scores(root)
        assert {k: v for k, v in scores.items() if k[0] != "forger"} == {
            k: v for k, v in expected.items() if root == course or in_class_run(k[0], k[1])
        }, root.name
        page = (root / "feedback" / "toonew" / "quiz" / "test.html").read_text()
        assert "This notebook could not be graded." in page
    # nbgrader's old formats, graded in plain nbgrader only after `nbgrader update`
    assert expected[("v0", "quiz", "test", "correct_squares")] == 1
    assert expected[("answertype", "nbtests", "p1", "foo")] == 1
    # nbgrader's own notebooks meet what the issue found wrong: a file beside the notebook
    assert expected[("good", "quiz", "open_relative_file", "open_file")] == 10
    assert expected[("nometa", "quiz", "open_relative_file", "open_file")] == 10
    assert expected[("good", "quiz", "test", "correct_squares")] == 1
    # a file two folders down the release reached every kernel, in either command
    assert expected[("good", "quiz", "deep", "check_total")] == 1


def test_a_hand_in_that_forges_or_rewrites_released_files_gains_nothing(graded):
    """The forger's data.txt (one line where the check wants four), its values.txt and its link
    are never what the kernel reads (the release's are); its write to the released file
    fails, so its wrong answer stays wrong; its missing notebook is 0 and said so."""
    _, course, again, runs = graded
    for root in (course, again):
        scores = cell_scores(root)
        assert scores[("forger", "quiz", "open_relative_file", "open_file")] == 10, root.name
        assert scores[("forger", "quiz", "deep", "check_total")] == 0, root.name
        assert sum(v for k, v in scores.items() if k[:3] == ("forger", "quiz", "test")) == 0
    assert "test.ipynb: not handed in; that notebook graded 0" in runs["make autograde"].stdout
    # nothing the hand-in holds was read: its other entries are listed as ignored
    assert "submitted/forger/quiz: 2 other file(s) ignored: data, data.txt" in (
        runs["make autograde"].stdout
    )


def test_make_autograde_grades_an_instructors_assignment_in_its_class_run(graded):
    """Every hand-in of ps1 and quiz went through the class run (intake, a scratch course under
    a neutral id, the sandbox, the engine): a line each in the grading log with the key of
    what it was graded from and each test cell's verdict by notebook, and its phases timed."""
    from graders.formats import gradelog

    _, _, again, runs = graded
    latest = gradelog.latest(gradelog.read(again)[0])
    hand_ins = {("bitdiddle", "ps1"), ("hacker", "ps1"), ("good", "quiz"), ("nometa", "quiz"),
                ("forger", "quiz")} | CLASS_RUN_EDGE  # fmt: skip
    assert set(latest) == hand_ins
    for item, entry in latest.items():
        assert entry["ok"] and entry["key"], item
        assert "kernel_start" in entry["timings"], item
    assert latest[("good", "quiz")]["verdicts"]["deep/check_total"].passed
    assert latest[("forger", "quiz")]["verdicts"]["deep/check_total"].passed is False
    assert f"grading {len(hand_ins)} hand-in(s) on a local Dask cluster" in (
        runs["make autograde"].stdout
    )
    # the hidden autotests, which the release does not have, were run
    assert latest[("right", "autotest")]["verdicts"]["hidden/test_hidden"].passed
    with open(again / "timings.csv", newline="") as fh:
        timed = {(row["student"], row["lab"]) for row in csv.DictReader(fh)}
    assert timed == hand_ins


SCORED = re.compile(r'<li><a href="#([^"]+)">[^<]*</a> \(Score: ([0-9.]+) / ([0-9.]+)\)</li>')


def test_validate_autograde_and_feedback_agree_on_every_cell(graded):
    """Of each hand-in of `VALIDATED`, validate fails the cells autograde takes points from,
    and no other; hidden tests aside (validate cannot run them: the README's deliberate
    difference), and where validate gives no verdict (a changed test cell or cell type: it
    says so). A notebook autograde grades 0 for want of nbgrader's metadata fails validation
    with its feedback's sentence (plain nbgrader's validate says it passes every test). Every
    feedback page of either command lists each cell with the gradebook's score."""
    _, course, again, runs = graded
    scores, most = cell_scores(course), cell_scores(course, "max_score")
    for (student, assignment, name), said in runs["validate"].items():
        where = (student, assignment, name)
        source = nbformat.read(course / "build" / "source" / assignment / f"{name}.ipynb", 4)
        meta = [c.metadata.get("nbgrader", {}) for c in source.cells]
        hidden = {m["grade_id"] for m, c in zip(meta, source.cells, strict=True)
                  if "BEGIN HIDDEN TESTS" in c.source}  # fmt: skip
        by_hand = {(*where, m["grade_id"]) for m in meta if m.get("grade") and m.get("solution")}
        lost = lost_of(scores, most, where, by_hand)
        if "changed" in said or "type_changed" in said:
            continue
        handed = nbformat.read(course / "submitted" / student / assignment / f"{name}.ipynb", 4)
        ids = {c.source.strip(): c.metadata.get("nbgrader", {}).get("grade_id")
               for c in handed.cells}  # fmt: skip
        ids[MALFORMED.strip()] = MALFORMED_ID
        failed = {ids[f["source"]] for f in said.get("failed", [])}
        if MALFORMED_ID in failed:
            assert failed == {MALFORMED_ID}  # and autograde's 0 and feedback say the same
            assert not any(v for k, v in scores.items() if k[:3] == where), where
            page = course / "feedback" / student / assignment / f"{name}.html"
            assert "This notebook could not be graded." in page.read_text()
            continue
        assert failed <= lost and lost - hidden <= failed, (where, failed, lost)
    # what validate says of the kinds plain nbgrader's validate gets wrong or refuses
    assert not runs["validate"][("changed", "autotest", "hidden")]  # a hidden autotest fails
    assert lost_of(scores, most, ("changed", "autotest", "hidden")) == {"test_hidden"}
    assert "type_changed" in runs["validate"][("answertype", "nbtests", "p1")]
    for root in (course, again):
        scores, most = cell_scores(root), cell_scores(root, "max_score")
        for page in (root / "feedback").glob("*/*/*.html"):
            student, assignment = page.parent.parent.name, page.parent.name
            text = page.read_text()
            listed = {m[0]: (float(m[1]), float(m[2])) for m in SCORED.findall(text)}
            kept = {k[3]: (v, most[k]) for k, v in scores.items()
                    if k[:3] == (student, assignment, page.stem)}  # fmt: skip
            total = f"<h4>{page.stem} (Score: {float(sum(v for v, _ in kept.values()))} / "
            assert total + f"{float(sum(m for _, m in kept.values()))})</h4>" in text, page
            if "This notebook could not be graded." in text:  # no cell listed: the sentence
                kept = {}
            assert listed == kept, (root.name, page)


def lost_of(scores, most, where, by_hand=()) -> set[str]:
    """The cells of a notebook that autograde gave less than their points (graded by hand:
    `by_hand`, which validate does not judge, left out)."""
    return {k[3] for k, v in scores.items() if k[:3] == where and v < most[k] and k not in by_hand}


def test_feedback_and_export_exist_for_every_hand_in(graded):
    _, course, again, _ = graded
    for root in (course, again):
        grades = (root / "grades.csv").read_text()
        for student, assignment, names in (
            ("bitdiddle", "ps1", ["problem1", "problem2"]),
            ("hacker", "ps1", ["problem1", "problem2"]),
            ("good", "quiz", ["deep", "open_relative_file", "test"]),
            ("nometa", "quiz", ["open_relative_file", "test"]),
            ("forger", "quiz", ["deep", "open_relative_file"]),
            *((s, a, [n] + ["open_relative_file"] * (s in COMPANION)) for s, a, n, _ in EDGE),
        ):
            if root == again and not in_class_run(student, assignment):
                continue
            assert f"{assignment}," in grades and student in grades
            for name in names:
                page = root / "feedback" / student / assignment / f"{name}.html"
                assert page.is_file(), page


def test_a_notebook_without_nbgrader_metadata_costs_that_notebook_only(graded):
    _, course, again, _ = graded
    for root in (course, again):
        scores = cell_scores(root)
        assert sum(v for k, v in scores.items() if k[:3] == ("nometa", "quiz", "test")) == 0
        page = (root / "feedback" / "nometa" / "quiz" / "test.html").read_text()
        assert "This notebook could not be graded." in page
        graded_nb = nbformat.read(root / "autograded" / "nometa" / "quiz" / "test.ipynb", 4)
        assert graded_nb.cells[0].source == MALFORMED


def test_make_report_and_the_formgraders_views_read_the_assignments(graded):
    """`make report` on the class run's course: its grades-wide.csv has each assignment's
    total per student as the gradebook has it, and its page each assignment's cells by
    notebook; the formgrader's views (nbgrader's API, which its pages call) list them."""
    from graders.report.report import build_report

    _, _, again, _ = graded
    built = build_report(again)
    scores = cell_scores(again)
    with open(built.wide_csv, newline="") as fh:
        wide = {row["student_id"]: row for row in csv.DictReader(fh)}
    for student, assignment in (("bitdiddle", "ps1"), ("forger", "quiz"), ("good", "quiz")):
        total = sum(v for k, v in scores.items() if k[:2] == (student, assignment))
        (column,) = [c for c in wide[student] if c.startswith(f"{assignment} (max ")]
        assert float(wide[student][column]) == pytest.approx(total), (student, assignment)
    page = built.index.read_text()
    assert "deep/check_total" in page and "problem1/" in page
    assert "feedback/good/quiz/deep.html" in page  # a link to the student's feedback
    api = make_api_factory(REPO / "nbgrader_config.py")(str(again), {})
    listed = {a: api.get_assignment(a, released=set()) for a in ASSIGNMENTS}  # no exchange
    assert listed["quiz"]["num_submissions"] == 4 and listed["ps1"]["num_submissions"] == 2
    assert listed["nbtests"]["num_submissions"] == 2 and listed["autotest"]["num_submissions"] == 1
    forger = api.get_submission("quiz", "forger")
    assert forger["autograded"] and forger["score"] == pytest.approx(10.0)  # open_file only


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
    # plain nbgrader's validate (no configuration), in this process: its Validator with the
    # steps nbgrader lists (named here: this process may have read the course's configuration)
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, Execute
    from nbgrader.validator import Validator

    plain = Validator(preprocessors=[CheckCellMetadata, ClearOutput, Execute])
    assert [c.__name__ for c in plain.preprocessors] == ["CheckCellMetadata", "ClearOutput",
                                                         "Execute"]  # fmt: skip
    found = plain.validate(str(path))
    assert [c["source"][:10] for c in found.get("failed", [])] == ["import sys"]
