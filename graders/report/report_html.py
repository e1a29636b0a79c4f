"""The class report's building blocks: escaped HTML (tables, figures, links), durations in
words, relative links into the course, and the files the report writes (CSVs, index.html)."""

from __future__ import annotations

import csv
import html
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from graders.report.report_data import ClassData

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


def table(header: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
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


def chart(data: str, alt: str, caption: str, csv_name: str) -> str:
    link = f'<a href="{e(quote(csv_name))}">{e(csv_name)}</a>'
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{e(alt)}">'
        f"<figcaption>{e(caption)} Numbers: {link}</figcaption></figure>"
    )


def link(target: str | None, text: str) -> str:
    return f'<a href="{e(target)}">{e(text)}</a>' if target else e(text)


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"


def href(course: ClassData, out: Path, *parts: str) -> str | None:
    """A relative link from the report folder `out` to root/<parts...> (each part URL-quoted,
    whatever characters it holds), or None where there is nothing."""
    if not course.root.joinpath(*parts).exists():
        return None
    base = os.path.relpath(course.root, out).replace(os.sep, "/")
    return "/".join([quote(base, safe="/"), *(quote(p, safe="") for p in parts)])


def feedback_href(course: ClassData, out: Path, student: str, lab: str) -> str | None:
    """feedback/<student>/<lab>/<lab>.html, relative to the report, or None; for an
    assignment of several notebooks (none named after it), its first notebook's page."""
    found = href(course, out, "feedback", student, lab, f"{lab}.html")
    folder = course.root / "feedback" / student / lab
    if found is None and folder.is_dir() and not folder.is_symlink():
        pages = sorted(p.name for p in folder.glob("*.html") if p.is_file())
        found = href(course, out, "feedback", student, lab, pages[0]) if pages else None
    return found


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


@dataclass
class Files:
    """The report's folder, and the CSV files written into it."""

    out: Path
    csvs: list[Path] = field(default_factory=list)

    def save(self, name: str, header: list[str], rows: list[list]) -> str:
        self.csvs.append(write_csv(self.out / name, header, rows))
        return name


def write_page(out: Path, parts: list[str]) -> Path:
    """index.html in `out`, written whole or not at all."""
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
    return index
