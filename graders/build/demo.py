"""The demo class: students made from the solution notebooks, with the score each must get.

Each lab declares its students in ``solutions/<lab>/demo.toml`` (see CONTRIBUTING.md). A
student's notebook is the *release* notebook with some answer cells filled in, so it looks
exactly like a real hand-in: nbgrader checksums, locked cells and hidden tests as released.

    python -m graders.build.demo run         # write submitted/, grade it, print the table, compare
    python -m graders.build.demo write       # only write submitted/<student>/<lab>/ for every lab
    python -m graders.build.demo check [LAB]  # grade the demo class in a scratch course, compare
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from graders.build.build import SourceError, build, source_notebook
from graders.config.course import LABS, REPO, SOLUTIONS, unknown_labs
from graders.formats.verdict import failures

CRASH_LINE = "pirnt('starting exercise')  # a typo: NameError before anything else runs\n"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


@dataclass
class Student:
    name: str
    lab: str
    score: float
    why: str = ""
    fill: list[str] | None = None  # None: every answer cell
    crash: bool = False
    cells: dict[str, str] = field(default_factory=dict)


def declared_class(lab: str) -> list[Student]:
    path = SOLUTIONS / lab / "demo.toml"
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    except FileNotFoundError:
        raise SourceError(f"{path} is missing: every lab declares its demo class") from None
    except tomllib.TOMLDecodeError as error:
        raise SourceError(f"{path} is not valid TOML: {error}") from None
    students = []
    for name, spec in table.items():
        if not isinstance(spec, dict):
            raise SourceError(f"{path}: {name!r} should be a table [{name}] of one student")
        unknown = set(spec) - {"score", "why", "fill", "crash", "cells"}
        if unknown or "score" not in spec:
            raise SourceError(
                f"{path}: student {name!r} needs a score, and knows no {sorted(unknown)}"
            )
        students.append(Student(name=name, lab=lab, **spec))
    return students


def solution_code(cell) -> str:
    """An answer cell of the source notebook, with the solution markers removed."""
    lines = cell.source.splitlines(keepends=True)
    return "".join(line for line in lines if line.strip() not in MARKERS)


def answer_sources(nb) -> dict[str, str]:
    """The answer cells of `nb` (grade_id -> source), in notebook order."""
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }


def answer_ids(nb) -> list[str]:
    return list(answer_sources(nb))


def student_notebook(student: Student, release_nb, solution_nb):
    """The release notebook as `student` hands it in."""
    solutions = {
        c.metadata["nbgrader"]["grade_id"]: solution_code(c)
        for c in solution_nb.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    nb = copy.deepcopy(release_nb)
    ids = answer_ids(nb)
    unknown = (set(student.cells) | set(student.fill or [])) - set(ids)
    if unknown:
        raise SourceError(
            f"{student.lab}/demo.toml, student {student.name!r}: no answer cell {sorted(unknown)}"
        )
    fill = ids if student.fill is None else student.fill
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id not in ids:
            continue
        if grade_id in student.cells:
            cell.source = student.cells[grade_id].strip("\n")
        elif grade_id in fill:
            cell.source = solutions[grade_id].strip("\n")
        if student.crash and grade_id == ids[0]:
            cell.source = CRASH_LINE + cell.source
    return nb


def write_class(root: Path, labs: list[str], release: Path) -> list[Student]:
    """Write every declared student of `labs` under root/submitted/."""
    everyone = []
    for lab in labs:
        release_nb = nbformat.read(release / lab / f"{lab}.ipynb", as_version=4)
        solution_nb = source_notebook(lab)
        for student in declared_class(lab):
            out = root / "submitted" / student.name / lab / f"{lab}.ipynb"
            out.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(student_notebook(student, release_nb, solution_nb), out)
            everyone.append(student)
    return everyone


def score_mismatches(
    students: list[Student], scores: dict[tuple[str, str], float | None]
) -> list[str]:
    """Lines describing each declared score that autograding did not give exactly."""
    wrong = []
    for s in students:
        got = scores.get((s.name, s.lab))
        if got is None or abs(got - s.score) > 1e-9:
            wrong.append(f"{s.lab}: {s.name} declared {s.score:g}, got {got}  ({s.why})")
    return wrong


def check_demo_class(labs: list[str], workers: int | None = None, sentences: bool = False) -> int:
    """Build `labs` into a scratch course, grade their demo class there, compare scores;
    `sentences`: under each student, the sentence of every check that did not pass."""
    from graders.grade.grade import grade_class

    with tempfile.TemporaryDirectory(prefix="demo-check-") as tmp:
        root = Path(tmp)
        release = build(root=root, labs=labs, release=root / "labs")
        students = write_class(root, labs, release)
        run = grade_class(root, labs=labs, workers=workers, feedback=False, quiet=True)
    wrong = score_mismatches(students, run.scores)
    for s in students:
        got = run.scores.get((s.name, s.lab))
        mark = "ok " if (s.name, s.lab) in run.scores and abs(got - s.score) < 1e-9 else "BAD"
        print(f"{mark} {s.lab:<24} {s.name:<22} declared {s.score:>5g}  got {got}")
        if sentences:
            for line in failures(run.verdicts.get((s.name, s.lab), {})):
                print(f"      {line}")
    print(f"{len(students) - len(wrong)}/{len(students)} declared scores met")
    return 1 if wrong else 0


def run(workers: int | None = None) -> int:
    """`make demo`: grade the demo class in the course itself and print what it got."""
    from graders.grade.grade import grade_class, table

    students = write_class(REPO, LABS, REPO / "labs")
    names = {s.name for s in students}
    run = grade_class(REPO, labs=LABS, workers=workers)
    run.scores = {key: v for key, v in run.scores.items() if key[0] in names}
    print()
    print(table(run, LABS))
    print()
    print("grades.csv:  grades.csv (nbgrader export)")
    print("feedback:    feedback/<student>/<lab>/<lab>.html")
    for p in run.problems:
        print(f"needs a human look: {p.where}: {p.reason}")
    wrong = score_mismatches(students, run.scores)
    for line in wrong:
        print("WRONG SCORE:", line)
    print(f"{len(students) - len(wrong)}/{len(students)} declared demo scores met")
    from graders.report.report import build_report

    try:  # the report never changes demo's exit status
        print(f"report: {build_report(REPO).index.relative_to(REPO)}")
    except Exception as error:  # noqa: BLE001
        print(f"report: not built ({error})")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    from graders.grade.grade import worker_count

    parser = argparse.ArgumentParser(description="The demo class.")
    sub = parser.add_subparsers(dest="command", required=True)
    runp = sub.add_parser(
        "run", help="write and grade the demo class in the course, print the table"
    )
    runp.add_argument("--workers", type=worker_count, default=None)
    sub.add_parser("write", help="write submitted/ for every lab of the course")
    chk = sub.add_parser("check", help="grade the demo class of some labs in a scratch course")
    chk.add_argument("labs", nargs="*")
    chk.add_argument("--workers", type=worker_count, default=None)
    chk.add_argument("--sentences", action="store_true",
                     help="print the sentence of every check that did not pass")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        return command(args)
    except SourceError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2


def command(args: argparse.Namespace) -> int:
    if args.command == "run":
        return run(args.workers)
    if args.command == "write":
        students = write_class(REPO, LABS, REPO / "labs")
        print(f"wrote {len(students)} demo submissions under submitted/")
        return 0
    if complaint := unknown_labs(args.labs):
        print(complaint, file=sys.stderr)
        return 2
    return check_demo_class(args.labs or LABS, args.workers, args.sentences)


if __name__ == "__main__":
    raise SystemExit(main())
