"""The verdict of every test cell, decided outside the student's kernel.

A test cell runs in the student's kernel, after the student's code, so nothing it computes
there can be trusted: a replaced ``run_cell`` that never runs the test, a silenced
traceback, a patched ``torch.allclose``, a frame inspector that reads expected values. So
hidden tests bring no expected value and no pass/fail decision into the kernel: they call
the student's code on hidden inputs and ``observe(name, value)`` what came back
(graders/kernel/grader_observe.py), and this module decides:

* graders/sandbox/build_reference.py runs the instructor's solution notebook, in a kernel no student
  code touched, and collects the same records (made once per release by `make build`, kept
  in build/reference/, a format graders/formats/references.py owns);
* `JudgeRecords`, a step of nbgrader's own autograde (nbgrader_config.py), parses each test
  cell's records against a strict schema (graders/formats/records.py), compares them with the
  reference's (graders/judge/comparison.py, with the reference's tolerances), and replaces the
  cell's outputs by one sentence of its own (graders/formats/verdict.py): passed, or which check
  failed and what kind of answer was wrong (never an expected value). nbgrader's
  SaveAutoGrades then scores the cell from that sentence: an error means 0. So ``make
  autograde``, ``nbgrader autograde`` and the formgrader's button grade alike.

Nothing the kernel printed in a test cell is kept (a hostile kernel could print the hidden
code there), and output to stderr never costs points by itself: only a failed check does. A
failed visible check's message is quoted from the release, with only those of its values the
kernel gave that are typed values (graders/judge/shown_values.py); where the student's code raised,
PyTorch's message is added when it is one of the known ones (graders/judge/torch_errors.py), its
values elided in a hidden region (they could describe the hidden inputs).
"""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade
from traitlets import Unicode

from graders.formats import references, timings
from graders.formats.records import Malformed, Observations, Record, cell_records, test_cells
from graders.formats.timings import Phase
from graders.formats.verdict import VERDICT, Kind, Verdict
from graders.judge import torch_errors
from graders.judge.check_source import (
    assert_parts,
    joined,
    listed_values,
    message_parts,
    message_template,  # noqa: F401 - its name here is used too
)
from graders.judge.comparison import first_difference
from graders.judge.shown_values import MAX_NUMBERS, fill
from graders.judge.torch_errors import Budget

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"


# ---------------------------------------------------------------------------- words


ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELL_LINE = re.compile(r"(?:Cell In\[\d+\]|<ipython-input-\d+-[0-9a-f]+>), line (\d+)")
KNOWN_ERRORS = {
    name for name, value in vars(__import__("builtins")).items()
    if isinstance(value, type) and issubclass(value, BaseException)
} | {"CheckFailed", "CellTimeoutError", "DeadKernelError", "NotebookBudgetExceeded",
     "KernelUnresponsive"}  # fmt: skip


def hidden_lines(source: str, begin: str = BEGIN, end: str = END) -> set[int]:
    """1-based numbers of the lines in hidden regions, markers included (a test cell may have
    more than one: helpers other test cells need come first, before the visible checks)."""
    hidden, inside = set(), False
    for number, line in enumerate(source.split("\n"), 1):
        if begin in line:
            inside = True
        if inside:
            hidden.add(number)
        if end in line:
            inside = False
    return hidden


CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def failing_line(traceback: list) -> int | None:
    """The line of the test cell itself where the error was raised: the first cell frame of
    the last exception (a check that raises while handling another comes last)."""
    traceback = traceback if isinstance(traceback, list) else []
    frames = [ANSI.sub("", str(frame)) for frame in traceback]
    last = max((i for i, f in enumerate(frames) if any(c in f for c in CHAINED)), default=-1)
    for frame in frames[last + 1 :]:
        match = CELL_LINE.search(frame)
        if match:
            return int(match.group(1))
    return None


def _error_name(output) -> str:
    """The exception's name when it is one of Python's or the course's, else 'an error'
    (a name the kernel made up could carry text)."""
    name = str(output.get("ename", ""))
    return name if name in KNOWN_ERRORS else "an error"


