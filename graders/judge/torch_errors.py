"""PyTorch's own error messages (and a few of Python's), as templates with typed slots: the
judge shows an error's message only when it is one of these, with each slot's text shown only
when it is a value of the slot's type (a small integer, a shape, a dtype, an autograd node's
name from torch's own list); anything else in a slot is shown as '…'. No free text from the
kernel gets through.

The templates live in graders/judge/torch_errors.json, a file this module owns (`load`,
`build`), and hold for every torch of the course's range (pyproject.toml): the messages differ
between versions (torch 2.10 names an autograd node `SigmoidBackward0` where 2.14 says
`Sigmoid`; torch 2.15 starts the matmul messages with `mm: `), so the file keeps each torch's
templates, each template with the torches it was made on. `python -m graders.judge.torch_errors
build` runs each of `SNIPPETS` on the installed torch (and this Python), generalises the message
it raises (numbers, shapes, dtypes, class names and the snippet's own substitutions become
slots) and replaces that torch's templates in the file, keeping the other torches'; torch's
lists of dtypes, tensor types and autograd node names, and the exception names, are the union
over the torches. Run it with each torch of the range (tests/student/torch_check.py's
environments: `.scratch/torch-<version>/bin/python -m graders.judge.torch_errors build` with
PYTHONPATH=.), review the diff, commit. `python -m graders.judge.torch_errors check` runs the
snippets again and says which message matches none of its templates:
tests/claims/test_torch_errors_hold.py does it on the machine's torch and on each torch `make
torch-check` tries. A message the file does not hold is never shown: the
judge says the error's type in its own words (graders/judge/judge.py's `torch_message` gives
'').

A template is the error's type and its message with slots `{int}` (an integer of at most 5
digits), `{dims}` (0 to 4 such integers, ", " between), `{size}` (`torch.Size([{dims}])`),
`{dtype}`, `{scalar}`, `{tensor_type}`, `{node}`, `{pytype}` (`<class 'float'>`), `{pyname}`
(`'NoneType'`'s name) (from the lists in the file) and
`{elided}` (any text, never shown: a name the student chose).
"""

from __future__ import annotations

import builtins
import json
import re
import sys
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from graders.judge.template_match import parts_of, split

DATA = Path(__file__).with_name("torch_errors.json")
MAX_MESSAGE = 600  # a longer message is never matched
CUT = 200  # solutions/common/setup_cell.py's `attempt` keeps the first 200 characters
NUMBER = r"-?[0-9]{1,5}"
DIMS = re.compile(r"(?:[0-9]{1,5}(?:, [0-9]{1,5}){0,3})?")
SIZE = re.compile(r"torch\.Size\(\[(" + DIMS.pattern + r")\]\)")
NUMBER_SLOTS = {"int": 1, "dims": 4, "size": 4}  # the most numbers a slot can show
LISTED = (
    "dtype",
    "scalar",
    "tensor_type",
    "node",
    "pytype",
    "pyname",
)  # slots whose values are listed
PYTYPES = ["int", "float", "bool", "str", "list", "tuple", "dict", "NoneType", "torch.Tensor",
           "numpy.ndarray", "torch.nn.parameter.Parameter", "function", "generator"]  # fmt: skip
PYNAMES = sorted({name.split(".")[-1] for name in PYTYPES} | {"method", "type", "module",
                 "builtin_function_or_method", "Linear", "Sequential"})  # fmt: skip


@dataclass
class Budget:
    """How many numbers may still be shown (graders/judge/shown_values.py gives each check one)."""

    numbers: int

    def take(self, count: int) -> bool:
        if count > self.numbers:
            return False
        self.numbers -= count
        return True


