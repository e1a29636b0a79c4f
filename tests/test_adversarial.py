"""An adversarial class, generated like the demo class: submissions that try to hang, crash,
flood, escape, fool the grader or read what they must not. Each must get exactly its declared
score, the class run must finish, and the gradebook and every other submission must be intact.

The attacks come in classes (each student says which in `HOSTILE`):

1. reading or forging the verdict from inside the kernel (a value equal to anything, a
   function that reads its caller's frames, a forged ``grader_observe``/``display``, event
   hooks and transformers that rewrite, skip or re-record the hidden code);
2. links in and out of the hand-in folder, and links the kernel makes while it runs;
3. hidden test code printed into the outputs, hoping that feedback shows it;
4. a hand-in that tries to stop the class (malformed records, named pipes, a crowded folder,
   a working folder filled with files);
5. student folder names that break paths, globs, command lines or CSV;
6. the sandbox's allow-list and limits (secrets, uid, memory over processes, a fork bomb,
   /dev/shm), plus late submissions as plain nbgrader sees them.

The last tests are the holes this class found in the grader (each was a strict xfail until
its fix): the judge's sentence quoting a record, the runtime folder and /tmp without a size
cap, a crowded folder hiding timestamp.txt, CSV-breaking names, a folder name that is not
UTF-8.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import html
import json
import os
import shutil
import sqlite3
import stat
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from graders import intake, judge, sandbox
from graders.build import build, source_notebook
from graders.course import REPO, SOLUTIONS, lab_source
from graders.demo import declared_class, student_notebook, write_class
from graders.grade import grade_class

LAB = "lab02_backprop"  # 10 points: 5 test cells of 2, answer cells below
# The attacks are on the grader, not on a lab: they grade lab 2 as it was when they were
# written (tests/fixtures/solutions/), so that editing the course does not move their scores.
FROZEN = Path(__file__).resolve().parent / "fixtures" / "solutions"
pytestmark = pytest.mark.slow  # every test here grades a class or runs a kernel


@pytest.fixture(scope="module", autouse=True)
def frozen_lab():
    """Every build and demo class of this module reads the frozen lab 2."""
    import graders.build
    import graders.demo

    patch = pytest.MonkeyPatch()
    frozen = lambda lab: FROZEN / lab / f"{lab}.py"  # noqa: E731
    patch.setattr(graders.build, "lab_source", frozen)
    patch.setattr(graders.demo, "SOLUTIONS", FROZEN)
    patch.setitem(globals(), "lab_source", frozen)
    yield
    patch.undo()


FIRST, SECOND = "recurrent_step", "backward_twice"
TEST_CELLS = [
    "test_recurrent_step",
    "test_backward_twice",
    "test_fresh_gradients",
    "test_f_leaves",
    "test_f_intermediates",
]
CELL_TIMEOUT = 20
BUDGET_S = 15  # the budget test's; long enough for the setup cell and one exercise
MIME = judge.MIME
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


# ---------------------------------------------------------------------------- the attacks

# Code that fakes success: the kernel skips every test cell and reports "ok".
HIJACK_RUN_CELL = """
ip = get_ipython()
_real = ip.run_cell_async
async def _fake(raw_cell, *args, **kwargs):
    if "check(" in raw_cell or "assert" in raw_cell:
        raw_cell = "pass"
    return await _real(raw_cell, *args, **kwargs)
ip.run_cell_async = _fake
"""

# Wrong answers everywhere, with every comparison the checks use made to say "equal".
PATCH_COMPARISONS = """
import builtins, torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
builtins.abs = lambda x: 0
builtins.all = lambda it: True
"""
# Leave a startup file for whichever kernel starts next with the same IPython folder: if
# kernels shared it, every later student would fail every check.
PLANT_FOR_NEXT_KERNEL = """
import pathlib
_startup = pathlib.Path(get_ipython().profile_dir.startup_dir)
_startup.mkdir(parents=True, exist_ok=True)
(_startup / "00-plant.py").write_text("import torch\\ntorch.allclose = lambda *a, **k: False\\n")
print("PLANTED", _startup)
"""

WRONG = {
    FIRST: "def recurrent_step(Wh, Wx, x, h):\n    return torch.zeros(()), torch.zeros(3, 1)",
    SECOND: "def backward_twice(w):\n    return torch.tensor(0.0)",
    "fresh_gradients": "def fresh_gradients(n):\n    return [0.0] * n",
}

# Answers that pass every visible check and are wrong on every hidden input: the base of
# the class-1 attacks, so that the hidden code runs and records (0 points on their own).
GAMER = {
    FIRST: """
def recurrent_step(Wh, Wx, x, h):
    out = (Wh.sum() + Wx.sum()) * 0.0 + 1.0  # a scalar, and Wh.grad gets filled
    out.backward()
    next_h = torch.zeros(3, 1, requires_grad=True)
    next_h.sum().backward()  # the all-ones gradient the visible check looks for
    return out, next_h
""",
    SECOND: """
def backward_twice(w):
    return torch.tensor(24.0)  # right for the visible check's w = 2 only
""",
    "fresh_gradients": """
import math

def fresh_gradients(n):
    return [1 - math.tanh(3.0) ** 2] * n  # the visible check's tensors only
