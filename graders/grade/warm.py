"""Imported by each local Dask worker as it starts (graders.grade.engine.PRELOAD): what every
grading task needs, so that a worker's first task starts its kernel at once instead of
importing nbgrader, nbconvert and the sandbox first. It only imports."""

from __future__ import annotations

import nbconvert.exporters.html  # noqa: F401 - generate_feedback's page
import nbgrader.apps  # noqa: F401 - autograde and generate_feedback

import graders.grade.task  # noqa: F401
import graders.judge.feedback  # noqa: F401
import graders.judge.judge  # noqa: F401
import graders.sandbox.sandbox  # noqa: F401
