"""The class report's page: report/index.html, one function per section (each lab's in
graders/report/report_labs.py), each writing the
CSV behind its pictures and tables (`Files`). Everything printed is HTML-escaped; links to
feedback pages are URL-quoted. The numbers come from graders/report/report_numbers.py, the pictures
from graders/report/report_charts.py."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from urllib.parse import quote

from graders.formats.gradelog import GRADING_LOG
from graders.report.report_charts import times_png
from graders.report.report_data import ClassData
from graders.report.report_html import (
    Files,
    chart,
    duration,
    e,
    feedback_href,
    file_name,
    href,
    link,
    table,
    write_csv,
)
from graders.report.report_numbers import (
    HumanLook,
    lab_times,
    number,
    runs,
    wide_rows,
)

WIDE_CSV = "grades-wide.csv"


def head_section(course: ClassData, out: Path, look: list[HumanLook]) -> list[str]:
    """The title, what the report counts, notes about the log, and the page's menu."""
    root = course.root
    labs = list(course.labs.values())
    parts: list[str] = []
    hand_ins = sum(len(lab.submissions) for lab in labs)
    generated = time.strftime("%Y-%m-%d %H:%M:%S %z")
    parts.append(
        f"<h1>Class report</h1><p class=muted>{e(str(root))}, built {e(generated)} from "
        f"gradebook.db and {GRADING_LOG}.</p>"
    )
    parts.append(
        "<p>"
        + e(
            f"{len(course.students)} student(s), {len(labs)} lab(s), {hand_ins} hand-in(s) "
            f"in the gradebook; {len(look)} need a human look."
        )
        + f' For the LMS: <a href="{e(quote(os.path.relpath(root / WIDE_CSV, out)))}">'
        f"{WIDE_CSV}</a> (and nbgrader's grades.csv).</p>"
    )
    for problem in course.log_problems:
        parts.append(f"<p class=muted>note: {e(problem)}</p>")
    nav = ['<a href="#human">needs a human look</a>']
    nav += [f'<a href="#lab-{e(file_name(lab.name))}">{e(lab.name)}</a>' for lab in labs]
    nav += ['<a href="#time">grading time</a>', '<a href="#students">students</a>']
    parts.append(f"<nav>{''.join(nav)}</nav>")
    return parts


def human_look_section(
    course: ClassData, out: Path, files: Files, look: list[HumanLook]
) -> list[str]:
    """Hand-ins that need a human look, with links to their feedback and folder."""
    save = files.save
    parts: list[str] = []
    parts.append('<h2 id="human">Needs a human look</h2>')
    save(
        "needs-a-human-look.csv",
        ["student", "lab", "why", "details", "feedback", "hand_in"],
        [
            [
                r.student,
                r.lab,
                r.why,
                r.details,
                feedback_href(course, out, r.student, r.lab) or "",
                href(course, out, "submitted", r.student, r.lab) or "",
            ]
            for r in look
        ],
    )
    if look:
        rows = []
        for r in look:
            page = feedback_href(course, out, r.student, r.lab)
            folder = href(course, out, "submitted", r.student, r.lab)
            rows.append(
                [
                    e(r.student),
                    e(r.lab),
                    e(r.why),
                    e(r.details),
                    link(page, "feedback") if page else "<span class=muted>none</span>",
                    link(folder, "folder") if folder else "<span class=muted>gone</span>",
                ]
            )
        header = ["student", "lab", "why", "details", "feedback page", "hand-in"]
        parts.append(table(header, rows))
    else:
        parts.append("<p>Nothing: every hand-in was graded to the end.</p>")
    parts.append(
        '<p class=muted>Numbers: <a href="needs-a-human-look.csv">needs-a-human-look.csv</a>. '
        "Only hand-ins known to the gradebook are listed; a folder that is not a student's lab "
        "(a wrong lab name, a stray file) is named by <code>make autograde</code> only.</p>"
    )
    return parts


def times_section(course: ClassData, files: Files) -> list[str]:
    """Seconds per hand-in, by lab (a box plot, a table, grading-times.csv)."""
    save = files.save
    times, time_rows = lab_times(course)
    parts: list[str] = []
    parts.append('<h2 id="time">Grading time</h2>')
    save(
        "grading-times.csv",
        [
            "student",
            "lab",
            "graded_at",
            "queue_s",
            "intake_s",
            "autograde_s",
            "feedback_s",
            "total_s",
            "merge_s",
            "grading_s",
        ],
        time_rows,
    )
    if times:
        alt = "Box plot of seconds per hand-in, by lab: " + "; ".join(
            f"{lab} median {statistics.median(v):.1f} s, max {max(v):.1f} s"
            for lab, v in times.items()
        )
        parts.append('<div class="charts">')
        parts.append(
            chart(
                times_png(times),
                alt,
                "Seconds each hand-in took: its task (intake, nbgrader autograde, feedback) "
                "plus its merge; time waiting for a worker not counted.",
                "grading-times.csv",
            )
        )
        parts.append(
            table(
                ["lab", "hand-ins", "min s", "median s", "max s"],
                [
                    [
                        e(lab),
                        str(len(v)),
                        number(round(min(v), 1)),
                        number(round(statistics.median(v), 1)),
                        number(round(max(v), 1)),
                    ]
                    for lab, v in times.items()
                ],
                numeric={1, 2, 3, 4},
            )
        )
        parts.append("</div>")
    else:
        parts.append("<p>No timings in the log.</p>")
    return parts


