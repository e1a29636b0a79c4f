"""graders/report/report_charts.py: each chart a PNG (base64, for the page) drawn from the
typed rows alone, its size from what it shows (no gradebook, no graded class)."""

from __future__ import annotations

import base64
import io

from PIL import Image

from graders.report import report_charts
from graders.report.report_data import Lab
from graders.report.report_numbers import PassRate, ScoreBin


def _size(encoded: str) -> tuple[int, int]:
    data = base64.b64decode(encoded, validate=True)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return Image.open(io.BytesIO(data)).size


def test_the_histogram_is_a_png_of_its_fixed_size_whole_scores_or_ranges():
    lab = Lab("lab1", max_score=5.0)
    whole = [ScoreBin(s, s, n) for s, n in ((0, 1), (2, 1), (5, 1))]
    ranges = [ScoreBin(0, 25, 3), ScoreBin(25, 50, 0), ScoreBin(50, 75, 9)]
    assert _size(report_charts.histogram_png(lab, whole)) == (500, 260)
    assert _size(report_charts.histogram_png(lab, ranges)) == (500, 260)


def test_the_pass_rates_grow_a_row_per_check_and_draw_a_lab_without_hand_ins():
    lab = Lab("lab1", max_score=5.0)
    two = [PassRate("t1", 2.0, 1, 3, 1 / 3), PassRate("t2", 3.0, 0, 0, None)]
    six = [PassRate(f"t{i}", 1.0, i, 6, i / 6) for i in range(6)]
    (w2, h2), (w6, h6) = (
        _size(report_charts.pass_rate_png(lab, two)),
        _size(report_charts.pass_rate_png(lab, six)),
    )
    assert w2 == w6 == 500 and h6 - h2 == round(100 * 0.32 * 4)


def test_the_times_chart_widens_with_its_phases():
    narrow = _size(report_charts.times_png({"execution": [1.0, 2.0]}))
    wide = _size(report_charts.times_png({p: [1.0, 2.0] for p in "abcdef"}))
    assert narrow == (400, 300) and wide[0] > narrow[0] and wide[1] == 300