@cache
def load(path: Path = DATA) -> dict:
    """The file's contents: {"torch": [versions], "lists": {slot: [values]}, "exceptions",
    "templates": [{"type", "template", "snippets", "torch": [versions]}]}; an empty set of
    templates when it is missing."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"torch": [], "lists": {}, "sets": {}, "exceptions": [], "templates": []}
    data["sets"] = {slot: frozenset(values) for slot, values in data["lists"].items()}
    for entry in data["templates"]:
        entry["parts"], entry["slots"] = parts_of(entry["template"])
    return data


def exception_names() -> frozenset[str]:
    return frozenset(load()["exceptions"])


def slot_text(slot: str, text: str, budget: Budget | None) -> str:
    """What the judge shows for one slot's text: the value if it is of the slot's type (and
    the budget allows its numbers), else '…'."""
    data = load()
    if slot in LISTED:
        return text if text in data["sets"].get(slot, ()) else "…"
    if slot == "int":
        ok, count = re.fullmatch(NUMBER, text) is not None, 1
        shown = str(int(text)) if ok else ""
    elif slot in ("dims", "size"):
        match = DIMS.fullmatch(text) if slot == "dims" else SIZE.fullmatch(text)
        dims = match.group(0 if slot == "dims" else 1) if match else ""
        ok, count = match is not None, len(dims.split(", ")) if dims else 0
        shown = ", ".join(str(int(n)) for n in dims.split(", ")) if dims else ""
        shown = shown if slot == "dims" else f"torch.Size([{shown}])"
    else:  # elided, or a slot this version does not know
        return "…"
    return shown if ok and (budget is None or budget.take(count)) else "…"


def message(ename: str, text: str, budget: Budget | None = None, elide: bool = False) -> str | None:
    """`text` (an error's first line, maybe cut at CUT characters) in the judge's words when it
    is one of PyTorch's known messages for `ename`, else None. With `elide`, every slot is
    '…' (where the error came from hidden inputs)."""
    if "\n" in text or len(text) > MAX_MESSAGE or ename not in exception_names():
        return None
    for entry in load()["templates"]:
        if entry["type"] != ename:
            continue
        found = split(entry["parts"], text, cut=len(text) >= CUT)
        if found is None:
            continue
        parts = entry["parts"][: found.stop] if found.cut else entry["parts"]
        words, slots, values = [], iter(entry["slots"]), iter(found.values)
        for part in parts:
            if part is not None:
                words.append(part)
            else:
                value = next(values)
                words.append("…" if elide else slot_text(next(slots), value, budget))
        return "".join(words) + (found.partial + "…" if found.cut else "")
    return None


# ---------------------------------------------------------------------------- the build

_F = """
class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): return x * 2
    @staticmethod
    def backward(ctx, g): return {}
"""
_G = """
class F(torch.autograd.Function):
    @staticmethod
    def forward(x): return x * 2
    @staticmethod
    def setup_context(ctx, inputs, output): pass
    @staticmethod
    def backward(ctx, g): return g * 2
