"""Build the course: solutions/<lab>/<lab>.py  ->  nbgrader source notebook  ->  labs/<lab>/.

The text sources are jupytext percent files whose cell headers carry a short form of the
nbgrader metadata, for example ``# %% nbgrader={"solution": true, "grade_id": "f_xyz"}``.
`source_notebook` expands it to nbgrader's full schema and gives every cell a stable id, so
that building twice gives byte-identical notebooks (tests/test_build.py relies on it).

`python -m graders.build` (``make build``) then runs each solution notebook once and keeps
the observations the grader's independent check compares students with (build/reference/,
graders/sandbox/build_reference.py beside this module), so that grading a class only reads them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import jupytext
import nbformat

from graders.build import includes
from graders.config import colab, nbgrader_cli
from graders.config.course import (
    ASSIGNMENTS_DIR,
    LABS,
    REPO,
    SOLUTIONS,
    lab_source,
    own_assignments,
    unknown_labs,
)
from graders.formats import gradebook

NBGRADER_SCHEMA = 3
SHORT_KEYS = {"grade_id", "solution", "grade", "points", "locked", "task"}


class SourceError(ValueError):
    """A text source in solutions/ that cannot be built; the message names the file."""


def full_nbgrader_metadata(short: dict, where: str) -> dict:
    """Expand the short inline form into the metadata nbgrader expects."""
    unknown = sorted(set(short) - SHORT_KEYS)
    if unknown:  # a misspelt "solution" would release the cell as it is
        raise SourceError(
            f"{where}: unknown nbgrader key(s) {', '.join(map(repr, unknown))};"
            f" known: {', '.join(sorted(SHORT_KEYS))}"
        )
    if "grade_id" not in short:
        raise SourceError(f"{where}: an nbgrader cell needs a grade_id")
    solution = bool(short.get("solution", False))
    grade = bool(short.get("grade", False))
    if grade and "points" not in short:
        raise SourceError(f"{where}: graded cell {short['grade_id']!r} needs points")
    points = short.get("points", 0)
    if grade and (isinstance(points, bool) or not isinstance(points, int | float) or points <= 0):
        raise SourceError(f"{where}: points of {short['grade_id']!r} should be a positive number")
    meta = {
        "grade": grade,
        "grade_id": short["grade_id"],
        "locked": bool(short.get("locked", grade and not solution)),
        "schema_version": NBGRADER_SCHEMA,
        "solution": solution,
        "task": bool(short.get("task", False)),
    }
    if grade:
        meta["points"] = short["points"]
    return meta


def header_lines(text: str, fragment: str) -> list[int]:
    """The line numbers of the cell headers (``# %% ...``) that contain `fragment`."""
    lines = enumerate(text.splitlines(), 1)
    return [number for number, line in lines if line.startswith("# %%") and fragment in line]


def where(path: Path, text: str, fragment: str, index: int) -> str:
    """'path, line N' of the cell header that contains `fragment`, else 'path, cell index'."""
    found = header_lines(text, fragment)
    return f"{path}, line {found[0]}" if found else f"{path}, cell {index}"


def source_notebook(lab: str, path: Path | None = None) -> nbformat.NotebookNode:
    """Read solutions/<lab>/<lab>.py (or `path`) into an nbgrader source notebook.

    The line ``# %course-setup`` in the setup cell (grade_id "setup") becomes the course's
    shared setup code, solutions/common/setup_cell.py; the lab's own lines follow it. Each
    ``# %course-include NAME`` line becomes the shared fragment solutions/common/NAME
    (graders/build/includes.py) before jupytext reads the text.
    Raises SourceError, naming the file and line, for what would build a wrong notebook.
    """
    path = path or lab_source(lab)
    shared_setup = (SOLUTIONS / "common" / "setup_cell.py").read_text().strip("\n")
    text = path.read_text(encoding="utf-8")  # its line numbers are the ones errors name
    try:
        nb = jupytext.reads(includes.expand(text, path), fmt="py:percent")
    except includes.IncludeError as error:
        raise SourceError(str(error)) from None
    nb.metadata.pop("jupytext", None)
    nb.metadata["language_info"] = {"name": "python"}
    seen, anchor, after = set(), "top", 0
    for index, cell in enumerate(nb.cells):
        bad = cell.metadata.get("incorrectly_encoded_metadata")
        if bad is not None:  # jupytext keeps a header it cannot parse as text, silently
            raise SourceError(
                f"{where(path, text, bad, index)}: cannot read the cell header's metadata {bad!r}"
                ' (it should be valid JSON, like nbgrader={"grade_id": "...", ...})'
            )
        short = cell.metadata.get("nbgrader")
        if short is not None and not isinstance(short, dict):
            at = where(path, text, f"nbgrader={json.dumps(short)}", index)
            raise SourceError(f"{at}: nbgrader={json.dumps(short)} should be a JSON object {{...}}")
        if short is not None and short.get("grade_id") == "setup":
            # jupytext reads the line `# %course-setup` as the magic `%course-setup`
            lines = cell.source.splitlines()
            marks = ("%course-setup", "# %course-setup")
            at = [i for i, line in enumerate(lines) if line.strip() in marks]
            if len(at) > 1:
                raise SourceError(f"{path}: '# %course-setup' appears more than once")
            if at:  # (tests/student/test_student_experience.py checks that every lab has it)
                after = ["", ""] if any(line.strip() for line in lines[at[0] + 1 :]) else []
                lines[at[0] : at[0] + 1] = shared_setup.splitlines() + after
                cell.source = "\n".join(lines)
                # shown collapsed: JupyterLab shows its first line, Colab its @title
                cell.metadata["jupyter"] = {"source_hidden": True}
                cell.metadata["cellView"] = "form"
        if short is not None:
            at = where(path, text, f'"{short.get("grade_id")}"', index)
            cell.metadata["nbgrader"] = full_nbgrader_metadata(short, at)
            cell_id = anchor = short["grade_id"]
            after = 0
        else:  # named after the nearest nbgrader cell above, so an insertion renames few ids
            after += 1
            cell_id = f"{anchor}--{after}"
        if cell_id in seen:
            lines = ", ".join(map(str, header_lines(text, f'"{cell_id}"'))) or "?"
            raise SourceError(f"{path}, lines {lines}: grade_id {cell_id!r} is used twice")
        seen.add(cell_id)
        cell["id"] = cell_id
    add_badge(nb, lab)
    return nb


def add_badge(nb: nbformat.NotebookNode, lab: str) -> None:
    """The Open-in-Colab badge under the title of the lab's first cell (course.toml says where)."""
    try:
        line = colab.badge(colab.published(), lab)
    except colab.SettingError as error:
        raise SourceError(str(error)) from None
    first = nb.cells[0] if nb.cells else None
    if line and first is not None and first.cell_type == "markdown":
        title, _, rest = first.source.partition("\n")
        first.source = f"{title}\n\n{line}\n{rest}".rstrip("\n")


def write_sources(root: Path, labs: list[str], own: Path = ASSIGNMENTS_DIR) -> None:
    """nbgrader's source folder: each lab's notebook from its text source, and each of the
    instructor's own assignments (`own`/<name>/: notebooks and the files and folders beside
    them) copied as it is."""
    for lab in labs:
        if lab not in LABS and (own / lab).is_dir():
            out = root / "build" / "source" / lab
            shutil.rmtree(out, ignore_errors=True)  # a notebook removed there goes here too
            shutil.copytree(own / lab, out, symlinks=False, ignore=_NOT_RELEASED)
            continue
        out = root / "build" / "source" / lab / f"{lab}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(source_notebook(lab), out)


_NOT_RELEASED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")


def build(
    root: Path = REPO,
    labs: list[str] | None = None,
    release: Path | None = None,
    own: Path = ASSIGNMENTS_DIR,
) -> Path:
    """Write the source notebooks under root/build/source and the release under `release`:
    `labs` (default: every lab and every assignment of the instructor's in `own`).

    The gradebook (root/gradebook.db, graders/formats/gradebook.py) learns each lab's cells and
    checksums on the way: that is what autograding compares submissions against.
    """
    labs = labs or LABS + own_assignments(own)
    release = release or root / "labs"
    write_sources(root, labs, own)
    # nbgrader's generate_assignment, in this process: its command line would import
    # nbgrader again for each lab (seconds each; a third of them jsonschema's IRI grammars)
    changes = {"CourseDirectory": {"release_directory": str(release)}}
    api = nbgrader_cli.make_api_factory(REPO / "nbgrader_config.py")(str(root), changes)
    for lab in labs:
        with nbgrader_cli.this_python_first():
            result = api.generate_assignment(lab, force=True)
        if not result.get("success"):
            log = (result.get("log") or "") + (result.get("error") or "")
            if "because there are submissions associated with it" in log:
                raise SystemExit(
                    f"make build: {lab} adds or removes graded cells, and {gradebook.of(root)}"
                    " holds graded hand-ins of it (nbgrader keeps a graded lab's cells fixed). "
                    "To start over: `make clean`, which removes the gradebook, autograded/ and "
                    "feedback/; to keep the grades, change cells' contents only."
                )
            raise SystemExit(f"nbgrader generate_assignment {lab} failed:\n{log}")
        extra = lab_source(lab).parent / "files"
        if lab in LABS and extra.is_dir():
            shutil.copytree(extra, release / lab, dirs_exist_ok=True)
    return release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", help="labs to build (default: all)")
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="skip running the solution notebooks for the grader's reference observations",
    )
    args = parser.parse_args(argv)
    everything = LABS + own_assignments()
    if complaint := unknown_labs([a for a in args.labs if a not in own_assignments()]):
        print(f"make build: {complaint}", file=sys.stderr)
        return 2
    try:
        release = build(labs=args.labs or everything)
        text = colab.README.read_text(encoding="utf-8")
        table = colab.readme(text, colab.published(), LABS)
    except (SourceError, colab.SettingError) as error:
        print(f"make build: {error}", file=sys.stderr)
        return 2
    if table != text:
        colab.README.write_text(table, encoding="utf-8")
        print("README.md: the lab table written anew")
    print(f"built {len(args.labs or everything)} assignment(s) into {release.relative_to(REPO)}/")
    if not args.no_reference:
        from graders.sandbox.build_reference import prepare_references

        start = time.monotonic()
        try:
            prepare_references(REPO, args.labs or everything)
        except RuntimeError as error:  # the instructor's notebook: a sentence, no traceback
            print(f"make build: {error}", file=sys.stderr)
            return 2
        print(f"reference observations in build/reference/ ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
