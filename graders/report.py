"""The instructor's class report: report/index.html, a CSV behind every picture, and
grades-wide.csv for the LMS.

Everything comes from two files grading already writes; no other database is kept:

* nbgrader's gradebook (``gradebook.db``): who handed in which lab, the grade of every test
  cell, late submissions (a submission's ``total_seconds_late``) and flagged notebooks;
* ``grading-log.jsonl`` (graders/grade.py): one line per hand-in graded, with each test
  cell's verdict, the time each phase took and why it needs a human look. A regrade appends
  a line; the latest line of a (student, lab) is the one that counts.

The page works opened from disk, offline: pictures are matplotlib PNGs (Agg) embedded as
base64, and each has alt text, an HTML table of its numbers and a CSV file beside the page.
Everything printed is HTML-escaped; links to feedback pages are URL-quoted.

    python -m graders.report [--root R] [--out report]
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
import os
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote

from graders.course import REPO
from graders.grade import GRADING_LOG  # one line per hand-in graded (grade.log_hand_in)

WIDE_CSV = "grades-wide.csv"
PASSED = "passed"
KINDS = {
    "visible": "a visible check failed",
    "hidden": "a hidden check failed",
    "records": "records could not be read",
    "limit": "stopped at a limit",
    "not_answered": "not answered",
}
EXAMPLES = 2  # example students shown for each failure sentence
RUN_GAP_S = 1.0  # a hand-in that started after the previous line was written: a new run


# ------------------------------------------------------------------------------- reading


@dataclass
class Submission:
    student: str
    lab: str
    raw: float = 0.0  # the sum of its grades (nbgrader's SubmittedAssignment.score)
    penalty: float = 0.0  # late penalty (nbgrader's late_submission_penalty)
    seconds_late: float = 0.0  # nbgrader's total_seconds_late
    flagged: bool = False  # a notebook of it is flagged (a failure, or by a human)
    grades: dict[str, float] = field(default_factory=dict)  # by cell key

    @property
    def score(self) -> float:
        """The score nbgrader exports (grades.csv): raw score less the penalty, at least 0."""
        return max(0.0, self.raw - self.penalty)


@dataclass
class Lab:
    name: str
    max_score: float = 0.0
    cells: list[tuple[str, float]] = field(default_factory=list)  # (key, points), in order
    order_from: str = "the release notebook"
    submissions: dict[str, Submission] = field(default_factory=dict)  # by student


@dataclass
class Course:
    root: Path
    labs: dict[str, Lab]
    students: list[str]
    log: dict[tuple[str, str], dict]  # the latest line of each (student, lab)
    log_lines: list[dict]  # every line, in the order written
    log_problems: list[str]  # lines of the log that could not be read


def _release_order(root: Path, lab: str, notebook: str) -> list[str] | None:
    """grade_ids of the release notebook labs/<lab>/<notebook>.ipynb, in order, or None."""
    path = root / "labs" / lab / f"{notebook}.ipynb"
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        return [
            c["metadata"]["nbgrader"]["grade_id"]
            for c in nb["cells"]
            if isinstance(c.get("metadata", {}).get("nbgrader"), dict)
            and c["metadata"]["nbgrader"].get("grade_id")
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_gradebook(root: Path) -> tuple[dict[str, Lab], list[str]]:
    """Labs (with their grade cells in notebook order and every submission) and students."""
    from nbgrader.api import (
        Assignment,
        BaseCell,
        Grade,
        Gradebook,
        GradeCell,
        Notebook,
        SubmittedAssignment,
        SubmittedNotebook,
        TaskCell,
    )

    path = root / "gradebook.db"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `make build` first.")
    labs: dict[str, Lab] = {}
    with Gradebook(f"sqlite:///{path}") as gb:
        db = gb.db
        students = sorted(s.id for s in gb.students)
        notebooks_of: dict[str, list] = defaultdict(list)
        for assignment in sorted(gb.assignments, key=lambda a: a.name):
            lab = labs[assignment.name] = Lab(assignment.name)
            for nb in sorted(assignment.notebooks, key=lambda n: n.name):
                notebooks_of[assignment.name].append(nb.name)
                graded = [c for c in nb._base_cells if isinstance(c, GradeCell | TaskCell)]
                order = _release_order(root, assignment.name, nb.name)
                if order is None:
                    lab.order_from = "the gradebook (no release notebook found)"
                    order = []
                place = {name: i for i, name in enumerate(order)}
                graded.sort(key=lambda c: place.get(c.name, len(place)))
                for cell in graded:
                    lab.cells.append(((nb.name, cell.name), cell.max_score))
                    lab.max_score += cell.max_score
        for lab in labs.values():  # one notebook a lab (this course): the grade_id alone
            single = len(notebooks_of[lab.name]) == 1
            lab.cells = [(_key(k, single), points) for k, points in lab.cells]

        by_id: dict[str, Submission] = {}
        rows = (
            db.query(
                SubmittedAssignment.id,
                Assignment.name,
                SubmittedAssignment.student_id,
                SubmittedAssignment.timestamp,
                SubmittedAssignment.extension,
                Assignment.duedate,
            )
            .select_from(SubmittedAssignment)
            .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
            .all()
        )
        for sub_id, lab_name, student, stamp, extension, duedate in rows:
            sub = Submission(student, lab_name)
            if stamp is not None and duedate is not None:
                due = duedate + (extension or timedelta(0))
                sub.seconds_late = max(0.0, (stamp - due).total_seconds())
            by_id[sub_id] = labs[lab_name].submissions[student] = sub
        for sub_id, flagged, penalty in db.query(
            SubmittedNotebook.assignment_id,
            SubmittedNotebook.flagged,
            SubmittedNotebook.late_submission_penalty,
        ):
            if sub_id in by_id:
                by_id[sub_id].flagged |= bool(flagged)
                by_id[sub_id].penalty += penalty or 0.0
        grades = (
            db.query(SubmittedNotebook.assignment_id, Notebook.name, BaseCell.name, Grade.score)
            .select_from(Grade)
            .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
            .join(BaseCell, Grade.cell_id == BaseCell.id)
            .join(Notebook, BaseCell.notebook_id == Notebook.id)
            .all()
        )
        for sub_id, nb_name, cell_name, score in grades:
            sub = by_id.get(sub_id)
            if sub is None:
                continue
            single = len(notebooks_of[sub.lab]) == 1
            sub.grades[_key((nb_name, cell_name), single)] = score or 0.0
            sub.raw += score or 0.0
    return labs, students


def _key(key: tuple[str, str], single: bool) -> str:
    return key[1] if single else f"{key[0]}/{key[1]}"


def read_log(root: Path) -> tuple[list[dict], list[str]]:
    """Every line of grading-log.jsonl that can be read, and what could not be."""
    lines, problems = [], []
    try:
        text = (root / GRADING_LOG).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], [f"no {GRADING_LOG}: verdicts, timings and problems are not known"]
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
            str(entry["student"]), str(entry["lab"])
        except (ValueError, KeyError, TypeError) as error:
            problems.append(f"{GRADING_LOG} line {number} left out ({error})")
            continue
        lines.append(entry)
    return lines, problems


def read_course(root: Path) -> Course:
    labs, students = read_gradebook(root)
    lines, problems = read_log(root)
    latest = {(e["student"], e["lab"]): e for e in lines}  # a regrade's line comes later
    stray = [k for k in latest if k[1] not in labs or k[0] not in labs[k[1]].submissions]
    if stray:
        problems.append(
            f"{len(stray)} hand-in(s) in {GRADING_LOG} are not in the gradebook: left out"
        )
    for key in stray:
        del latest[key]
    return Course(root, labs, students, latest, lines, problems)


# ------------------------------------------------------------------------------ numbers


def number(value: float | None) -> str:
    """A number for people and for LMS imports: a dot decimal, no exponent, no trailing 0."""
    if value is None:
        return ""
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def passed(score: float, points: float) -> bool:
    return score >= points - 1e-9


def pass_rates(lab: Lab) -> list[dict]:
    """For each grade cell, in notebook order: how many hand-ins got its full points."""
    subs = list(lab.submissions.values())
    rows = []
    for key, points in lab.cells:
        ok = sum(passed(s.grades.get(key, 0.0), points) for s in subs)
        rows.append(
            {
                "grade_id": key,
                "points": points,
                "passed": ok,
                "hand_ins": len(subs),
                "pass_rate": ok / len(subs) if subs else None,
            }
        )
    return rows


def histogram(lab: Lab) -> list[dict]:
    """Hand-ins by score: one bin a point when points are whole (up to 50), else ten bins."""
    scores = [s.score for s in lab.submissions.values()]
    top = lab.max_score
    whole = all(float(p).is_integer() for _, p in lab.cells) and 0 < top <= 50
    if whole:
        counts = Counter(round(s) for s in scores)
        return [
            {"score_from": k, "score_to": k, "hand_ins": counts.get(k, 0)}
            for k in range(int(top) + 1)
        ]
    width = (top or 1) / 10
    rows = []
    for i in range(10):
        low, high = i * width, (i + 1) * width
        last = i == 9
        count = sum(low <= s < high or (last and s >= high) for s in scores)
        rows.append({"score_from": low, "score_to": high, "hand_ins": count})
    return rows


def failures(course: Course, lab: Lab) -> dict[str, list[dict]]:
    """For each grade cell: its failure sentences (from the log), counted, with examples."""
    found: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for student in sorted(lab.submissions):
        entry = course.log.get((student, lab.name))
        if not entry:
            continue
        for grade_id, verdict in (entry.get("verdicts") or {}).items():
            if not isinstance(verdict, dict) or verdict.get("kind") == PASSED:
                continue
            sentence = str(verdict.get("sentence", "")).strip() or "(no sentence)"
            found[grade_id][(str(verdict.get("kind", "")), sentence)].append(student)
    result = {}
    for key, _ in lab.cells:
        groups = found.get(key, {})
        result[key] = sorted(
            (
                {"kind": kind, "sentence": sentence, "count": len(who), "examples": who[:EXAMPLES]}
                for (kind, sentence), who in groups.items()
            ),
            key=lambda g: (-g["count"], g["sentence"]),
        )
    return result


def grading_time(entry: dict) -> float | None:
    """Seconds one hand-in took: its task (intake, autograde, feedback) and its merge."""
    timings = entry.get("timings") or {}
    if not isinstance(timings.get("total"), int | float):
        return None
    return float(timings["total"]) + float(timings.get("merge") or 0.0)


def _graded_at(entry: dict) -> datetime | None:
    try:
        return datetime.strptime(str(entry.get("graded_at")), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def runs(lines: list[dict]) -> list[dict]:
    """Grading runs told apart in the log. A run began when its first hand-in started: that
    hand-in's graded_at less its queue wait and grading time (all of a run's hand-ins give
    about the same); a hand-in whose run began after the line before it was written starts
    a new run. Lines of hand-ins intake refused (no timings) are written at a run's start;
    a task that failed without its timings joins the run it is in. Wall time: from the
    beginning to the last graded_at."""
    found: list[dict] = []
    previous: datetime | None = None
    for entry in lines:
        at = _graded_at(entry)
        if at is None:
            continue
        timings = entry.get("timings") or {}
        took = grading_time(entry)
        queue = timings.get("queue")
        if not isinstance(queue, int | float):
            kind, began = "intake", at
        elif took is None:
            kind, began = "partial", None
        else:
            kind, began = "timed", at - timedelta(seconds=queue + took)
        current = found[-1] if found else None
        if current is None:
            fresh = True
        elif kind == "intake":
            fresh = current["tasks"] > 0 or (at - current["began"]).total_seconds() > 3600
        elif kind == "partial":
            fresh = False
        elif current["timed"]:
            fresh = began > previous + timedelta(seconds=RUN_GAP_S)
        else:  # after intake's lines, or a failed task's, of the same run
            fresh = (began - current["began"]).total_seconds() > 3600
        if fresh:
            current = {"began": began or at, "ended": at, "hand_ins": 0, "sum_s": 0.0}
            current.update(timed=False, tasks=0)
            found.append(current)
        if began is not None:
            current["began"] = min(current["began"], began)
        current["ended"] = max(current["ended"], at)
        current["hand_ins"] += 1
        current["sum_s"] += took or 0.0
        current["timed"] |= kind == "timed"
        current["tasks"] += kind != "intake"
        previous = at
    for run in found:
        run["wall_s"] = (run["ended"] - run["began"]).total_seconds()
        del run["timed"], run["tasks"]
    return found


def human_look(course: Course) -> list[dict]:
    """Hand-ins that need a human look: problems in their latest log line, or a notebook
    flagged in the gradebook. `why` is one word of: killed, budget, limit, malformed hand-in,
    grading failed, feedback, flagged."""
    rows = []
    for lab in course.labs.values():
        for student in sorted(lab.submissions):
            sub = lab.submissions[student]
            entry = course.log.get((student, lab.name)) or {}
            reasons = [str(r) for r in entry.get("problems") or []]
            if not reasons and not sub.flagged:
                continue
            rows.append(
                {
                    "student": student,
                    "lab": lab.name,
                    "why": _why(reasons, entry, sub.flagged),
                    "details": "; ".join(reasons) or "flagged in the gradebook",
                }
            )
    return rows


def _why(reasons: list[str], entry: dict, flagged: bool) -> str:
    text = " ".join(reasons).lower()
    timings = entry.get("timings") or {}
    if not reasons:
        return "flagged" if flagged else ""
    if "died" in text or "killed" in text:
        return "killed"
    if entry and not entry.get("ok") and "queue" not in timings:
        return "malformed hand-in"  # intake refused it: it never reached a kernel
    if "budget" in text:
        return "budget"
    kinds = [v.get("kind") for v in (entry.get("verdicts") or {}).values() if isinstance(v, dict)]
    if "graded up to there" in text or "limit" in kinds:
        return "limit"
    if "feedback" in text and entry.get("ok"):
        return "feedback"
    return "grading failed"


def href(course: Course, out: Path, *parts: str) -> str | None:
    """A relative link from the report folder `out` to root/<parts...> (each part URL-quoted,
    whatever characters it holds), or None where there is nothing."""
    if not course.root.joinpath(*parts).exists():
        return None
    base = os.path.relpath(course.root, out).replace(os.sep, "/")
    return "/".join([quote(base, safe="/"), *(quote(p, safe="") for p in parts)])


def feedback_href(course: Course, out: Path, student: str, lab: str) -> str | None:
    """feedback/<student>/<lab>/<lab>.html, relative to the report, or None."""
    return href(course, out, "feedback", student, lab, f"{lab}.html")


# --------------------------------------------------------------------------- the LMS CSV


def wide_rows(course: Course) -> tuple[list[str], list[list[str]]]:
    """grades-wide.csv: one row a student, one column a lab (its max in the header, as
    `lab01_graph (max 8)`), then the total; empty where a lab was not handed in."""
    labs = list(course.labs.values())
    header = ["student_id"] + [f"{lab.name} (max {number(lab.max_score)})" for lab in labs]
    header.append(f"total (max {number(sum(lab.max_score for lab in labs))})")
    rows = []
    for student in course.students:
        subs = [lab.submissions.get(student) for lab in labs]
        cells = [number(s.score) if s else "" for s in subs]
        handed_in = [s.score for s in subs if s]
        rows.append([student, *cells, number(sum(handed_in)) if handed_in else ""])
    return header, rows


# --------------------------------------------------------------------------------- files


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    partial.replace(path)
    return path


def file_name(name: str) -> str:
    """A lab's name as part of a file name (gradebook names could hold anything)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