x = torch.ones(3)
"""
# name: (code that raises, {literal in the generalised message: its replacement})
SNIPPETS: dict[str, tuple[str, dict[str, str]]] = {
    "backward without a graph": ("torch.ones(3).sum().backward()", {}),
    "backward of a non-scalar": ("x = torch.ones(3, requires_grad=True); (x * 2).backward()", {}),
    "backward twice": (
        "x = torch.ones(3, requires_grad=True); y = (x * x).sum(); y.backward(); y.backward()",
        {},
    ),
    "in-place change of a saved tensor": (
        "x = torch.ones(3, requires_grad=True); y = x.sigmoid(); y.mul_(2); y.sum().backward()",
        {"output {int} of Sigmoid,": "output {int} of {node},",
         "output {int} of SigmoidBackward0,": "output {int} of {node},"},
    ),
    "in-place change of a leaf": ("x = torch.ones(3, requires_grad=True); x.add_(1)", {}),
    "in-place change of a leaf's view": ("x = torch.ones(3, requires_grad=True); x[0] = 1", {}),
    ".numpy() of a tensor that requires grad": ("torch.ones(3, requires_grad=True).numpy()", {}),
    ".item() of several elements": ("torch.ones(3).item()", {}),
    "matmul shapes": ("torch.ones(3, 4) @ torch.ones(5, 6)", {}),
    "matmul of vectors of different sizes": ("torch.ones(3) @ torch.ones(4)", {}),
    "matrix times vector as mm": ("torch.ones(3, 4).mm(torch.ones(4))", {}),
    "bmm shapes": ("torch.bmm(torch.ones(2, 3, 4), torch.ones(3, 4, 5))", {}),
    "broadcast": ("torch.ones(3) + torch.ones(4)", {}),
    "view of the wrong size": ("torch.ones(3, 4).view(5)", {}),
    "view of a non-contiguous tensor": ("torch.ones(3, 4).t().view(12)", {}),
    "expand": ("torch.ones(3).expand(4)", {}),
    "cat shapes": ("torch.cat([torch.ones(2, 3), torch.ones(2, 4)])", {}),
    "stack shapes": ("torch.stack([torch.ones(3), torch.ones(4)])", {}),
    "index out of range": ("torch.ones(3)[5]", {}),
    "dim out of range": ("torch.ones(3).sum(dim=2)", {}),
    "matmul dtypes": (
        "torch.ones(3, 4) @ torch.ones(4, 5, dtype=torch.float64)",
        {"{int} != {int}": "{scalar} != {scalar}", "float != double": "{scalar} != {scalar}"},
    ),
    "linear dtypes": (
        "torch.nn.Linear(4, 5)(torch.ones(3, 4, dtype=torch.float64))",
        {"got Double and Float": "got {scalar} and {scalar}"},
    ),
    "integer tensor that requires grad": (
        "torch.ones(3, dtype=torch.long, requires_grad=True)",
        {},
    ),
    "cross-entropy target dtype": (
        "torch.nn.functional.cross_entropy(torch.ones(3, 4), torch.ones(3))",
        {"but got Float": "but got {scalar}", "but found Float": "but found {scalar}"},
    ),
    "autograd.grad of an unused input": (
        "x = torch.ones(3, requires_grad=True); z = torch.ones(3, requires_grad=True)\n"
        "torch.autograd.grad((x * 2).sum(), [x, z])",
        {},
    ),
    "autograd.grad with grad_outputs of another shape": (
        "x = torch.ones(3, requires_grad=True); torch.autograd.grad(x * 2, x, torch.ones(4))",
        {},
    ),
    "assigning .grad of another size": ("x = torch.ones(3); x.grad = torch.ones(4)", {}),
    "requires_grad of a non-leaf": (
        "x = torch.ones(3, requires_grad=True); (x * 2).requires_grad_(False)",
        {},
    ),
    "optimizer on a non-leaf": (
        "x = torch.ones(3, requires_grad=True); torch.optim.SGD([x * 2], lr=0.1)",
        {},
    ),
    "torch.func.grad of a non-scalar": ("torch.func.grad(lambda x: x * 2)(torch.ones(3))", {}),
    "torch.func.grad of a non-tensor": ("torch.func.grad(lambda x: 1.0)(torch.ones(3))", {}),
    "vjp/jacrev of a non-tensor": ("torch.func.jacrev(lambda x: 1.0)(torch.ones(3))", {}),
    "vmap in_dims": (
        "torch.func.vmap(lambda x: x, in_dims=1)(torch.ones(3))",
        {"vmap(<lambda>, in_dims={int}, ...)": "vmap({elided}, in_dims={elided}, ...)"},
    ),
    "vmap sizes": ("torch.func.vmap(lambda x, y: x + y)(torch.ones(3), torch.ones(4))", {}),
    "vmap over .item()": ("torch.func.vmap(lambda x: x.item())(torch.ones(3))", {}),
    "jvp tangent size": (
        "torch.func.jvp(lambda x: x, (torch.ones(3),), (torch.ones(4),))",
        {},
    ),
    "jvp primals not a tuple": ("torch.func.jvp(lambda x: x, torch.ones(3), torch.ones(3))", {}),
    "autograd.Function under torch.func": (
        _F.format("g * 2") + "torch.func.jvp(F.apply, (torch.ones(3),), (torch.ones(3),))",
        {},
    ),
    "autograd.Function.jvp not implemented": (_G + "torch.func.jvp(F.apply, (x,), (x,))", {}),
    "autograd.Function without vmap support": (
        _G + "torch.func.vmap(F.apply)(x)",
        {"vmap over F,": "vmap over {elided},"},
    ),
    "autograd.Function.backward not implemented": (
        _G.replace("def backward(ctx, g): return g * 2", "def jvp(ctx, t): return t")
        + "F.apply(x.requires_grad_()).sum().backward()",
        {},
    ),
    # Python's own, as the labs' wrong answers raise them
    "unpacking too few values": (
        "x, = ()",
        {},
    ),
    "unpacking too many values": ("a, b = (1, 2, 3)", {}),
    "attribute of None": ("None.grad_fn", {"'NoneType' object has no attribute 'grad_fn'":
                          "'{pyname}' object has no attribute '{elided}'"}),
    "None indexed": ("None[0]", {"'NoneType'": "'{pyname}'"}),
    "None unpacked": ("a, b = None", {"non-iterable NoneType": "non-iterable {pyname}"}),
    "None called": ("None()", {"'NoneType'": "'{pyname}'"}),
    "a missing argument": (
        "def f(a, b): pass\nf(1)",
        {"f() missing": "{elided}() missing", "argument: 'b'": "argument: '{elided}'"},
    ),
    "too many arguments": ("def f(a): pass\nf(1, 2)", {"f() takes": "{elided}() takes"}),
    "an operator on None": (
        "None * torch.ones(2)",
        {"for *: 'NoneType' and 'Tensor'": "for {elided}: '{pyname}' and '{pyname}'"},
    ),
    "backward returning too many gradients": (
        _F.format("g * 2, g") + "F.apply(torch.ones(3, requires_grad=True)).sum().backward()",
        {"function FBackward": "function {elided}Backward"},
    ),
    "backward returning a gradient of another shape": (
        _F.format("g[:1]") + "F.apply(torch.ones(3, requires_grad=True)).sum().backward()",
        {"Function FBackward": "Function {elided}Backward"},
    ),
}  # fmt: skip

GENERAL = re.compile(
    r"(?P<size>torch\.Size\(\[[\d, ]*\]\))|(?P<pytype><class '[\w.]+'>)"
    r"|(?P<tensor_type>torch\.(?:cuda\.|quantized\.)?\w+Tensor)(?![\w.])"
    r"|(?P<dtype>torch\.[a-z]\w*)(?![\w.(])|\[(?P<dims>\d+(?:, \d+)*)\]"
    r"|(?<![\w.])(?P<times>\d+x\d+)(?![\w.])|(?<![\w.])(?P<int>-?\d+)(?![\w])"
)


def generalise(text: str, lists: dict[str, list[str]], fixes: dict[str, str]) -> str:
    """A message with its typed parts as slots, then the snippet's own substitutions."""

    def slot(match: re.Match) -> str:
        kind = match.lastgroup
        if kind == "dims":
            return "[{dims}]"
        if kind == "times":
            return "{int}x{int}"
        if kind == "pytype":
            return "{pytype}" if match.group(0)[8:-2] in lists["pytype"] else match.group(0)
        if kind in ("dtype", "tensor_type") and match.group(0) not in lists[kind]:
            return match.group(0)
        return "{" + kind + "}"

    template = GENERAL.sub(slot, text)
    for old, new in fixes.items():
        template = template.replace(old, new)
    return template


