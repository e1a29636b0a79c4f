"""What several test files share: one place, so that a test file holds tests.

* the report's small graded class (`report_class`: tests/test_report.py, tests/clients/
  test_browser.py, through tests/conftest.py's `report_course`);
* a lab's complete notebook and its errors (tests/student/);
* records and test cells as a graded notebook holds them (the judge's tests);
* a free TCP port (tests/clients/), the text a cell printed, the processes running a command;
* the reference records, made once per test session and shared by every scratch course
  (`share_references`): running a lab's solution is the same work whichever course asks;
* the class conftest's `graded` grades (`write_test_class`): the demo class and the mistake
  catalogue of every lab, folded into as few hand-ins as their answer cells allow.
"""

from __future__ import annotations

import base64
import fcntl
import os
import re
import secrets
import shutil
import socket
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from graders.build.build import build, source_notebook
from graders.build.catalogue import Variant, catalogue
from graders.build.demo import (
    Student,
    answer_ids,
    answer_sources,
    declared_class,
    student_notebook,
    write_class,
)
from graders.config.course import REPO
from graders.formats import gradebook, references
from graders.formats.records import MIME
from graders.grade.grade import grade_class
from graders.kernel.grader_observe import encode
from graders.sandbox.build_reference import prepare_references

REPORT_LABS = ["lab02_backprop", "lab03_accumulation"]  # the two fastest labs to grade
ODD = '<b>Ann & "O\'Neil" #1 50%?'  # a student folder name with HTML and URL characters
LATE, ON_TIME = "partial", "complete"  # lab02's hand-ins with a timestamp.txt
KINDS = {"complete", "blank", "partial", "crash"}  # every demo class has these

_graded: dict[str, Path] = {}


def reference_cache(tmp_path_factory) -> Path:
    """One folder per test session, shared by the xdist workers (their base folders are
    siblings), for the reference records of every lab (`share_references`)."""
    base = tmp_path_factory.getbasetemp()
    where = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "reference-cache"
    where.mkdir(exist_ok=True)
    return where


