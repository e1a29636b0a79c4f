"""The mistake catalogue: answers students really write, wrong and right, each with the points
it must lose, graded by the course's own grader and held to them.

Each lab may have ``solutions/<lab>/mistakes.toml`` beside its demo class:

    [[variant]]
    exercise = "fresh_gradients"   # the answer cell (grade_id) this answer replaces
    kind = "wrong"                 # "wrong": loses points; "correct": keeps them all
    loses = 2                      # the points it must lose (0 for a correct answer)
    why = "no zero_grad: the values grow from pass to pass"
    code = '''
    def fresh_gradients(n):
        ...
    '''
    # alone = true                 # graded in a notebook of its own (see below)

A mistake costs points once, in its own exercise (the checks of other exercises do not use
it), so variants of different exercises are graded together: the k-th variant of every
exercise goes into hand-in k, whose score must be the full marks minus what its variants
lose. A variant whose loss is not its own exercise's alone (a check that says "this uses
your walk from exercise 2, which failed there") is marked ``alone`` and graded by itself.

    python -m graders.build.catalogue check [LAB ...]   # grade the catalogue in a scratch course
    python -m graders.build.catalogue count             # variants per lab and exercise
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

from graders.build.build import SourceError, build, source_notebook
from graders.build.demo import Student, answer_ids, student_notebook
from graders.config.course import LABS, SOLUTIONS, unknown_labs
from graders.formats.verdict import failures

KINDS = {"wrong", "correct"}
KEYS = {"exercise", "kind", "loses", "why", "code", "alone"}


@dataclass
class Variant:
    lab: str
    exercise: str
    kind: str
    loses: float
    why: str
    code: str
    alone: bool = False


@dataclass
class Pack:
    """One graded hand-in of the catalogue: several variants, at most one per exercise."""

    lab: str
    name: str
    variants: list[Variant]

    def student(self) -> Student:
        cells = {v.exercise: v.code for v in self.variants}
        return Student(name=self.name, lab=self.lab, score=0, cells=cells)


def catalogue(lab: str) -> list[Variant]:
    """The lab's variants ([] when it has no mistakes.toml); raises SourceError, by name."""
    path = SOLUTIONS / lab / "mistakes.toml"
    if not path.is_file():
        return []
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise SourceError(f"{path} is not valid TOML: {error}") from None
    found = []
    for index, spec in enumerate(table.get("variant", [])):
        where = f"{path}, variant {index + 1}"
        unknown = set(spec) - KEYS
        missing = {"exercise", "kind", "loses", "why", "code"} - set(spec)
        if unknown or missing:
            raise SourceError(f"{where}: unknown {sorted(unknown)}, missing {sorted(missing)}")
        if spec["kind"] not in KINDS:
            raise SourceError(f"{where}: kind should be 'wrong' or 'correct'")
        loses = spec["loses"]
        if isinstance(loses, bool) or not isinstance(loses, int | float) or loses < 0:
            raise SourceError(f"{where}: loses should be a number >= 0")
        if (spec["kind"] == "correct") != (loses == 0):
            raise SourceError(f"{where}: a correct variant loses 0, a wrong one more than 0")
        found.append(Variant(lab=lab, **spec))
    return found


def packs(lab: str, variants: list[Variant]) -> list[Pack]:
    """The hand-ins that grade `variants`: the k-th of each exercise together, `alone` ones
    by themselves."""
    together: dict[int, list[Variant]] = {}
    counts: dict[str, int] = {}
    alone = []
    for variant in variants:
        if variant.alone:
            alone.append(variant)
            continue
        k = counts.get(variant.exercise, 0)
        counts[variant.exercise] = k + 1
        together.setdefault(k, []).append(variant)
    found = [Pack(lab, f"catalogue-{k + 1}", group) for k, group in sorted(together.items())]
    found += [Pack(lab, f"catalogue-alone-{i + 1}", [v]) for i, v in enumerate(alone)]
    return found


def expected(pack: Pack, full: float) -> float:
    return full - sum(v.loses for v in pack.variants)


def write_packs(root: Path, lab: str, release: Path) -> list[Pack]:
    """Write the catalogue's hand-ins of `lab` under root/submitted/; check every exercise
    names an answer cell."""
    release_nb = nbformat.read(release / lab / f"{lab}.ipynb", as_version=4)
    solution_nb = source_notebook(lab)
    answers = set(answer_ids(release_nb))
    variants = catalogue(lab)
    for v in variants:
        if v.exercise not in answers:
            raise SourceError(f"{lab}/mistakes.toml: no answer cell {v.exercise!r}")
    made = packs(lab, variants)
    for pack in made:
        out = root / "submitted" / pack.name / lab / f"{lab}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        nb = student_notebook(pack.student(), copy.deepcopy(release_nb), solution_nb)
        nbformat.write(nb, out)
    return made


def check_catalogue(labs: list[str], workers: int | None = None, sentences: bool = False) -> int:
    """Build `labs` into a scratch course, grade their catalogue there, compare;
    `sentences`: under each hand-in, the sentence of every check that did not pass."""
    from graders.grade.grade import grade_class

    with tempfile.TemporaryDirectory(prefix="catalogue-") as tmp:
        root = Path(tmp)
        release = build(root=root, labs=labs, release=root / "labs")
        made = [pack for lab in labs for pack in write_packs(root, lab, release)]
        run = grade_class(root, labs=labs, workers=workers, feedback=False, quiet=True)
    wrong = 0
    for pack in made:
        full = run.max_scores.get(pack.lab, 0)
        got, want = run.scores.get((pack.name, pack.lab)), expected(pack, full)
        ok = got is not None and abs(got - want) < 1e-9
        wrong += not ok
        names = ", ".join(f"{v.exercise}:{v.kind}" for v in pack.variants)
        print(f"{'ok ' if ok else 'BAD'} {pack.lab:<24} {pack.name:<20} want {want:>5g} got {got}"
              f"  ({names})")  # fmt: skip
        if sentences:
            for line in failures(run.verdicts.get((pack.name, pack.lab), {})):
                print(f"      {line}")
    count = sum(len(p.variants) for p in made)
    print(f"{count} variants in {len(made)} hand-ins; {len(made) - wrong}/{len(made)} as declared")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    from graders.grade.grade import worker_count

    parser = argparse.ArgumentParser(description="The mistake catalogue.")
    sub = parser.add_subparsers(dest="command", required=True)
    chk = sub.add_parser("check", help="grade the catalogue of some labs in a scratch course")
    chk.add_argument("labs", nargs="*")
    chk.add_argument("--workers", type=worker_count, default=None)
    chk.add_argument("--sentences", action="store_true",
                     help="print the sentence of every check that did not pass")  # fmt: skip
    sub.add_parser("count", help="variants per lab and exercise")
    args = parser.parse_args(argv)
    try:
        if args.command == "count":
            for lab in LABS:
                variants = catalogue(lab)
                wrong = sum(v.kind == "wrong" for v in variants)
                print(f"{lab:<24} {wrong:>3} wrong, {len(variants) - wrong:>3} correct")
            return 0
        if complaint := unknown_labs(args.labs):
            print(complaint, file=sys.stderr)
            return 2
        return check_catalogue(args.labs or LABS, args.workers, args.sentences)
    except SourceError as error:
        print(f"catalogue: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