# ------------------------------------------------------------------------------ pictures


def png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def histogram_png(lab: Lab, rows: list[dict]) -> str:
    fig = _figure(5.0, 2.6)
    ax = fig.add_subplot()
    if rows and rows[0]["score_from"] == rows[0]["score_to"]:
        ax.bar([r["score_from"] for r in rows], [r["hand_ins"] for r in rows], width=0.8)
        ax.set_xticks([r["score_from"] for r in rows])
    else:
        lefts = [r["score_from"] for r in rows]
        widths = [r["score_to"] - r["score_from"] for r in rows]
        ax.bar(lefts, [r["hand_ins"] for r in rows], width=widths, align="edge")
    ax.set_xlabel(f"score (max {number(lab.max_score)})")
    ax.set_ylabel("hand-ins")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{lab.name}: scores", fontsize=10)
    return png(fig)


def pass_rate_png(lab: Lab, rows: list[dict]) -> str:
    fig = _figure(5.0, 0.9 + 0.32 * max(len(rows), 1))
    ax = fig.add_subplot()
    names = [r["grade_id"] for r in rows]
    rates = [100 * (r["pass_rate"] or 0.0) for r in rows]
    ax.barh(range(len(rows)), rates, color="#4c8c4a")
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()  # the notebook's first check on top
    ax.set_xlim(0, 100)
    ax.set_xlabel("hand-ins with full points (%)")
    ax.set_title(f"{lab.name}: pass rate of each check", fontsize=10)
    return png(fig)


