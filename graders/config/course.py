"""Where things are: the labs of the course and the folders of the nbgrader course."""

from __future__ import annotations

from pathlib import Path

from traitlets import Unicode
from traitlets.config import Config, Configurable

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


class CourseData(Configurable):
    """Where the course's data lives (nbgrader_config.py: ``c.CourseData.root``)."""

    root = Unicode(
        "",
        help=(
            "Folder of the course's data (lab 5's MNIST, under MNIST/raw/), prepared there once "
            "by each grading process (`python -m data.mnist ROOT` does it by hand) and given "
            "read-only to the kernels that grade, which find it as $COURSE_DATA_ROOT. On a Dask "
            "worker it is that machine's folder. Empty: data/cache beside the course."
        ),
    ).tag(config=True)


def configured_data_root(config: Config | None = None) -> Path:
    """The data root `config` names (c.CourseData.root; None: nbgrader_config.py's), else
    data/cache beside the course."""
    if config is None:
        from traitlets.config.loader import PyFileConfigLoader

        file = REPO / "nbgrader_config.py"
        try:
            config = PyFileConfigLoader(file.name, path=str(file.parent)).load_config()
        except Exception:  # noqa: BLE001 - nbgrader reports a broken config itself
            config = Config()
    return Path(CourseData(config=config).root or REPO / "data" / "cache")


def prepare_data(labs: list[str], root: Path | str | None = None) -> dict[str, str]:
    """Environment for the kernels: where the course data lives (`root`, resolved once by the
    caller from the configuration; None: `configured_data_root()`), prepared there once."""
    env = {}
    if "lab05_dynamicnet" in labs:
        try:
            from data import mnist
        except ImportError:
            return env
        root = Path(root) if root else configured_data_root()
        mnist.prepare(root)
        env["COURSE_DATA_ROOT"] = str(root)  # the kernel's own environment: the lab reads it
    return env
