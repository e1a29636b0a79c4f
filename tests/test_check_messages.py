"""Every visible-check message of every lab still reads as a whole sentence once the judge has
removed its values (graders/judge/judge.py quotes a failed check's message from the release, each
`{...}` replaced by '…', because a value computed in the student's kernel could carry text).

The rule (CONTRIBUTING.md, "Writing a check's message"): a value goes inside parentheses, as a
supplement; the message with those parentheses taken out must still say what was checked and
what kind of thing is wrong, in at least eight words, and no hint may lean on a removed value.
Only the released test cells are read: these are the messages feedback quotes.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from graders.config.course import LABS, REPO
from graders.judge.judge import message_template

MIN_WORDS = 8
# hints that only make sense with the removed text in front of the reader
LEANS_ON_VALUE = re.compile(
    r"\b(if it says|if the error says|if the message says|the message above|the text above|"
    r"the error above|as shown|shown above)\b",
    re.I,
)
PLACEHOLDER = "…"


def check_messages(lab: str) -> list[tuple[str, int, ast.expr]]:
    """(grade id, line, message node) of every `check(condition, message)` in the released
    test cells of `lab`."""
    nb = json.loads((REPO / "labs" / lab / f"{lab}.ipynb").read_text())
    found = []
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        tree = ast.parse("".join(cell["source"]))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "check"
                and len(node.args) >= 2
            ):
                found.append((meta["grade_id"], node.lineno, node.args[1]))
    return found


def without_parentheses(text: str) -> str:
    """`text` with every parenthesised group that holds a removed value taken out (innermost
    first), so what remains is what the student reads if no value survives."""
    group = re.compile(r"\s*[(\[][^()\[\]]*" + PLACEHOLDER + r"[^()\[\]]*[)\]]")
    while True:
        shorter = group.sub("", text)
        if shorter == text:
            return text
        text = shorter


def husk(template: str | None) -> str | None:
    """Why the elided message is not a whole sentence, or None when it is."""
    if template is None:
        return (
            "its message is not a string, an f-string or a sum of them: the judge cannot quote it"
        )
    bare = without_parentheses(template)
    if PLACEHOLDER in bare:
        return f"a value outside parentheses: {bare!r}"
    words = re.findall(r"[A-Za-z_][A-Za-z_0-9.()'\-]*", bare)
    if len(words) < MIN_WORDS:
        return f"{len(words)} words once its values are removed: {bare!r}"
    if PLACEHOLDER in template and LEANS_ON_VALUE.search(template):
        return f"a hint that leans on a removed value: {template!r}"
    return None


@pytest.mark.parametrize("lab", LABS)
def test_every_check_message_survives_elision(lab):
    messages = check_messages(lab)
    assert messages, f"{lab}: no visible check found in its test cells"
    problems = [
        f"{lab} {grade_id} line {line}: {why}"
        for grade_id, line, node in messages
        if (why := husk(message_template(node)))
    ]
    assert not problems, (
        f"{len(problems)} of {len(messages)} check messages do not survive elision "
        "(CONTRIBUTING.md, 'Writing a check's message'):\n" + "\n".join(problems)
    )


@pytest.mark.parametrize(
    "message, bad",
    [
        ('f"evaluate(x) should be {a}, got {b}."', True),  # values outside parentheses
        ('f"should return a dict with the keys {keys}."', True),
        ('f"hvp raised an error ({e}). If it says that x needs grad, fix it."', True),
        ('"Wrong."', True),  # too short
        ("message_variable", True),  # not quotable
        ('f"jacobian_rows(f, x) raised an error ({e}): run it above to see it."', False),
        (
            '"predict disagrees with PyTorch on one of the expressions: print predict(e) "'
            '+ f"for each of them (the first that disagrees: {i})."',
            False,
        ),
    ],
)  # fmt: skip
def test_the_rule_tells_husks_from_sentences(message, bad):
    node = ast.parse(message, mode="eval").body
    assert (husk(message_template(node)) is not None) is bad
