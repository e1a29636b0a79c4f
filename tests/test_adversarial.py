"""An adversarial class, generated like the demo class: submissions that try to hang, crash,
flood, escape, or fool the grader. Each must get exactly its declared score, the class run
must finish, and the gradebook and every other submission must be intact."""

from __future__ import annotations

import copy
import hashlib
import json
import sqlite3
import textwrap
import time
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
BUDGET_S = 15  # the budget test's; long enough for the setup cell and one exercise


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
# Leave a startup file for whichever kernel starts next with the same IPython folder: if
# kernels shared it, every later student would fail every check.
PLANT_FOR_NEXT_KERNEL = """
import pathlib
_startup = pathlib.Path(get_ipython().profile_dir.startup_dir)
_startup.mkdir(parents=True, exist_ok=True)
(_startup / "00-plant.py").write_text("import torch\\ntorch.allclose = lambda *a, **k: False\\n")
print("PLANTED", _startup)
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

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, PLANT_FOR_NEXT_KERNEL)
    add("plants_for_next_kernel", nb, 10)

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
    assert "PLANTED" in outputs("plants_for_next_kernel")  # written, and harmed nobody
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


def test_the_notebook_budget_keeps_the_checks_that_finished(tmp_path):
    """A notebook that runs out of its whole-notebook budget keeps the points of the checks
    done in time; the cell running then and the cells after it say why they failed."""
    build(root=tmp_path, labs=[LAB], release=tmp_path / "labs")
    release = nbformat.read(tmp_path / "labs" / LAB / f"{LAB}.ipynb", as_version=4)
    (complete,) = [s for s in declared_class(LAB) if s.name == "complete"]
    nb = student_notebook(complete, release, source_notebook(LAB))
    # ignores the interrupt, so only the budget stops it
    prepend(
        nb,
        SECOND,
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
    )
    out = tmp_path / "submitted" / "over_budget" / LAB / f"{LAB}.ipynb"
    out.parent.mkdir(parents=True)
    nbformat.write(nb, out)
    report = grade_class(tmp_path, labs=[LAB], workers=1, quiet=True, budget_s=BUDGET_S)
    assert report.scores[("over_budget", LAB)] == 2  # test_recurrent_step ran in time
    graded = nbformat.read(tmp_path / "autograded" / "over_budget" / LAB / f"{LAB}.ipynb", 4)
    errors = [
        o.evalue for c in graded.cells if c.cell_type == "code" for o in c.outputs
        if o.output_type == "error" and o.ename == "NotebookBudgetExceeded"
    ]  # fmt: skip
    assert (
        errors[0]
        == f"the whole-notebook budget of {BUDGET_S} s ran out while this cell was running"
    )
    assert len(errors) > 3 and all(e.startswith("not run:") for e in errors[1:])
    assert cell(graded, SECOND).outputs[-1].ename == "NotebookBudgetExceeded"
    problem = [p for p in report.problems if "over_budget" in p.where]
    assert problem and "budget" in problem[0].reason and SECOND in problem[0].reason


def test_a_kernel_that_hangs_is_killed_after_the_budget(tmp_path, monkeypatch):
    """The last resort behind the budget: the sandbox kills a kernel that outlives it."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_core.utils import run_sync

    from graders import sandbox

    monkeypatch.setattr(sandbox, "KILL_GRACE_S", 0)
    sandbox.write_kernelspec(tmp_path / "jupyter")
    (tmp_path / "runtime").mkdir()
    events = tmp_path / "runtime" / "events.jsonl"
    settings = {"runtime": str(tmp_path / "runtime"), "budget_s": 2, "events": str(events)}
    km = sandbox.SandboxKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "jupyter" / "kernels")]),
        sandbox=settings,
    )
    run_sync(km.start_kernel)(cwd=str(tmp_path))
    try:
        assert run_sync(km.is_alive)()
        time.sleep(4)
        assert not run_sync(km.is_alive)()
        assert json.loads(events.read_text())["workdir"] == str(tmp_path)
    finally:
        run_sync(km.shutdown_kernel)(now=True)
