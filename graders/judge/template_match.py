"""Cutting an untrusted text along a trusted template: a check's message as released (its
`{...}` placeholders) or a PyTorch error template (graders/judge/torch_errors.py, its typed slots).

A template is a list of parts: a literal (str) or a slot (None). `split` finds each literal in
the text from the left and gives the text between them, each slot's text: the lazy match of a
regular expression with one group per slot, anchored at both ends, but without backtracking,
so its time is linear in the text whatever either side holds (no regex bomb). A text that
could be split in more than one way is split the leftmost way; a slot whose text is not a
typed value is shown as '…' by the caller, so an unlucky split hides a value, never shows one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TEXT = 2000  # a longer text is not split at all: every slot stays '…'
SLOT = re.compile(r"\{(\w+)\}")


@dataclass
class Split:
    """What `split` found: the slots' texts, in order, as far as the text went; `cut` when the
    text stopped early (a message cut to its first 200 characters): then `stop` is the index
    of the part it stopped in and `partial` what it held of that part when a literal."""

    values: list[str]
    cut: bool = False
    stop: int = 0
    partial: str = ""


def parts_of(template: str) -> tuple[list[str | None], list[str]]:
    """A template written with named slots ('expected {int} but got {int}') as parts, and the
    slots' names in order."""
    parts: list[str | None] = []
    names: list[str] = []
    at = 0
    for match in SLOT.finditer(template):
        parts += [template[at : match.start()], None]
        names.append(match.group(1))
        at = match.end()
    parts.append(template[at:])
    return [p for p in parts if p != ""], names


def split(parts: list[str | None], text: str, cut: bool = False) -> Split | None:
    """The slots' texts when `text` is the template with each slot filled, else None. With
    `cut`, `text` may also stop anywhere (a prefix of such a text). Two slots side by side
    cannot be told apart: such a template never matches."""
    if len(text) > MAX_TEXT or any(
        a is None and b is None for a, b in zip(parts, parts[1:], strict=False)
    ):
        return None
    values: list[str] = []
    at = 0
    for i, part in enumerate(parts):
        if part is not None:
            if text.startswith(part, at):
                at += len(part)
                continue
            if cut and part.startswith(text[at:]):
                return Split(values, cut=True, stop=i, partial=text[at:])
            return None
        following = parts[i + 1] if i + 1 < len(parts) else None
        if following is None:
            end = len(text)
        elif i + 2 == len(parts) and text.endswith(following) and len(text) - len(following) >= at:
            end = len(text) - len(following)  # the last literal is anchored at the end
        else:
            end = text.find(following, at)
            if end < 0:
                return Split(values, cut=True, stop=i) if cut else None
        values.append(text[at:end])
        at = end
    return Split(values) if at == len(text) else None
