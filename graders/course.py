"""Where things are: the labs of the course and the folders of the nbgrader course."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"


def lab_source(lab: str) -> Path:
    return SOLUTIONS / lab / f"{lab}.py"


# A lab exists when its text source exists; the order is the order of the course.
LABS = sorted(p.name for p in SOLUTIONS.iterdir() if lab_source(p.name).is_file())
