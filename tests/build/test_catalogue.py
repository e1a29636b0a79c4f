"""The mistake catalogues (graders/build/catalogue.py, each lab's mistakes.toml) grade as declared,
and every exercise has a mistake in its lab's catalogue."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from graders.build.catalogue import catalogue
from graders.build.demo import answer_ids, answer_sources
from graders.config.course import LABS, REPO
from graders.judge import torch_errors

NOT_A_CHECKS_WORDS = ("A visible check stopped at line", "A visible check failed with")


def shows_a_known_message(sentence: str) -> bool:
    """Whether the sentence quotes one of graders/judge/torch_errors.json's messages (the first 40
    characters of one of its literal parts of 20 or more: a message may be cut), added by the
    judge or as a check's value."""
    templates = torch_errors.load()["templates"]
    return any(p[:40] in sentence for e in templates for p in e["parts"] if p and len(p) >= 20)


def failure_sentences(report, hand_ins: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The judge's failure sentences of these (student, lab) hand-ins: "check" (worded by a
    check), "code" (pointing into a check's own code), "other" (hidden checks, limits, not
    answered), and, across these, "pytorch" (quoting a known PyTorch or Python message), each
    as 'lab/student/grade id: ...'."""
    found: dict[str, list[str]] = {"check": [], "code": [], "pytorch": [], "other": []}
    for student, lab in hand_ins:
        for grade_id, verdict in report.verdicts.get((student, lab), {}).items():
            sentence = verdict.sentence
            if verdict.passed:
                continue
            where = f"{lab}/{student}/{grade_id}: {sentence}"
            if sentence.startswith(NOT_A_CHECKS_WORDS):
                found["code"].append(where)
            elif sentence.startswith("A visible check failed: "):
                found["check"].append(where)
            else:
                found["other"].append(where)
            if shows_a_known_message(sentence):
                found["pytorch"].append(where)
    return found


def counted(found: dict[str, list[str]]) -> str:
    return ", ".join(f"{len(v)} {k}" for k, v in found.items())


def test_no_catalogue_failure_points_into_a_checks_own_code(graded):
    """Every wrong answer of every catalogue is told by a check's own sentence (or a hidden
    check's), never by "stopped at line N" of the check's code."""
    _alone, folded, report = graded
    found = failure_sentences(report, [(f.name, f.lab) for f in folded if f.variants])
    print(f"catalogue failure sentences: {counted(found)}")
    assert found["check"], "no failure sentence worded by a check: was anything graded?"
    assert not found["code"], f"{counted(found)}:\n" + "\n".join(found["code"])


def test_the_mistake_catalogue_gets_its_declared_scores(graded):
    """Every catalogued answer loses exactly its declared points, in its own exercise only
    (variants of several exercises, and demo students, share a hand-in: their losses must add
    up; tests/helpers.py folds them)."""
    _alone, folded, report = graded
    wrong = [line for f in folded if f.variants and (line := f.mismatch(report))]
    assert not wrong, "\n".join(wrong)
    placed = sorted((f.lab, v.exercise, v.code) for f in folded for v in f.variants)
    assert placed == sorted((v.lab, v.exercise, v.code) for lab in LABS for v in catalogue(lab))


def longer_than_a_screen(notebooks: dict[str, Path]) -> list[str]:
    """'name/cell id: N lines' for each demo cell (a code cell neither graded nor an answer) of
    these executed notebooks whose outputs take more than a screen. A demo cell's id is the
    nearest nbgrader cell's above it and its rank after it ('test_hvp--2': graders/build.py),
    so a test cell's name in the id does not make it a test cell: its metadata does."""
    from helpers import SCREEN_LINES, output_lines

    long = []
    for name, path in notebooks.items():
        # (nbformat.v4.reads: nbformat.read validates, seconds for the 126 graded notebooks)
        for cell in nbformat.v4.reads(path.read_text(encoding="utf-8")).cells:
            info = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or info.get("grade") or info.get("solution"):
                continue
            lines = sum(output_lines(o) for o in cell.get("outputs", []))
            if lines > SCREEN_LINES:
                long.append(f"{name}/{cell.get('id')}: {lines} lines")
    return long


