"""How a hand-in's records differ from the solution's: `first_difference` says which check and
what kind of answer was wrong, in words that name parts and kinds, never a reference value.
The records have been parsed already (graders/formats/records.py); the reference's tolerances and
hints are used, never the student's."""

from __future__ import annotations

import math

from graders.formats.records import Record

DTYPES = {f"torch.{name}" for name in (
    "float16", "float32", "float64", "bfloat16", "complex64", "complex128", "int8", "int16",
    "int32", "int64", "uint8", "bool")}  # fmt: skip


def _is_tensor(value) -> bool:
    return isinstance(value, dict) and set(value) == {"tensor", "shape", "dtype"}


def _kind(value) -> str:
    if value is None:
        return "None"
    if _is_tensor(value):
        return "a tensor"
    kinds = {bool: "True/False", int: "a number", float: "a number", str: "text", list: "a list"}
    return kinds.get(type(value), "named values" if isinstance(value, dict) else "something else")


def _close_numbers(ref, got, rtol: float, atol: float) -> bool:
    if isinstance(ref, list):
        return (
            isinstance(got, list)
            and len(ref) == len(got)
            and all(_close_numbers(r, g, rtol, atol) for r, g in zip(ref, got, strict=True))
        )
    if isinstance(ref, bool) or isinstance(got, bool):
        return type(ref) is type(got) and ref == got
    if isinstance(ref, int | float) and isinstance(got, int | float):
        return math.isclose(ref, got, rel_tol=rtol, abs_tol=atol)
    return type(ref) is type(got) and ref == got


FACTORS = {-1.0: "the solution's with the opposite sign", 2.0: "twice the solution's",
           0.5: "half the solution's", -2.0: "minus twice the solution's",
           -0.5: "minus half the solution's"}  # fmt: skip


def _numbers(value) -> list[float] | None:
    """A nested list of numbers, flat; None when it holds anything else."""
    if isinstance(value, list):
        flat = []
        for item in value:
            inner = _numbers(item)
            if inner is None:
                return None
            flat += inner
        return flat
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return [float(value)] if ok and math.isfinite(value) else None


def constant_factor(ref, got, rtol: float, atol: float) -> float | None:
    """c when `got` is `ref` times one constant c other than 1 and 0 (within the reference's
    tolerances), for at least two of ref's numbers not zero; else None."""
    r, g = _numbers(ref), _numbers(got)
    if r is None or g is None or len(r) != len(g) or sum(x != 0 for x in r) < 2:
        return None
    c = sum(x * y for x, y in zip(r, g, strict=True)) / sum(x * x for x in r)
    if not math.isfinite(c) or math.isclose(c, 1.0, rel_tol=1e-6) or abs(c) < 1e-9:
        return None
    return c if _close_numbers([c * x for x in r], g, rtol, atol) else None


def factor_words(c: float) -> str:
    """' (twice the solution's)' where the factor is one of FACTORS, else ''."""
    named = next((w for k, w in FACTORS.items() if math.isclose(c, k, rel_tol=1e-6)), None)
    return f" ({named})" if named else ""


def difference(ref, got, rtol: float, atol: float, where: str = "") -> str | None:
    """How `got` differs from `ref`, in words that name the part and never a value of ref."""
    part = where or "the result"
    if _is_tensor(ref):
        if not _is_tensor(got):
            return f"{part} is {_kind(got)} where the solution gives a tensor"
        if ref["shape"] != got["shape"]:
            shape = got["shape"]
            ok = (
                isinstance(shape, list)
                and len(shape) <= 8
                and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)
            )
            shown = f"shape {tuple(shape)}" if ok else "a malformed shape"
            return f"{part} has {shown}, not the shape the solution gives"
        if ref["dtype"] != got["dtype"]:
            dtype = got["dtype"] if got["dtype"] in DTYPES else "another dtype"
            return f"{part} has {dtype}, not the dtype the solution gives"
        if not _close_numbers(ref["tensor"], got["tensor"], rtol, atol):
            c = constant_factor(ref["tensor"], got["tensor"], rtol, atol)
            if c is not None:
                return f"{part} has the wrong values, off by one constant factor{factor_words(c)}"
            return f"{part} has the wrong values"
        return None
    if ref is None or got is None or isinstance(ref, bool) or isinstance(got, bool):
        if type(ref) is not type(got):
            return f"{part} is {_kind(got)} where the solution gives {_kind(ref)}"
        return None if ref == got else f"{part} is {got}, not what the solution gives"
    if isinstance(ref, int | float):
        if not isinstance(got, int | float):
            return f"{part} is {_kind(got)} where the solution gives a number"
        return None if math.isclose(ref, got, rel_tol=rtol, abs_tol=atol) else f"{part} is wrong"
    if isinstance(ref, str):
        if not isinstance(got, str):
            return f"{part} is {_kind(got)} where the solution gives text"
        return None if ref == got else f"{part} is not what the solution gives"
    if isinstance(ref, list):
        if not isinstance(got, list):
            return f"{part} is {_kind(got)} where the solution gives a list"
        if len(ref) != len(got):
            return f"{part} has {len(got)} items, not as many as the solution gives"
        for i, (r, g) in enumerate(zip(ref, got, strict=True)):
            why = difference(r, g, rtol, atol, f"{where}[{i}]" if where else f"item {i}")
            if why:
                return why
        return None
    if isinstance(ref, dict):
        if not isinstance(got, dict):
            return f"{part} is {_kind(got)} where the solution gives named values"
        for key in ref:
            name = f"{where}.{key}" if where else key
            if key not in got:
                return f"{name} is missing"
            why = difference(ref[key], got[key], rtol, atol, name)
            if why:
                return why
        extra = set(got) - set(ref)
        return f"{part} has a part the solution does not give" if extra else None
    return f"{part} cannot be compared"


def first_difference(reference: list[Record], student: list[Record]) -> str | None:
    """None when the student's records match the reference's, else a sentence saying which
    check and what kind of answer was wrong (names and kinds, never the expected values)."""
    for i, ref in enumerate(reference):
        if i >= len(student):
            return f"the check did not get as far as '{ref['name']}'"
        got = student[i]
        if got.get("name") != ref["name"]:
            return f"'{ref['name']}' was expected next, the check recorded something else"
        why = difference(ref["value"], got["value"], ref["rtol"], ref["atol"])
        if why:
            hint = f" ({ref['hint']})" if ref.get("hint") else ""
            return f"{ref['name']}: {why}{hint}"
    if len(student) > len(reference):
        return "the check recorded more results than the solution does"
    return None
