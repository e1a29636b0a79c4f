"""The engine (graders/grade/engine.py): where the scheduler comes from, and how run_all hands out
tasks: at most `window` at a time, each result to the grader as it arrives, and a task that
failed in Dask itself as a result with a reason. (A real cluster, `dask scheduler` and
`dask worker` processes: tests/clients/test_dask_cluster.py.)"""

from __future__ import annotations

import threading

import pytest

from graders.grade import engine, task

pytestmark = pytest.mark.timeout(300)


def test_the_scheduler_comes_from_the_config_only(tmp_path, monkeypatch):
    config = tmp_path / "nbgrader_config.py"
    config.write_text('c = get_config()\nc.GradingEngine.scheduler = "tcp://from-config:8786"\n')
    assert engine.configured_scheduler(config) == "tcp://from-config:8786"
    monkeypatch.setenv("COURSE_DASK_SCHEDULER", "tcp://from-env:8786")  # no longer read
    assert engine.configured_scheduler(config) == "tcp://from-config:8786"
    assert "scheduler" in engine.GradingEngine.class_get_help()  # documented with help=
    config.write_text("this is not python(\n")
    assert engine.configured_scheduler(config) == ""  # nbgrader says what is wrong itself
    config.write_text("c = get_config()\n")
    assert engine.configured_scheduler(config) == ""  # a local cluster


RUNNING = {"now": 0, "most": 0}
LOCK = threading.Lock()


def fake_run(course, job):
    """task.run's stand-in: counts how many run at once; a job named 'crash' raises."""
    import time

    with LOCK:
        RUNNING["now"] += 1
        RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
    time.sleep(0.05)
    with LOCK:
        RUNNING["now"] -= 1
    if job["lab"] == "crash":
        raise RuntimeError("worker lost")
    return {"ok": True, "timings": {}, "lab": job["lab"], "shared": course["config"]}


def test_run_all_keeps_a_window_and_turns_a_failed_task_into_a_reason(monkeypatch):
    from distributed import Client

    monkeypatch.setattr(task, "run", fake_run)  # in-process workers see the same module
    jobs = [(i, {"lab": "crash" if i == 3 else f"lab{i}"}) for i in range(8)]
    arrived = {}
    with Client(processes=False, n_workers=1, threads_per_worker=4, dashboard_address=":0") as c:
        engine.run_all(
            c, {"config": "shared"}, iter(jobs), lambda k, r, t: arrived.update({k: r}), 2
        )
    assert sorted(arrived) == list(range(8))
    assert RUNNING["most"] <= 2  # never more than the window at once
    assert all(arrived[i]["ok"] and arrived[i]["shared"] == "shared" for i in arrived if i != 3)
    assert arrived[3]["ok"] is False
    assert arrived[3]["reason"].startswith("the grading engine failed on it (RuntimeError")
