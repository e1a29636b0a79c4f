"""Cutting an untrusted text along a trusted template (graders/judge/template_match.py): leftmost,
anchored at both ends, linear in time, and a text that does not fit gives nothing."""

from __future__ import annotations

import time

from graders.judge.template_match import parts_of, split


def test_a_text_is_cut_along_the_literals():
    parts, names = parts_of("got {int} and {dims} here")
    assert parts == ["got ", None, " and ", None, " here"] and names == ["int", "dims"]
    assert split(parts, "got 3 and 4, 5 here").values == ["3", "4, 5"]
    assert split(parts, "got 3 and 4, 5 there") is None
    assert split(parts, "not 3 and 4 here") is None
    # the last literal is anchored at the end: a value holding it still splits
    assert split(["(it has ", None, ")"], "(it has (3, 4))").values == ["(3, 4)"]
    # two slots side by side cannot be told apart
    assert split([None, None], "34") is None


def test_a_cut_text_is_split_as_far_as_it_goes():
    parts = ["a ", None, " b ", None, " c"]
    found = split(parts, "a", cut=True)  # inside a literal: that much of it
    assert found.cut and found.values == [] and found.stop == 0 and found.partial == "a"
    # inside a slot: the slots before it (its own text may go on: not kept)
    found = split(parts, "a 1 b", cut=True)
    assert found.cut and found.values == [] and found.stop == 1
    found = split(parts, "a 1 b 2", cut=True)
    assert found.cut and found.values == ["1"] and found.stop == 3
    assert split(parts, "a 1 b", cut=False) is None


def test_splitting_takes_linear_time():
    parts = [p for i in range(20) for p in ("a", None)] + ["b"]
    started = time.monotonic()
    for text in ["a" * 1999, "ab" * 999, "a" * 1000 + "c"]:
        split(parts, text)
        split(parts, text, cut=True)
    assert split(parts, "a" * 5000) is None  # too long to split at all
    assert time.monotonic() - started < 1.0
