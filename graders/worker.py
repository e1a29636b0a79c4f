"""A grading worker: one long-lived process that runs grading tasks (graders/task.py) one
after another through nbgrader's own Python API, so a class run pays for nbgrader's start-up
once per worker instead of once per hand-in.

The engine (graders/grade.py) starts one per worker thread (`Worker`) and talks to it in
JSON lines: a task's job on the worker's stdin, its result on its stdout. Everything else
the worker or nbgrader prints goes to stderr (a log file). The notebook's kernel is started
by nbgrader, in the sandbox (graders/sandbox.py), one per hand-in; the worker itself runs
only the instructor's code.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

from graders.course import REPO
from graders.nbgrader_cli import nbgrader_env


def serve() -> int:
    from graders.task import grade, make_api_factory

    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not break replies
    api_for = make_api_factory(REPO / "nbgrader_config.py")
    for line in sys.stdin:
        result = grade(api_for, json.loads(line))
        replies.write(json.dumps(result) + "\n")
        replies.flush()
    return 0


class Worker:
    """The grader's end of one worker process; a new process replaces one that died or hung."""

    def __init__(self, log: Path):
        self.log = log
        self.process: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        with open(self.log, "a") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "graders.worker"],
                cwd=REPO,  # `-m` puts it on sys.path: graders.* import
                env=nbgrader_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    def run(self, job: dict, timeout: float) -> dict:
        """The result of one task; raises subprocess.TimeoutExpired after `timeout` s."""
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else None
        if line is None:
            self.process.kill()
            self.close()
            raise subprocess.TimeoutExpired("graders.worker", timeout)
        if not line:  # the worker died: its last words are in the log
            self.process.kill()
            self.close()
            return {"ok": False, "reason": "the grading process died; see " + str(self.log)}
        return json.loads(line)

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()  # the worker's loop ends: it exits by itself
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


if __name__ == "__main__":
    sys.exit(serve())