def runs_section(course: ClassData, files: Files) -> list[str]:
    """Grading runs told apart in the log: the largest and the latest, the last ten."""
    save = files.save
    parts: list[str] = []
    found_runs = runs(course.log_lines)
    save(
        "runs.csv",
        ["began", "ended", "hand_ins", "wall_s", "sum_of_hand_ins_s"],
        [
            [
                r.began.isoformat(),
                r.ended.isoformat(),
                r.hand_ins,
                number(r.wall_s),
                number(r.sum_s),
            ]
            for r in found_runs
        ],
    )
    if found_runs:
        last = found_runs[-1]
        biggest = max(found_runs, key=lambda r: r.hand_ins)
        parts.append(
            "<p>"
            + e(
                f"Whole run: the largest run in the log graded {biggest.hand_ins} "
                f"hand-in(s) in {duration(biggest.wall_s)} of wall time (from when its "
                f"first hand-in started, that is its graded_at less its queue wait and "
                f"grading time, to its last graded_at); the hand-ins' own times add up to "
                f"{duration(biggest.sum_s)}. The latest run graded {last.hand_ins} "
                f"hand-in(s) in {duration(last.wall_s)}."
            )
            + "</p>"
        )
        parts.append(
            table(
                ["began", "ended", "hand-ins", "wall time", "sum of hand-ins"],
                [
                    [
                        e(r.began.strftime("%Y-%m-%d %H:%M:%S")),
                        e(r.ended.strftime("%Y-%m-%d %H:%M:%S")),
                        str(r.hand_ins),
                        e(duration(r.wall_s)),
                        e(duration(r.sum_s)),
                    ]
                    for r in found_runs[-10:]
                ],
                numeric={2, 3, 4},
            )
        )
        parts.append('<p class=muted>The last 10 runs; all in <a href="runs.csv">runs.csv</a>.</p>')
    return parts


def students_section(course: ClassData, out: Path, files: Files) -> list[str]:
    """Every student's score in every lab (linked to feedback, late marked), and the LMS CSV."""
    root = course.root
    labs = list(course.labs.values())
    save = files.save
    parts: list[str] = []
    parts.append('<h2 id="students">Students</h2>')
    header, wide = wide_rows(course)
    write_csv(root / WIDE_CSV, header, wide)
    student_rows, csv_rows = [], []
    for student in course.students:
        cells, raw_cells, total, late_labs = [], [], [], []
        for lab in labs:
            sub = lab.submissions.get(student)
            if sub is None:
                cells.append("<span class=muted>-</span>")
                raw_cells += ["", ""]
                continue
            total.append(sub.score)
            text = e(number(sub.score))
            if sub.seconds_late > 0:
                late_labs.append(lab.name)
                text += (
                    f' <span class=late title="{e(duration(sub.seconds_late))} late">late</span>'
                )
            page = feedback_href(course, out, student, lab.name)
            cells.append(f'<a href="{e(page)}">{text}</a>' if page else text)
            raw_cells += [number(sub.score), number(sub.seconds_late)]
        student_rows.append([e(student), *cells, e(number(sum(total)) if total else "")])
        csv_rows.append(
            [student, *raw_cells, number(sum(total)) if total else "", " ".join(late_labs)]
        )
    save(
        "students.csv",
        ["student"]
        + [f"{lab.name}{suffix}" for lab in labs for suffix in ("", "_seconds_late")]
        + ["total", "late"],
        csv_rows,
    )
    parts.append(
        table(
            ["student"]
            + [
                f"{e(lab.name)}<br><span class=muted>max {number(lab.max_score)}</span>"
                for lab in labs
            ]
            + [
                f"total<br><span class=muted>max {number(sum(lab.max_score for lab in labs))}"
                "</span>"
            ],
            student_rows,
            numeric=set(range(1, len(labs) + 2)),
        )
    )
    parts.append(
        "<p class=muted>A score links to the student's feedback page; <span class=late>late"
        "</span>: handed in after the due date (nbgrader's total_seconds_late &gt; 0; hover "
        'for how late). Numbers: <a href="students.csv">students.csv</a>.</p>'
    )
    return parts
