"""Where each hand-in of a class run is graded: on the Dask engine (graders/grade/engine.py), a
local cluster by default or an existing scheduler; and, while the local cluster starts, in
this process, the shortest hand-ins first, so that the first kernel starts at once (one
hand-in alone is graded here with no cluster at all). Each result is handed to the caller's
`merge` as it arrives, one at a time, whichever lane it came from."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from graders.formats.timings import Clock, Phase
from graders.formats.wire import Course, Job, Result
from graders.grade import engine
from graders.grade.class_run import ClassRun
from graders.grade.intake import HandIn

SPAWN_WAIT_S = 30  # past this, the local cluster's workers are awaited without grading here


def grade_here(course: Course, job: Job) -> Result:
    """One grading task in this process, as a worker runs it (graders.grade.task.run: its kernel in
    the sandbox, everything as data; it writes nothing of this process's environment)."""
    from graders.grade import task

    return task.run(course, job)


class _Queue:
    """The hand-ins left to grade, taken from either end by two lanes at once: the engine
    takes the longest first, this process (while the local cluster starts) the shortest."""

    def __init__(self, jobs) -> None:
        self._jobs = deque(jobs)
        self._lock = threading.Lock()

    def first(self):
        while True:
            with self._lock:
                if not self._jobs:
                    return
                item = self._jobs.popleft()
            yield item

    def last(self):
        with self._lock:
            return self._jobs.pop() if self._jobs else None


def run_tasks(
    scheduler: str | None,
    workers: int,
    course: Course,
    jobs: Iterator[tuple[HandIn, Job]],
    merge: Callable[[HandIn, Result], None],
    run: ClassRun,
    total: int,
    say: Callable[..., None],
    local: engine.LocalCluster | None = None,
) -> threading.Thread | None:
    """Grade `jobs` ((hand-in, Job) pairs) on the engine, handing each result to
    `merge(hand_in, result)` as it arrives, one at a time; an interrupted or lost engine ends
    the run with what was merged so far (`run.interrupted` says why).

    Without a scheduler, the local cluster (`local`, started by the caller as early as it
    could, else here) comes up while this process grades the shortest hand-ins itself, one at
    a time, until the cluster is ready: the first kernel starts at once, and one hand-in
    alone is graded here with no cluster at all. Returns the thread that ends the local
    cluster (join it), or None."""
    start = time.monotonic()
    merging = threading.Lock()  # one result merged at a time, whichever lane it came from
    closed = threading.Event()  # the run is over: a late result is not merged

    def arrived(hand_in: HandIn, result: Result, submitted: float) -> None:
        took, clock = result.setdefault("timings", {}), result.get("clock") or Clock()
        if clock.started_at is not None:
            took[Phase.QUEUE] = max(0.0, clock.started_at - submitted)
        kernel_up = clock.kernel_up_at
        took[Phase.INTAKE] = took.get(Phase.INTAKE, 0.0) + hand_in.intake_s
        with merging:
            if closed.is_set():
                return
            if kernel_up is not None:
                after = max(0.0, kernel_up - run.started_at)
                run.first_kernel_s = min(run.first_kernel_s or after, after)
            merge(hand_in, result)
            run.graded += 1
            elapsed = time.monotonic() - start
            eta = elapsed / run.graded * (total - run.graded)
            say(f"  [{run.graded}/{total}] {hand_in.student}/{hand_in.lab}  "
                f"{elapsed:.0f}s, ETA {eta:.0f}s")  # fmt: skip

    def here(item) -> None:
        hand_in, job = item
        arrived(hand_in, grade_here(course, job), time.time())

    queue = _Queue(jobs)
    try:
        if scheduler and total:
            with engine.client(scheduler, workers) as connected:
                _engine_lane(connected, course, queue, arrived, run, say)
        elif total:
            if local is None and total > 1:
                local = engine.LocalCluster(cluster_size(workers, total))
            if local is not None:
                _local_lanes(local, course, queue, arrived, here, closed, run, say)
            for item in iter(queue.last, None):  # alone, or the cluster did not start
                here(item)
    except KeyboardInterrupt:
        run.interrupted = "interrupted"
    except OSError as error:  # the scheduler could not be reached, or was lost
        run.interrupted = f"lost the grading engine ({error})"
    with merging:
        closed.set()
    if run.interrupted:
        say(f"{run.interrupted} after {run.graded} of {total} hand-in(s): what was graded "
            "is in the gradebook; run the same command again to grade the rest")  # fmt: skip
    return local.close() if local is not None else None


def _local_lanes(local, course, queue, arrived, here, closed, run, say) -> None:
    """The local cluster takes the longest hand-ins once it is up; meanwhile, from the time
    its workers are spawned, this process grades the shortest, one at a time."""

    def shortest_while_starting() -> None:
        if not local.wait_spawned(timeout=SPAWN_WAIT_S):
            return
        while not closed.is_set() and not local.ready():
            item = queue.last()
            if item is None:
                return
            here(item)

    lane = threading.Thread(target=shortest_while_starting, daemon=True)
    lane.start()
    try:
        connected = local.client()
    except OSError as error:  # the caller grades the rest here, one at a time
        say(f"note: {error}; grading here, one hand-in at a time")
        connected = None
    if connected is not None:
        _engine_lane(connected, course, queue, arrived, run, say)
    lane.join()


def _engine_lane(connected, course, queue, arrived, run, say) -> None:
    run.dashboard = connected.dashboard_link
    say(f"Dask dashboard: {run.dashboard}")
    window = 2 * max(1, len(connected.scheduler_info().get("workers", {}))) + 2
    engine.run_all(connected, course, queue.first(), arrived, window)


def cluster_size(workers: int, hand_ins: int) -> int:
    """Workers of the local cluster for `hand_ins`: at most `workers`, and no more than the
    hand-ins left once this process has graded the first one while the cluster starts."""
    return max(1, min(workers, hand_ins - 1))
