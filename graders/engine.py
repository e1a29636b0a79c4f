"""The engine: grading tasks (graders/task.py) run on Dask distributed.

By default `make autograde` starts a local cluster: one worker process per core, one thread
(and one torch thread) each, nothing to set up. Set a scheduler's address instead, with
``--scheduler tcp://host:8786``, the environment variable COURSE_DASK_SCHEDULER, or
``c.GradingEngine.scheduler`` in nbgrader_config.py, and the tasks go to an existing
cluster: ``dask scheduler`` and ``dask worker`` on any machines, dask-jobqueue on
SLURM/PBS, dask-kubernetes. A worker needs the course's Python environment and bubblewrap;
it shares no file system with the instructor's machine: a task gets its inputs as bytes and
gives its results back as data, and the instructor's side merges them, one at a time.

Dask re-runs a task whose worker was lost; a task whose workers die again and again (Dask's
``distributed.scheduler.allowed-failures``, 3 by default) fails with KilledWorker, and the
hand-in is recorded as needing a human look.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from traitlets import Unicode
from traitlets.config import Configurable

from graders.wire import Course, Job, Result

ENV = "COURSE_DASK_SCHEDULER"
# A grading task waits on its kernel; Dask's statistical profiler would sample that wait every
# 10 ms, about 6% of a core per worker (measured on 2 cores). Cluster workers: the same, with
# DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False in their environment.
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}


class GradingEngine(Configurable):
    """Where grading tasks run (nbgrader_config.py: ``c.GradingEngine.scheduler``)."""

    scheduler = Unicode(
        "", help="address of an existing Dask scheduler; empty: a local cluster"
    ).tag(config=True)


def configured_scheduler(config_file: Path) -> str:
    """The scheduler named by the environment, else by nbgrader_config.py, else ''."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    from traitlets.config.loader import PyFileConfigLoader

    try:
        config = PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config()
    except Exception:  # noqa: BLE001 - nbgrader reports a broken config itself
        return ""
    return GradingEngine(config=config).scheduler


@contextmanager
def client(scheduler: str = "", workers: int | None = None) -> Iterator:
    """A Dask client: of the cluster at `scheduler`, or of a local cluster of `workers`."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler, timeout="30s") as connected:
            yield connected
        return
    with (
        dask.config.set(WORKER_CONFIG),
        LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,  # a worker grades one hand-in at a time
            processes=True,
            memory_limit=0,  # the kernels have their own caps (graders/sandbox.py)
            dashboard_address=":0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as local,
    ):
        yield local


def run_all(
    connected,
    course: Course,
    jobs: Iterator[tuple[object, Job]],
    on_result: Callable[[object, Result, float], None],
    window: int,
) -> None:
    """Submit `jobs` ((key, job) pairs), at most `window` at a time, and hand each result to
    `on_result(key, result, submitted_at)` as it arrives. A task that failed in Dask itself
    (its workers kept dying, or the scheduler was lost) gives a result with a reason."""
    import time

    from distributed import as_completed

    from graders.task import run

    shared = connected.scatter(course, broadcast=True)
    pending = {}

    def submit_next() -> bool:
        for key, job in jobs:
            future = connected.submit(run, shared, job, pure=False, retries=0)
            pending[future] = (key, time.time())
            queue.add(future)
            return True
        return False

    queue = as_completed()
    for _ in range(window):
        if not submit_next():
            break
    for future in queue:
        key, submitted = pending.pop(future)
        try:
            result = future.result()
        except Exception as error:  # noqa: BLE001 - KilledWorker, a lost scheduler, ...
            name = type(error).__name__
            if name == "KilledWorker":
                why = "the grading worker died every time it ran this hand-in"
            else:
                why = f"the grading engine failed on it ({name}: {str(error)[:200]})"
            result = Result(ok=False, reason=why, timings={})
        on_result(key, result, submitted)
        submit_next()
