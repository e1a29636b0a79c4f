"""What a check's released source says (trusted: read from the release, never from the kernel):
its message as literal parts and placeholders, and, for a placeholder that is a loop's
variable over a literal list (`for _name, _t in (("x", _x), ("y", _y)): check(...,
f"{_name}.grad is None ...")`), the strings it can take: the judge shows such a value when the
kernel's text is one of them (an index into a list the release already shows).
"""

from __future__ import annotations

import ast

MAX_LISTED = 16  # a longer literal list gives no listed values


def message_parts(node: ast.expr) -> list[str | None] | None:
    """A check's message as written in the release: its literal parts, and None for each
    placeholder; None when it is not a string, an f-string or a sum of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.Constant) else None for v in node.values]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = message_parts(node.left), message_parts(node.right)
        return None if left is None or right is None else left + right
    return None


def assert_parts(node: ast.expr) -> list[str | None] | None:
    """An ``assert``'s message as written in the release, like `message_parts`, where any
    other expression added to a string (``"... it is " + repr(got)``) is a placeholder too;
    None when the message has no literal text (a name, a call)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = assert_parts(node.left), assert_parts(node.right)
        if left is None and right is None:
            return None
        return (left or [None]) + (right or [None])
    parts = message_parts(node)
    return parts if parts and any(p for p in parts) else None


def placeholder_names(node: ast.expr) -> list[str | None]:
    """The variable each placeholder of the message shows, in order (None: not a plain name)."""
    if isinstance(node, ast.JoinedStr):
        return [
            v.value.id
            if isinstance(v, ast.FormattedValue)
            and isinstance(v.value, ast.Name)
            and v.format_spec is None
            and v.conversion in (-1, ord("s"))
            else None
            for v in node.values
            if not isinstance(v, ast.Constant)
        ]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return placeholder_names(node.left) + placeholder_names(node.right)
    return []


def message_template(node: ast.expr) -> str | None:
    """The text of a check's message as written in the release, placeholders as '…'."""
    parts = message_parts(node)
    return None if parts is None else "".join("…" if p is None else p for p in parts)


def joined(parts: list[str | None]) -> list[str | None]:
    """Adjacent literals as one (a sum of strings, or an f-string's pieces); no empty ones."""
    out: list[str | None] = []
    for part in parts:
        if part is not None and out and out[-1] is not None:
            out[-1] += part
        elif part != "":
            out.append(part)
    return out


def _strings(node: ast.expr) -> list[str] | None:
    """The strings of a literal list or tuple of strings, or of a string's characters."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return list(node.value)
    if isinstance(node, ast.List | ast.Tuple) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]
    return None


def _column(node: ast.expr, index: int) -> list[str] | None:
    """The index-th strings of a literal list of literal tuples."""
    if not isinstance(node, ast.List | ast.Tuple):
        return None
    column = []
    for row in node.elts:
        if not isinstance(row, ast.List | ast.Tuple) or len(row.elts) <= index:
            return None
        cell = row.elts[index]
        if not (isinstance(cell, ast.Constant) and isinstance(cell.value, str)):
            return None
        column.append(cell.value)
    return column


def _loop_lists(loop: ast.For) -> dict[str, list[str]]:
    """name -> the literal strings a `for` loop binds it to."""
    found: dict[str, list[str]] = {}
    target, source = loop.target, loop.iter
    if isinstance(target, ast.Name):
        strings = _strings(source)
        if strings is not None:
            found[target.id] = strings
        return found
    if not isinstance(target, ast.Tuple):
        return found
    zipped = (
        isinstance(source, ast.Call)
        and getattr(source.func, "id", None) == "zip"
        and len(source.args) == len(target.elts)
    )
    for index, element in enumerate(target.elts):
        if isinstance(element, ast.Name):
            strings = _strings(source.args[index]) if zipped else _column(source, index)
            if strings is not None:
                found[element.id] = strings
    return found


def listed_values(tree: ast.AST, call: ast.Call) -> list[frozenset[str] | None]:
    """For each placeholder of `call`'s message, the strings it may show (None: none), from
    the `for` loops around the call; a name assigned again inside the loop gives none."""
    names = placeholder_names(call.args[1])
    lists: dict[str, list[str]] = {}
    for loop in ast.walk(tree):
        if isinstance(loop, ast.For) and loop.lineno <= call.lineno <= (loop.end_lineno or 0):
            lists.update(_loop_lists(loop))
            for node in ast.walk(loop):
                for target in getattr(node, "targets", []) + [getattr(node, "target", None)]:
                    if isinstance(target, ast.Name) and node is not loop:
                        lists.pop(target.id, None)
    return [
        frozenset(lists[n]) if n in lists and len(lists[n]) <= MAX_LISTED else None for n in names
    ]