def provoke(code: str) -> tuple[str, str] | None:
    """(type name, first line of the message) of the error `code` raises on this torch."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(code, {"torch": torch})
    except Exception as error:  # noqa: BLE001 - the point is to catch it
        lines = str(error).strip().splitlines()
        return type(error).__name__, lines[0] if lines else ""
    return None


def torch_lists() -> dict[str, list[str]]:
    """Torch's own names: dtypes, tensor types, scalar types, autograd nodes."""
    import torch

    dtypes = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    tensor_types = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dtype in dtypes:
            try:
                tensor_types.add(torch.empty(0, dtype=dtype).type())
            except Exception:  # noqa: BLE001 - a dtype with no tensor type
                pass
    tensor_types |= {name.replace("torch.", "torch.cuda.") for name in tensor_types}
    scalars = {name.split(".")[-1].removesuffix("Tensor") for name in tensor_types}
    scalars |= {name.lower() for name in scalars} | {"long int", "c10::Half", "c10::BFloat16"}
    nodes = {name for name in dir(torch._C._functions) if "Backward" in name}
    nodes |= {re.sub(r"Backward\d*$", "", name) for name in nodes}
    return {
        "dtype": sorted(str(d) for d in dtypes),
        "scalar": sorted(scalars),
        "tensor_type": sorted(tensor_types),
        "node": sorted(nodes - {""}),
        "pytype": [f"<class '{name}'>" for name in PYTYPES],
        "pyname": PYNAMES,
    }


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) if n.isdigit() else 0 for n in version.split("."))


