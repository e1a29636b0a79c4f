"""Per-lab time budgets (graders/formats/budgets.py): a hand-in's cells are matched to the
solution's by grade_id, cell id or source; a cell the solution lacks gets the lab's largest budget,
never 0 s; adding or copying cells never adds to the notebook's budget; the words say which cell ran
out of time, where, and how long the solution takes there."""

from __future__ import annotations

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from graders.formats import budgets
from graders.formats.budgets import Budget, CellTime, Policy, digest, plan, words

POLICY = Policy(multiple=10, floor_s=5, first_floor_s=30, notebook_floor_s=60)


def graded(grade_id: str) -> dict:
    return {"nbgrader": {"grade_id": grade_id}}


def solution():
    """A solution of four code cells: setup, an exercise, its test, a slow training cell."""
    cells = [
        new_markdown_cell("# Lab"),
        new_code_cell("import torch", id="setup", metadata=graded("setup")),
        new_markdown_cell("## Exercise 1: `step`"),
        new_code_cell("def step(x):\n    return x", id="ex1", metadata=graded("step")),
        new_code_cell("check(step(1) == 1, 'm')", id="t1", metadata=graded("test_step")),
        new_markdown_cell("## Training"),
        new_code_cell("train()", id="train"),
    ]  # fmt: skip
    nb = new_notebook(cells=cells)
    times = [2.0, 0.01, 0.2, 4.0]
    timed = [
        CellTime(id=c.id, grade_id=c.metadata.get("nbgrader", {}).get("grade_id"),
                 source=digest(c.source), seconds=s)
        for c, s in zip([c for c in cells if c.cell_type == "code"], times, strict=True)
    ]  # fmt: skip
    return nb, timed, 7.5


def test_each_cell_gets_a_multiple_of_the_solutions_time_with_a_floor():
    nb, timed, total = solution()
    cells, notebook = plan(nb, timed, total, POLICY)
    assert {i: b.seconds for i, b in cells.items()} == {1: 30, 3: 5, 4: 5, 6: 40}
    assert cells[6].solution_s == 4.0 and cells[1].solution_s == 2.0
    assert notebook == 75  # 10 x 7.5 s, over the floor of 60


def test_cells_are_matched_by_grade_id_then_id_then_source():
    nb, timed, total = solution()
    nb.cells[3].id = "renamed"  # a grade_id still finds it
    nb.cells[6].id = "other"  # same source: still found
    nb.cells[6].metadata = {}
    cells, _ = plan(nb, timed, total, POLICY)
    assert cells[3].solution_s == 0.01 and cells[6].solution_s == 4.0
    nb.cells[6].source = "train()  # edited"  # neither id nor source: a cell of the student's
    cells, _ = plan(nb, timed, total, POLICY)
    assert cells[6].solution_s is None and cells[6].seconds == 40  # the lab's largest


def test_a_cell_the_student_added_gets_the_largest_budget_never_zero():
    nb, timed, total = solution()
    nb.cells.insert(4, new_code_cell("print(step(2))"))  # no id of the solution's
    cells, _ = plan(nb, timed, total, POLICY)
    assert cells[4].solution_s is None and cells[4].seconds == 40
    # a lab whose cells are all quick: the floor, not 0
    quick = [dict(c, seconds=0.0) for c in timed]
    cells, notebook = plan(nb, quick, 0.1, POLICY)
    assert cells[4].seconds == 5 and notebook == 60


def test_the_first_cell_pays_the_imports_whoever_wrote_it():
    nb, timed, total = solution()
    nb.cells.insert(0, new_code_cell("x = 1"))
    cells, _ = plan(nb, timed, total, POLICY)
    assert cells[0].seconds == 40 and cells[0].solution_s is None  # largest, and >= 30
    assert cells[2].seconds == 30  # the setup cell keeps its own first-cell floor


def test_adding_or_copying_cells_never_adds_to_the_notebooks_budget():
    nb, timed, total = solution()
    _, alone = plan(nb, timed, total, POLICY)
    copies = [new_code_cell(nb.cells[6].source, id="train") for _ in range(200)]
    copies += [new_code_cell("while True: pass") for _ in range(200)]
    nb.cells.extend(copies)
    cells, notebook = plan(nb, timed, total, POLICY)
    assert notebook == alone == 75
    # a copy with the solution's id and source matches nothing the first one took
    assert all(cells[i].solution_s is None for i in range(7, len(nb.cells)))


def test_the_words_find_the_cell_in_the_students_notebook():
    nb, timed, total = solution()
    nb.cells[2].source = "## Exercise 1: `step` <script>alert(1)</script>"
    cells, _ = plan(nb, timed, total, POLICY)
    said = words(cells[4])
    assert said == (
        "not run, because the 2nd code cell after 'Exercise 1: step scriptalert(1)/script' "
        "(cell 5) ran out of its time budget of 5 s (the solution runs it in 0.2 s): look for "
        "a loop that never ends, or work that grows with each pass"
    )
    assert words(cells[6], itself=True).startswith(
        "this cell ran out of its time budget of 40 s (the solution runs it in 4.0 s)"
    )
    extra = Budget(
        seconds=40, solution_s=None, where="the code cell after 'X' (cell 9)", longest_s=4
    )
    assert "a cell the solution does not have" in words(extra)
    assert "<" not in budgets.where_words(nb)[3]
