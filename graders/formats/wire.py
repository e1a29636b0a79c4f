"""What crosses between the instructor's side (graders.grade.grade, graders.grade.merge) and a
grading task (graders.grade.task), on whichever machine the engine (graders.grade.engine) runs
it: plain data only, since a task shares no file system with the instructor.

* `Course`: what every task of a class run shares (graders.grade.inputs.course_inputs makes it);
* `Job`: one hand-in (graders.grade makes it; graders.grade.task.run adds `LocalJob`'s paths);
* `Result`: what a task gives back (graders.grade.task.grade), merged by graders.grade.merge;

The phases' durations and the task's timings file are graders/formats/timings.py's, the
sandbox's events file graders/formats/events.py's.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from graders.formats.records import Observations
from graders.formats.references import ReferenceFile
from graders.formats.timings import Clock, Durations
from graders.formats.verdict import Verdicts


class Course(TypedDict):
    """By assignment (a lab, or an instructor's own), then by notebook name (a lab has one,
    named after it; an instructor's assignment any number)."""

    config: str  # nbgrader_config.py's text
    gradebook: bytes  # the assignments-only gradebook (no students)
    references: dict[str, dict[str, Observations]]  # the solution's records
    releases: dict[str, dict[str, str]]  # the released notebooks' text
    # the release's other files and folders: each regular file by its path in the release
    # folder ("data.txt", "data/train.csv"), as bytes; never a link
    files: dict[str, dict[str, bytes]]
    # the solution's times (graders.formats.references.times), for the per-notebook budgets
    timings: NotRequired[dict[str, dict[str, ReferenceFile]]]
    # c.CourseData.root, resolved once by the class run (None: each worker's data/cache)
    data_root: NotRequired[str | None]


class Job(TypedDict):
    lab: str  # the assignment
    notebooks: dict[str, str]  # the hand-in's notebooks by name (those it holds), text
    timestamp: str | None  # nbgrader's timestamp.txt, when handed in with one
    cell_timeout: int | None  # seconds per cell, flat (None: the per-lab budgets)
    budget_s: float | None  # the whole notebook, flat (None: the per-lab budgets)
    feedback: bool  # make the feedback page too


class LocalJob(Job, total=False):
    """A job with what graders.grade.task.run unpacked of the Course on the worker's disk."""

    gradebook: str
    reference_dir: str
    files: list[str]  # the released files and folders, put in the kernel's working folder
    data_root: str | None
    releases: dict[str, str]  # the released notebooks by name, text
    scratch_root: str


class GradeScores(TypedDict):
    auto_score: float | None
    manual_score: float | None
    extra_credit: float | None
    needs_manual_grade: bool


class NotebookScores(TypedDict):
    late_penalty: float | None
    grades: dict[str, GradeScores]  # by grade cell's name
    comments: dict[str, str | None]  # by cell's name: nbgrader's auto comment


class Scores(TypedDict):
    timestamp: str | None  # ISO
    notebooks: dict[str, NotebookScores]  # by notebook name


class Result(TypedDict, total=False):
    ok: bool
    reason: str | None  # why not ok
    timings: Durations  # seconds by phase (graders/formats/timings.py)
    clock: Clock  # when the task began and its first kernel was up
    verdicts: Verdicts  # by grade_id (a notebook of several: "<notebook>/<grade_id>")
    scores: Scores
    autograded: dict[str, str]  # the graded notebooks by name, text
    feedback: dict[str, str]  # the feedback pages by notebook name, HTML
    feedback_problem: str  # why there is no feedback page
