"""The class report's section for each lab: its scores and the pass rate of each check
(pictures, tables, CSVs), and why checks failed (the judge's sentences, counted)."""

from __future__ import annotations

import statistics
from pathlib import Path
from urllib.parse import quote

from graders.formats.gradelog import GRADING_LOG
from graders.formats.verdict import Kind
from graders.report.report_charts import histogram_png, pass_rate_png
from graders.report.report_data import ClassData, Lab
from graders.report.report_html import (
    Files,
    chart,
    e,
    feedback_href,
    file_name,
    link,
    table,
)
from graders.report.report_numbers import (
    EXAMPLES,
    failures,
    histogram,
    number,
    pass_rates,
    passed,
)

KINDS = {  # a verdict's kind (graders/formats/verdict.py), in words
    Kind.VISIBLE: "a visible check failed",
    Kind.HIDDEN: "a hidden check failed",
    Kind.RECORDS: "records could not be read",
    Kind.LIMIT: "stopped at a limit",
    Kind.NOT_ANSWERED: "not answered",
}


def lab_section(course: ClassData, out: Path, files: Files, lab: Lab) -> list[str]:
    """One lab: its scores and pass rates (pictures, tables, CSVs), then why checks failed."""
    parts: list[str] = []
    stem = file_name(lab.name)
    parts.append(f'<h2 id="lab-{e(stem)}">{e(lab.name)}</h2>')
    scores = [s.score for s in lab.submissions.values()]
    if not scores:
        parts.append("<p>No hand-ins in the gradebook.</p>")
        return parts
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
    parts += _lab_charts(lab, files, stem)

    parts += _failures_section(course, out, files, lab, stem)
    return parts


def _lab_charts(lab: Lab, files: Files, stem: str) -> list[str]:
    """A lab's score histogram and each check's pass rate: pictures, tables and CSVs."""
    save = files.save
    parts: list[str] = []
    bins = histogram(lab)
    hist_csv = save(
        f"{stem}-scores.csv",
        ["score_from", "score_to", "hand_ins"],
        [[number(b.score_from), number(b.score_to), b.hand_ins] for b in bins],
    )
    label = [
        number(b.score_from)
        if b.score_from == b.score_to
        else f"{number(b.score_from)} to {number(b.score_to)}"
        for b in bins
    ]
    alt = f"Histogram of {lab.name} scores: " + "; ".join(
        f"{text}: {b.hand_ins}" for text, b in zip(label, bins, strict=True) if b.hand_ins
    )
    rates = pass_rates(lab)
    rate_csv = save(
        f"{stem}-pass-rates.csv",
        ["grade_id", "points", "passed", "hand_ins", "pass_rate"],
        [
            [
                r.grade_id,
                number(r.points),
                r.passed,
                r.hand_ins,
                number(r.pass_rate),
            ]
            for r in rates
        ],
    )
    rate_alt = f"Pass rate of each check of {lab.name}, in notebook order: " + "; ".join(
        f"{r.grade_id} {r.passed} of {r.hand_ins}" for r in rates
    )
    parts.append('<div class="charts">')
    parts.append(
        chart(
            histogram_png(lab, bins),
            alt,
            f"Scores of {lab.name} (after any late penalty, as in grades.csv).",
            hist_csv,
        )
    )
    parts.append(
        table(
            ["score", "hand-ins"],
            [[e(t), str(b.hand_ins)] for t, b in zip(label, bins, strict=True)],
            numeric={0, 1},
        )
    )
    parts.append(
        chart(
            pass_rate_png(lab, rates),
            rate_alt,
            f"Hand-ins with full points on each check, in the order of the notebook "
            f"(order from {lab.order_from}).",
            rate_csv,
        )
    )
    parts.append(
        table(
            ["check", "points", "passed", "pass rate"],
            [
                [
                    e(r.grade_id),
                    number(r.points),
                    f"{r.passed}/{r.hand_ins}",
                    f"{100 * r.pass_rate:.0f}%" if r.pass_rate is not None else "",
                ]
                for r in rates
            ],
            numeric={1, 2, 3},
        )
    )
    parts.append("</div>")
    return parts


def _failures_section(course: ClassData, out: Path, files: Files, lab: Lab, stem: str) -> list[str]:
    """The judge's failure sentences of each check of `lab`, counted, with examples."""
    save = files.save
    parts: list[str] = []
    found = failures(course, lab)
    logged = sum((s, lab.name) in course.log for s in lab.submissions)
    with_verdicts = sum(
        bool(course.log.get((s, lab.name), {}).get("verdicts")) for s in lab.submissions
    )
    fail_csv = save(
        f"{stem}-failures.csv",
        ["grade_id", "kind", "sentence", "hand_ins", "example_1", "example_2"],
        [
            [key, g.kind, g.sentence, g.count, *(g.examples + ["", ""])[:EXAMPLES]]
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
        count = sum(g.count for g in groups)
        parts.append(
            f"<h4>{e(key)} <span class=muted>({e(number(points))} points): "
            f"{count} failed</span></h4>"
        )
        if not groups:
            continue
        rows = []
        for g in groups:
            examples = ", ".join(
                link(feedback_href(course, out, s, lab.name), s) for s in g.examples
            )
            rows.append(
                [
                    e(g.sentence),
                    e(KINDS.get(g.kind, g.kind)),
                    str(g.count),
                    examples,
                ]
            )
        parts.append(table(["sentence", "kind", "hand-ins", "for example"], rows, {2}))
    return parts
