"""The class report (graders/report/report.py): its numbers are the gradebook's and the grading
log's, every picture has its numbers beside it, odd student names are escaped and quoted, and a
regrade of one student is in the report seconds later.

One small class is graded once per session (two fast labs, six of each demo class, plus a
student with an odd name, a kernel that dies, a notebook that is not JSON and a late hand-in);
tests/clients/test_browser.py opens the same report in Chromium.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote

import nbformat
import pytest
from helpers import LATE, ODD, ON_TIME
from helpers import REPORT_LABS as LABS

from graders.config.course import REPO
from graders.formats.gradelog import GRADING_LOG
from graders.formats.verdict import Verdict
from graders.grade.class_run import read_scores
from graders.grade.grade import grade_class
from graders.report.report import build_report
from graders.report.report_page import WIDE_CSV


@pytest.fixture(scope="session")
def graded(report_course) -> Path:
    return report_course  # tests/conftest.py's, so that tests/clients/test_browser.py shares it


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def gradebook_truth(root: Path) -> dict:
    """What nbgrader's own API says, computed here without graders/report/report.py."""
    from nbgrader.api import Gradebook, MissingEntry

    truth = {"cells": {}, "scores": {}, "late": {}, "flagged": set(), "students": []}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        truth["students"] = [s.id for s in gb.students]
        for assignment in gb.assignments:
            lab = assignment.name
            (notebook,) = assignment.notebooks
            subs = list(assignment.submissions)
            for cell in notebook.grade_cells:
                passed = 0
                for sub in subs:
                    grade = gb.find_grade(cell.name, lab, lab, sub.student.id)
                    passed += grade.score >= cell.max_score
                truth["cells"][(lab, cell.name)] = (passed, len(subs), cell.max_score)
            for student in truth["students"]:
                try:
                    sub = gb.find_submission(lab, student)
                except MissingEntry:
                    continue
                score = max(0.0, sub.score - sub.late_submission_penalty)
                truth["scores"][(student, lab)] = score
                truth["late"][(student, lab)] = sub.total_seconds_late > 0
                if any(nb.flagged for nb in sub.notebooks):
                    truth["flagged"].add((student, lab))
    return truth


def latest_log(root: Path) -> dict[tuple[str, str], dict]:
    latest = {}
    for line in (root / GRADING_LOG).read_text().splitlines():
        entry = json.loads(line)
        latest[(entry["student"], entry["lab"])] = entry
    return latest


def release_order(root: Path, lab: str) -> list[str]:
    nb = nbformat.read(root / "labs" / lab / f"{lab}.ipynb", as_version=4)
    return [
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    ]


def test_pass_rates_scores_and_totals_are_the_gradebooks(graded):
    built = build_report(graded)
    out = built.index.parent
    truth = gradebook_truth(graded)
    for lab in LABS:
        rows = read_csv(out / f"{lab}-pass-rates.csv")
        assert [r["grade_id"] for r in rows] == release_order(graded, lab)
        for r in rows:
            passed, hand_ins, points = truth["cells"][(lab, r["grade_id"])]
            assert (int(r["passed"]), int(r["hand_ins"])) == (passed, hand_ins), r
            assert float(r["points"]) == points
            assert float(r["pass_rate"]) == pytest.approx(passed / hand_ins, abs=1e-4)
        # the histogram counts every hand-in of the lab once, in its score's bin
        bins = read_csv(out / f"{lab}-scores.csv")
        scores = Counter(v for (_, l), v in truth["scores"].items() if l == lab)
        assert sum(int(b["hand_ins"]) for b in bins) == sum(scores.values())
        assert {float(b["score_from"]): int(b["hand_ins"]) for b in bins if int(b["hand_ins"])} == (
            scores
        )
    # one row a student: each lab's score, empty where not handed in, the total, late flags
    students = {r["student"]: r for r in read_csv(out / "students.csv")}
    wide = {r["student_id"]: r for r in read_csv(graded / WIDE_CSV)}
    assert set(students) == set(wide) == set(truth["students"])
    header = list(next(iter(wide.values())))
    maxes = {lab: format(read_scores(graded, LABS)[1][lab], "g") for lab in LABS}
    column = {lab: f"{lab} (max {maxes[lab]})" for lab in LABS}
    all_max = format(sum(read_scores(graded, LABS)[1].values()), "g")
    assert header == ["student_id", *column.values(), f"total (max {all_max})"]
    for student in truth["students"]:
        mine = {lab: truth["scores"].get((student, lab)) for lab in LABS}
        total = sum(v for v in mine.values() if v is not None)
        assert float(students[student]["total"]) == pytest.approx(total)
        assert float(wide[student][f"total (max {all_max})"]) == pytest.approx(total)
        for lab in LABS:
            cell = wide[student][column[lab]]
            assert cell == ("" if mine[lab] is None else format(mine[lab], "g")), (student, lab)
            late = truth["late"].get((student, lab), False)
            assert (lab in students[student]["late"].split()) == late, (student, lab)
    assert truth["late"][(LATE, LABS[0])] and not truth["late"][(ON_TIME, LABS[0])]
    assert float(students[LATE][f"{LABS[0]}_seconds_late"]) == 27.5 * 3600
    # nbgrader's own export agrees with the wide CSV wherever a lab was handed in
    for row in read_csv(graded / "grades.csv"):
        if (row["student_id"], row["assignment"]) in truth["scores"]:
            got = wide[row["student_id"]][column[row["assignment"]]]
            assert float(got) == float(row["score"])


