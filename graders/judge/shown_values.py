"""The values of a failed visible check's message that the judge shows.

A check's message is quoted from the release (graders/judge/judge.py), each `{...}` placeholder
as '…'. The kernel's own text of the message (the error's `evalue`, untrusted) is cut along
the released message (graders/judge/template_match.py) to recover each placeholder's text, and a
text is shown only if it is a typed value under this module's schema, re-formatted here:

* `int`: at most 5 digits and a sign; `float`: shown with 4 significant digits; `bool`;
  `none`;
* `shape`: `(3, 4)` or `torch.Size([3, 4])`, at most 4 dims of at most 5 digits each;
* `dtype`: one of torch's (`torch.float32`), from graders/torch_errors.json;
* `error`: `ErrorType: message` as `attempt` (solutions/common/setup_cell.py) writes it, the
  type a known exception's name and the message one of PyTorch's known messages
  (graders/judge/torch_errors.py), else the type alone (`RuntimeError: …`);
* `listed`: one of the strings of a literal list the release loops over, where the
  placeholder is that loop's variable (graders/judge/check_source.py).

At most `MAX_VALUES` values and `MAX_NUMBERS` numbers (an int, a float, a shape's dims, the
numbers in an error's message) are shown per check; the rest stay '…'. `capacity_bits` is
how much a check's shown values can carry at most (README.md, "Threat model").
"""

from __future__ import annotations

import math
import re

from graders.judge import torch_errors
from graders.judge.check_source import MAX_LISTED
from graders.judge.template_match import split
from graders.judge.torch_errors import Budget

MAX_VALUES = 3
MAX_NUMBERS = 4
INT = re.compile(r"-?[0-9]{1,5}")
EXP = r"[eE][+-]?[0-9]{1,3}"
FLOAT = re.compile(rf"-?(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:{EXP})?|[0-9]+{EXP}|inf)|nan")
DIM = r"[0-9]{1,5}"
TUPLE = re.compile(rf"\(\)|\(({DIM}),\)|\(({DIM}(?:, {DIM}){{1,3}})\)")
SIZE = re.compile(rf"torch\.Size\(\[((?:{DIM}(?:, {DIM}){{0,3}})?)\]\)")
ERROR = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,40})(?:: (.*))?", re.S)  # ASCII names only


def typed(text: str, budget: Budget) -> dict | None:
    """The typed record of one placeholder's text, or None when it is not a typed value (or
    its numbers do not fit in the budget)."""
    if len(text) > torch_errors.MAX_MESSAGE:
        return None
    if text in ("True", "False"):
        return {"kind": "bool", "value": text == "True"}
    if text == "None":
        return {"kind": "none"}
    if text in torch_errors.load()["sets"].get("dtype", ()):
        return {"kind": "dtype", "value": text}
    if INT.fullmatch(text):
        return {"kind": "int", "value": int(text)} if budget.take(1) else None
    if FLOAT.fullmatch(text) and len(text) <= 24:
        return {"kind": "float", "value": float(text)} if budget.take(1) else None
    shape = TUPLE.fullmatch(text) or SIZE.fullmatch(text)
    if shape:
        inner = next((g for g in shape.groups() if g), "")
        dims = [int(n) for n in inner.split(", ")] if inner else []
        form = "size" if text.startswith("torch") else "tuple"
        return {"kind": "shape", "dims": dims, "form": form} if budget.take(len(dims)) else None
    error = ERROR.fullmatch(text)
    if error and error.group(1) in torch_errors.exception_names():
        ename, message = error.group(1), error.group(2)
        said = torch_errors.message(ename, message, budget) if message else None
        return {"kind": "error", "type": ename, "message": said, "bare": message is None}
    return None


def render(record: dict | None) -> str:
    """The judge's text for a typed record; '…' for None."""
    if record is None:
        return "…"
    kind = record["kind"]
    if kind in ("bool", "int", "dtype", "listed"):
        return str(record["value"])
    if kind == "none":
        return "None"
    if kind == "float":
        return f"{record['value']:.4g}"
    if kind == "shape":
        dims = record["dims"]
        if record["form"] == "size":
            return f"torch.Size([{', '.join(map(str, dims))}])"
        return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(map(str, dims))})"
    if kind == "error":
        return record["type"] if record["bare"] else f"{record['type']}: {record['message'] or '…'}"
    return "…"


def fill(parts: list[str | None], text: str, listed: list | None = None) -> str:
    """The released message (`parts`: literals, and None for each placeholder) with the typed
    values recovered from the kernel's `text` of it; '…' for every other placeholder.
    `listed[i]`, where given, is the set of strings the release lets placeholder i show
    (graders/judge/check_source.py: a loop's variable over a literal list)."""
    found = split(parts, str(text))
    values = iter(found.values if found else [])
    listed = iter(listed or [])
    budget, shown, words = Budget(MAX_NUMBERS), 0, []
    for part in parts:
        if part is not None:
            words.append(part)
            continue
        value, allowed = next(values, ""), next(listed, None)
        record = None
        if found and shown < MAX_VALUES:
            known = allowed is not None and value in allowed
            record = {"kind": "listed", "value": value} if known else typed(value, budget)
        shown += record is not None
        words.append(render(record))
    return "".join(words)


# ---------------------------------------------------------------------------- capacity


def _numbers() -> int:
    """How many texts one shown number can be: an int of at most 5 digits, or a float with 4
    significant digits (sign, mantissa, exponent of a double), inf, -inf, nan."""
    return 2 * 99_999 + 1 + 2 * 9_000 * (308 + 324 + 1) + 4


def _error_skeletons() -> int:
    """How many error texts there are once their numbers are set aside: the type alone, with
    ': …', or with one of PyTorch's messages (cut anywhere), each listed slot any of its list
    or '…', each number slot its number or '…', a dims slot also its count of dims."""
    data = torch_errors.load()
    lists = data["sets"]
    count = 2 * len(data["exceptions"])
    for entry in data["templates"]:
        ways = len(entry["template"]) + 1  # where a cut message stops
        for slot in entry["slots"]:
            ways *= len(lists.get(slot, ())) + 1 if slot in torch_errors.LISTED else 1
            ways *= {"int": 2, "dims": 6, "size": 6}.get(slot, 1)
        count += ways
    return count


def capacity_bits() -> float:
    """At most how many bits the shown values of one check's message carry: log2 of the count
    of the different texts its placeholders can show, MAX_VALUES values (each '…', a bool,
    None, a dtype, an int, a float, a shape of 0-4 dims in 2 forms, a listed string, or an
    error) and at most
    MAX_NUMBERS numbers among them."""
    skeletons = 1 + 2 + 1 + len(torch_errors.load()["sets"].get("dtype", ())) + 2 + 2 * 5
    skeletons += MAX_LISTED  # one of the strings of a literal list in the release
    skeletons += _error_skeletons()
    return MAX_VALUES * math.log2(skeletons) + MAX_NUMBERS * math.log2(_numbers() + 1)
