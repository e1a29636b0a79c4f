"""Where a class run's hand-ins are graded (graders/grade/dispatch.py): one alone here with no
cluster, the shortest here while the local cluster starts and the longest on it, each merged
once; the whole class here when the cluster does not start; this process's environment left
as it was."""

from __future__ import annotations

from graders.formats.timings import Clock


class FakeCluster:
    """engine.LocalCluster's stand-in: up after `up_after` hand-ins were graded here (None:
    it fails to start)."""

    made: list = []

    def __init__(self, workers, up_after=1, graded=None):
        self.workers, self.up_after, self.graded, self.closed = workers, up_after, graded, False
        FakeCluster.made.append(self)

    def wait_spawned(self, timeout):
        return True

    def ready(self):
        return self.up_after is None or len(self.graded) >= self.up_after

    def client(self):
        while not self.ready():
            import time

            time.sleep(0.01)
        if self.up_after is None:
            raise OSError("the local Dask cluster did not start (fake)")
        return "client"

    def close(self):
        import threading

        self.closed = True
        ending = threading.Thread(target=lambda: None)
        ending.start()
        return ending


def lanes(monkeypatch, count, up_after):
    """run_tasks on `count` fake hand-ins (h0 the longest): who graded what, in order."""
    from graders.grade import dispatch, engine
    from graders.grade.class_run import ClassRun
    from graders.grade.intake import HandIn

    here, on_engine, merged = [], [], []
    FakeCluster.made = []
    monkeypatch.setattr(
        engine, "LocalCluster", lambda workers: FakeCluster(workers, up_after, here)
    )

    def grade_here(course, job):
        here.append(job["lab"])
        return {"ok": True, "timings": {}, "clock": Clock(kernel_up_at=1.0)}

    def run_all(connected, course, jobs, arrived, window):
        for hand_in, job in jobs:
            on_engine.append(job["lab"])
            arrived(hand_in, {"ok": True, "timings": {}, "clock": Clock(started_at=0.0)}, 0.0)

    monkeypatch.setattr(dispatch, "grade_here", grade_here)
    monkeypatch.setattr(engine, "run_all", run_all)
    monkeypatch.setattr(dispatch, "_engine_lane", lambda c, course, queue, arrived, run, say: (
        run_all(c, course, queue.first(), arrived, 2)))  # fmt: skip
    hand_ins = [HandIn("s", f"h{i}", b"{}") for i in range(count)]
    jobs = ((h, {"lab": h.lab}) for h in hand_ins)
    run = ClassRun(started_at=0.0)
    merge = lambda hand_in, result: merged.append(hand_in.lab)  # noqa: E731
    ending = dispatch.run_tasks("", 2, {}, jobs, merge, run, count, lambda *a: None)
    if ending is not None:
        ending.join()
    return here, on_engine, merged, run


def test_one_hand_in_is_graded_here_without_a_cluster(monkeypatch):
    here, on_engine, merged, run = lanes(monkeypatch, 1, up_after=0)
    assert (here, on_engine, merged) == (["h0"], [], ["h0"])
    assert FakeCluster.made == [] and run.graded == 1
    assert run.first_kernel_s == 1.0  # its kernel_up_at, from the run's start


def test_the_shortest_are_graded_here_while_the_cluster_starts(monkeypatch):
    here, on_engine, merged, run = lanes(monkeypatch, 5, up_after=2)
    assert here == ["h4", "h3"]  # from the end of the queue: the shortest labs
    assert on_engine == ["h0", "h1", "h2"]  # the engine takes the longest first
    assert sorted(merged) == [f"h{i}" for i in range(5)] and run.graded == 5  # each once
    assert [c.workers for c in FakeCluster.made] == [2] and FakeCluster.made[0].closed
    here, on_engine, merged, run = lanes(monkeypatch, 2, up_after=1)
    assert (here, on_engine) == (["h1"], ["h0"])
    assert [c.workers for c in FakeCluster.made] == [1]  # one hand-in is left for it


def test_a_cluster_that_does_not_start_leaves_the_class_graded_here(monkeypatch):
    here, on_engine, merged, run = lanes(monkeypatch, 3, up_after=None)
    assert on_engine == [] and sorted(here) == ["h0", "h1", "h2"] and run.graded == 3
    assert run.interrupted is None