def test_failure_counts_are_the_logs(graded):
    built = build_report(graded)
    latest = latest_log(graded)
    for lab in LABS:
        expected: dict[tuple, list[str]] = defaultdict(list)
        for (student, entry_lab), entry in sorted(latest.items()):
            if entry_lab != lab:
                continue
            for grade_id, raw in entry["verdicts"].items():
                verdict = Verdict.from_json(raw)  # the log's line as written (json)
                if not verdict.passed:
                    expected[(grade_id, verdict.kind, verdict.sentence)].append(student)
        rows = read_csv(built.index.parent / f"{lab}-failures.csv")
        got = {(r["grade_id"], r["kind"], r["sentence"]): r for r in rows}
        assert set(got) == set(expected)
        for key, students in expected.items():
            row = got[key]
            assert int(row["hand_ins"]) == len(students), key
            examples = [s for s in (row["example_1"], row["example_2"]) if s]
            assert len(examples) == min(2, len(students))
            assert set(examples) <= set(students)
        assert sum(len(v) for v in expected.values()) > 5  # the demo class fails checks
        # the checks are listed in the order of the notebook
        order = release_order(graded, lab)
        listed = [r["grade_id"] for r in rows]
        assert listed == sorted(listed, key=order.index)


def test_needs_a_human_look_names_who_which_lab_and_why(graded):
    built = build_report(graded)
    rows = read_csv(built.index.parent / "needs-a-human-look.csv")
    found = {(r["student"], r["lab"]): r for r in rows}
    assert found[("exiter", LABS[0])]["why"] == "killed"
    assert "kernel died" in found[("exiter", LABS[0])]["details"]
    assert found[(ODD, LABS[1])]["why"] == "malformed hand-in"
    assert "not a valid notebook" in found[(ODD, LABS[1])]["details"]
    truth = gradebook_truth(graded)
    assert truth["flagged"] <= set(found)
    logged = {k for k, e in latest_log(graded).items() if e["problems"]}
    assert set(found) == truth["flagged"] | logged
    # a hand-in that was not graded has no feedback page, but its folder is linked
    page = built.index.read_text(encoding="utf-8")
    folder = "../submitted/" + quote(ODD, safe="") + "/" + LABS[1]
    assert f'href="{html.escape(folder)}"' in page


class Page(HTMLParser):
    """Figures (img, alt, CSV link), every href, and the text of the page."""

    def __init__(self):
        super().__init__()
        self.figures: list[dict] = []
        self.hrefs: list[str] = []
        self.text: list[str] = []
        self.tables = 0
        self.inside = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.figures.append({"img": None, "alt": None, "csv": []})
            self.inside = True
        elif tag == "img":
            self.figures[-1].update(img=attrs["src"], alt=attrs.get("alt"))
        elif tag == "a":
            self.hrefs.append(attrs["href"])
            if self.inside and attrs["href"].endswith(".csv"):
                self.figures[-1]["csv"].append(attrs["href"])
        elif tag == "table":
            self.tables += 1

    def handle_endtag(self, tag):
        if tag == "figure":
            self.inside = False

    def handle_data(self, data):
        self.text.append(data)


