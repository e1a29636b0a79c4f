"""Where things are: the labs of the course and the folders of the nbgrader course."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions"
# An instructor's own assignments: ordinary nbgrader source notebooks written in Jupyter (any
# number, any names), with the files and folders they read, in assignments/<name>/. `make
# build` copies each into nbgrader's source folder (build/source/<name>/) beside the labs.
ASSIGNMENTS_DIR = REPO / "assignments"


def lab_source(lab: str) -> Path:
    return SOLUTIONS / lab / f"{lab}.py"


# A lab exists when its text source exists; the order is the order of the course.
LABS = sorted(p.name for p in SOLUTIONS.iterdir() if lab_source(p.name).is_file())


def own_assignments(folder: Path = ASSIGNMENTS_DIR) -> list[str]:
    """The instructor's assignments: each folder of `folder` that holds a notebook."""
    if not folder.is_dir():
        return []
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.is_dir() and not p.name.startswith(".") and any(p.glob("*.ipynb"))
    )


def notebooks(folder: Path) -> list[str]:
    """The names (without .ipynb) of the notebooks of an assignment's folder, in order."""
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.ipynb") if p.is_file())


def unknown_labs(labs: list[str]) -> str | None:
    """A one-line complaint about the names in `labs` that are not labs, or None."""
    unknown = sorted(set(labs) - set(LABS))
    if unknown:
        return f"no such lab: {', '.join(unknown)} (labs: {', '.join(LABS)})"
    return None


def prepare_data(labs: list[str]) -> dict[str, str]:
    """Environment for the kernels: where the course data lives (prepared once, here)."""
    import os

    env = {}
    if "lab05_dynamicnet" in labs:
        try:
            from data import mnist
        except ImportError:
            return env
        root = Path(os.environ.get("COURSE_DATA_ROOT", REPO / "data" / "cache"))
        mnist.prepare(root)
        env["COURSE_DATA_ROOT"] = str(root)
    return env
