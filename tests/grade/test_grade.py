"""A class run (graders/grade/grade.py): every failure has a sentence, bad input is reported by
name while the rest of the class is graded and exported, bad arguments get one line.
Where each hand-in is graded is tests/test_dispatch.py's; the order, tests/test_inputs.py's."""

from __future__ import annotations

import copy
import csv
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import reference_cache, share_references

from graders.build.build import build
from graders.build.demo import declared_class, write_class
from graders.config.course import REPO


def test_every_failure_has_a_sentence(graded):
    """No failed check is explained by a bare exception name: each says what was wrong."""
    _students, _packs, report = graded
    bare = [
        f"{student}/{lab} {grade_id}: {v.sentence}"
        for (student, lab), verdicts in report.verdicts.items()
        for grade_id, v in verdicts.items()
        if v.kind != "passed" and len(v.sentence.split()) < 6
    ]
    assert not bare, bare


def grade_cli(root: Path, lab: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "graders.grade", "--root", str(root), "--lab", lab]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)


@pytest.mark.slow
def test_bad_submissions_are_reported_and_the_rest_is_graded(tmp_path, tmp_path_factory):
    lab = "lab02_backprop"
    build(root=tmp_path, labs=[lab], release=tmp_path / "labs")
    share_references(tmp_path, [lab], reference_cache(tmp_path_factory))
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