def test_every_picture_is_an_embedded_png_with_alt_text_a_table_and_a_csv(graded):
    built = build_report(graded)
    parser = Page()
    parser.feed(built.index.read_text(encoding="utf-8"))
    assert len(parser.figures) == 2 * len(LABS) + 1  # scores and pass rates, and the times
    assert parser.tables >= len(parser.figures)
    for figure in parser.figures:
        prefix = "data:image/png;base64,"
        assert figure["img"].startswith(prefix)
        assert base64.b64decode(figure["img"][len(prefix) :])[:8] == b"\x89PNG\r\n\x1a\n"
        assert figure["alt"] and len(figure["alt"]) > 30, figure["alt"]
        (link,) = figure["csv"]
        assert (built.index.parent / unquote(link)).is_file(), link
    assert {p.name for p in built.csvs} >= {
        *(f"{lab}-{kind}.csv" for lab in LABS for kind in ("scores", "pass-rates", "failures")),
        "grading-times.csv",
        "needs-a-human-look.csv",
        "students.csv",
        "runs.csv",
    }
    assert all(p.is_file() for p in built.csvs)
    # nothing on the page needs a network: no http(s) link, no script
    page = built.index.read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_odd_student_names_are_escaped_and_their_links_quoted(graded):
    built = build_report(graded)
    page = built.index.read_text(encoding="utf-8")
    assert ODD not in page and "<b>" not in page  # the name never reaches the page raw
    assert html.escape(ODD) in page
    parser = Page()
    parser.feed(page)
    assert ODD in "".join(parser.text)  # what a reader sees is the name as it is
    odd = [h for h in parser.hrefs if quote(ODD, safe="") in h]
    assert odd, "no link to the odd student's feedback page"
    for link in parser.hrefs:
        if link.startswith("#"):
            continue
        assert (built.index.parent / unquote(link)).exists(), link
    feedback = f"../feedback/{quote(ODD, safe='')}/{LABS[0]}/{LABS[0]}.html"
    assert feedback in odd
    # in the CSVs the name is kept as it is (csv quoting only)
    assert ODD in {r["student_id"] for r in read_csv(graded / WIDE_CSV)}


def test_the_command_line_writes_the_report_where_asked(graded, tmp_path):
    out = tmp_path / "elsewhere" / "report"
    result = subprocess.run(
        [sys.executable, "-m", "graders.report", "--root", str(graded), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert f"report: {out / 'index.html'}" in result.stdout
    parser = Page()
    parser.feed((out / "index.html").read_text(encoding="utf-8"))
    feedback = [h for h in parser.hrefs if "/feedback/" in h]
    assert feedback and all((out / unquote(h)).is_file() for h in feedback)


def test_the_report_is_rebuilt_in_seconds_after_a_regrade(graded):
    """`blank` hands lab02 in again, complete: only that hand-in is regraded (the others are
    set aside meanwhile), and the report rebuilt from the gradebook and the log shows it."""
    lab, student = LABS[0], "blank"
    submitted, aside = graded / "submitted", graded / "submitted-aside"
    complete = aside / "complete" / lab / f"{lab}.ipynb"
    submitted.rename(aside)
    try:
        (submitted / student / lab).mkdir(parents=True)
        shutil.copy(complete, submitted / student / lab / f"{lab}.ipynb")
        grade_class(graded, labs=[lab], workers=1, quiet=True)
    finally:
        shutil.rmtree(submitted)
        aside.rename(submitted)
        shutil.copy(submitted / "complete" / lab / f"{lab}.ipynb", submitted / student / lab)
    started = time.monotonic()
    built = build_report(graded)
    seconds = time.monotonic() - started
    print(f"report rebuilt in {seconds:.2f} s after regrading {student}/{lab}")
    assert seconds < 30
    wide = {r["student_id"]: r for r in read_csv(graded / WIDE_CSV)}
    full = format(read_scores(graded, LABS)[1][lab], "g")
    assert wide[student][f"{lab} (max {full})"] == full
    failures = read_csv(built.index.parent / f"{lab}-failures.csv")
    assert student not in {r["example_1"] for r in failures} | {r["example_2"] for r in failures}
    runs = read_csv(built.index.parent / "runs.csv")
    assert [int(r["hand_ins"]) for r in runs[-1:]] == [1]
    assert int(runs[0]["hand_ins"]) > 15


def test_an_ungraded_course_and_a_missing_gradebook(tmp_path):
    from nbgrader.api import Gradebook

    missing = subprocess.run(
        [sys.executable, "-m", "graders.report", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "gradebook.db is missing" in missing.stderr
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        gb.add_assignment("lab01_graph")
        gb.add_notebook("lab01_graph", "lab01_graph")
        gb.add_grade_cell("test_a", "lab01_graph", "lab01_graph", max_score=3, cell_type="code")
        gb.add_student("someone")
    built = build_report(tmp_path)
    page = built.index.read_text(encoding="utf-8")
    assert "No hand-ins in the gradebook." in page
    assert f"no {GRADING_LOG}" in page
    assert read_csv(tmp_path / WIDE_CSV) == [
        {"student_id": "someone", "lab01_graph (max 3)": "", "total (max 3)": ""}
    ]
