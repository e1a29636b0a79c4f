"""A grading worker: one long-lived process that autogrades one submission after another
through nbgrader's own Python API (``NbGraderAPI.autograde``), so a class run pays for
nbgrader's start-up once per worker instead of once per submission.

graders.grade starts one per worker thread (`Worker`) and talks to it in JSON lines:

* job, on the worker's stdin: ``{"root": scratch course, "lab": ..., "student": ...,
  "env": {...}, "cell_timeout": seconds or null}``;
* reply, on its stdout: ``{"success": bool, "log": nbgrader's log}``.

Everything else the worker or nbgrader prints goes to stderr (a log file). The notebook's
kernel is still started by nbgrader, in the sandbox (graders/sandbox.py), one per
submission; the worker itself runs only the instructor's code.
"""

from __future__ import annotations

import copy
import json
import os
import select
import subprocess
import sys
from pathlib import Path

from graders.build import nbgrader_env
from graders.course import REPO


def serve() -> int:
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not break replies
    base = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    for line in sys.stdin:
        job = json.loads(line)
        os.environ.update(job["env"])
        config = copy.deepcopy(base)
        config.CourseDirectory.root = job["root"]
        if job.get("cell_timeout"):
            config.Execute.timeout = job["cell_timeout"]
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        result = api.autograde(job["lab"], job["student"], force=True, create=True)
        log = result.get("log", "") + "\n" + result.get("error", "")
        replies.write(json.dumps({"success": bool(result.get("success")), "log": log}) + "\n")
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

    def autograde(self, job: dict, timeout: float) -> tuple[bool, str]:
        """(success, log) of one job; raises subprocess.TimeoutExpired after `timeout` s."""
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
            return False, "the grading process died; see " + str(self.log)
        reply = json.loads(line)
        return reply["success"], reply["log"]

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