def torch_message(output, elide: bool = False) -> str:
    """' (its message: ...)' when the error's message is one of PyTorch's known ones
    (graders/judge/torch_errors.py; with `elide`, its values hidden), else ''."""
    lines = str(output.get("evalue", "")).strip().splitlines()
    text = lines[0] if lines else ""
    said = torch_errors.message(str(output.get("ename", "")), text, Budget(MAX_NUMBERS), elide)
    return f" (its message: {said})" if said else ""


def visible_failure(source: str, line: int | None, ename: str, output=None) -> str:
    """Words for a failed visible check at `line`, from the released source only; the values
    of its message the kernel gave (`output`, the error) only where they are typed values
    (graders/judge/shown_values.py), and PyTorch's own message where it is a known one."""
    output = output or {}
    if line is None:
        return f"A visible check failed with {ename}{torch_message(output)}."
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    calls = [
        node
        for node in (ast.walk(tree) if tree else [])
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "check"
        and node.lineno <= line <= (node.end_lineno or node.lineno)
        and len(node.args) >= 2
    ]
    if calls and ename in ("CheckFailed", "AssertionError"):
        parts = joined(message_parts(calls[-1].args[1]) or [])
        if parts:
            listed = listed_values(tree, calls[-1])
            return f"A visible check failed: {fill(parts, output.get('evalue', ''), listed)}"
    asserts = [
        node
        for node in (ast.walk(tree) if tree else [])
        if isinstance(node, ast.Assert)
        and node.msg is not None
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    if asserts and ename == "AssertionError":  # the instructor's own words for the student
        parts = joined(assert_parts(asserts[-1].msg) or [])
        if parts:
            return f"A visible check failed: {fill(parts, output.get('evalue', ''))}"
    if ename == "NameError":
        return undefined_name(tree, output)
    lines = source.split("\n")
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    why = ""
    said = torch_message(output)
    return f"A visible check stopped at line {line} (`{text[:100]}`) with {ename}{said}{why}."


UNDEFINED = re.compile(
    r"name '([A-Za-z_][A-Za-z0-9_]{0,60})' is not defined(?:\. Did you mean: '\w{1,60}'\?)?"
)


def undefined_name(tree, output) -> str:
    """Words for a visible check that met a name not defined: the student's cell that should
    define it failed or did not run (not a fault of the check). The name is shown only when
    the released check itself uses it (the kernel's text could name anything)."""
    match = UNDEFINED.fullmatch(str(output.get("evalue", "")).strip())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} if tree else set()
    if match and match.group(1) in used:
        what = f"it uses `{match.group(1)}`, which is not defined"
    else:
        what = "a name it uses is not defined"
    return (
        f"A visible check could not run: {what}. Run the exercise cell that defines it, above "
        "this check, and fix the error that cell shows (or run the cells above it first)."
    )


LIMIT_ENAMES = {"MemoryError": "it hit the memory cap"}


def verdict(cell, index: int, reference: list[Record], limits: dict) -> tuple[Kind, str]:
    """(kind, sentence) of one test cell: kind is passed, not_answered, visible, hidden,
    records, limit; the sentence is the grader's own, shown in place of the outputs."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    hidden = hidden_lines(cell.source)
    if index in limits or str(index) in limits:
        why = limits.get(index) or limits.get(str(index))
        return "limit", f"Not graded to the end: {why}."
    if errors:
        first = errors[0]
        ename = _error_name(first)
        if ename == "NotImplementedError" and not torch_message(first):
            return (
                "not_answered",
                "Not answered yet: an exercise this check uses still raises NotImplementedError.",
            )
        if ename in LIMIT_ENAMES:
            return "limit", f"Not graded to the end: {LIMIT_ENAMES[ename]}."
        line = failing_line(first.get("traceback", []))
        if line in hidden:
            try:
                got = cell_records(cell)
            except Malformed:
                got = []
            pending = reference[len(got)]["name"] if len(got) < len(reference) else None
            during = f" while checking '{pending}'" if pending else ""
            return "hidden", (
                f"A hidden check called your code on other inputs{during}, and it raised "
                f"{ename}{torch_message(first, elide=True)}: run your code on other sizes and "
                "values to find out why."
            )
        return "visible", visible_failure(cell.source, line, ename, first)
    try:
        got = cell_records(cell)
    except Malformed as why:
        return "records", f"A hidden check's results could not be read ({why}): graded 0."
    if reference:
        why = first_difference(reference, got)
        if why:
            return "hidden", f"A hidden check failed: {why}."
    elif got:
        return "records", "A hidden check's results could not be read (unexpected records)."
    return "passed", "Passed."


# ---------------------------------------------------------------------------- the step


class GradingEnvironmentError(RuntimeError):
    """The grading environment lacks a package the lab needs: no grade would be right."""


ENVIRONMENT = "This grading environment lacks"  # the setup cell's words (solutions/common)


def environment_problem(nb) -> str | None:
    """The setup cell's one sentence when the grading environment lacks a package."""
    for cell in nb.cells:
        if cell.cell_type != "code" or is_grade(cell):
            continue
        for output in cell.get("outputs", []):
            evalue = str(output.get("evalue", "")) if output.get("output_type") == "error" else ""
            if evalue.startswith(ENVIRONMENT):
                return evalue.splitlines()[0][:300]
    return None


