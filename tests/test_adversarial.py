"""An adversarial class, generated like the demo class: submissions that try to hang, crash,
flood, escape, or fool the grader. Each must get exactly its declared score, the class run
must finish, and the gradebook and every other submission must be intact."""

from __future__ import annotations

import copy
import hashlib
import sqlite3
import textwrap
from pathlib import Path

import nbformat
import pytest

from graders.build import build, source_notebook
from graders.course import REPO
from graders.demo import declared_class, student_notebook, write_class
from graders.grade import grade_class

LAB = "lab02_backprop"  # 10 points: 5 test cells of 2, answer cells below
FIRST, SECOND = "recurrent_step", "backward_twice"
CELL_TIMEOUT = 20


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def prepend(nb, grade_id, code):
    c = cell(nb, grade_id)
    c.source = textwrap.dedent(code).strip() + "\n" + c.source


# Code that fakes success: the kernel skips every test cell and reports "ok".
HIJACK_RUN_CELL = """
ip = get_ipython()
_real = ip.run_cell_async
async def _fake(raw_cell, *args, **kwargs):
    if "check(" in raw_cell or "assert" in raw_cell:
        raw_cell = "pass"
    return await _real(raw_cell, *args, **kwargs)
ip.run_cell_async = _fake
"""

# Wrong answers everywhere, with every comparison the checks use made to say "equal".
PATCH_COMPARISONS = """
import builtins, torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
builtins.abs = lambda x: 0
builtins.all = lambda it: True
"""
WRONG = {
    FIRST: "def recurrent_step(Wh, Wx, x, h):\n    return torch.zeros(()), torch.zeros(3, 1)",
    SECOND: "def backward_twice(w):\n    return torch.tensor(0.0)",
    "fresh_gradients": "def fresh_gradients(n):\n    return [0.0] * n",
}


