"""The engine: grading tasks (graders/grade/task.py) run on Dask distributed.

By default `make autograde` starts a local cluster: one worker process per core, one thread
(and one torch thread) each, nothing to set up. It starts in a thread of its own
(`LocalCluster`), its workers importing what a task needs as they start (graders/grade/warm.py),
while the class run goes on (graders/grade/grade.py grades the first hand-ins itself meanwhile). Set
a scheduler's address instead, with ``--scheduler tcp://host:8786`` or
``c.GradingEngine.scheduler`` in nbgrader_config.py, and the tasks go
to an existing cluster: ``dask scheduler`` and ``dask worker`` on any machines, dask-jobqueue
on SLURM/PBS, dask-kubernetes. A worker needs the course's Python environment and bubblewrap;
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

from graders.formats.wire import Course, Job, Result

# A grading task waits on its kernel; Dask's statistical profiler would sample that wait every
# 10 ms, about 6% of a core per worker (measured on 2 cores). Cluster workers: the same, with
# DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False in their environment.
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}


class GradingEngine(Configurable):
    """Where grading tasks run (nbgrader_config.py: ``c.GradingEngine.scheduler``)."""

    scheduler = Unicode(
        "",
        help=(
            "Address of an existing Dask scheduler (tcp://host:8786) whose workers grade the "
            "class; empty: a local cluster of this machine's cores. `python -m graders.grade "
            "--scheduler` overrides it for one run."
        ),
    ).tag(config=True)


def configured_scheduler(config_file: Path) -> str:
    """The scheduler named by nbgrader_config.py, else ''."""
    from traitlets.config.loader import PyFileConfigLoader

    try:
        config = PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config()
    except Exception:  # noqa: BLE001 - nbgrader reports a broken config itself
        return ""
    return GradingEngine(config=config).scheduler


@contextmanager
def client(scheduler: str = "", workers: int | None = None) -> Iterator:
    """A Dask client: of the cluster at `scheduler`, or of a local cluster of `workers`."""
    from distributed import Client

    if scheduler:
        with Client(scheduler, timeout="30s") as connected:
            yield connected
        return
    local = LocalCluster(workers)
    try:
        yield local.client()
    finally:
        local.close().join()


# What a local worker imports as it starts (graders/grade/warm.py), while the instructor's side is
# still reading the hand-ins: its first task then starts its kernel at once.
PRELOAD = ["graders.grade.warm"]


class LocalCluster:
    """A local Dask cluster, started in a thread of its own as soon as it is made: one worker
    process per core (one thread each: a worker grades one hand-in at a time), no memory
    limit (the kernels have their own caps, graders/sandbox/sandbox.py), Dask's profiler off, and
    Dask's own log quiet below CRITICAL (a worker whose scheduler closes first logs a traceback;
    what went wrong with a hand-in reaches the instructor as its result). Whoever
    made it goes on meanwhile; `client()` waits for it, `ready()` says whether it is up,
    `close()` ends it in the background (join the thread it returns to wait)."""

    def __init__(self, workers: int | None = None) -> None:
        import threading

        self.workers = workers or os.cpu_count() or 1
        self._up = threading.Event()
        self._made: tuple | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, args=(self.workers,), daemon=True)
        self._thread.start()

    def _start(self, workers: int) -> None:
        try:
            import dask
            from distributed import Client
            from distributed import LocalCluster as Cluster

            with dask.config.set(WORKER_CONFIG):
                cluster = Cluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    memory_limit=0,
                    dashboard_address=":0",
                    silence_logs=logging.CRITICAL,
                    preload=PRELOAD,
                )
            self._made = (cluster, Client(cluster))
        except BaseException as error:  # noqa: BLE001 - told to whoever waits for it
            self._error = error
        finally:
            self._up.set()

    def ready(self) -> bool:
        """Whether the cluster is up (or failed to start: `client()` then raises)."""
        return self._up.is_set()

    def wait_spawned(self, timeout: float) -> bool:
        """Wait until its worker processes are started (or it is up, or failed): each takes
        this process's working folder with it, which a grading task run here changes while
        its notebook runs (nbgrader's converters chdir into their course). False after
        `timeout` seconds."""
        import multiprocessing
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.ready() or len(multiprocessing.active_children()) >= self.workers:
                return True
            time.sleep(0.05)
        return False

    def client(self):
        """The cluster's client, once it is up; raises OSError when it could not start."""
        self._up.wait()
        if self._made is None:
            raise OSError(f"the local Dask cluster did not start ({self._error!r})")
        return self._made[1]

    def close(self):
        """End the cluster in a thread (returned: join it to wait for the end)."""
        import threading

        def end() -> None:
            self._thread.join()
            if self._made is not None:
                cluster, connected = self._made
                for step in (connected.close, cluster.close):
                    try:
                        step()
                    except Exception:  # noqa: BLE001 - ending it never costs a grade
                        pass

        ending = threading.Thread(target=end, daemon=True)
        ending.start()
        return ending


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

    from graders.grade.task import run

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
