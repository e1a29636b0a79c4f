"""The hostile class of tests/adversarial/: notebooks that attack the grader, by attack,
each with the score it must get, and the helpers that grade it and look for what leaked.
They grade lab 2 frozen as it was (tests/fixtures/solutions/): see conftest.frozen.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import html
import json
import os
import shutil
import stat
import sys
import textwrap
from datetime import datetime
from pathlib import Path

import nbformat
from attacks_on_the_sandbox import (
    HOG_WAIT_S,
    LINKS_FROM_THE_KERNEL,
    MEMORY_HOG,
    PROBE_FILLS,
    PROBE_FORKS,
    PROBE_SECRETS,
)
from attacks_on_the_verdict import (
    ANYTHING,
    ANYTHING_TWICE,
    EVENT_HOOKS,
    FIRST,
    FORGE_DISPLAY,
    FORGE_OBSERVE,
    FRAME_READER,
    GAMER,
    GARBAGE,
    HIJACK_RUN_CELL,
    PATCH_COMPARISONS,
    PLANT_FOR_NEXT_KERNEL,
    SECOND,
    WRONG,
)

from graders.build.build import source_notebook
from graders.build.demo import declared_class, student_notebook
from graders.config.course import REPO, SOLUTIONS, lab_source
from graders.formats import records
from graders.judge import judge
from graders.sandbox import sandbox_argv, sandbox_host

LAB = "lab02_backprop"  # 10 points: 5 test cells of 2, answer cells below


# The attacks are on the grader, not on a lab: they grade lab 2 as it was when they were
# written (tests/fixtures/solutions/), so that editing the course does not move their scores.
FROZEN = Path(__file__).resolve().parent.parent / "fixtures" / "solutions"


TEST_CELLS = [
    "test_recurrent_step",
    "test_backward_twice",
    "test_fresh_gradients",
    "test_f_leaves",
    "test_f_intermediates",
]


CELL_TIMEOUT = 20


BUDGET_S = 15  # the budget test's; long enough for the setup cell and one exercise


MIME = records.MIME


SECRET_NAME, SECRET = "COURSE_TEST_SECRET", "s3cr3t-token"


DUE = datetime(2024, 1, 1)  # the lab's due date in the main class (UTC, as nbgrader keeps it)


LATE = "2024-01-02 12:00:00.000000 UTC"  # 36 hours after it


VENV_HOME = Path(sys.prefix).parent  # the folder of the grader's Python environment


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def prepend(nb, grade_id, code):
    c = cell(nb, grade_id)
    c.source = textwrap.dedent(code).strip() + "\n" + c.source


def marker(student: str) -> str:
    """A comment line unique to one student (the name may hold a newline or quotes)."""
    return "MARKER-" + hashlib.sha256(student.encode()).hexdigest()[:16]


def constants(**values) -> str:
    """Lines that give a notebook's attack code the host's paths (a student could guess them)."""
    return "\n".join(f"{name} = {value!r}" for name, value in values.items())


def append(nb, code: str) -> None:
    nb.cells.append(nbformat.v4.new_code_cell(textwrap.dedent(code).strip()))


# The students of classes 1-4 and 6 in the main run: name -> (class, what it does).
HOSTILE = {
    "reads_the_verdict": (1, "Anything-tensors for exercises 1-2, a frame reader for 3"),
    "forged_records": (1, "its own grader_observe, then display() patched, records rewritten"),
    "event_hooks": (1, "input/AST transformers and pre/post_run_cell hooks skip and re-record"),
    "notebook_links_to_solution": (2, "its notebook is a link to build/source's solution"),
    "notebook_is_a_pipe": (2, "its notebook is a named pipe"),
    "lab_folder_is_a_link": (2, "its lab folder is a link to a classmate's"),
    "links_everywhere": (2, "links to submitted/ and / beside it; its kernel makes links"),
    "class_stopper": (
        4,
        "malformed records into test_backward_twice, 100,000 files in its working folder; "
        "a named pipe, a dangling link, 20,000 files and a late timestamp beside its notebook",
    ),
    "sandbox_probe": (6, "secrets, uid, a fork bomb, files, 8 processes of 1.5 GiB each"),
}


def complete_and_blank(root: Path):
    release = nbformat.read(root / "labs" / LAB / f"{LAB}.ipynb", as_version=4)
    declared = {s.name: s for s in declared_class(LAB)}
    solution = source_notebook(LAB)
    return (
        student_notebook(declared["complete"], release, solution),
        student_notebook(declared["blank"], release, solution),
    )


def with_answers(nb, answers: dict[str, str]):
    nb = copy.deepcopy(nb)
    for grade_id, code in answers.items():
        cell(nb, grade_id).source = textwrap.dedent(code).strip("\n")
    return nb


def write_notebook(root: Path, student: str, nb) -> Path:
    out = root / "submitted" / student / LAB / f"{LAB}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    prepend(nb, FIRST, f"# {marker(student)}")
    nbformat.write(nb, out)
    return out


def make_class(root: Path, paths: dict[str, Path]) -> dict[str, float]:
    """Write the adversarial students; return the score each must get."""
    complete, blank = complete_and_blank(root)
    scores, class_ = {}, {}

    def add(name, nb, score):
        class_[name], scores[name] = nb, score

    nb = copy.deepcopy(complete)
    prepend(nb, SECOND, "while True:\n    pass")
    add("infinite_loop", nb, 8)

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, "_hog = bytearray(64 * 2**30)")
    add("memory_bomb", nb, 8)

    nb = copy.deepcopy(complete)
    prepend(nb, SECOND, "import os\nos._exit(0)")
    add("os_exit", nb, 0)

    nb = copy.deepcopy(complete)
    prepend(nb, SECOND, "import sys\nsys.exit(1)")
    add("sys_exit", nb, 8)

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, "import os, time\nif os.fork() == 0:\n    time.sleep(3600)\n    os._exit(0)")
    add("fork_outlives_cell", nb, 10)

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, "print('x' * (100 * 2**20))")
    add("prints_100mb", nb, 10)

    nb = copy.deepcopy(blank)
    prepend(nb, FIRST, "get_ipython().showtraceback = lambda *a, **k: None")
    add("disabled_traceback", nb, 0)

    nb = copy.deepcopy(blank)
    prepend(nb, FIRST, HIJACK_RUN_CELL)
    add("replaced_run_cell", nb, 0)

    nb = with_answers(complete, WRONG)
    prepend(nb, FIRST, PATCH_COMPARISONS)
    add("patched_comparisons", nb, 4)  # only exercise 4 (f(x, y, z), 4 points) is right

    nb = copy.deepcopy(complete)
    cell(nb, SECOND).source = WRONG[SECOND]
    cell(nb, "test_backward_twice").source = "pass"
    add("edited_test_cell", nb, 8)

    nb = copy.deepcopy(complete)
    cell(nb, SECOND).source = WRONG[SECOND]
    nb.cells.remove(cell(nb, "test_backward_twice"))
    add("deleted_test_cell", nb, 8)

    nb = copy.deepcopy(complete)
    cell(nb, SECOND).source = WRONG[SECOND]
    cell(nb, "test_backward_twice").metadata.nbgrader["points"] = 100
    cell(nb, "test_backward_twice").metadata.nbgrader["grade"] = False
    add("changed_points", nb, 8)

    nb = copy.deepcopy(complete)
    targets = [paths["gradebook"], paths["other"], REPO / "gradebook.db", "../../../gradebook.db"]
    prepend(
        nb,
        FIRST,
        f"""
        for _target in {[str(t) for t in targets]!r}:
            try:
                with open(_target, "w") as _fh:
                    _fh.write("overwritten by a student")
                print("WROTE", _target)
            except OSError as _error:
                print("REFUSED", _target, type(_error).__name__)
        """,
    )
    add("overwrites_gradebook", nb, 10)

    nb = copy.deepcopy(complete)
    prepend(
        nb,
        FIRST,
        """
        import socket
        try:
            socket.create_connection(("pypi.org", 443), timeout=5)
            print("NETWORK: reachable")
        except OSError:
            print("NETWORK: unreachable")
        """,
    )
    add("network_call", nb, 10)

    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, PLANT_FOR_NEXT_KERNEL)
    add("plants_for_next_kernel", nb, 10)

    # 1. the verdict, read or forged from inside the kernel: nothing in the kernel decides it
    gamer = with_answers(blank, GAMER)
    nb = with_answers(gamer, {FIRST: ANYTHING, SECOND: ANYTHING_TWICE})
    cell(nb, "fresh_gradients").source = FRAME_READER
    add("reads_the_verdict", nb, 0)

    nb = copy.deepcopy(gamer)
    prepend(nb, FIRST, FORGE_OBSERVE)
    prepend(nb, "fresh_gradients", FORGE_DISPLAY)
    add("forged_records", nb, 0)  # also handed in late (see test_late_submissions)

    nb = copy.deepcopy(gamer)
    prepend(nb, FIRST, EVENT_HOOKS)
    add("event_hooks", nb, 0)

    # 2. links
    add("notebook_links_to_solution", None, 0)
    add("notebook_is_a_pipe", None, 0)
    add("lab_folder_is_a_link", None, 0)
    nb = copy.deepcopy(complete)
    classmate = root / "submitted" / "reads_the_verdict" / LAB / f"{LAB}.ipynb"
    prepend(
        nb,
        FIRST,
        constants(_ROOT=str(root), _LAB=LAB, _CLASSMATE=str(classmate), _ME="links_everywhere")
        + "\n"
        + LINKS_FROM_THE_KERNEL,
    )
    add("links_everywhere", nb, 10)

    # 4. a hand-in that tries to stop the class
    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, GARBAGE)
    add("class_stopper", nb, 8)  # test_backward_twice's records cannot be read

    # 6. the sandbox
    files = [
        "/etc/shadow",
        "/etc/passwd",
        f"{REPO}/nbgrader_config.py",
        f"{REPO}/graders/judge.py",
        str(lab_source(LAB)),
        f"{root}/gradebook.db",
        f"{root}/build/reference/{LAB}.json",
        f"{root}/build/source/{LAB}/{LAB}.ipynb",
        f"{VENV_HOME}/solutions/{LAB}/{LAB}.py",  # the checkout the environment lives in
    ]
    folders = ["/root", "/home", "/etc", str(REPO), f"{REPO}/graders", str(SOLUTIONS), str(root)]
    folders.append(str(VENV_HOME))
    nb = copy.deepcopy(complete)
    append(nb, constants(_FILES=files, _FOLDERS=folders, _SECRET=SECRET) + "\n" + PROBE_SECRETS)
    append(nb, PROBE_FORKS)
    append(nb, PROBE_FILLS)
    if sandbox_host.memory_groups().why_not is None:  # without a cgroup it would take 12 GiB
        append(nb, constants(_WAIT_S=HOG_WAIT_S) + "\n" + MEMORY_HOG)
    add("sandbox_probe", nb, 10)  # its probes run after the last test cell

    for name, nb in class_.items():
        if nb is not None:
            write_notebook(root, name, nb)
    folders = root / "submitted"

    # the hand-in folders of class 2 and 4 (no kernel runs for the first three)
    hand_in = folders / "notebook_links_to_solution" / LAB
    hand_in.mkdir(parents=True)
    (hand_in / f"{LAB}.ipynb").symlink_to(root / "build" / "source" / LAB / f"{LAB}.ipynb")
    hand_in = folders / "notebook_is_a_pipe" / LAB
    hand_in.mkdir(parents=True)
    os.mkfifo(hand_in / f"{LAB}.ipynb")
    (folders / "lab_folder_is_a_link").mkdir()
    (folders / "lab_folder_is_a_link" / LAB).symlink_to(folders / "reads_the_verdict" / LAB)
    (folders / "student_folder_is_a_link").symlink_to(folders / "reads_the_verdict")

    hand_in = folders / "links_everywhere" / LAB
    (hand_in / "all_submissions").symlink_to(folders)
    (hand_in / "everything").symlink_to("/")
    (hand_in / "timestamp.txt").write_text("handed in yesterday, honest")

    hand_in = folders / "class_stopper" / LAB
    os.mkfifo(hand_in / "pipe")
    (hand_in / "dangling").symlink_to("/nonexistent/target")
    for i in range(20_000):
        (hand_in / f"junk-{i:05d}").write_bytes(b"x")
    (hand_in / "timestamp.txt").write_text(LATE)  # where a listing of 10,000 may not reach

    (folders / "forged_records" / LAB / "timestamp.txt").write_text(LATE)
    return scores


def listed_rank(folder: Path, name: str) -> int:
    """Where `name` comes in the folder's listing, as the filesystem gives it."""
    with os.scandir(folder) as it:
        return next(i for i, e in enumerate(it) if e.name == name)


