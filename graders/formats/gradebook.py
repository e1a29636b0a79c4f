"""The gradebook's location: nbgrader's SQLite file of a course, and how to open it.

Every module that reads or writes a gradebook (grade, merge, task, report_data) opens it here,
so its file name and its SQLAlchemy URL are written once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GRADEBOOK = "gradebook.db"  # in the course folder (nbgrader's default name)


def of(root: Path) -> Path:
    """The gradebook of the course at `root`."""
    return root / GRADEBOOK


def url(db: Path) -> str:
    """nbgrader's (SQLAlchemy's) address of the gradebook file `db`."""
    return f"sqlite:///{db}"


@contextmanager
def opened(db: Path) -> Iterator:
    """nbgrader's Gradebook on the file `db`, closed (and committed by nbgrader) after."""
    from nbgrader.api import Gradebook

    with Gradebook(url(db)) as gb:
        yield gb