""",
    "f_xyz": """
x = torch.tensor(-2.0, requires_grad=True)
y = torch.tensor(2.0, requires_grad=True)
z = torch.tensor(3.0, requires_grad=True)
p = x * 1.0  # not x**2
q = p + y
f = q * z
p.retain_grad()
q.retain_grad()
f.backward()
x.grad, z.grad = torch.tensor(-12.0), torch.tensor(6.0)  # the table's values, set by hand
""",
}

# 1a. A tensor that is equal to, less than and greater than anything, whose every method
# answers with itself, and which records as a 0-d zero (it cannot know the right value).
ANYTHING = """
class Anything(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return ANY

    def __eq__(self, other):
        return True

    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__

    def __bool__(self):
        return True

    def __hash__(self):
        return 0

    def __repr__(self):
        return "Anything()"

    def __format__(self, spec):
        return "Anything()"

    def tolist(self):
        return 0.0

    @property
    def shape(self):
        return torch.Size([])

    @property
    def dtype(self):
        return torch.float32


ANY = torch.Tensor._make_subclass(Anything, torch.zeros(()))


def recurrent_step(Wh, Wx, x, h):
    (Wh.sum() + Wx.sum()).backward()  # Wh.grad must not be None
    return ANY, ANY
"""
ANYTHING_TWICE = "def backward_twice(w):\n    return ANY"
# 1b. The caller's frames hold what the visible check expects: return it.
FRAME_READER = """
import inspect
import sys


def fresh_gradients(n):
    frames = [sys._getframe(1)] + [info.frame for info in inspect.stack()[1:]]
    for frame in frames:
        for scope in (frame.f_locals, frame.f_globals):
            for name in ("_expected", "expected", "_values", "_v"):
                if isinstance(scope.get(name), float):
                    return [scope[name]] * n
    return [0.0] * n
"""

# 1c. Forged records: a grader_observe of its own (the student's values, a tolerance that
# accepts anything, a display id to rewrite them by later), then the real one with its
# display() and IPython's replaced, and the records of earlier test cells rewritten.
FORGE_OBSERVE = """
import sys
import types

import grader_observe as _real_observe
from IPython.display import display as _display

_MIME = _real_observe.MIME
_shown = []


def _tolerant(record):
    return dict(record, rtol=1e300, atol=1e300, hint="forged")


def _fake_observe(name, value, rtol=1e-5, atol=1e-8, hint=None):
    record = _tolerant({"name": str(name), "value": _real_observe.encode(value)})
    _shown.append((_display({_MIME: record}, raw=True, display_id=True), record))


_fake = types.ModuleType("grader_observe")
_fake.observe, _fake.encode, _fake.MIME = _fake_observe, _real_observe.encode, _MIME
sys.modules["grader_observe"] = _fake
"""
FORGE_DISPLAY = """
import IPython.display

sys.modules["grader_observe"] = _real_observe


def _tolerant_display(*objs, **kwargs):
    objs = [
        {k: _tolerant(v) if k == _MIME else v for k, v in o.items()} if isinstance(o, dict) else o
        for o in objs
    ]
    return _display(*objs, **kwargs)


_real_observe.display = IPython.display.display = _tolerant_display
for _handle, _record in _shown:  # rewrite the records already in test cells 1 and 2
    _handle.update({_MIME: dict(_record, value=None)}, raw=True)
"""

# 1d. Event hooks and transformers: an input transformer drops the hidden code of test
# cells 1 and 2; a pre_run_cell hook installs an AST transformer that removes the observe
# calls of test cell 3; for cells 4 and 5 it holds the records back, and a post_run_cell
# hook clears the cell's outputs and shows them again with a tolerance of its own.
EVENT_HOOKS = """
import ast

import grader_observe as _observe_module
from IPython.display import clear_output
from IPython.display import display as _display

_ip = get_ipython()
_MIME = _observe_module.MIME
_held = []


def _drop_hidden(lines):
    text = "".join(lines)
    if "recurrent_step(_Wh" not in text and "backward_twice(_w" not in text:
        return lines
    kept, inside = [], False
    for line in lines:
        inside = inside or "BEGIN HIDDEN" in line
        if not inside:
            kept.append(line)
        if "END HIDDEN" in line:
            inside = False
    return kept


class _NoObserve(ast.NodeTransformer):
    def visit_Expr(self, node):
        call = node.value
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "observe":
            return ast.Pass()
        return self.generic_visit(node)


def _hold(*objs, **kwargs):
    _held.extend(objs)


def _pre(info):
    source = info.raw_cell or ""
    if "BEGIN HIDDEN" not in source:
        return
    if "fresh_gradients(" in source:
        _ip.ast_transformers.append(_NoObserve())
    elif "_undefined" in source:  # test cells 4 and 5
        _held.clear()
        _observe_module.display = _hold


def _post(result):
    _ip.ast_transformers[:] = [t for t in _ip.ast_transformers if not isinstance(t, _NoObserve)]
    if _observe_module.display is _hold:
        _observe_module.display = _display
        clear_output()
        for obj in _held:
            if isinstance(obj, dict) and _MIME in obj:
                _display({_MIME: dict(obj[_MIME], rtol=1e300, atol=1e300)}, raw=True)


_ip.input_transformers_cleanup.append(_drop_hidden)
_ip.events.register("pre_run_cell", _pre)
_ip.events.register("post_run_cell", _post)
"""

# 2c. While it runs, the kernel makes links in its working folder and its private runtime
# folder to the gradebook, the reference records, a classmate's notebook and /; puts links
# to a classmate's notebook wherever its own graded notebook might be; and replaces its
# connection file by a link to the gradebook. Nothing of it may reach the host.
LINKS_FROM_THE_KERNEL = """
import json
import os
import sys

_private = os.path.dirname(sys.argv[sys.argv.index("-f") + 1])
_made, _read = [], []
_targets = {
    "gradebook.db": _ROOT + "/gradebook.db",
    "reference": _ROOT + "/build/reference",
    "solution.ipynb": _ROOT + f"/build/source/{_LAB}/{_LAB}.ipynb",
    "classmate.ipynb": _CLASSMATE,
    "everything": "/",
}
for _folder in (os.getcwd(), _private):
    for _name, _target in _targets.items():
        _link = os.path.join(_folder, _name)
        try:
            os.symlink(_target, _link)
            _made.append(_link)
            with open(_link, "rb") as _fh:
                _fh.read(1)
            _read.append(_link)
        except OSError:
            pass
_own = [
    f"{_LAB}.ipynb",
    f"{_ROOT}/autograded/{_ME}/{_LAB}/{_LAB}.ipynb",
    f"{_ROOT}/submitted/{_ME}/{_LAB}/{_LAB}.ipynb",
    os.path.join(_private, "..", "..", "autograded", "student", _LAB, f"{_LAB}.ipynb"),
    os.path.join(_private, "..", "..", "submitted", "student", _LAB, f"{_LAB}.ipynb"),
]
for _path in _own:
    try:
        os.makedirs(os.path.dirname(_path) or ".", exist_ok=True)
        if os.path.lexists(_path):
            os.remove(_path)
        os.symlink(_CLASSMATE, _path)
        _made.append(_path)
    except OSError:
        pass
try:
    _connection = sys.argv[sys.argv.index("-f") + 1]
    os.symlink(_ROOT + "/gradebook.db", _connection + ".link")
    os.replace(_connection + ".link", _connection)
    _made.append(_connection)
except OSError:
    pass
print("LINKS " + json.dumps({"made": _made, "read": _read}))
"""

# 3. Hidden code printed into the outputs: every cell's source from event hooks (into the
# test cells), and from an answer cell, the sources run so far, as text, HTML and a record.
LEAK_HOOKS = """
_ip = get_ipython()
_ip.events.register("pre_run_cell", lambda info: print("BEFORE", info.raw_cell))
_ip.events.register("post_run_cell", lambda result: print("AFTER", result.info.raw_cell))
"""
LEAK_HISTORY = """
from IPython.display import HTML, display

_ran = "\\n".join(In)
print("HISTORY", _ran)
display(HTML("<pre>" + _ran + "</pre>"))
_mime = "application/vnd.dyngraph." + "observation+json"  # not in this cell's own text
display({_mime: {"name": _ran, "value": 0, "rtol": 0, "atol": 0}}, raw=True)
get_ipython().set_next_input(_ran, replace=True)
"""

# 3b. Hidden code carried by the judge's own sentence: a hook keeps the names of the
# records of test_backward_twice, clears them, and records under the first name a tensor
# whose dtype is the hidden code (its shape is the visible check's, a scalar's). The judge
# quotes the dtype it got ("has dtype ..., not the dtype the solution gives").
LEAK_THROUGH_THE_JUDGE = """
import grader_observe as _observe_module
from IPython.display import clear_output
from IPython.display import display as _display

_names = []


def _note_names(*objs, **kwargs):
    for obj in objs:
        if isinstance(obj, dict) and _observe_module.MIME in obj:
            _names.append(obj[_observe_module.MIME]["name"])
    return _display(*objs, **kwargs)


def _leak(result):
    source = result.info.raw_cell or ""
    if source.startswith("_w = torch.tensor(2.0") and "BEGIN HIDDEN" in source and _names:
        hidden = source[source.index("BEGIN HIDDEN") :][:9000]
        value = {"tensor": 0.0, "shape": [], "dtype": hidden}
        clear_output()
        _display(
            {_observe_module.MIME: {"name": _names[0], "value": value, "rtol": 0, "atol": 0}},
            raw=True,
        )
    _names.clear()


_observe_module.display = _note_names
get_ipython().events.register("post_run_cell", _leak)
"""

# 4a. Malformed records shown into one test cell (test_backward_twice) by a hook, and a
# working folder filled with 100,000 small files.
GARBAGE = """
import os

from IPython.display import display as _display

_MIME = "application/vnd.dyngraph.observation+json"
_deep = 0
for _ in range(200):
    _deep = [_deep]
_GARBAGE = [
    "not JSON {",
    {"name": 1},
    None,
    ["a", "list"],
    {"name": "x", "value": _deep, "rtol": 0, "atol": 0},
    {"name": "x", "value": 1, "rtol": -1, "atol": 0},
    {"name": "x", "value": 1, "rtol": float("nan"), "atol": 0},
    {"name": "x" * 100_000, "value": 1, "rtol": 0, "atol": 0},
    {"name": "\\ud800", "value": "\\udfff", "rtol": 0, "atol": 0},
] + [{"name": "x", "value": 1, "rtol": 0, "atol": 0}] * 600


def _emit(result):
    if (result.info.raw_cell or "").startswith("_w = torch.tensor(2.0"):  # test_backward_twice
        for _record in _GARBAGE:
            try:
                _display({_MIME: _record}, raw=True)
            except Exception as _error:
                print("not sent:", type(_error).__name__)


get_ipython().events.register("post_run_cell", _emit)
os.makedirs("many", exist_ok=True)
_made = 0
try:
    for _i in range(100_000):
        with open(f"many/{_i}", "w") as _fh:
            _fh.write("x")
        _made += 1
except OSError as _error:
    print("stopped:", _error)
print("FILES", _made)
"""

# 6. What the sandbox lets the kernel see and do, in cells added after the last test cell
# (so that the score does not depend on how long they take). Each reports in one line; the
# test, not the kernel, decides. (The secret's value is given only to tell if it was seen.)
PROBE_SECRETS = """
import json
import os


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return None


def _list(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


_report = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid()}
_report["read"] = {p: _read(p) is not None for p in _FILES}
_report["listed"] = {p: _list(p) for p in _FOLDERS}
_seen = {"os.environ": json.dumps(dict(os.environ))}
for _pid in _list("/proc") or []:
    if _pid.isdigit():
        _seen[f"/proc/{_pid}/environ"] = _read(f"/proc/{_pid}/environ")
        _seen[f"/proc/{_pid}/cmdline"] = _read(f"/proc/{_pid}/cmdline")
_seen.update({p: _read(p) for p in _FILES})
_report["secret_seen_in"] = sorted(k for k, v in _seen.items() if v and _SECRET in v)
_report["environ"] = sorted(os.environ)
_report["proc_1_environ"] = _read("/proc/1/environ")
print("SECRETS " + json.dumps(_report))
"""
# A fork bomb, bounded by a loop (and by 10 s): as many sleeping processes as it can start
# (posix_spawn, which does not copy the kernel's memory), then all killed, whatever happens.
PROBE_FORKS = """
import errno
import json
import os
import signal
import time

_pids, _error, _until = [], None, time.monotonic() + 10
try:
    for _ in range(2000):
        if time.monotonic() > _until:
            _error = "out of time"
            break
        try:
            _pids.append(os.posix_spawn("/bin/sleep", ["sleep", "600"], {}))
        except OSError as e:
            _error = errno.errorcode.get(e.errno, str(e.errno))
            break
    print("FORKS " + json.dumps({"started": len(_pids), "error": _error}), flush=True)
finally:
    for _pid in _pids:
        os.kill(_pid, signal.SIGKILL)
    for _pid in _pids:
        os.waitpid(_pid, 0)
"""
# Files: 1 GiB into /dev/shm, and more than the working folder's cap into /tmp and into the
# private runtime folder (the one host folder it may write, for its connection and sockets).
PROBE_FILLS = """
import errno
import json
import os
import sys


def _fill(folder, total, chunk=8 << 20, per_file=32 << 20):
    done, error, files = 0, None, []
    blob = b"x" * chunk
    try:
        while done < total:
            files.append(os.path.join(folder, f"fill-{len(files)}"))
            with open(files[-1], "wb") as fh:
                written = 0
                while written < per_file and done < total:
                    fh.write(blob)
                    fh.flush()
                    written += chunk
                    done += chunk
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
    for path in files:
        try:
            os.remove(path)
        except OSError:
            pass
    return {"mib": done >> 20, "error": error}


_private = os.path.dirname(sys.argv[sys.argv.index("-f") + 1])
print("FILLS " + json.dumps({
    "shm": _fill("/dev/shm", 1 << 30),
    "tmp": _fill("/tmp", 288 << 20),
    "private": _fill(_private, 96 << 20),
}))
"""
# Memory over eight processes, 1.5 GiB each, held until the end. The children volunteer to
# the out-of-memory killer (oom_score_adj), so that the cgroup's cap stops them and not the
# kernel; the parent waits for the cap's first kill (at most HOG_WAIT_S), says how many
# held their 1.5 GiB then and how many the cap killed, and then kills the rest.
HOG_WAIT_S = 12
MEMORY_HOG = """
import json
import os
import signal
import time

_read_end, _write_end = os.pipe()
_children, _ended = [], {}
try:
    for _ in range(8):
        _pid = os.fork()
        if _pid == 0:
            try:
                os.close(_read_end)
                with open("/proc/self/oom_score_adj", "w") as fh:
                    fh.write("1000")
                _blob = b"\\x01" * (1536 << 20)
                os.write(_write_end, b"%d\\n" % os.getpid())
                time.sleep(600)
            finally:
                os._exit(0)
        _children.append(_pid)
    os.close(_write_end)
    os.set_blocking(_read_end, False)
    _deadline = time.monotonic() + _WAIT_S
    while not _ended and time.monotonic() < _deadline:
        for _pid in _children:
            _done, _status = os.waitpid(_pid, os.WNOHANG)
            if _done:
                _ended[_pid] = _status
        time.sleep(0.1)
    try:
        _allocated = {int(n) for n in os.read(_read_end, 4096).split()}
    except BlockingIOError:
        _allocated = set()
    _alive = [_pid for _pid in _children if _pid not in _ended]
    print("HOG " + json.dumps({
        "children": len(_children),
        "allocated": len(_allocated),
        "killed_by_the_cap": sum(os.WIFSIGNALED(s) for s in _ended.values()),
        "alive_at_the_end": len(_alive),
        "holding_at_the_end": len(_allocated & set(_alive)),
    }), flush=True)
finally:
    _alive = [_pid for _pid in _children if _pid not in _ended]
    for _pid in _alive:
        os.kill(_pid, signal.SIGKILL)
    for _pid in _alive:
        os.waitpid(_pid, 0)
"""


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
    if sandbox.memory_groups().why_not is None:  # without a cgroup it would take 12 GiB
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
    """The text of a graded notebook's outputs: of its other cells, or of its test cells."""
    nb = graded_notebook(root, student)
    return "\n".join(
        output_text(o)
        for c in nb.cells
        if c.cell_type == "code" and bool(is_test_cell(c)) == tests
        for o in c.outputs
    )


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
                    if leaked or judge.BEGIN in shown or MIME in shown:
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


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A built course (source, release, gradebook, reference records), copied by each run."""
    root = tmp_path_factory.mktemp("pristine")
    build(root=root, labs=[LAB], release=root / "labs")
    judge.prepare_references(root, [LAB], workers=2)
    return root


def course_copy(pristine: Path, root: Path) -> Path:
    shutil.copytree(pristine, root, symlinks=True, dirs_exist_ok=True)
    return root


def set_due_date(root: Path, due: datetime) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(LAB, duedate=due)


@pytest.fixture(scope="module")
def graded(pristine, tmp_path_factory):
    root = course_copy(pristine, tmp_path_factory.mktemp("adversarial"))
    write_class(root, [LAB], root / "labs")  # the demo class too: the "other students"
    paths = {
        "gradebook": root / "gradebook.db",
        "other": root / "submitted" / "complete" / LAB / f"{LAB}.ipynb",
    }
    scores = make_class(root, paths)
    set_due_date(root, DUE)
    before = snapshot(root)
    mp = pytest.MonkeyPatch()
    mp.setenv(SECRET_NAME, SECRET)  # in the grader's own environment while it grades
    try:
        report = grade_class(
            root, labs=[LAB], workers=2, cell_timeout=CELL_TIMEOUT, quiet=True, feedback=False
        )
    finally:
        mp.undo()
    return root, scores, report, before


# ---------------------------------------------------------------------------- every class


def test_every_adversary_gets_exactly_its_declared_score(graded):
    _root, scores, report, _before = graded
    assert set(HOSTILE) <= set(scores)
    got = {name: report.scores.get((name, LAB)) for name in scores}
    assert got == scores


def test_nothing_submitted_built_or_in_solutions_was_modified(graded):
    root, _scores, _report, before = graded
    assert snapshot(root) == before


def test_gradebook_is_intact_and_complete(graded):
    root, scores, report, _before = graded
    with sqlite3.connect(root / "gradebook.db") as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    demo = {s.name: s.score for s in declared_class(LAB)}
    assert {name: report.scores[(name, LAB)] for name in demo} == demo


def test_nothing_leaked_between_students_or_out_of_the_hidden_tests(graded):
    root, scores, _report, _before = graded
    owners = set(scores) | {s.name for s in declared_class(LAB)}
    assert scan_for_leaks(root, owners) == []


def test_adversaries_were_contained(graded):
    root, _scores, report, _before = graded
    assert "NETWORK: unreachable" in outputs(root, "network_call")
    assert "PLANTED" in outputs(root, "plants_for_next_kernel")  # written, and harmed nobody
    written = outputs(root, "overwrites_gradebook")
    assert "WROTE" not in written and written.count("REFUSED") == 4
    assert len(outputs(root, "prints_100mb")) < 100_000
    # nbgrader alone would have passed these cells; the judge, outside the kernel, did not
    for trick in ("replaced_run_cell", "patched_comparisons"):
        verdicts = report.verdicts[(trick, LAB)]
        failed = {g for g, v in verdicts.items() if v["kind"] != "passed"}
        assert failed >= set(TEST_CELLS[:3]), f"{trick}: {verdicts}"
    dead = [p for p in report.problems if "os_exit" in p.where]
    assert dead and "kernel died" in dead[0].reason


# ---------------------------------------------------------------------------- class 1


def test_the_verdict_cannot_be_read_or_forged_from_the_kernel(graded):
    """The hidden code ran (or was skipped by the student) and every check was judged
    outside the kernel: records with a tolerance of their own, rewritten, cleared and shown
    again, or missing, all fail; the visible checks the tricks passed count for nothing."""
    root, _scores, report, _before = graded
    for student in ("reads_the_verdict", "forged_records", "event_hooks"):
        verdicts = report.verdicts[(student, LAB)]
        assert set(verdicts) == set(TEST_CELLS), student
        kinds = {g: v["kind"] for g, v in verdicts.items()}
        assert "passed" not in kinds.values(), (student, verdicts)
        # every visible check passed: it is the hidden records that failed
        assert "visible" not in kinds.values(), (student, verdicts)
    kinds = {g: v["kind"] for g, v in report.verdicts[("event_hooks", LAB)].items()}
    sentences = {g: v["sentence"] for g, v in report.verdicts[("event_hooks", LAB)].items()}
    # the hidden code dropped by a transformer, or its observe calls removed: no records
    for grade_id in TEST_CELLS[:3]:
        assert "did not get as far" in sentences[grade_id], sentences[grade_id]
    # re-recorded with a tolerance of its own: the reference's tolerance decides
    for grade_id in TEST_CELLS[3:]:
        assert kinds[grade_id] == "hidden" and "did not get as far" not in sentences[grade_id]
    # the forged module and display were used: their records reached the judge, and failed
    graded_nb = graded_notebook(root, "forged_records")
    for grade_id in TEST_CELLS:
        assert cell(graded_nb, grade_id).outputs[0].ename == "CheckFailed"


# ---------------------------------------------------------------------------- class 2


def test_links_are_never_followed(graded):
    root, _scores, report, _before = graded
    problems = {p.where: p.reason for p in report.problems}
    solution_link = f"submitted/notebook_links_to_solution/{LAB}/{LAB}.ipynb"
    assert "symbolic link" in problems[solution_link]
    assert "recorded as 0" in problems[solution_link]
    assert "not a regular file" in problems[f"submitted/notebook_is_a_pipe/{LAB}/{LAB}.ipynb"]
    assert "a link" in problems[f"submitted/lab_folder_is_a_link/{LAB}"]
    assert "a link" in problems["submitted/student_folder_is_a_link"]
    assert ("student_folder_is_a_link", LAB) not in report.scores
    # links beside a notebook are named and ignored; the hand-in is graded from its bytes
    notes = {p.where: p.reason for p in report.notes}
    beside = notes[f"submitted/links_everywhere/{LAB}"]
    assert "all_submissions" in beside and "everything" in beside
    assert report.timings[("links_everywhere", LAB)]["intake"] < 5  # nothing was copied
    # the links the kernel made went nowhere: nothing read through them, nothing on the host
    made = reported(root, "links_everywhere", "LINKS")
    assert len(made["made"]) >= 10 and made["read"] == []
    for kind in ("autograded", "feedback"):
        links = [p for p in (root / kind).rglob("*") if p.is_symlink()]
        assert links == [], links
    assert sorted(p.name for p in (root / "autograded" / "links_everywhere" / LAB).iterdir()) == [
        f"{LAB}.ipynb"
    ]


# ---------------------------------------------------------------------------- class 4


def test_one_hand_in_cannot_stop_the_class(graded):
    root, scores, report, _before = graded
    assert all((name, LAB) in report.scores for name in scores)
    verdicts = report.verdicts[("class_stopper", LAB)]
    assert verdicts["test_backward_twice"]["kind"] == "records"
    assert {g for g, v in verdicts.items() if v["kind"] == "passed"} == set(TEST_CELLS) - {
        "test_backward_twice"
    }
    printed = outputs(root, "class_stopper")
    assert "No space left on device" in printed and "FILES " in printed  # filled to its cap
    notes = {p.where: p.reason for p in report.notes}
    crowded = notes[f"submitted/class_stopper/{LAB}"]
    assert "other file(s) ignored: dangling, junk-00000" in crowded
    assert report.timings[("class_stopper", LAB)]["intake"] < 5


# ---------------------------------------------------------------------------- class 6


def ways_to_the_allowed(folder: str) -> set[str]:
    """The entries of `folder` a kernel may see: the first step towards a path on its
    allow-list (the Python environment, graders/kernel), and nothing else."""
    allowed = [*sandbox.python_paths(), sandbox.KERNEL_SIDE]
    return {p.relative_to(folder).parts[0] for p in allowed if Path(folder) in p.parents}


def test_the_sandbox_shows_nothing_secret_and_holds_its_limits(graded):
    root, scores, report, _before = graded
    assert report.scores[("sandbox_probe", LAB)] == scores["sandbox_probe"] == 10
    probe = reported(root, "sandbox_probe", "SECRETS")
    assert probe["uid"] != 0 and probe["euid"] != 0 and probe["gid"] != 0
    assert probe["read"] == dict.fromkeys(probe["read"], False), probe["read"]
    listed = probe["listed"]
    for folder in ("/root", str(REPO), f"{REPO}/graders", str(VENV_HOME)):  # the ways in only
        assert set(listed[folder] or []) <= ways_to_the_allowed(folder), (folder, listed)
    assert set(listed["/etc"] or []) <= {"ld.so.cache", "localtime"}, listed
    assert listed["/home"] == ["student"]
    assert listed[str(SOLUTIONS)] is None and listed[str(root)] is None
    assert probe["secret_seen_in"] == []
    assert SECRET_NAME not in probe["environ"]
    assert SECRET not in outputs(root, "sandbox_probe")
    assert not probe["proc_1_environ"]
    forks = reported(root, "sandbox_probe", "FORKS")
    assert 0 < forks["started"] < sandbox.PROCESS_CAP and forks["error"] == "EAGAIN", forks
    shm = reported(root, "sandbox_probe", "FILLS")["shm"]
    assert shm["mib"] <= sandbox.SHM_BYTES >> 20 and shm["error"] in ("ENOSPC", "EFBIG"), shm


def test_memory_over_many_processes_is_capped_together(graded):
    root, _scores, _report, _before = graded
    if sandbox.memory_groups().why_not is not None:
        pytest.skip("no cgroup on this machine: the hog would take 12 GiB")
    hog = reported(root, "sandbox_probe", "HOG")
    assert hog["children"] == 8
    # never more than the cap at once: 8 x 1.5 GiB is twice GROUP_MEMORY_BYTES
    assert hog["holding_at_the_end"] * 1.5 * 2**30 < sandbox.GROUP_MEMORY_BYTES, hog
    # either the cap killed some, or (a slow machine) they had not all got their memory yet
    assert hog["killed_by_the_cap"] > 0 or hog["allocated"] < 4, hog


def test_the_kernel_cannot_fill_the_hosts_disk(graded):
    root, _scores, _report, _before = graded
    private = reported(root, "sandbox_probe", "FILLS")["private"]
    assert private["mib"] <= 16, private


def test_the_kernels_tmp_is_capped_like_its_working_folder(graded):
    root, _scores, _report, _before = graded
    tmp = reported(root, "sandbox_probe", "FILLS")["tmp"]
    assert tmp["mib"] <= sandbox.WORKDIR_BYTES >> 20, tmp


# ---------------------------------------------------------------------------- late work


def lateness(root: Path, student: str) -> tuple[datetime | None, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        sub = gb.find_submission(LAB, student)
        return sub.timestamp, sub.total_seconds_late


def test_late_submissions_are_late_as_plain_nbgrader_would_say(graded):
    root, _scores, report, _before = graded
    stamp, late = lateness(root, "forged_records")
    assert stamp == datetime(2024, 1, 2, 12) and late == 36 * 3600
    assert lateness(root, "complete") == (None, 0)  # no timestamp.txt: not late
    # a timestamp.txt nbgrader cannot read is ignored, with a note
    assert lateness(root, "links_everywhere") == (None, 0)
    notes = {p.where: p.reason for p in report.notes}
    assert "timestamp.txt (not a timestamp" in notes[f"submitted/links_everywhere/{LAB}"]


def test_a_crowded_folder_does_not_hide_a_late_timestamp(graded):
    root, _scores, _report, _before = graded
    folder = root / "submitted" / "class_stopper" / LAB
    if listed_rank(folder, "timestamp.txt") < intake.MAX_LISTED:
        pytest.skip("this filesystem lists timestamp.txt among the first entries")
    stamp, late = lateness(root, "class_stopper")
    assert stamp == datetime(2024, 1, 2, 12) and late == 36 * 3600


# ---------------------------------------------------------------------------- classes 3, 5

NAMES = ["a[1]*?", "with space", "-leading-dash", "élève", "n" * 190 + "-200-chars"]
CSV_HOSTILE = 'comma,"quote"\nnewline'


@pytest.fixture(scope="module")
def named(pristine, tmp_path_factory):
    """A class graded with feedback: hostile folder names (10 each, complete), a notebook
    that prints the hidden tests' code everywhere it can (10), and one that has the judge
    quote it (8)."""
    root = course_copy(pristine, tmp_path_factory.mktemp("named"))
    complete, _blank = complete_and_blank(root)
    for name in [*NAMES, CSV_HOSTILE]:
        write_notebook(root, name, copy.deepcopy(complete))
    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, LEAK_HOOKS)
    prepend(nb, "fresh_gradients", LEAK_HISTORY)
    write_notebook(root, "leaks_hidden_code", nb)
    nb = copy.deepcopy(complete)
    prepend(nb, FIRST, LEAK_THROUGH_THE_JUDGE)
    write_notebook(root, "leaks_through_the_judge", nb)
    report = grade_class(root, labs=[LAB], workers=2, cell_timeout=CELL_TIMEOUT, quiet=True)
    return root, report


def grades_csv(root: Path) -> list[dict]:
    with open(root / "grades.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_any_folder_name_is_graded_under_its_own_name(named):
    root, report = named
    rows = {(r["student_id"], r["assignment"]): r for r in grades_csv(root)}
    for name in NAMES:
        assert report.scores[(name, LAB)] == 10, name
        assert float(rows[(name, LAB)]["score"]) == 10, name
        assert (root / "feedback" / name / LAB / f"{LAB}.html").is_file(), name
        assert (root / "autograded" / name / LAB / f"{LAB}.ipynb").is_file(), name
    assert report.scores[(CSV_HOSTILE, LAB)] == 10
    assert not report.problems, report.problems


def test_grades_csv_keeps_one_row_per_student_whatever_the_name(named):
    root, _report = named
    rows = grades_csv(root)
    assert len(rows) == len(NAMES) + 3
    row = next(r for r in rows if r["student_id"] == CSV_HOSTILE)
    assert float(row["score"]) == 10 and row["assignment"] == LAB


def test_feedback_shows_no_hidden_code_whatever_the_kernel_printed(named):
    root, report = named
    assert report.scores[("leaks_hidden_code", LAB)] == 10
    # the kernel had the hidden code in hand, and printed it (the instructors' graded copy
    # keeps what answer cells printed; test cells hold only the judge's sentence)
    printed = outputs(root, "leaks_hidden_code")
    assert any(line in printed for line in hidden_lines(LAB))
    assert "BEFORE Wh = torch.ones(3, 3" in printed  # a plain cell's source, from the hook
    assert "BEFORE" not in outputs(root, "leaks_hidden_code", tests=True)
    page = root / "feedback" / "leaks_hidden_code" / LAB / f"{LAB}.html"
    shown = html.unescape(page.read_text())
    assert "Passed." in shown
    for printed_line in ("BEFORE Wh = torch.ones(3, 3", "AFTER _Wh = torch.randn", "HISTORY \n"):
        assert printed_line not in shown
    owners = {*NAMES, CSV_HOSTILE, "leaks_hidden_code", "leaks_through_the_judge"}
    assert scan_for_leaks(root, owners, unless="leaks_through_the_judge") == []


def test_the_judges_sentence_carries_no_hidden_code(named):
    root, report = named
    assert report.scores[("leaks_through_the_judge", LAB)] == 8  # its forged check fails
    page = root / "feedback" / "leaks_through_the_judge" / LAB / f"{LAB}.html"
    shown = html.unescape(page.read_text())
    leaked = [line for line in hidden_lines(LAB) if line in shown]
    assert leaked == []


def test_a_folder_name_that_is_not_utf8_does_not_stop_the_class(pristine, tmp_path):
    root = course_copy(pristine, tmp_path / "course")
    (root / "submitted" / "no_notebook" / LAB).mkdir(parents=True)
    odd = os.path.join(os.fsencode(root / "submitted"), b"\xff\xfe-student", LAB.encode())
    os.makedirs(odd)
    with open(os.path.join(odd, f"{LAB}.ipynb".encode()), "w") as fh:
        fh.write("not a notebook")
    report = grade_class(root, labs=[LAB], workers=1, quiet=True, feedback=False)
    assert report.scores[("no_notebook", LAB)] == 0
    assert any("student" in p.where and p.where.startswith("submitted/") for p in report.problems)


# ---------------------------------------------------------------------------- budgets


def test_the_notebook_budget_keeps_the_checks_that_finished(pristine, tmp_path):
    """A notebook that runs out of its whole-notebook budget keeps the points of the checks
    done in time; the cell running then and the cells after it say why they failed."""
    root = course_copy(pristine, tmp_path / "course")
    complete, _blank = complete_and_blank(root)
    # ignores the interrupt, so only the budget stops it
    prepend(
        complete,
        SECOND,
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
    )
    write_notebook(root, "over_budget", complete)
    report = grade_class(root, labs=[LAB], workers=1, quiet=True, budget_s=BUDGET_S, feedback=False)
    assert report.scores[("over_budget", LAB)] == 2  # test_recurrent_step ran in time
    graded = graded_notebook(root, "over_budget")
    errors = [
        o.evalue for c in graded.cells if c.cell_type == "code" and not is_test_cell(c)
        for o in c.outputs if o.output_type == "error" and o.ename == "NotebookBudgetExceeded"
    ]  # fmt: skip
    assert (
        errors[0]
        == f"the whole-notebook budget of {BUDGET_S} s ran out while this cell was running"
    )
    assert len(errors) > 3 and all(e.startswith("not run:") for e in errors[1:])
    assert cell(graded, SECOND).outputs[-1].ename == "NotebookBudgetExceeded"
    # the test cells after it carry the judge's sentence in place of the kernel's error
    for grade_id in TEST_CELLS[1:]:
        (output,) = cell(graded, grade_id).outputs
        assert output.ename == "CheckFailed", grade_id
        assert output.evalue.startswith("Not graded to the end:"), output.evalue
    problem = [p for p in report.problems if "over_budget" in p.where]
    assert problem and "budget" in problem[0].reason and SECOND in problem[0].reason


def test_a_kernel_that_hangs_is_killed_after_the_budget(tmp_path, monkeypatch):
    """The last resort behind the budget: the sandbox kills a kernel that outlives it."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_core.utils import run_sync

    monkeypatch.setattr(sandbox, "KILL_GRACE_S", 0)
    sandbox.write_kernelspec(tmp_path / "jupyter")
    (tmp_path / "runtime").mkdir()
    events = tmp_path / "runtime" / "events.jsonl"
    settings = {"runtime": str(tmp_path / "runtime"), "budget_s": 2, "events": str(events)}
    km = sandbox.SandboxKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "jupyter" / "kernels")]),
        sandbox=settings,
    )
    run_sync(km.start_kernel)(cwd=str(tmp_path))
    try:
        assert run_sync(km.is_alive)()
        time.sleep(4)
        assert not run_sync(km.is_alive)()
        event = json.loads(events.read_text())
        assert event["kernel"] == str(km._private)
        assert event["budget_s"] == 2
    finally:
        run_sync(km.shutdown_kernel)(now=True)
