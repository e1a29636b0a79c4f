"""The grader's end of a worker process: a worker that hangs or dies costs one submission,
never the class run (the grading itself is tested in test_grading and test_adversarial)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graders.worker import Worker


def fake(code: str):
    """A Worker whose process runs `code` instead of graders.worker."""

    def start(self):
        return subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    return start


def test_a_hung_worker_times_out_and_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setattr(Worker, "_start", fake("import time; time.sleep(60)"))
    worker = Worker(tmp_path / "worker.log")
    with pytest.raises(subprocess.TimeoutExpired):
        worker.run({"lab": "lab"}, timeout=1)
    assert worker.process is None  # killed; the next job starts a new one
    monkeypatch.setattr(
        Worker,
        "_start",
        fake("import sys; sys.stdin.readline(); print('{\"ok\": true}')"),
    )
    assert worker.run({"lab": "lab"}, timeout=10) == {"ok": True}
    worker.close()


def test_a_dead_worker_is_a_failed_job_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(Worker, "_start", fake("import sys; sys.stdin.readline(); sys.exit(3)"))
    worker = Worker(tmp_path / "worker.log")
    result = worker.run({"lab": "lab"}, timeout=10)
    assert not result["ok"] and "the grading process died" in result["reason"]
    assert "worker.log" in result["reason"]
    assert worker.process is None
