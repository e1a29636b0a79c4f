"""The gradebook's location: nbgrader's SQLite file of a course, and how to open it.

Every module that reads or writes a gradebook (grade, merge, task, report_data) opens it here,
so its file name and its SQLAlchemy URL are written once. A task's scratch gradebook (one
hand-in's copy, thrown away after) is written without waiting for the disk (`scratch`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GRADEBOOK = "gradebook.db"  # in the course folder (nbgrader's default name)
_SCRATCH: set[str] = set()  # the scratch gradebooks open now in this process (real paths)


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


def _no_waiting_for_the_disk(connection, _record) -> None:
    """SQLAlchemy's connect event, for every engine of this process: a scratch gradebook's
    connection neither syncs nor keeps a journal file (nbgrader commits about 50 times per
    hand-in, each a few waits for the disk); every other gradebook keeps SQLite's defaults."""
    if not _SCRATCH:
        return
    row = connection.execute("PRAGMA database_list").fetchone()
    if row and row[2] and os.path.realpath(row[2]) in _SCRATCH:
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute("PRAGMA journal_mode=MEMORY")


@contextmanager
def scratch(db: Path) -> Iterator[Path]:
    """While inside: `db` is a scratch gradebook, thrown away after, so what nbgrader writes
    to it is not waited for (a crash loses it, which costs nothing: the task is run again)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _no_waiting_for_the_disk):
        event.listen(Engine, "connect", _no_waiting_for_the_disk)
    key = os.path.realpath(db)
    _SCRATCH.add(key)
    try:
        yield db
    finally:
        _SCRATCH.discard(key)
