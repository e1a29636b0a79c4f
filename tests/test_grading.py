"""Grading a class with nbgrader: the demo class gets exactly its declared scores, and bad
input is reported by name while the rest of the class is still graded and exported."""

from __future__ import annotations

import copy
import csv
import html
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from graders.build import build
from graders.catalogue import catalogue, expected
from graders.course import LABS, REPO, lab_source
from graders.demo import answer_ids, compare, declared_class, write_class
from graders.feedback import TemplateFeedback


@pytest.mark.slow
def test_demo_class_gets_its_declared_scores(course, graded):
    students, _packs, report = graded
    assert not report.problems, report.problems
    assert compare(students, report.scores) == []
    # every lab's demo class is complete: full marks, nothing, part, a crash, two mistakes
    for lab in LABS:
        declared = {s.name: s.score for s in declared_class(lab)}
        assert {"complete", "blank", "partial", "crash"} <= set(declared), lab
        assert len(declared) >= 6, f"{lab}: the demo class needs at least two named mistakes"
        assert declared["complete"] == report.max_scores[lab] > 0
        assert declared["blank"] == 0
    # grades.csv (nbgrader export) and one feedback page per submission
    with open(course / "grades.csv") as fh:
        rows = {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(fh)}
    for s in students:
        assert rows[(s.name, s.lab)] == s.score
        assert (course / "feedback" / s.name / s.lab / f"{s.lab}.html").is_file()


@pytest.mark.slow
def test_the_mistake_catalogue_gets_its_declared_scores(graded):
    """Every catalogued answer loses exactly its declared points, in its own exercise only
    (variants of several exercises share a hand-in: their losses must add up)."""
    _students, packs, report = graded
    wrong = []
    for pack in packs:
        got = report.scores.get((pack.name, pack.lab))
        want = expected(pack, report.max_scores[pack.lab])
        if got is None or abs(got - want) > 1e-9:
            names = ", ".join(f"{v.exercise} ({v.kind}: {v.why})" for v in pack.variants)
            wrong.append(f"{pack.lab}/{pack.name}: want {want}, got {got}: {names}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_every_failure_has_a_sentence(graded):
    """No failed check is explained by a bare exception name: each says what was wrong."""
    _students, _packs, report = graded
    bare = [
        f"{student}/{lab} {grade_id}: {v['sentence']}"
        for (student, lab), verdicts in report.verdicts.items()
        for grade_id, v in verdicts.items()
        if v["kind"] != "passed" and len(v["sentence"].split()) < 6
    ]
    assert not bare, bare


@pytest.mark.parametrize("lab", [lab for lab in LABS if catalogue(lab)])
def test_a_catalogue_covers_every_exercise(lab):
    """At least three wrong answers per exercise and two other correct ones per lab."""
    variants = catalogue(lab)
    release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    for exercise in answer_ids(release):
        wrong = [v for v in variants if v.exercise == exercise and v.kind == "wrong"]
        assert len(wrong) >= 3, f"{lab}: {exercise} has {len(wrong)} wrong variants"
    assert sum(v.kind == "correct" for v in variants) >= 2, f"{lab}: fewer than 2 correct"


def hidden_lines(lab: str) -> list[str]:
    """Lines of the lab's hidden tests that appear nowhere in what students are given."""
    released = (REPO / "labs" / lab / f"{lab}.ipynb").read_text()
    lines, inside = [], False
    for line in lab_source(lab).read_text().splitlines():
        if "BEGIN HIDDEN TESTS" in line or "END HIDDEN TESTS" in line:
            inside = "BEGIN" in line
        elif inside and len(line.strip()) > 20 and json.dumps(line.strip())[1:-1] not in released:
            lines.append(line.strip())
    return lines


@pytest.mark.slow
def test_feedback_never_shows_hidden_tests(course, graded):
    """Runs after the demo class was graded: no feedback page holds hidden test code."""
    pages = list((course / "feedback").glob("*/*/*.html"))
    assert pages, "no feedback was written"
    for page in pages:
        text = html.unescape(page.read_text())
        lab = page.parent.name
        assert "HIDDEN TESTS" not in text, page
        leaked = [line for line in hidden_lines(lab) if line in text]
        assert not leaked, f"{page} shows hidden test code: {leaked[:2]}"
    assert any(hidden_lines(lab) for lab in LABS), "the leak check has nothing to look for"


def test_feedback_is_the_template_not_the_kernels_outputs():
    """A test cell shows its visible checks and the judge's sentence; no cell shows what the
    kernel printed (an event hook could print hidden code there)."""
    source = "\n".join(
        [
            "### BEGIN HIDDEN TESTS",
            "def _helper(): pass",
            "### END HIDDEN TESTS",
            "_v = 1",
            "check(_v == 2, 'visible')",
            "### BEGIN HIDDEN TESTS",
            "from grader_observe import observe",
            "### END HIDDEN TESTS",
        ]
    )
    test = nbformat.v4.new_code_cell(source)
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1, "solution": False}
    test.metadata["verdict"] = {"kind": "visible", "sentence": "A visible check failed: visible"}
    test.outputs = [nbformat.v4.new_output("stream", name="stdout", text="HIDDEN CODE")]
    answer = nbformat.v4.new_code_cell("x = 1")
    answer.outputs = [nbformat.v4.new_output("stream", name="stdout", text="HIDDEN CODE")]
    nb = nbformat.v4.new_notebook(cells=[answer, test])
    nb, _ = TemplateFeedback().preprocess(nb, {})
    assert nb.cells[2].source == "_v = 1\ncheck(_v == 2, 'visible')"
    assert [o.text for o in nb.cells[2].outputs] == ["A visible check failed: visible\n"]
    assert nb.cells[1].outputs == []
    assert "HIDDEN CODE" not in json.dumps(nb)