def test_after_a_catalogued_mistake_no_demo_cell_shows_more_than_a_screen(graded, course):
    """A wrong answer fails in its own check, and the lab's demos that run it after that say
    so in one sentence (the setup cell's `your_code`), never a traceback through the demo: a
    wrong softplus_op made lab 11's next cell print the compiler's 600 lines, a wrong hvp lab
    10's timing cell 57. Read from the graded class's autograded notebooks: nothing is run
    again for this."""
    _alone, folded, _report = graded
    autograded = course / "autograded"
    notebooks = {
        f"{f.lab}/{f.name}": autograded / f.name / f.lab / f"{f.lab}.ipynb" for f in folded
    }
    # (a hand-in that its limits stopped may have no autograded notebook: nothing to read)
    present = {name: path for name, path in notebooks.items() if path.exists()}
    assert {name.split("/")[0] for name in present} == {f.lab for f in folded}
    long = longer_than_a_screen(present)
    assert not long, "\n".join(long)


def test_the_screen_rule_reads_demo_cells_only(tmp_path):
    """The rule above on a notebook made for it: a demo cell of 60 lines is found, whatever
    its id says; an answer cell and a test cell of 60 lines, and a demo cell of a screen, are
    not."""
    from helpers import SCREEN_LINES

    def cell(cell_id, lines, **nbgrader):
        made = nbformat.v4.new_code_cell("print(...)")
        made["id"] = cell_id
        made.outputs = [nbformat.v4.new_output("stream", text="x\n" * lines)]
        if nbgrader:
            made.metadata["nbgrader"] = {"grade_id": cell_id, **nbgrader}
        return made

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        cell("answer", 60, solution=True, grade=False),
        cell("test_answer", 60, grade=True, solution=False),
        cell("test_answer--1", SCREEN_LINES),
        cell("test_answer--2", 60),
    ]
    nbformat.write(nb, tmp_path / "lab.ipynb")
    assert longer_than_a_screen({"lab/one": tmp_path / "lab.ipynb"}) == [
        "lab/one/test_answer--2: 60 lines"
    ]


@pytest.mark.parametrize("lab", [lab for lab in LABS if catalogue(lab)])
def test_a_catalogue_covers_every_exercise(lab):
    """At least three wrong answers per exercise and two other correct ones per lab."""
    variants = catalogue(lab)
    release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    for exercise in answer_ids(release):
        wrong = [v for v in variants if v.exercise == exercise and v.kind == "wrong"]
        assert len(wrong) >= 3, f"{lab}: {exercise} has {len(wrong)} wrong variants"
    assert sum(v.kind == "correct" for v in variants) >= 2, f"{lab}: fewer than 2 correct"


def test_the_test_class_folds_every_mistake_once_without_sharing_a_cell(tmp_path):
    """tests/helpers.py's `write_test_class`, which conftest's `graded` grades: every demo
    student (complete and blank by themselves) and every catalogued answer in exactly one
    hand-in, no two of them on one answer cell, each hand-in written with their code, and no
    more hand-ins than the lab's busiest answer cell needs."""
    from helpers import ALONE, demo_cells, write_test_class

    from graders.build.build import source_notebook
    from graders.build.demo import declared_class

    for lab in LABS:
        release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
        source = source_notebook(lab)
        alone, folded = write_test_class(tmp_path, lab, REPO / "labs")
        assert {s.name for s in alone} == ALONE
        placed = [s.name for s in alone] + [s.name for f in folded for s in f.students]
        assert sorted(placed) == sorted(s.name for s in declared_class(lab)), lab
        variants = [(v.exercise, v.code) for f in folded for v in f.variants]
        assert sorted(variants) == sorted((v.exercise, v.code) for v in catalogue(lab)), lab
        busiest: dict[str, int] = {}
        for hand_in in folded:
            taken = [v.exercise for v in hand_in.variants]
            for student in hand_in.students:
                taken += demo_cells(student, release, source)
            assert len(taken) == len(set(taken)), f"{lab}/{hand_in.name} shares a cell"
            for cell in taken:
                busiest[cell] = busiest.get(cell, 0) + 1
            written = nbformat.read(
                tmp_path / "submitted" / hand_in.name / lab / f"{lab}.ipynb", as_version=4
            )
            sources = answer_sources(written)
            for cell, code in hand_in.cells.items():
                assert sources[cell] == code.strip("\n"), f"{lab}/{hand_in.name}/{cell}"
        assert len(folded) == max(busiest.values()), lab
