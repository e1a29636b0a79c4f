"""The instructor's class report: report/index.html, a CSV behind every picture, and
grades-wide.csv for the LMS.

Everything comes from two files grading already writes; no other database is kept:

* nbgrader's gradebook (``gradebook.db``): who handed in which lab, the grade of every test
  cell, late submissions (a submission's ``total_seconds_late``) and flagged notebooks;
* ``grading-log.jsonl`` (graders/formats/gradelog.py): one line per hand-in graded, with each test
  cell's verdict, the time each phase took and why it needs a human look. A regrade appends
  a line; the latest line of a (student, lab) is the one that counts.

The page works opened from disk, offline: pictures are matplotlib PNGs (Agg) embedded as
base64, and each has alt text, an HTML table of its numbers and a CSV file beside the page.
Everything printed is HTML-escaped; links to feedback pages are URL-quoted.

Four steps, four modules: reading (graders/report/report_data.py), numbers (report_numbers.py),
pictures (report_charts.py) and the page, a function per section (report_page.py); this
module puts them in order. None of them imports the grading stack.

    python -m graders.report [--root R] [--out report]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from graders.config.course import REPO
from graders.report.report_data import read_course
from graders.report.report_html import Files, write_page
from graders.report.report_labs import lab_section
from graders.report.report_numbers import human_look
from graders.report.report_page import (
    WIDE_CSV,
    head_section,
    human_look_section,
    runs_section,
    students_section,
    times_section,
)


@dataclass
class Built:
    index: Path
    wide_csv: Path
    csvs: list[Path]
    seconds: float


def build_report(root: Path = REPO, out: Path | None = None) -> Built:
    """Read the gradebook and the log of the course at `root`; write `out`/index.html (default
    root/report), a CSV for each picture and table beside it, and root/grades-wide.csv."""
    started = time.monotonic()
    root = root.resolve()
    out = (out or root / "report").resolve()
    out.mkdir(parents=True, exist_ok=True)
    course = read_course(root)
    files = Files(out)
    look = human_look(course)
    parts = head_section(course, out, look)
    parts += human_look_section(course, out, files, look)
    for lab in course.labs.values():
        parts += lab_section(course, out, files, lab)
    parts += times_section(course, files)
    parts += runs_section(course, files)
    parts += students_section(course, out, files)
    index = write_page(out, parts)
    return Built(index, root / WIDE_CSV, files.csvs, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build the class report (report/index.html) and grades-wide.csv."
    )
    parser.add_argument("--root", type=Path, default=REPO, help="the course folder (default: repo)")
    parser.add_argument("--out", type=Path, default=None, help="where (default: <root>/report)")
    args = parser.parse_args(argv)
    built = build_report(args.root, args.out)
    try:
        shown = built.index.relative_to(Path.cwd().resolve())
        wide = built.wide_csv.relative_to(Path.cwd().resolve())
    except ValueError:
        shown, wide = built.index, built.wide_csv
    print(f"report: {shown}  (built in {built.seconds:.1f} s)")
    print(f"LMS:    {wide}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