def this_torch() -> str:
    import torch

    return torch.__version__.split("+")[0]


def made_on(data: dict) -> list[str]:
    """The torches a file was made on (a file of one torch named it as a string)."""
    versions = data.get("torch") or []
    return [versions] if isinstance(versions, str) else list(versions)


def build(path: Path = DATA) -> list[str]:
    """Write this torch's templates into `path`, keeping those of the other torches it holds;
    the snippets that raised nothing."""
    import torch

    version = this_torch()
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {"torch": [], "exceptions": [], "templates": [], "lists": {}}
    lists = torch_lists()
    raw = {**lists, "pytype": PYTYPES}
    made: dict[tuple[str, str], list[str]] = {}
    problems = []
    for name, (code, fixes) in SNIPPETS.items():
        got = provoke(code)
        if got is None:
            problems.append(f"{name}: raised nothing")
            continue
        template = generalise(got[1], raw, fixes)
        made.setdefault((got[0], template), []).append(name)
    # (type, template, snippets) -> the torches it was made on; this torch's made anew
    entries: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for entry in old.get("templates", []):
        versions = set(entry.get("torch", [])) - {version}
        if versions:
            key = (entry["type"], entry["template"], tuple(entry["snippets"]))
            entries.setdefault(key, set()).update(versions)
    for (ename, template), names in made.items():
        entries.setdefault((ename, template, tuple(names)), set()).add(version)
    order = {name: i for i, name in enumerate(SNIPPETS)}
    exceptions = {n for n, v in vars(builtins).items() if isinstance(v, type)
                  and issubclass(v, BaseException)}  # fmt: skip
    exceptions |= {n for n, v in vars(torch).items() if isinstance(v, type)
                   and issubclass(v, BaseException)}  # fmt: skip
    data = {
        "torch": sorted(set(made_on(old)) | {version}, key=version_key),
        "exceptions": sorted(exceptions | set(old.get("exceptions", []))),
        "templates": [
            {
                "type": t,
                "template": text,
                "snippets": list(names),
                "torch": sorted(versions, key=version_key),
            }
            for (t, text, names), versions in sorted(
                entries.items(),
                key=lambda item: (
                    order.get(item[0][2][0], len(order)),
                    min(map(version_key, item[1])),
                    item[0][1],
                ),
            )
        ],
        "lists": {
            slot: sorted(set(values) | set(old.get("lists", {}).get(slot, [])))
            if slot not in ("pytype", "pyname")
            else values
            for slot, values in lists.items()
        },
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    load.cache_clear()
    return problems


def check(path: Path = DATA) -> list[str]:
    """The snippets whose message on this torch is none of the file's templates for it (any
    torch's), in words."""
    data = load(path)
    where: dict[str, list[dict]] = {}
    for entry in data["templates"]:
        for name in entry["snippets"]:
            where.setdefault(name, []).append(entry)
    problems = []
    for name, (code, _fixes) in SNIPPETS.items():
        got = provoke(code)
        if name not in where or got is None:
            problems.append(
                f"{name}: {'not in the file' if name not in where else 'raised nothing'}"
            )
            continue
        ename, text = got
        matching = [
            (e, found)
            for e in where[name]
            if e["type"] == ename and (found := split(e["parts"], text)) is not None
        ]
        if not matching:
            known = [e["template"] for e in where[name]]
            problems.append(f"{name}: {ename}: {text!r} matches none of {known!r}")
            continue
        entry, found = matching[0]
        for slot, value in zip(entry["slots"], found.values, strict=True):
            if slot != "elided" and slot_text(slot, value, None) == "…":
                problems.append(f"{name}: {value!r} is not a value of {{{slot}}}")
    return problems


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["build"], ["check"]):
        print("usage: python -m graders.judge.torch_errors build|check", file=sys.stderr)
        return 2
    problems = build() if argv == ["build"] else check()
    for line in problems:
        print(line, file=sys.stderr)
    if argv == ["build"]:
        print(f"{len(load()['templates'])} templates written to {DATA}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
