"""Code and text that several labs share, written once in solutions/common/ and put into each
lab's notebook by the build, so that every release stays one self-contained notebook.

A lab's text source names a shared fragment on a line of its own:

    # %course-include dynamicnet.py              (in a code cell: the class, as a given)
    # %course-include dynamicnet.py --exercise   (in the exercise cell that asks for it)
    # %course-include how_this_lab_works.md      (in a markdown cell: the paragraph)

`expand` replaces each such line by the fragment's lines before jupytext reads the text: a
``.py`` fragment as it is, a ``.md`` fragment as markdown comment lines (``# ...``). A fragment
may carry nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` marks: ``--exercise`` keeps
them (nbgrader then releases the stub), any other include drops those two lines. The expanded
text is exactly what the lab's source held before the fragment was taken out of it, so the
release is byte for byte what it was (`fold` is the way back: it turns the verbatim copies of a
fragment in a text source into include lines, which is how the copies became includes).
``python -m graders.build.includes show LAB`` prints a lab's source with its includes expanded
(jupytext opens that as a notebook an instructor can run); ``fold [LAB ...]`` folds copies.
The setup cell's ``# %course-setup`` is older and does more (it collapses the cell): build.py.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from graders.config.course import LABS, SOLUTIONS, lab_source

COMMON = SOLUTIONS / "common"
DIRECTIVE = re.compile(r"^# %course-include (?P<name>[\w.-]+)(?P<exercise> --exercise)?\s*$")
MARKS = ("### BEGIN SOLUTION", "### END SOLUTION")


class IncludeError(ValueError):
    """An include line that names no fragment, or a fragment that cannot be included."""


def fragments(common: Path | None = None) -> list[str]:
    """The names of the fragments a lab may include (not the setup cell, not the README)."""
    common = common or COMMON
    skip = ("setup_cell.py", "README.md")  # the setup cell's own mark; what this folder holds
    return sorted(
        p.name for p in common.iterdir() if p.suffix in (".py", ".md") and p.name not in skip
    )


def rendered(name: str, exercise: bool = False, common: Path | None = None) -> list[str]:
    """The lines an include of fragment `name` stands for in a percent text source."""
    common = common or COMMON
    path = common / name
    if not path.is_file() or name not in fragments(common):
        known = ", ".join(fragments(common))
        raise IncludeError(f"no shared fragment {name!r} in {common} (there are: {known})")
    lines = path.read_text(encoding="utf-8").strip("\n").splitlines()
    if any(line.startswith("# %%") for line in lines):
        raise IncludeError(f"{path}: a fragment is part of one cell: it holds no '# %%' header")
    if path.suffix == ".md":
        return [f"# {line}".rstrip() for line in lines]
    if not exercise:
        lines = [line for line in lines if line.strip() not in MARKS]
    return lines


def expand(text: str, where: Path | str = "the text source", common: Path | None = None) -> str:
    """`text` with every include line replaced by its fragment (`where` names the file in
    errors). A text without include lines comes back unchanged."""
    common = common or COMMON
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        found = DIRECTIVE.match(line)
        if not found:
            if line.lstrip().startswith("# %course-include"):
                raise IncludeError(
                    f"{where}, line {number}: cannot read {line.strip()!r} (write "
                    "'# %course-include NAME' or '# %course-include NAME --exercise')"
                )
            out.append(line)
            continue
        try:
            out += rendered(found["name"], bool(found["exercise"]), common)
        except IncludeError as error:
            raise IncludeError(f"{where}, line {number}: {error}") from None
    return "\n".join(out)


def lab_text(lab: str) -> str:
    """Lab `lab`'s text source with its includes expanded: the text the build reads."""
    path = lab_source(lab)
    return expand(path.read_text(encoding="utf-8"), path)


def included(text: str) -> list[tuple[str, bool]]:
    """(fragment, exercise) of each include line of `text`, in order."""
    return [
        (found["name"], bool(found["exercise"]))
        for found in map(DIRECTIVE.match, text.split("\n"))
        if found
    ]


def fold(text: str, common: Path | None = None) -> str:
    """`text` with each verbatim copy of a fragment (as `rendered` writes it, with or without
    its solution marks) replaced by the fragment's include line; `expand` undoes it exactly."""
    common = common or COMMON
    lines = text.split("\n")
    for name in fragments(common):
        for exercise in (True, False):
            copy = rendered(name, exercise, common)
            if exercise and copy == rendered(name, False, common):
                continue  # no marks: the plain include says it
            line = f"# %course-include {name}" + (" --exercise" if exercise else "")
            index = 0
            while index <= len(lines) - len(copy):
                if lines[index : index + len(copy)] == copy:
                    lines[index : index + len(copy)] = [line]
                index += 1
    return "\n".join(lines)


def load(name: str, namespace: dict, common: Path | None = None) -> dict:
    """Run the code fragment `name` (its solution included) in `namespace` and return it: how
    tests and benchmarks use the labs' shared code without copying it. Tracebacks quote the
    fragment's own file."""
    common = common or COMMON
    path = common / name
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("show", "fold"))
    parser.add_argument("labs", nargs="*", help="labs (default for fold: all)")
    args = parser.parse_args(argv)
    if args.action == "show" and len(args.labs) != 1:
        parser.error("show takes one lab")
    unknown = [lab for lab in args.labs if lab not in LABS]
    if unknown:
        parser.error(f"no lab {', '.join(unknown)} in {SOLUTIONS}")
    try:
        if args.action == "show":
            sys.stdout.write(lab_text(args.labs[0]))
            return 0
        for lab in args.labs or LABS:
            path = lab_source(lab)
            text = path.read_text(encoding="utf-8")
            folded = fold(text)
            if folded != text:
                assert expand(folded, path) == expand(text, path), f"{path}: folding changes it"
                path.write_text(folded, encoding="utf-8")
                print(f"{path.relative_to(SOLUTIONS.parent)}: {included(folded)}")
    except IncludeError as error:
        print(f"includes: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
