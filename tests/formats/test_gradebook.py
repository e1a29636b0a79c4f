"""graders/formats/gradebook.py: where a course's gradebook is, how it is opened, and that
only a scratch gradebook skips waiting for the disk."""

from __future__ import annotations

from pathlib import Path

from graders.formats import gradebook


def _pragmas(db) -> tuple[int, str]:
    """SQLite's synchronous level and journal mode on a connection nbgrader would make."""
    from sqlalchemy import create_engine, text

    engine = create_engine(gradebook.url(db))
    try:
        with engine.connect() as connection:
            sync = connection.execute(text("PRAGMA synchronous")).scalar()
            journal = connection.execute(text("PRAGMA journal_mode")).scalar()
    finally:
        engine.dispose()
    return sync, journal.lower()


def test_a_course_gradebook_is_nbgraders_file():
    root = Path("/somewhere/course")
    assert gradebook.of(root) == root / "gradebook.db"
    assert gradebook.url(gradebook.of(root)) == "sqlite:////somewhere/course/gradebook.db"


def test_only_a_scratch_gradebook_is_written_without_waiting_for_the_disk(tmp_path):
    """Read on connections SQLAlchemy makes, as nbgrader's Gradebook makes them (opening an
    nbgrader gradebook costs seconds of its migrations: the class tests do that)."""
    course, task = tmp_path / "course.db", tmp_path / "task.db"
    defaults = _pragmas(course)
    assert defaults[0] != 0 and defaults[1] != "memory"
    with gradebook.scratch(task):
        assert _pragmas(task) == (0, "memory")  # synchronous=OFF, the journal in memory
        assert _pragmas(course) == defaults  # the course's own gradebook keeps SQLite's
    assert _pragmas(task) == defaults  # after: a gradebook like any other again