class JudgeRecords(NbGraderPreprocessor):
    """A step of nbgrader's autograde, after Execute and before SaveAutoGrades: every test
    cell's outputs become the judge's verdict (see the module's docstring)."""

    reference_dir = Unicode(
        "", help="folder of <lab>.json reference records (default: <course>/build/reference)"
    ).tag(config=True)
    timings = Unicode(
        "",
        help="a file to which the seconds judging took are appended (graders.grade.task reads it)",
    ).tag(config=True)

    def preprocess(self, nb, resources):
        started = time.monotonic()
        try:
            return self._judge(nb, resources)
        finally:
            if self.timings:
                timings.add(Path(self.timings), Phase.CHECKS, time.monotonic() - started)

    def _judge(self, nb, resources):
        info = resources.get("nbgrader", {})
        lab = info.get("assignment")
        limits = resources.get("sandbox_limits", {})
        problem = environment_problem(nb)
        if problem:  # stop: grading this notebook here would give 0 for nothing
            raise GradingEnvironmentError(problem)
        notebook = info.get("notebook") or lab
        try:
            reference, missing = self._reference(lab, notebook), None
        except Exception as error:  # noqa: BLE001 - needed only where a hidden test recorded
            reference, missing = {}, error
        for index, cell in test_cells(nb):
            if missing is not None and _records_any(cell):  # nothing to compare them with
                raise missing
            grade_id = cell.metadata.nbgrader["grade_id"]
            kind, sentence = verdict(cell, index, reference.get(grade_id, []), limits)
            cell.metadata[VERDICT] = Verdict(kind=Kind(kind), sentence=sentence).metadata()
            if kind == Kind.PASSED:
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=sentence)]
            else:
                cell.outputs = [
                    nbformat.v4.new_output(
                        "error", ename="CheckFailed", evalue=sentence, traceback=[sentence]
                    )
                ]
        return nb, resources

    def _reference(self, lab: str | None, notebook: str | None) -> Observations:
        """The solution's records of this notebook. Needed only where a hidden test recorded
        (an ordinary nbgrader notebook records nothing and needs none); missing then, the
        notebook cannot be judged, and nbgrader reports it as not graded (never a 0)."""
        from graders.sandbox.build_reference import course_reference

        # plain nbgrader in the repository: made again if stale
        folder, file, observed = course_reference(
            self.config, self.reference_dir, lab, notebook, remake=True
        )
        if observed is not None:
            return observed
        try:  # no source notebook here: the records made with it, as they are
            return references.observations(file)
        except (OSError, ValueError, KeyError) as error:
            raise RuntimeError(
                f"no reference records for {lab}/{notebook}.ipynb in {folder}, and its hidden "
                f"tests recorded results to compare with them: run `make build` ({error})"
            ) from None


def _records_any(cell) -> bool:
    """Whether a test cell's outputs hold records of a hidden test (graders.formats.records)."""
    try:
        return bool(cell_records(cell))
    except Malformed:
        return True