def times_png(data: dict[str, list[float]]) -> str:
    fig = _figure(max(4.0, 1.1 * len(data) + 1.5), 3.0)
    ax = fig.add_subplot()
    labels = list(data)
    ax.boxplot([data[k] for k in labels], tick_labels=labels)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.set_ylabel("seconds per hand-in")
    ax.set_title("grading time per hand-in", fontsize=10)
    return png(fig)


# ---------------------------------------------------------------------------------- HTML

e = html.escape  # every text and attribute printed goes through it

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 75em; padding: 0 1em;
       color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
figure { margin: 0; display: table; }
figcaption { display: table-caption; caption-side: bottom; font-size: 0.85em; color: #555; }
.late { color: #a33; font-weight: bold; } .muted { color: #777; }
nav a { margin-right: 0.8em; }
"""


def _table(header: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """An HTML table; cells are already-escaped HTML."""
    head = "".join(
        f"<th{' class=n' if i in numeric else ''}>{h}</th>" for i, h in enumerate(header)
    )
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=n' if i in numeric else ''}>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chart(data: str, alt: str, caption: str, csv_name: str) -> str:
    link = f'<a href="{e(quote(csv_name))}">{e(csv_name)}</a>'
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{e(alt)}">'
        f"<figcaption>{e(caption)} Numbers: {link}</figcaption></figure>"
    )


def _link(target: str | None, text: str) -> str:
    return f'<a href="{e(target)}">{e(text)}</a>' if target else e(text)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"


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
    csvs: list[Path] = []
    parts: list[str] = []

    def save(name: str, header: list[str], rows: list[list]) -> str:
        csvs.append(write_csv(out / name, header, rows))
        return name

    labs = list(course.labs.values())
    look = human_look(course)
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

    # needs a human look
    parts.append('<h2 id="human">Needs a human look</h2>')
    save(
        "needs-a-human-look.csv",
        ["student", "lab", "why", "details", "feedback", "hand_in"],
        [
            [
                r["student"],
                r["lab"],
                r["why"],
                r["details"],
                feedback_href(course, out, r["student"], r["lab"]) or "",
                href(course, out, "submitted", r["student"], r["lab"]) or "",
            ]
            for r in look
        ],
    )
    if look:
        rows = []
        for r in look:
            page = feedback_href(course, out, r["student"], r["lab"])
            folder = href(course, out, "submitted", r["student"], r["lab"])
            rows.append(
                [
                    e(r["student"]),
                    e(r["lab"]),
                    e(r["why"]),
                    e(r["details"]),
                    _link(page, "feedback") if page else "<span class=muted>none</span>",
                    _link(folder, "folder") if folder else "<span class=muted>gone</span>",
                ]
            )
        header = ["student", "lab", "why", "details", "feedback page", "hand-in"]
        parts.append(_table(header, rows))
    else:
        parts.append("<p>Nothing: every hand-in was graded to the end.</p>")
    parts.append(
        '<p class=muted>Numbers: <a href="needs-a-human-look.csv">needs-a-human-look.csv</a>. '
        "Only hand-ins known to the gradebook are listed; a folder that is not a student's lab "
        "(a wrong lab name, a stray file) is named by <code>make autograde</code> only.</p>"
    )

    # each lab
    times: dict[str, list[float]] = {}
    time_rows: list[list] = []
    for lab in labs:
        stem = file_name(lab.name)
        parts.append(f'<h2 id="lab-{e(stem)}">{e(lab.name)}</h2>')
        scores = [s.score for s in lab.submissions.values()]
        if not scores:
            parts.append("<p>No hand-ins in the gradebook.</p>")
            continue
        full = sum(passed(s, lab.max_score) for s in scores)
        parts.append(
            "<p>"
            + e(
                f"{len(scores)} hand-in(s); mean {statistics.mean(scores):.2f}, median "
                f"{number(statistics.median(scores))} of {number(lab.max_score)}; "
                f"{full} with full marks."
            )
            + "</p>"
        )
        bins = histogram(lab)
        hist_csv = save(
            f"{stem}-scores.csv",
            ["score_from", "score_to", "hand_ins"],
            [[number(b["score_from"]), number(b["score_to"]), b["hand_ins"]] for b in bins],
        )
        label = [
            number(b["score_from"])
            if b["score_from"] == b["score_to"]
            else f"{number(b['score_from'])} to {number(b['score_to'])}"
            for b in bins
        ]
        alt = f"Histogram of {lab.name} scores: " + "; ".join(
            f"{text}: {b['hand_ins']}" for text, b in zip(label, bins, strict=True) if b["hand_ins"]
        )
        rates = pass_rates(lab)
        rate_csv = save(
            f"{stem}-pass-rates.csv",
            ["grade_id", "points", "passed", "hand_ins", "pass_rate"],
            [
                [
                    r["grade_id"],
                    number(r["points"]),
                    r["passed"],
                    r["hand_ins"],
                    number(r["pass_rate"]),
                ]
                for r in rates
            ],
        )
        rate_alt = f"Pass rate of each check of {lab.name}, in notebook order: " + "; ".join(
            f"{r['grade_id']} {r['passed']} of {r['hand_ins']}" for r in rates
        )
        parts.append('<div class="charts">')
        parts.append(
            _chart(
                histogram_png(lab, bins),
                alt,
                f"Scores of {lab.name} (after any late penalty, as in grades.csv).",
                hist_csv,
            )
        )
        parts.append(
            _table(
                ["score", "hand-ins"],
                [[e(t), str(b["hand_ins"])] for t, b in zip(label, bins, strict=True)],
                numeric={0, 1},
            )
        )
        parts.append(
            _chart(
                pass_rate_png(lab, rates),
                rate_alt,
                f"Hand-ins with full points on each check, in the order of the notebook "
                f"(order from {lab.order_from}).",
                rate_csv,
            )
        )
        parts.append(
            _table(
                ["check", "points", "passed", "pass rate"],
                [
                    [
                        e(r["grade_id"]),
                        number(r["points"]),
                        f"{r['passed']}/{r['hand_ins']}",
                        f"{100 * r['pass_rate']:.0f}%" if r["pass_rate"] is not None else "",
                    ]
                    for r in rates
                ],
                numeric={1, 2, 3},
            )
        )
        parts.append("</div>")

        # failures of each check
        found = failures(course, lab)
        logged = sum((s, lab.name) in course.log for s in lab.submissions)
        with_verdicts = sum(
            bool(course.log.get((s, lab.name), {}).get("verdicts")) for s in lab.submissions
        )
        fail_csv = save(
            f"{stem}-failures.csv",
            ["grade_id", "kind", "sentence", "hand_ins", "example_1", "example_2"],
            [
                [key, g["kind"], g["sentence"], g["count"], *(g["examples"] + ["", ""])[:EXAMPLES]]
                for key, groups in found.items()
                for g in groups
            ],
        )
        unlogged = len(lab.submissions) - logged
        parts.append(
            f"<h3>Why checks failed</h3><p class=muted>The judge's sentences, from "
            f"{GRADING_LOG} (the latest line of each hand-in), for the {with_verdicts} of "
            f"{len(lab.submissions)} hand-in(s) graded to a verdict"
            + (f"; {unlogged} have no line in the log" if unlogged else "")
            + f'. Numbers: <a href="{e(quote(fail_csv))}">{e(fail_csv)}</a></p>'
        )
        for key, points in lab.cells:
            groups = found[key]
            count = sum(g["count"] for g in groups)
            parts.append(
                f"<h4>{e(key)} <span class=muted>({e(number(points))} points): "
                f"{count} failed</span></h4>"
            )
            if not groups:
                continue
            rows = []
            for g in groups:
                examples = ", ".join(
                    _link(feedback_href(course, out, s, lab.name), s) for s in g["examples"]
                )
                rows.append(
                    [
                        e(g["sentence"]),
                        e(KINDS.get(g["kind"], g["kind"])),
                        str(g["count"]),
                        examples,
                    ]
                )
            parts.append(_table(["sentence", "kind", "hand-ins", "for example"], rows, {2}))

        for student in sorted(lab.submissions):
            entry = course.log.get((student, lab.name))
            took = grading_time(entry) if entry else None
            if took is None:
                continue
            times.setdefault(lab.name, []).append(took)
            t = entry.get("timings") or {}
            time_rows.append(
                [student, lab.name, entry.get("graded_at", "")]
                + [
                    number(t.get(k))
                    for k in ("queue", "intake", "autograde", "feedback", "total", "merge")
                ]
                + [number(took)]
            )

    # grading time
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
            _chart(
                times_png(times),
                alt,
                "Seconds each hand-in took: its task (intake, nbgrader autograde, feedback) "
                "plus its merge; time waiting for a worker not counted.",
                "grading-times.csv",
            )
        )
        parts.append(
            _table(
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
    found_runs = runs(course.log_lines)
    save(
        "runs.csv",
        ["began", "ended", "hand_ins", "wall_s", "sum_of_hand_ins_s"],
        [
            [
                r["began"].isoformat(),
                r["ended"].isoformat(),
                r["hand_ins"],
                number(r["wall_s"]),
                number(r["sum_s"]),
            ]
            for r in found_runs
        ],
    )
    if found_runs:
        last = found_runs[-1]
        biggest = max(found_runs, key=lambda r: r["hand_ins"])
        parts.append(
            "<p>"
            + e(
                f"Whole run: the largest run in the log graded {biggest['hand_ins']} "
                f"hand-in(s) in {_duration(biggest['wall_s'])} of wall time (from when its "
                f"first hand-in started, that is its graded_at less its queue wait and "
                f"grading time, to its last graded_at); the hand-ins' own times add up to "
                f"{_duration(biggest['sum_s'])}. The latest run graded {last['hand_ins']} "
                f"hand-in(s) in {_duration(last['wall_s'])}."
            )
            + "</p>"
        )
        parts.append(
            _table(
                ["began", "ended", "hand-ins", "wall time", "sum of hand-ins"],
                [
                    [
                        e(r["began"].strftime("%Y-%m-%d %H:%M:%S")),
                        e(r["ended"].strftime("%Y-%m-%d %H:%M:%S")),
                        str(r["hand_ins"]),
                        e(_duration(r["wall_s"])),
                        e(_duration(r["sum_s"])),
                    ]
                    for r in found_runs[-10:]
                ],
                numeric={2, 3, 4},
            )
        )
        parts.append('<p class=muted>The last 10 runs; all in <a href="runs.csv">runs.csv</a>.</p>')

    # students
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
                    f' <span class=late title="{e(_duration(sub.seconds_late))} late">late</span>'
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
        _table(
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

    page = (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>Class report</title><style>{STYLE}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )
    index = out / "index.html"
    partial = out / ".index.html.partial"
    partial.write_text(page, encoding="utf-8")
    partial.replace(index)
    return Built(index, root / WIDE_CSV, csvs, time.monotonic() - started)


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
