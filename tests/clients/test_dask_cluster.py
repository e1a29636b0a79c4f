"""Grading on a cluster: a real `dask scheduler` and two `dask worker` processes, each started
as a separate process in a folder of its own outside the repository, sharing no folder with
the course. A lab's demo class is graded through them with its declared scores (those
`make demo` holds the local run to); an interrupted run, run again, grades only what is
missing, and a worker killed mid-run costs nothing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import reference_cache, share_references

from graders.build.build import build
from graders.build.demo import write_class
from graders.config.course import REPO
from graders.formats.gradelog import GRADING_LOG
from graders.grade.class_run import read_scores

LABS = ["lab01_graph"]  # its demo class: 9 hand-ins, of the lab whose notebook runs quickest
DASK = str(Path(sys.executable).parent / "dask")
# A guard against a hang, not a speed test: the test's own time only, not its fixtures'.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900, func_only=True)]


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.is_file() or not path.read_text().strip():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path_factory):
    """A scheduler and two single-threaded workers, each in a folder of its own."""
    base = tmp_path_factory.mktemp("cluster")
    folders = {name: base / name for name in ("scheduler", "worker-1", "worker-2")}
    for folder in folders.values():
        folder.mkdir()
    address_file = folders["scheduler"] / "scheduler.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    processes = [
        subprocess.Popen(
            [
                DASK,
                "scheduler",
                "--port",
                "0",
                "--dashboard-address",
                ":0",
                "--scheduler-file",
                str(address_file),
            ],
            cwd=folders["scheduler"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    ]
    wait_for(address_file)
    address = json.loads(address_file.read_text())["address"]
    for name in ("worker-1", "worker-2"):
        processes.append(
            subprocess.Popen(
                [
                    DASK,
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--no-nanny",
                    "--local-directory",
                    str(folders[name]),
                    "--name",
                    name,
                ],
                cwd=folders[name],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
        )
    from distributed import Client

    with Client(address, timeout="60s") as client:
        client.wait_for_workers(2, timeout=120)
    yield address, processes[1:]
    for process in processes:
        process.kill()
        process.wait()


def ctrl_c_works() -> None:
    """In the child before exec: Ctrl-C's default. A shell without job control starts its
    background commands with SIGINT ignored (`make test &` in a script), the children
    inherit that, and Python then installs no KeyboardInterrupt: the run could not be
    interrupted the way an instructor's terminal interrupts it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def grade_cli(root: Path, address: str, labs: list[str] = LABS) -> subprocess.Popen:
    argv = [sys.executable, "-m", "graders.grade", "--root", str(root), "--scheduler", address]
    argv += [arg for lab in labs for arg in ("--lab", lab)]
    return subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=ctrl_c_works,
    )


def log_lines(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / GRADING_LOG).read_text().splitlines()]


def test_a_cluster_grades_like_the_local_run_resumes_and_survives_a_lost_worker(
    cluster, tmp_path, tmp_path_factory
):
    """One class, two runs on the cluster: the first interrupted (Ctrl-C) after three
    hand-ins, the second, the same command again, grades only the rest while one of the two
    workers is killed for good; the class ends with its declared scores, each hand-in graded
    once. (One cluster and one course for both: each costs the suite about half a minute.)"""
    address, workers = cluster
    root = tmp_path / "course"
    build(root=root, labs=LABS, release=root / "labs")
    share_references(root, LABS, reference_cache(tmp_path_factory))
    students = write_class(root, LABS, root / "labs")
    assert len(students) >= 8, "too small a class to stop after 3 and lose a worker after 2"
    run = grade_cli(root, address)
    out = []
    for line in run.stdout:
        out.append(line)
        if "[3/" in line:
            run.send_signal(signal.SIGINT)  # Ctrl-C
    assert run.wait() == 130, "".join(out)
    assert "run the same command again" in "".join(out)
    with sqlite3.connect(root / "gradebook.db") as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    first = log_lines(root)
    assert 3 <= len(first) <= len(students) - 4, "".join(out)

    again = grade_cli(root, address)
    out = []
    for line in again.stdout:
        out.append(line)
        if "[2/" in line and workers[0].poll() is None:  # mid-run: lose a worker for good
            workers[0].kill()
    text = "".join(out)
    assert again.wait() == 0, text
    assert workers[0].poll() is not None, "the worker was not killed mid-run"
    assert f"({len(first)} already graded" in text
    assert "Traceback" not in text and "needs a human look" not in text, text
    logged = [(e["student"], e["lab"]) for e in log_lines(root)]
    assert sorted(logged) == sorted((s.name, s.lab) for s in students), "graded twice or lost"
    scores, _ = read_scores(root, LABS)
    assert scores == {(s.name, s.lab): s.score for s in students}  # as make demo's are