def grade_cli(root: Path, lab: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "graders.grade", "--root", str(root), "--lab", lab]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)


@pytest.mark.slow
def test_bad_submissions_are_reported_and_the_rest_is_graded(tmp_path):
    lab = "lab02_backprop"
    build(root=tmp_path, labs=[lab], release=tmp_path / "labs")
    good = next(s for s in declared_class(lab) if s.name == "complete")
    write_class(tmp_path, [lab], tmp_path / "labs")
    for student in {s.name for s in declared_class(lab)} - {good.name}:
        shutil.rmtree(tmp_path / "submitted" / student)
    complete = nbformat.read(tmp_path / "submitted" / good.name / lab / f"{lab}.ipynb", 4)

    def hand_in(student: str, nb=None, text: str | None = None, name: str = lab) -> Path:
        path = tmp_path / "submitted" / student / name / f"{name}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path) if nb is not None else path.write_text(text)
        return path

    hand_in("broken_json", text='{"cells": [ this is not json')
    hand_in("no_cells", nbformat.v4.new_notebook())
    hand_in("wrong_lab", text="{}", name="lab99_nope")
    huge = hand_in("huge", text="{}")
    with open(huge, "wb") as fh:
        fh.truncate(200 * 2**20)  # 200 MB (sparse)
    exiter = copy.deepcopy(complete)
    answer = next(c for c in exiter.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = "import os\nos._exit(3)\n" + answer.source
    hand_in("exiter", exiter)
    other_kernel = copy.deepcopy(complete)
    other_kernel.metadata.kernelspec = {
        "name": "julia-1.9",
        "display_name": "Julia",
        "language": "julia",
    }
    hand_in("other_kernel", other_kernel)
    older = copy.deepcopy(complete)  # an older release: a test cell missing, another different
    older.cells = [c for c in older.cells if c.get("id") != "test_f_intermediates"]
    next(c for c in older.cells if c.get("id") == "test_backward_twice").source = "assert True"
    hand_in("older_release", older)
    before = {p: p.read_bytes() for p in (tmp_path / "submitted").rglob("*.ipynb") if p != huge}

    result = grade_cli(tmp_path, lab)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Traceback" not in out
    assert f"submitted/broken_json/{lab}/{lab}.ipynb: not a valid notebook file" in out
    assert f"submitted/no_cells/{lab}/{lab}.ipynb: the notebook has no cells" in out
    assert "submitted/wrong_lab/lab99_nope: there is no lab named 'lab99_nope'" in out
    assert f"submitted/huge/{lab}/{lab}.ipynb: the notebook is 200 MB" in out
    assert f"submitted/exiter/{lab}: the kernel died" in out
    assert all(p.read_bytes() == b for p, b in before.items()), "a submitted file was modified"

    def grades():
        with open(tmp_path / "grades.csv") as fh:
            return {
                (r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(fh)
            }

    first = grades()
    assert first[("complete", lab)] == good.score
    assert first[("other_kernel", lab)] == good.score  # the kernelspec is restored
    assert first[("older_release", lab)] == good.score  # the test cells are restored
    assert first[("exiter", lab)] == 0.0  # kept, with zero, and named above
    # grading again gives the same grades
    assert grade_cli(tmp_path, lab).returncode == 0
    assert grades() == first


def test_bad_arguments_get_one_line_not_a_traceback(tmp_path):
    for args in (["--workers", "0"], ["--workers", "two"], ["--lab", "lab99"]):
        result = subprocess.run(
            [sys.executable, "-m", "graders.grade", *args], capture_output=True, text=True, cwd=REPO
        )
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr and result.stderr.strip(), args
    empty = subprocess.run(
        [sys.executable, "-m", "graders.grade", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert empty.returncode == 1 and "Traceback" not in empty.stderr
    assert "gradebook.db is missing: run `make build` first" in empty.stderr


@pytest.mark.slow
def test_labs_whose_solution_ran_longest_are_graded_first(course, graded, tmp_path):
    """`make build` times each lab's solution run; a class run starts with the longest labs,
    so it does not end on one long notebook while the other workers wait."""
    from graders.grade import longest_first
    from graders.intake import HandIn

    for lab in LABS:
        saved = json.loads((course / "build" / "reference" / f"{lab}.json").read_text())
        assert saved["seconds"] > 0, lab
    reference = tmp_path / "build" / "reference"
    reference.mkdir(parents=True)
    for lab, seconds in (("short", 2.0), ("long", 9.5), ("middle", 4.0)):
        (reference / f"{lab}.json").write_text(json.dumps({"seconds": seconds}))
    (reference / "damaged.json").write_text("{not json")
    labs = ("short", "damaged", "long", "middle")
    found = [HandIn(student, lab, b"") for student in ("a", "b") for lab in labs]
    order = [(h.student, h.lab) for h in longest_first(found, tmp_path)]
    expected = ["long", "middle", "short", "damaged"]  # a lab never timed: last, as found
    assert order == [(student, lab) for lab in expected for student in ("a", "b")]