def make_class(root: Path, paths: dict[str, Path]) -> dict[str, float]:
    """Write the adversarial students; return the score each must get."""
    release = nbformat.read(root / "labs" / LAB / f"{LAB}.ipynb", as_version=4)
    declared = {s.name: s for s in declared_class(LAB)}
    solution = source_notebook(LAB)
    complete = student_notebook(declared["complete"], release, solution)
    blank = student_notebook(declared["blank"], release, solution)
    scores, class_ = {}, {}

    def add(name, nb, score):
        class_[name], scores[name] = nb, score

    nb = copy.deepcopy(complete)
    prepend(nb, SECOND, "while True:\n    pass")
    add("infinite_loop", nb, 8)

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, "_hog = bytearray(64 * 2**30)")
    add("memory_bomb", nb, 8)

    nb = copy.deepcopy(complete)
    prepend(nb, SECOND, "import os\nos._exit(0)")
    add("os_exit", nb, 0)

    nb = copy.deepcopy(complete)
    prepend(nb, SECOND, "import sys\nsys.exit(1)")
    add("sys_exit", nb, 8)

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, "import os, time\nif os.fork() == 0:\n    time.sleep(3600)\n    os._exit(0)")
    add("fork_outlives_cell", nb, 10)

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, "print('x' * (100 * 2**20))")
    add("prints_100mb", nb, 10)

    nb = copy.deepcopy(blank)
    prepend(nb, FIRST, "get_ipython().showtraceback = lambda *a, **k: None")
    add("disabled_traceback", nb, 0)

    nb = copy.deepcopy(blank)
    prepend(nb, FIRST, HIJACK_RUN_CELL)
    add("replaced_run_cell", nb, 0)

    nb = copy.deepcopy(complete)
    for grade_id, code in WRONG.items():
        cell(nb, grade_id).source = code
    prepend(nb, FIRST, PATCH_COMPARISONS)
    add("patched_comparisons", nb, 4)  # only exercise 4 (f(x, y, z), 4 points) is right

    nb = copy.deepcopy(complete)
    cell(nb, SECOND).source = WRONG[SECOND]
    cell(nb, "test_backward_twice").source = "pass"
    add("edited_test_cell", nb, 8)

    nb = copy.deepcopy(complete)
    cell(nb, SECOND).source = WRONG[SECOND]
    nb.cells.remove(cell(nb, "test_backward_twice"))
    add("deleted_test_cell", nb, 8)

    nb = copy.deepcopy(complete)
    cell(nb, SECOND).source = WRONG[SECOND]
    cell(nb, "test_backward_twice").metadata.nbgrader["points"] = 100
    cell(nb, "test_backward_twice").metadata.nbgrader["grade"] = False
    add("changed_points", nb, 8)

    nb = copy.deepcopy(complete)
    targets = [paths["gradebook"], paths["other"], REPO / "gradebook.db", "../../../gradebook.db"]
    prepend(
        nb,
        FIRST,
        f"""
        for _target in {[str(t) for t in targets]!r}:
            try:
                with open(_target, "w") as _fh:
                    _fh.write("overwritten by a student")
                print("WROTE", _target)
            except OSError as _error:
                print("REFUSED", _target, type(_error).__name__)
        """,
    )
    add("overwrites_gradebook", nb, 10)

    nb = copy.deepcopy(complete)
    prepend(
        nb,
        FIRST,
        """
        import socket
        try:
            socket.create_connection(("pypi.org", 443), timeout=5)
            print("NETWORK: reachable")
        except OSError:
            print("NETWORK: unreachable")
        """,
    )
    add("network_call", nb, 10)

    for name, nb in class_.items():
        out = root / "submitted" / name / LAB / f"{LAB}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)
    return scores


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("adversarial")
    build(root=root, labs=[LAB], release=root / "labs")
    write_class(root, [LAB], root / "labs")  # the demo class too: the "other students"
    paths = {
        "gradebook": root / "gradebook.db",
        "other": root / "submitted" / "complete" / LAB / f"{LAB}.ipynb",
    }
    scores = make_class(root, paths)
    before = {p: digest(p) for p in (root / "submitted").rglob("*.ipynb")}
    report = grade_class(root, labs=[LAB], workers=2, cell_timeout=CELL_TIMEOUT, quiet=True)
    return root, scores, report, before


def test_every_adversary_gets_exactly_its_declared_score(graded):
    _root, scores, report, _before = graded
    got = {name: report.scores.get((name, LAB)) for name in scores}
    assert got == scores


def test_nothing_submitted_was_modified(graded):
    _root, _scores, _report, before = graded
    after = {p: digest(p) for p in before}
    assert after == before


def test_gradebook_is_intact_and_complete(graded):
    root, scores, report, _before = graded
    with sqlite3.connect(root / "gradebook.db") as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    demo = {s.name: s.score for s in declared_class(LAB)}
    assert {name: report.scores[(name, LAB)] for name in demo} == demo


def test_adversaries_were_contained(graded):
    root, _scores, report, _before = graded

    def outputs(student):
        nb = nbformat.read(root / "autograded" / student / LAB / f"{LAB}.ipynb", as_version=4)
        return "".join(
            o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
        )

    assert "NETWORK: unreachable" in outputs("network_call")
    written = outputs("overwrites_gradebook")
    assert "WROTE" not in written and written.count("REFUSED") == 4
    assert len(outputs("prints_100mb")) < 100_000
    # nbgrader alone would have passed these cells; the independent check overruled it
    for trick in ("replaced_run_cell", "patched_comparisons"):
        nb = nbformat.read(root / "autograded" / trick / LAB / f"{LAB}.ipynb", as_version=4)
        overruled = [
            c.metadata.nbgrader["grade_id"]
            for c in nb.cells
            if any(o.get("ename") == "IndependentCheckFailed" for o in c.get("outputs", []))
        ]
        assert overruled, f"{trick}: no test cell was overruled by the judge"
    dead = [p for p in report.problems if "os_exit" in p.where]
    assert dead and "kernel died" in dead[0].reason
