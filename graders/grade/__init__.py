"""The class run: every hand-in under submitted/ graded into the gradebook, on a Dask cluster
(``python -m graders.grade``, ``make autograde``; `grade`: ``grade_class``, ``main``). It finds
the hand-ins without trusting their folders (`intake`: ``discover``, ``HandIn``, ``Problem``),
gathers what every task shares and what each grade depends on (`inputs`: ``course_inputs``,
``hand_in_key``), hands the tasks to the cluster as they fit (`dispatch`: ``run_tasks``;
`engine`: ``run_all``, with `warm` preloaded by each local worker), grades one hand-in in a
scratch nbgrader course with the sandbox and the judge (`task`: ``run``, ``grade``), merges
each result under the real student's name (`merge`) and tells the run's outcome (`class_run`:
``ClassRun``, timings.csv). Imports the sandbox, the judge, the formats and the settings,
never the build or the report."""

__all__ = ["class_run", "dispatch", "engine", "grade", "inputs", "intake", "merge", "task", "warm"]