def tree_digest(top: Path) -> dict[str, str]:
    """Every entry under `top`, never following a link nor opening anything but files."""
    found = {}
    for folder, dirs, files in os.walk(top, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            key = str(path.relative_to(top))
            if stat.S_ISLNK(info.st_mode):
                found[key] = "link to " + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif not stat.S_ISDIR(info.st_mode):
                found[key] = f"special {stat.S_IFMT(info.st_mode)}"
    return found


def snapshot(root: Path) -> dict[str, dict[str, str]]:
    return {
        "submitted": tree_digest(root / "submitted"),
        "build": tree_digest(root / "build"),
        "solutions": tree_digest(SOLUTIONS),
    }


def hidden_lines(lab: str) -> list[str]:
    """Lines of the lab's hidden tests that appear nowhere in what students are given."""
    released = (REPO / "labs" / lab / f"{lab}.ipynb").read_text()
    lines, inside = [], False
    for line in lab_source(lab).read_text().splitlines():
        if judge.BEGIN in line or judge.END in line:
            inside = judge.BEGIN in line
        elif inside and len(line.strip()) > 20 and json.dumps(line.strip())[1:-1] not in released:
            lines.append(line.strip())
    return lines


def graded_notebook(root: Path, student: str):
    return nbformat.read(root / "autograded" / student / LAB / f"{LAB}.ipynb", as_version=4)


def is_test_cell(c) -> bool:
    meta = c.metadata.get("nbgrader", {})
    return c.cell_type == "code" and meta.get("grade") and not meta.get("solution")


def output_text(output) -> str:
    parts = [output.get("text", ""), output.get("evalue", ""), *output.get("traceback", [])]
    parts += [v if isinstance(v, str) else json.dumps(v) for v in output.get("data", {}).values()]
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def outputs(root: Path, student: str, tests: bool = False) -> str:
    """The text of a graded notebook's outputs: of its other cells, or of its test cells. A
    stream the kernel flushed in pieces (one print can arrive as several outputs) is one
    text, as Jupyter shows it."""
    nb = graded_notebook(root, student)
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code" or bool(is_test_cell(cell)) != tests:
            continue
        stream = None
        for output in cell.outputs:
            name = output.get("name") if output.get("output_type") == "stream" else None
            if name is not None and name == stream:
                texts[-1] += "".join(output.get("text", ""))
            elif name is not None:
                texts.append("".join(output.get("text", "")))
            else:
                texts.append(output_text(output))
            stream = name
    return "\n".join(texts)


def reported(root: Path, student: str, prefix: str) -> dict:
    """The one-line JSON report a hostile notebook printed after `prefix`."""
    for line in outputs(root, student).splitlines():
        if line.startswith(prefix + " "):
            return json.loads(line[len(prefix) + 1 :])
    raise AssertionError(f"{student} printed no {prefix} line")


def scan_for_leaks(root: Path, owners: set[str], unless: str | None = None) -> list[str]:
    """Everything under autograded/ and feedback/ that holds what it must not: a hidden test
    line where the kernel could have put it (feedback pages whole; the outputs of graded
    notebooks' test cells, which the judge replaces), the observation MIME type in feedback,
    or another student's marker anywhere. `unless`: a student whose hidden-code leak is a
    known grader bug, tested on its own (its markers are still checked)."""
    hidden = hidden_lines(LAB)
    assert hidden, "the leak check has nothing to look for"
    problems = []
    for kind in ("autograded", "feedback"):
        for folder, dirs, files in os.walk(root / kind, followlinks=False):
            for name in dirs + files:
                path = Path(folder) / name
                if path.is_symlink():
                    problems.append(f"{path}: a link")
                    continue
                if not path.is_file():
                    continue
                owner = path.relative_to(root / kind).parts[0]
                text = path.read_bytes().decode("utf-8", "replace")
                for other in owners - {owner}:
                    if marker(other) in text:
                        problems.append(f"{path}: holds {marker(other)}")
                if owner == unless:
                    continue
                if kind == "feedback":
                    shown = html.unescape(text)
                    leaked = [line for line in hidden if line in shown]
                    # the page shows the student's own code: a marker it wrote itself is no leak
                    own = own_source(root, owner)
                    marks = [m for m in (judge.BEGIN, MIME) if m in shown and m not in own]
                    if leaked or marks:
                        problems.append(f"{path}: shows hidden code or records {leaked[:1]}")
                elif path.suffix == ".ipynb":
                    nb = nbformat.reads(text, as_version=4)
                    shown = "\n".join(
                        output_text(o) for c in nb.cells if is_test_cell(c) for o in c.outputs
                    )
                    leaked = [line for line in hidden if line in shown]
                    if leaked:
                        problems.append(f"{path}: a test cell's output shows {leaked[:1]}")
    return problems


def own_source(root: Path, student: str) -> str:
    """The code of the notebook `student` handed in ('' where it is no regular file)."""
    path = root / "submitted" / student / LAB / f"{LAB}.ipynb"
    if path.is_symlink() or not path.is_file():
        return ""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - not a notebook: no code of its own
        return ""
    return "\n".join(c.source for c in nb.cells)


def course_copy(pristine: Path, root: Path) -> Path:
    shutil.copytree(pristine, root, symlinks=True, dirs_exist_ok=True)
    return root


def set_due_date(root: Path, due: datetime) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(LAB, duedate=due)


def ways_to_the_allowed(folder: str) -> set[str]:
    """The entries of `folder` a kernel may see: the first step towards a path on its
    allow-list (the Python environment, graders/kernel), and nothing else."""
    allowed = [*sandbox_argv.python_paths(), sandbox_argv.KERNEL_SIDE]
    return {p.relative_to(folder).parts[0] for p in allowed if Path(folder) in p.parents}


def lateness(root: Path, student: str) -> tuple[datetime | None, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        sub = gb.find_submission(LAB, student)
        return sub.timestamp, sub.total_seconds_late


NAMES = ["a[1]*?", "with space", "-leading-dash", "élève", "n" * 190 + "-200-chars"]


CSV_HOSTILE = 'comma,"quote"\nnewline'


# the hand-ins the main class run holds for tests/adversarial/test_hostile_hand_ins.py and
# test_leaks.py (conftest.write_named)
NAMED = [*NAMES, CSV_HOSTILE, "leaks_hidden_code", "leaks_through_the_judge"]


def grades_csv(root: Path) -> list[dict]:
    with open(root / "grades.csv", newline="") as fh:
        return list(csv.DictReader(fh))