def share_references(root: Path, labs: list[str], cache: Path) -> None:
    """Give the scratch course `root` the reference records of `labs`, each made once per
    session: a lab another worker is making is left for later (work on another meanwhile),
    then waited for. The judge still checks each record's key (solution, recorder, torch),
    so a record from a different solution is made again, never used."""
    left = list(labs)
    while left:
        for lab in list(left):
            with open(cache / f"{lab}.lock", "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | (fcntl.LOCK_NB if len(left) > 1 else 0))
                except BlockingIOError:
                    continue  # another worker makes it now
                saved, mine = cache / f"{lab}.json", references.path(references.folder(root), lab)
                if saved.is_file() and not mine.is_file():
                    mine.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(saved, mine)
                prepare_references(root, [lab], workers=1)  # the record is checked, or made
                shutil.copyfile(mine, cache / f"{lab}.tmp")
                os.replace(cache / f"{lab}.tmp", saved)
                left.remove(lab)
        if left:
            time.sleep(0.5)


ALONE = {"complete", "blank"}  # demo students graded by themselves in the test's class


@dataclass
class Folded:
    """One hand-in of the test's class: mistakes of the catalogue and of the demo class that
    touch different answer cells, together. Its score must be full marks minus the sum of
    their losses (a mistake costs points once, in its own exercises: CONTRIBUTING.md)."""

    lab: str
    name: str
    cells: dict[str, str] = field(default_factory=dict)  # answer cell -> code handed in
    variants: list[Variant] = field(default_factory=list)
    students: list[Student] = field(default_factory=list)  # demo students folded in here
    alone: bool = False  # a catalogue variant marked `alone`: nothing else joins it

    def expected(self, full: float) -> float:
        lost = sum(v.loses for v in self.variants) + sum(full - s.score for s in self.students)
        return full - lost

    def members(self) -> str:
        named = [f"{v.exercise} ({v.kind}: {v.why})" for v in self.variants]
        named += [f"demo student {s.name} ({s.why})" for s in self.students]
        return ", ".join(named)

    def mismatch(self, run) -> str | None:
        """A line naming this hand-in and its members when `run` (a ClassRun) did not give
        it the expected score; None when it did."""
        got = run.scores.get((self.name, self.lab))
        want = self.expected(run.max_scores[self.lab])
        if got is not None and abs(got - want) <= 1e-9:
            return None
        return f"{self.lab}/{self.name}: want {want}, got {got}: {self.members()}"


def demo_cells(student: Student, release_nb, solution_nb) -> dict[str, str]:
    """The answer cells `student` hands in other than as solved: its mistakes, the cells it
    leaves as released, the cell its crash breaks. Empty: the complete answer."""
    solved = Student(name="solved", lab=student.lab, score=0)
    solved_cells = answer_sources(student_notebook(solved, release_nb, solution_nb))
    mine = answer_sources(student_notebook(student, release_nb, solution_nb))
    return {cell: code for cell, code in mine.items() if code != solved_cells[cell]}


def write_test_class(root: Path, lab: str, release: Path) -> tuple[list[Student], list[Folded]]:
    """Write under root/submitted/ the demo students of ALONE by themselves, and the mistake
    catalogue's hand-ins (the k-th variant of every exercise together) with every other demo
    student folded into the first one whose answer cells it leaves alone (a new hand-in where
    none does). `make demo` grades each demo student by itself; this grades the same
    mistakes in about half the hand-ins."""
    release_nb = nbformat.read(release / lab / f"{lab}.ipynb", as_version=4)
    solution_nb = source_notebook(lab)
    alone, members = [], []
    for student in declared_class(lab):
        cells = demo_cells(student, release_nb, solution_nb)
        if student.name in ALONE or set(cells) >= set(answer_ids(release_nb)):
            alone.append(student)
        else:
            members.append((student, cells))
    # first fit, the demo students (several cells each, the biggest first) before the
    # catalogue's variants (one cell each): as many hand-ins as the busiest answer cell needs,
    # or about
    folded: list[Folded] = []

    def home_for(cells) -> Folded:
        for hand_in in folded:
            if not hand_in.alone and not set(hand_in.cells) & set(cells):
                return hand_in
        folded.append(Folded(lab, f"catalogue-{len(folded) + 1}"))
        return folded[-1]

    for student, cells in sorted(members, key=lambda m: -len(m[1])):
        home = home_for(cells)
        home.cells.update(cells)
        home.students.append(student)
    for variant in catalogue(lab):
        if variant.alone:
            home = Folded(lab, f"catalogue-{len(folded) + 1}", alone=True)
            folded.append(home)
        else:
            home = home_for([variant.exercise])
        home.cells[variant.exercise] = variant.code
        home.variants.append(variant)
    for student in alone:
        write_hand_in(root, student.name, lab, student_notebook(student, release_nb, solution_nb))
    for hand_in in folded:
        student = Student(name=hand_in.name, lab=lab, score=0, cells=hand_in.cells)
        write_hand_in(root, hand_in.name, lab, student_notebook(student, release_nb, solution_nb))
    return alone, folded


def write_hand_in(root: Path, student: str, lab: str, nb) -> None:
    out = root / "submitted" / student / lab / f"{lab}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)


def report_class(tmp_path_factory) -> Path:
    """A scratch course with REPORT_LABS built and a small class graded (once per session)."""
    if "root" in _graded:
        return _graded["root"]
    root = tmp_path_factory.mktemp("report-course")
    build(root=root, labs=REPORT_LABS, release=root / "labs")
    share_references(root, REPORT_LABS, reference_cache(tmp_path_factory))
    students = write_class(root, REPORT_LABS, root / "labs")
    submitted, lab = root / "submitted", REPORT_LABS[0]
    for student in students:  # of each demo class: the four kinds and two named mistakes
        others = [s.name for s in students if s.lab == student.lab and s.name not in KINDS]
        keep = KINDS | set(others[:2]) | {"no_retain_graph"}
        if student.name not in keep:
            shutil.rmtree(submitted / student.name / student.lab)
            if not any((submitted / student.name).iterdir()):
                (submitted / student.name).rmdir()
    shutil.copytree(submitted / "no_retain_graph" / lab, submitted / ODD / lab)
    broken = submitted / ODD / REPORT_LABS[1] / f"{REPORT_LABS[1]}.ipynb"
    broken.parent.mkdir()
    broken.write_text('{"cells": [ this is not json')
    exiter = nbformat.read(submitted / "complete" / lab / f"{lab}.ipynb", as_version=4)
    answer = next(c for c in exiter.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = "import os\nos._exit(3)\n" + answer.source
    (submitted / "exiter" / lab).mkdir(parents=True)
    nbformat.write(exiter, submitted / "exiter" / lab / f"{lab}.ipynb")
    with gradebook.opened(gradebook.of(root)) as gb:
        gb.update_or_create_assignment(lab, duedate=datetime(2024, 1, 1, 12))
    (submitted / LATE / lab / "timestamp.txt").write_text("2024-01-02 15:30:00.000000 UTC")
    (submitted / ON_TIME / lab / "timestamp.txt").write_text("2023-12-31 12:00:00.000000 UTC")
    grade_class(root, labs=REPORT_LABS, workers=2, quiet=True)
    _graded["root"] = root
    return root


def complete_notebook(lab: str):
    release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    (student,) = [s for s in declared_class(lab) if s.name == "complete"]
    return student_notebook(student, release, source_notebook(lab))


def errors(nb) -> list[str]:
    found = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                head = cell.source.splitlines()[0] if cell.source else ""
                found.append(f"cell {index} ({head[:60]!r}): {output.ename}: {output.evalue[:300]}")
    return found


SCREEN_LINES = 45  # a screen of output in JupyterLab or Colab, at its default font
OUTPUT_PX = 900  # the width of a notebook's output area (tests/clients/test_browser.py measures)


def output_lines(output) -> int:
    """How many lines `output` takes on the screen (a picture or HTML: none counted)."""
    if output.output_type == "stream":
        return output.get("text", "").rstrip("\n").count("\n") + 1
    if output.output_type == "error":
        return sum(str(line).count("\n") + 1 for line in output.get("traceback", []))
    data = output.get("data", {})
    if any(key.startswith("image/") or key == "text/html" for key in data):
        return 0
    return str(data.get("text/plain", "")).count("\n") + 1


def picture_width(output) -> float | None:
    """The width in CSS px at which a notebook shows the picture `output` holds, or None."""
    data = output.get("data", {})
    svg, png = data.get("image/svg+xml"), data.get("image/png")
    inline = re.search(r'src="data:image/(svg\+xml|png);base64,([^"]+)"', data.get("text/html", ""))
    if inline and inline.group(1) == "png":
        png = inline.group(2)
    elif inline:
        svg = base64.b64decode(inline.group(2)).decode("utf-8", "replace")
    if svg:
        size = re.search(r'<svg[^>]*?\swidth="([0-9.]+)(pt|px)?"', svg)
        return float(size.group(1)) * (4 / 3 if size.group(2) == "pt" else 1) if size else None
    if png:
        shown = output.get("metadata", {}).get("image/png", {}).get("width")
        return shown or struct.unpack(">I", base64.b64decode(png)[16:20])[0]
    return None


def student_view_problems(nb) -> list[str]:
    """What an executed notebook shows a student that it should not: a traceback (an error
    output of more than one line), a cell's output longer than a screen, a picture wider than
    the output area, a picture without a text alternative (an <img alt=...>)."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        where = f"cell {cell.get('id')!r} ({(cell.source.splitlines() or [''])[0][:50]!r})"
        outputs = cell.get("outputs", [])
        lines = sum(output_lines(o) for o in outputs)
        if lines > SCREEN_LINES:
            found.append(f"{where}: {lines} lines of output, more than a screen ({SCREEN_LINES})")
        for output in outputs:
            if output.output_type == "error" and output_lines(output) > 1:
                found.append(
                    f"{where}: a traceback of {output_lines(output)} lines "
                    f"({output.ename}: {str(output.evalue)[:100]})"
                )
            width = picture_width(output)
            if width and width > OUTPUT_PX:
                found.append(f"{where}: a picture {width:.0f} px wide, in a {OUTPUT_PX} px area")
            data = output.get("data", {})
            has_alt = re.search(r'<img alt="[^"]+"', data.get("text/html", ""))
            if width and not has_alt:
                found.append(f"{where}: a picture without a text alternative")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_text(cell) -> str:
    """What a cell printed (its stream outputs), joined."""
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def running_with(fragment: str) -> list[str]:
    """The processes whose command line holds `fragment`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fragment in fh.read().decode(errors="replace"):
                    found.append(pid)
        except OSError:  # it ended meanwhile
            continue
    return found


def record(name, value, rtol=1e-5, atol=1e-8, hint=None):
    """A record as observe() makes it, of `value`."""
    return {"name": name, "value": encode(value), "rtol": rtol, "atol": atol, "hint": hint}


def graded_cell(source, outputs):
    """A test cell (graded, not a solution) with `outputs`."""
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1, "solution": False}
    cell.outputs = outputs
    return cell


def error_output(ename, line):
    return nbformat.v4.new_output(
        "error", ename=ename, evalue="secret " * 10, traceback=[f"Cell In[3], line {line}"]
    )


def display_output(rec):
    return nbformat.v4.new_output("display_data", data={MIME: rec})


def small_gradebook(root: Path, lab: str = "lab1", cells: dict[str, float] | None = None) -> Path:
    """root/gradebook.db with one lab of one notebook (named after it) and its grade cells
    (name -> points), and no students: what `make build` leaves, in small."""
    cells = cells or {"t1": 2.0, "t2": 3.0}
    with gradebook.opened(gradebook.of(root)) as gb:
        gb.add_assignment(lab)
        gb.add_notebook(lab, lab)
        for name, points in cells.items():
            gb.add_grade_cell(name, lab, lab, max_score=points, cell_type="code")
    return gradebook.of(root)


# ---- kernels started as the grader starts them (tests/test_zygote.py, test_grading_guard.py)


def sandbox_client(
    tmp_path, cells: list[str], readonly: list[Path] = (), fork: bool = True
) -> NotebookClient:
    """A client for these cells, whose kernel is started as the grader starts it (`fork`: the
    sandbox's setting, c.SandboxedExecute.fork_kernels); the command that started it is kept
    as `client.started`."""
    from graders.sandbox import sandbox_kernel

    nb = new_notebook(cells=[new_code_cell(code) for code in cells])
    runtime = tmp_path / f"runtime-{secrets.token_hex(2)}"
    runtime.mkdir()
    started = []

    class Manager(sandbox_kernel.SandboxKernelManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.sandbox = {
                "runtime": str(runtime),
                "readonly": [str(p) for p in readonly],
                "fork": fork,
            }

        async def _async_pre_start_kernel(self, **kw):
            argv, kw = await super()._async_pre_start_kernel(**kw)
            started.append(" ".join(argv))
            return argv, kw

    made = NotebookClient(nb, kernel_manager_class=Manager, timeout=120, allow_errors=True)
    made.started = started
    return made


def forked(made: NotebookClient) -> bool:
    """Whether the client's kernel was forked from the warm process (graders/sandbox/zygote.py)."""
    from graders.sandbox import zygote

    (command,) = made.started
    return str(zygote.STUB) in command and "bwrap" not in command


def printed_line(cell, tag: str) -> str:
    """What `cell` printed after `tag`, to the end of that line."""
    text = stream_text(cell)
    assert tag in text, text
    return text.split(tag, 1)[1].splitlines()[0].strip()
