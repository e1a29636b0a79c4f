"""What a check's released source says (graders/judge/check_source.py): its message's parts, and the
literal strings a placeholder that is a loop's variable may show."""

from __future__ import annotations

import ast

from graders.judge.check_source import joined, listed_values, message_parts, message_template


def _call(source: str) -> tuple[ast.AST, ast.Call]:
    tree = ast.parse(source)
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "check"
    ]
    return tree, calls[-1]


def test_a_message_is_its_literals_and_placeholders():
    node = ast.parse('f"a {x} b" + "c" + f"{y:.2f}"', mode="eval").body
    assert message_parts(node) == ["a ", None, " b", "c", None]
    assert joined(message_parts(node)) == ["a ", None, " bc", None]
    assert message_template(node) == "a … bc…"
    assert message_parts(ast.parse("'a' % x", mode="eval").body) is None


def test_a_loops_literal_strings_are_what_its_variable_may_show():
    tree, call = _call(
        'for _name, _t in (("x", _x), ("y", _y)):\n'
        '    check(_t.grad is not None, f"{_name}.grad is None ({_t.grad}, {_name!r})")\n'
    )
    assert listed_values(tree, call) == [frozenset({"x", "y"}), None, None]
    tree, call = _call(
        'for _n, _v in zip("xyz", _vs):\n    check(_v, f"d/d{_n} is wrong ({_n})")\n'
    )
    assert listed_values(tree, call) == [frozenset("xyz")] * 2
    tree, call = _call('for _k in ["a", "b"]:\n    check(_k, f"{_k} is wrong")\n')
    assert listed_values(tree, call) == [frozenset({"a", "b"})]
    # not a literal list, or the name assigned again inside the loop: nothing listed
    tree, call = _call('for _k in names:\n    check(_k, f"{_k} is wrong")\n')
    assert listed_values(tree, call) == [None]
    tree, call = _call('for _k in ["a"]:\n    _k = secret()\n    check(_k, f"{_k} is wrong")\n')
    assert listed_values(tree, call) == [None]
    # outside the loop: nothing listed
    tree, call = _call('for _k in ["a"]:\n    pass\ncheck(_k, f"{_k} is wrong")\n')
    assert listed_values(tree, call) == [None]
