"""The class report's pictures: matplotlib (Agg) figures as base64 PNGs, from the rows
graders/report/report_numbers.py computes."""

from __future__ import annotations

import base64
import io

from graders.report.report_data import Lab
from graders.report.report_numbers import PassRate, ScoreBin, number


def png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def histogram_png(lab: Lab, rows: list[ScoreBin]) -> str:
    fig = _figure(5.0, 2.6)
    ax = fig.add_subplot()
    if rows and rows[0].score_from == rows[0].score_to:
        ax.bar([r.score_from for r in rows], [r.hand_ins for r in rows], width=0.8)
        ax.set_xticks([r.score_from for r in rows])
    else:
        lefts = [r.score_from for r in rows]
        widths = [r.score_to - r.score_from for r in rows]
        ax.bar(lefts, [r.hand_ins for r in rows], width=widths, align="edge")
    ax.set_xlabel(f"score (max {number(lab.max_score)})")
    ax.set_ylabel("hand-ins")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{lab.name}: scores", fontsize=10)
    return png(fig)


def pass_rate_png(lab: Lab, rows: list[PassRate]) -> str:
    fig = _figure(5.0, 0.9 + 0.32 * max(len(rows), 1))
    ax = fig.add_subplot()
    names = [r.grade_id for r in rows]
    rates = [100 * (r.pass_rate or 0.0) for r in rows]
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
