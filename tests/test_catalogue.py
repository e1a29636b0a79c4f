"""The mistake catalogues (graders/catalogue.py, each lab's mistakes.toml) grade as declared,
and every exercise has a mistake in its lab's catalogue."""

from __future__ import annotations

import nbformat
import pytest

from graders.catalogue import catalogue, expected
from graders.course import LABS, REPO
from graders.demo import answer_ids


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


@pytest.mark.parametrize("lab", [lab for lab in LABS if catalogue(lab)])
def test_a_catalogue_covers_every_exercise(lab):
    """At least three wrong answers per exercise and two other correct ones per lab."""
    variants = catalogue(lab)
    release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    for exercise in answer_ids(release):
        wrong = [v for v in variants if v.exercise == exercise and v.kind == "wrong"]
        assert len(wrong) >= 3, f"{lab}: {exercise} has {len(wrong)} wrong variants"
    assert sum(v.kind == "correct" for v in variants) >= 2, f"{lab}: fewer than 2 correct"
