"""The class report's building blocks (graders/report/report_html.py): every text is escaped,
a link into the course is relative and quoted whatever a folder's name holds (None where
there is nothing), a duration is said in words, and files are written whole."""

from __future__ import annotations

import csv

from graders.report.report_data import ClassData
from graders.report.report_html import (
    duration,
    feedback_href,
    file_name,
    href,
    link,
    table,
    write_csv,
)


def test_texts_are_escaped_and_numbers_aligned():
    assert link(None, "<b>ann</b>") == "&lt;b&gt;ann&lt;/b&gt;"
    assert link('x"y', "a&b") == '<a href="x&quot;y">a&amp;b</a>'
    assert table(["who", "n"], [["ann", "3"]], {1}) == (
        "<table><thead><tr><th>who</th><th class=n>n</th></tr></thead>"
        "<tbody><tr><td>ann</td><td class=n>3</td></tr></tbody></table>"
    )
    assert file_name("lab 1/../x?") == "lab_1_.._x_"


def test_durations_are_said_in_words():
    assert [duration(s) for s in (0.4, 59.6, 119, 125, 3599, 3600, 7384)] == [
        "0 s", "60 s", "119 s", "2 min 5 s", "59 min 59 s", "1 h 0 min", "2 h 3 min",
    ]  # fmt: skip


def test_links_into_the_course_are_relative_and_quoted(tmp_path):
    course = ClassData(tmp_path, {}, [], {}, [], [])
    out = tmp_path / "report"
    out.mkdir()
    odd = "ann #1 ?&"
    (tmp_path / "feedback" / odd / "lab1").mkdir(parents=True)
    (tmp_path / "feedback" / odd / "lab1" / "lab1.html").write_text("page")
    assert href(course, out, "feedback", odd, "lab1", "lab1.html") == (
        "../feedback/ann%20%231%20%3F%26/lab1/lab1.html"
    )
    assert href(course, out, "feedback", "bob", "lab1", "lab1.html") is None
    assert feedback_href(course, out, odd, "lab1").endswith("/lab1/lab1.html")
    (tmp_path / "feedback" / "bob" / "ps1").mkdir(parents=True)  # several notebooks, none ps1
    for name in ("quiz.html", "deep.html"):
        (tmp_path / "feedback" / "bob" / "ps1" / name).write_text("page")
    assert feedback_href(course, out, "bob", "ps1") == "../feedback/bob/ps1/deep.html"
    assert feedback_href(course, out, "carl", "ps1") is None


def test_a_csv_is_written_whole(tmp_path):
    path = write_csv(tmp_path / "rows.csv", ["a", "b"], [["x, y", 1], ['"q"', 2.5]])
    with open(path, newline="") as fh:
        assert list(csv.reader(fh)) == [["a", "b"], ["x, y", "1"], ['"q"', "2.5"]]
    assert [p.name for p in tmp_path.iterdir()] == ["rows.csv"]  # no partial file left
