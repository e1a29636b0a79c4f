"""A class run (graders/grade.py): every failure has a sentence, bad input is reported by
name while the rest of the class is graded and exported, bad arguments get one line, and
the longest labs go first."""

from __future__ import annotations

import copy
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import reference_cache, share_references

from graders.build import build
from graders.course import LABS, REPO
from graders.demo import declared_class, write_class


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


class FakeCluster:
    """engine.LocalCluster's stand-in: up after `up_after` hand-ins were graded here (None:
    it fails to start)."""

    made: list = []

    def __init__(self, workers, up_after=1, graded=None):
        self.workers, self.up_after, self.graded, self.closed = workers, up_after, graded, False
        FakeCluster.made.append(self)

    def wait_spawned(self, timeout):
        return True

    def ready(self):
        return self.up_after is None or len(self.graded) >= self.up_after

    def client(self):
        while not self.ready():
            import time

            time.sleep(0.01)
        if self.up_after is None:
            raise OSError("the local Dask cluster did not start (fake)")
        return "client"

    def close(self):
        import threading

        self.closed = True
        ending = threading.Thread(target=lambda: None)
        ending.start()
        return ending


def lanes(monkeypatch, count, up_after):
    """_run_tasks on `count` fake hand-ins (h0 the longest): who graded what, in order."""
    from graders import engine, grade
    from graders.class_run import ClassRun
    from graders.intake import HandIn

    here, on_engine, merged = [], [], []
    FakeCluster.made = []
    monkeypatch.setattr(
        engine, "LocalCluster", lambda workers: FakeCluster(workers, up_after, here)
    )

    def grade_here(course, job):
        here.append(job["lab"])
        return {"ok": True, "timings": {"kernel_up_at": 1.0}}

    def run_all(connected, course, jobs, arrived, window):
        for hand_in, job in jobs:
            on_engine.append(job["lab"])
            arrived(hand_in, {"ok": True, "timings": {"started_at": 0.0}}, 0.0)

    monkeypatch.setattr(grade, "grade_here", grade_here)
    monkeypatch.setattr(engine, "run_all", run_all)
    monkeypatch.setattr(grade, "_merge_one", lambda root, h, r, run, key: merged.append(h.lab))
    monkeypatch.setattr(grade, "_engine_lane", lambda c, course, queue, arrived, run, say: (
        run_all(c, course, queue.first(), arrived, 2)))  # fmt: skip
    hand_ins = [HandIn("s", f"h{i}", b"{}") for i in range(count)]
    jobs = ((h, {"lab": h.lab}) for h in hand_ins)
    keys = {("s", h.lab): "key" for h in hand_ins}
    run = ClassRun(started_at=0.0)
    ending = grade._run_tasks(Path("."), "", 2, {}, jobs, keys, run, count, lambda *a: None)
    if ending is not None:
        ending.join()
    return here, on_engine, merged, run


def test_one_hand_in_is_graded_here_without_a_cluster(monkeypatch):
    here, on_engine, merged, run = lanes(monkeypatch, 1, up_after=0)
    assert (here, on_engine, merged) == (["h0"], [], ["h0"])
    assert FakeCluster.made == [] and run.graded == 1
    assert run.first_kernel_s == 1.0  # its kernel_up_at, from the run's start


def test_the_shortest_are_graded_here_while_the_cluster_starts(monkeypatch):
    here, on_engine, merged, run = lanes(monkeypatch, 5, up_after=2)
    assert here == ["h4", "h3"]  # from the end of the queue: the shortest labs
    assert on_engine == ["h0", "h1", "h2"]  # the engine takes the longest first
    assert sorted(merged) == [f"h{i}" for i in range(5)] and run.graded == 5  # each once
    assert [c.workers for c in FakeCluster.made] == [2] and FakeCluster.made[0].closed
    here, on_engine, merged, run = lanes(monkeypatch, 2, up_after=1)
    assert (here, on_engine) == (["h1"], ["h0"])
    assert [c.workers for c in FakeCluster.made] == [1]  # one hand-in is left for it


def test_a_cluster_that_does_not_start_leaves_the_class_graded_here(monkeypatch):
    here, on_engine, merged, run = lanes(monkeypatch, 3, up_after=None)
    assert on_engine == [] and sorted(here) == ["h0", "h1", "h2"] and run.graded == 3
    assert run.interrupted is None


def test_grading_here_leaves_jupyters_variables_as_they_were(monkeypatch):
    import os

    from graders import grade, task

    monkeypatch.setenv("JUPYTER_PATH", "/before")
    monkeypatch.delenv("JUPYTER_RUNTIME_DIR", raising=False)

    def run(course, job):  # as graders.task.run does, for its kernel's spec and files
        os.environ.update({"JUPYTER_PATH": "/scratch/jupyter", "JUPYTER_RUNTIME_DIR": "/x"})
        return {"ok": True}

    monkeypatch.setattr(task, "run", run)
    assert grade.grade_here({}, {"lab": "x"}) == {"ok": True}
    assert os.environ["JUPYTER_PATH"] == "/before" and "JUPYTER_RUNTIME_DIR" not in os.environ
