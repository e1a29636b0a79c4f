"""The kernel cannot get out of its sandbox: it sees nothing secret, changes nothing of the
course, follows no link out, and holds its memory, process, disk and /tmp limits.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hostile_class import (
    LAB,
    SECRET,
    SECRET_NAME,
    TEST_CELLS,
    VENV_HOME,
    outputs,
    reported,
    snapshot,
    ways_to_the_allowed,
)

from graders.build.demo import declared_class
from graders.config.course import REPO, SOLUTIONS
from graders.sandbox import sandbox_argv, sandbox_host


def test_nothing_submitted_built_or_in_solutions_was_modified(graded):
    root, _scores, _report, before = graded
    assert snapshot(root) == before


def test_gradebook_is_intact_and_complete(graded):
    root, scores, report, _before = graded
    with sqlite3.connect(root / "gradebook.db") as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    demo = {s.name: s.score for s in declared_class(LAB)}
    assert {name: report.scores[(name, LAB)] for name in demo} == demo


def test_adversaries_were_contained(graded):
    root, _scores, report, _before = graded
    assert "NETWORK: unreachable" in outputs(root, "network_call")
    assert "PLANTED" in outputs(root, "plants_for_next_kernel")  # written, and harmed nobody
    written = outputs(root, "overwrites_gradebook")
    assert "WROTE" not in written and written.count("REFUSED") == 4
    assert len(outputs(root, "prints_100mb")) < 100_000
    # nbgrader alone would have passed these cells; the judge, outside the kernel, did not
    for trick in ("replaced_run_cell", "patched_comparisons"):
        verdicts = report.verdicts[(trick, LAB)]
        failed = {g for g, v in verdicts.items() if v.kind != "passed"}
        assert failed >= set(TEST_CELLS[:3]), f"{trick}: {verdicts}"
    dead = [p for p in report.problems if "os_exit" in p.where]
    assert dead and "kernel died" in dead[0].reason


def test_links_are_never_followed(graded):
    root, _scores, report, _before = graded
    problems = {p.where: p.reason for p in report.problems}
    solution_link = f"submitted/notebook_links_to_solution/{LAB}/{LAB}.ipynb"
    assert "symbolic link" in problems[solution_link]
    assert "recorded as 0" in problems[solution_link]
    assert "not a regular file" in problems[f"submitted/notebook_is_a_pipe/{LAB}/{LAB}.ipynb"]
    assert "a link" in problems[f"submitted/lab_folder_is_a_link/{LAB}"]
    assert "a link" in problems["submitted/student_folder_is_a_link"]
    assert ("student_folder_is_a_link", LAB) not in report.scores
    # links beside a notebook are named and ignored; the hand-in is graded from its bytes
    notes = {p.where: p.reason for p in report.notes}
    beside = notes[f"submitted/links_everywhere/{LAB}"]
    assert "all_submissions" in beside and "everything" in beside
    assert report.timings[("links_everywhere", LAB)]["intake"] < 5  # nothing was copied
    # the links the kernel made went nowhere: nothing read through them, nothing on the host
    made = reported(root, "links_everywhere", "LINKS")
    assert made["read"] == []
    # in its working folder, to each target, and in place of its own notebook; none in its
    # sockets' folder, the one host folder it shares with the grader (read-only by then).
    # Where the course lies under /tmp on the host, the kernel can make the course's folders
    # in its own private /tmp and a link there: on the host that path is never a link
    assert len([m for m in made["made"] if m.startswith("/home/student/")]) >= 5, made
    elsewhere = [m for m in made["made"] if not m.startswith("/home/student/")]
    assert f"{LAB}.ipynb" in elsewhere, made
    for path in set(elsewhere) - {f"{LAB}.ipynb"}:
        assert path.startswith("/tmp/") and str(root).startswith("/tmp/"), made
        assert not Path(path).is_symlink(), path
    for kind in ("autograded", "feedback"):
        links = [p for p in (root / kind).rglob("*") if p.is_symlink()]
        assert links == [], links
    # the graded notebook, and the hand-in's timestamp as nbgrader's autograde keeps it
    kept = sorted(p.name for p in (root / "autograded" / "links_everywhere" / LAB).iterdir())
    assert kept in ([f"{LAB}.ipynb"], [f"{LAB}.ipynb", "timestamp.txt"]), kept


def test_the_sandbox_shows_nothing_secret_and_holds_its_limits(graded):
    root, scores, report, _before = graded
    assert report.scores[("sandbox_probe", LAB)] == scores["sandbox_probe"] == 10
    probe = reported(root, "sandbox_probe", "SECRETS")
    assert probe["uid"] != 0 and probe["euid"] != 0 and probe["gid"] != 0
    assert probe["read"] == dict.fromkeys(probe["read"], False), probe["read"]
    listed = probe["listed"]
    for folder in ("/root", str(REPO), f"{REPO}/graders", str(VENV_HOME)):  # the ways in only
        assert set(listed[folder] or []) <= ways_to_the_allowed(folder), (folder, listed)
    assert set(listed["/etc"] or []) <= {"ld.so.cache", "localtime"}, listed
    assert listed["/home"] == ["student"]
    assert listed[str(SOLUTIONS)] is None and listed[str(root)] is None
    assert probe["secret_seen_in"] == []
    assert SECRET_NAME not in probe["environ"]
    assert SECRET not in outputs(root, "sandbox_probe")
    assert not probe["proc_1_environ"]
    forks = reported(root, "sandbox_probe", "FORKS")
    assert 0 < forks["started"] < sandbox_argv.PROCESS_CAP and forks["error"] == "EAGAIN", forks
    shm = reported(root, "sandbox_probe", "FILLS")["shm"]
    assert shm["mib"] <= sandbox_argv.SHM_BYTES >> 20 and shm["error"] in ("ENOSPC", "EFBIG"), shm


def test_memory_over_many_processes_is_capped_together(graded):
    root, _scores, _report, _before = graded
    if sandbox_host.memory_groups().why_not is not None:
        pytest.skip("no cgroup on this machine: the hog would take 12 GiB")
    hog = reported(root, "sandbox_probe", "HOG")
    assert hog["children"] == 8
    # never more than the cap at once: 8 x 1.5 GiB is twice GROUP_MEMORY_BYTES
    assert hog["holding_at_the_end"] * 1.5 * 2**30 < sandbox_argv.GROUP_MEMORY_BYTES, hog
    # either the cap killed some, or (a slow machine) they had not all got their memory yet
    assert hog["killed_by_the_cap"] > 0 or hog["allocated"] < 4, hog


def test_the_kernel_cannot_fill_the_hosts_disk(graded):
    root, _scores, _report, _before = graded
    private = reported(root, "sandbox_probe", "FILLS")["private"]
    assert private["mib"] <= 16, private


def test_the_kernels_tmp_is_capped_like_its_working_folder(graded):
    root, _scores, _report, _before = graded
    tmp = reported(root, "sandbox_probe", "FILLS")["tmp"]
    assert tmp["mib"] <= sandbox_argv.WORKDIR_BYTES >> 20, tmp
