"""One hand-in cannot stop the class or take more than its budget: a crashing, hanging or
slow notebook costs its own grade only, and the checks that finished keep their points.
"""

from __future__ import annotations

import html
import json
import time

from hostile_class import (
    BUDGET_S,
    LAB,
    SECOND,
    TEST_CELLS,
    cell,
    complete_and_blank,
    course_copy,
    graded_notebook,
    is_test_cell,
    outputs,
    prepend,
    write_notebook,
)

from graders.formats import budgets, references
from graders.grade.grade import grade_class
from graders.sandbox import sandbox_kernel


def test_one_hand_in_cannot_stop_the_class(graded):
    root, scores, report, _before = graded
    assert all((name, LAB) in report.scores for name in scores)
    verdicts = report.verdicts[("class_stopper", LAB)]
    assert verdicts["test_backward_twice"].kind == "records"
    assert {g for g, v in verdicts.items() if v.kind == "passed"} == set(TEST_CELLS) - {
        "test_backward_twice"
    }
    printed = outputs(root, "class_stopper")
    assert "No space left on device" in printed and "FILES " in printed  # filled to its cap
    notes = {p.where: p.reason for p in report.notes}
    crowded = notes[f"submitted/class_stopper/{LAB}"]
    assert "other file(s) ignored: dangling, junk-00000" in crowded
    assert report.timings[("class_stopper", LAB)]["intake"] < 5


def test_the_notebook_budget_keeps_the_checks_that_finished(pristine, tmp_path):
    """A notebook that runs out of its whole-notebook budget keeps the points of the checks
    done in time; the cell running then and the cells after it say why they failed."""
    root = course_copy(pristine, tmp_path / "course")
    complete, _blank = complete_and_blank(root)
    # ignores the interrupt, so only the budget stops it
    prepend(
        complete,
        SECOND,
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
    )
    write_notebook(root, "over_budget", complete)
    report = grade_class(root, labs=[LAB], workers=1, quiet=True, budget_s=BUDGET_S, feedback=False)
    assert report.scores[("over_budget", LAB)] == 2  # test_recurrent_step ran in time
    graded = graded_notebook(root, "over_budget")
    errors = [
        o.evalue for c in graded.cells if c.cell_type == "code" and not is_test_cell(c)
        for o in c.outputs if o.output_type == "error" and o.ename == "NotebookBudgetExceeded"
    ]  # fmt: skip
    assert (
        errors[0]
        == f"the whole-notebook budget of {BUDGET_S} s ran out while this cell was running"
    )
    assert len(errors) > 3 and all(e.startswith("not run:") for e in errors[1:])
    assert cell(graded, SECOND).outputs[-1].ename == "NotebookBudgetExceeded"
    # the test cells after it carry the judge's sentence in place of the kernel's error
    for grade_id in TEST_CELLS[1:]:
        (output,) = cell(graded, grade_id).outputs
        assert output.ename == "CheckFailed", grade_id
        assert output.evalue.startswith("Not graded to the end:"), output.evalue
    problem = [p for p in report.problems if "over_budget" in p.where]
    assert problem and "budget" in problem[0].reason and SECOND in problem[0].reason


def test_a_hand_in_that_loops_forever_is_stopped_at_its_cells_budget(pristine, tmp_path):
    """Exercise 2 loops forever: under the per-lab budgets (no limits given), its cell is
    stopped at its own budget, long before the flat 120 s a cell; the check before it keeps
    its points; every test cell after it, and the feedback page, say which cell ran out of
    time, its budget and how long the solution takes there."""
    root = course_copy(pristine, tmp_path / "course")
    complete, _blank = complete_and_blank(root)
    prepend(complete, SECOND, "while True:\n    pass")
    write_notebook(root, "loops_forever", complete)
    timed = references.timing(references.path(references.folder(root), LAB))
    assert timed is not None  # make build timed the solution
    plan, _notebook = budgets.plan(complete, *timed, budgets.Policy())
    index = next(i for i, c in enumerate(complete.cells) if c is cell(complete, SECOND))
    budget = plan[index]
    assert budget.solution_s is not None and budget.seconds < 120
    started = time.monotonic()
    report = grade_class(root, labs=[LAB], workers=1, quiet=True)
    assert time.monotonic() - started < 120  # the flat limit of that one cell, alone
    assert report.scores[("loops_forever", LAB)] == 2  # test_recurrent_step ran in time
    graded = graded_notebook(root, "loops_forever")
    itself = cell(graded, SECOND).outputs[-1]
    assert itself.ename == "CellTimeoutError"
    assert itself.evalue == budgets.words(budget, itself=True)
    said = f"Not graded to the end: {budgets.words(budget)}."
    assert f"ran out of its time budget of {budget.seconds} s (the solution runs it in" in said
    for grade_id in TEST_CELLS[1:]:
        (output,) = cell(graded, grade_id).outputs
        assert output.evalue == said, grade_id
    page = (root / "feedback" / "loops_forever" / LAB / f"{LAB}.html").read_text()
    assert html.escape(budgets.words(budget), quote=False) in page.replace("&#39;", "'")
    problem = [p for p in report.problems if "loops_forever" in p.where]
    assert problem and "time budget" in problem[0].reason


def test_a_kernel_that_hangs_is_killed_after_the_budget(tmp_path, monkeypatch):
    """The last resort behind the budget: the sandbox kills a kernel that outlives it."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_core.utils import run_sync

    monkeypatch.setattr(sandbox_kernel, "KILL_GRACE_S", 0)
    sandbox_kernel.write_kernelspec(tmp_path / "jupyter")
    (tmp_path / "runtime").mkdir()
    events = tmp_path / "runtime" / "events.jsonl"
    settings = {"runtime": str(tmp_path / "runtime"), "budget_s": 2, "events": str(events)}
    km = sandbox_kernel.SandboxKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "jupyter" / "kernels")]),
        sandbox=settings,
    )
    run_sync(km.start_kernel)(cwd=str(tmp_path))
    try:
        assert run_sync(km.is_alive)()
        time.sleep(4)
        assert not run_sync(km.is_alive)()
        event = json.loads(events.read_text())
        assert event["kernel"] == str(km._private)
        assert event["budget_s"] == 2
    finally:
        run_sync(km.shutdown_kernel)(now=True)
