"""The files and messages the grader's steps hand each other, each defined here by the one
module that owns it, with a typed record, and importing nothing of the course but the MIME
type of the kernel side's records: a test cell's verdict (`verdict`: ``Verdict``, ``Kind``),
a hidden test's records (`records`: ``Record``, ``Observations``), a lab's reference file
(`references`: ``ReferenceFile``, a task's copy) and the time budgets drawn from its cell
times (`budgets`: ``CellTime``, ``plan``), a hand-in's phases and their durations, kept apart
from clock times (`timings`: ``Phase``, ``Clock``, the task's timings file), what a grading
task gets and gives back (`wire`: ``Course``, ``Job``, ``LocalJob``, ``Result``, ``Scores``),
the sandbox's kills of kernels over budget (`events`: ``Kill``),
the grading log (`gradelog`: ``LogEntry``), the gradebook's file (`gradebook`) and grades.csv
(`export`: ``QuotedCsvExport``)."""

__all__ = [
    "budgets",
    "events",
    "export",
    "gradebook",
    "gradelog",
    "records",
    "references",
    "timings",
    "verdict",
    "wire",
]
