"""The mistake catalogues (graders/build/catalogue.py, each lab's mistakes.toml) grade as declared,
and every exercise has a mistake in its lab's catalogue."""

from __future__ import annotations

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
            sentence = verdict.get("sentence", "")
            if verdict.get("kind") == "passed":
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
