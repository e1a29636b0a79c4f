"""Attacks on the verdict (tests/adversarial/test_forged_verdicts.py): code a hostile hand-in
puts in its cells to pass checks it fails: a hijacked run_cell, patched comparisons, objects
equal to anything, a frame reader, forged observe() and display(), event hooks, and records
that are garbage."""

from __future__ import annotations

FIRST, SECOND = "recurrent_step", "backward_twice"  # lab 2's first two exercises

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
