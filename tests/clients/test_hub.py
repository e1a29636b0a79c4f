"""The course on a real JupyterHub (`make hub`, hub/), as its accounts use it.

One hub for the module, started by `make hub`'s own code (`python -m hub start`) with an
instructor and two students, stopped by it afterwards, and the machine checked to be as it
was (no account, group, home or state folder left).

* the term, in headless chromium through the hub: the instructor releases lab01_graph in the
  formgrader; each student fetches it in JupyterLab's Assignments tab, works (student 1 the
  complete answer, student 2 a partial one, handed in after the due date) and submits; the
  instructor collects, autogrades each hand-in, generates and releases feedback; each student
  fetches the feedback and reads the score and the judge's sentences. The scores read equal
  those `make autograde` (graders.grade) gives the same hand-ins, and the late one is late
  in both. Screenshots of each step: test-output/hub/.
* isolation, after the term (or, without chromium, after the same steps by nbgrader's
  commands run as each account): student 2's account tries to list, read, change, rename
  and remove student 1's hand-in and feedback, the released lab, the course's folder in the
  exchange, and the instructor's course files and gradebook: every attempt is refused, and
  the files have the same checksums afterwards.

Needs root (Unix accounts), bubblewrap, npm (the proxy) and chromium; skipped with one
line without them. It takes minutes (lab01_graph is built as the instructor, and graded twice).
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest

from graders.build import source_notebook
from graders.course import REPO
from graders.demo import declared_class, student_notebook

STATE = Path(os.environ.get("COURSE_HUB_STATE", "/srv/dgl-hub"))
SHOTS = REPO / "test-output" / "hub"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LAB = "lab01_graph"  # the browser's lab: the shortest to grade
STEP_MS = 300_000  # the longest one step may take (a server's start, an autograde)

pytestmark = [
    pytest.mark.timeout(1500),
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("bwrap") or not shutil.which("setpriv"),
        reason="the hub needs root (it creates Unix accounts), bubblewrap and setpriv",
    ),
    pytest.mark.skipif(
        not (REPO / "hub" / "node_modules").is_dir() and not shutil.which("npm"),
        reason="the hub's proxy needs npm (`apt-get install npm`)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> dict:
    """What the hub may change on the machine, to compare before and after."""
    return {
        "users": sorted(
            line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines()
        ),
        "groups": sorted(
            line.split(":")[0] for line in Path("/etc/group").read_text().splitlines()
        ),
        "homes": sorted(p.name for p in Path("/home").iterdir()),
        "state": STATE.exists(),
    }


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """`python -m hub start` (what `make hub` runs), with two students; its state."""
    from hub.cli import alive, read_state

    if alive(read_state().get("pid")):
        pytest.skip("a hub runs on this machine already (`make hub-stop` stops it)")
    before = machine()
    log = tmp_path_factory.mktemp("hub") / "hub.log"
    port = free_port()
    argv = [sys.executable, "-m", "hub", "start", "--students", "2", f"--port={port}"]
    argv += ["--labs", LAB]
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while "JupyterHub: http" not in log.read_text():
            if proc.poll() is not None or time.monotonic() - started > 900:
                pytest.fail(f"make hub did not start:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        state = read_state()
        state["base"] = f"http://127.0.0.1:{port}/"
        state["started_s"] = time.monotonic() - started
        print(f"hub usable after {state['started_s']:.0f} s")
        yield state
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)  # Ctrl-C: it stops and removes what it made
            try:
                proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                subprocess.run([sys.executable, "-m", "hub", "stop"], cwd=REPO, timeout=300)
    assert machine() == before, "make hub left the machine changed"


def as_account(hub: dict, name: str, *argv: str) -> subprocess.CompletedProcess:
    from hub.accounts import as_user

    path = f"{Path(hub['python']).parent}:/usr/local/bin:/usr/bin:/bin"
    return as_user(name, list(argv), path=path, timeout=600)


def nbgrader(hub: dict, name: str, *args: str) -> str:
    result = as_account(hub, name, hub["python"], "-m", "nbgrader", *args)
    assert result.returncode == 0, f"{name}: nbgrader {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


def checksums(*roots: Path) -> dict[str, str]:
    sums = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            stat = path.lstat()
            sums[str(path)] = f"{stat.st_mode:o} {stat.st_uid} " + (
                hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            )
    return sums


# ------------------------------------------------------------------ the term, in a browser


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def log_in(browser, hub: dict, name: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(STEP_MS)
    page.goto(hub["base"] + "hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", hub["passwords"][name])
    page.click("#login_submit")
    page.wait_for_url(f"**/user/{name}/lab**", timeout=STEP_MS)
    page.wait_for_selector(".jp-LabShell", timeout=STEP_MS)
    page.wait_for_selector(".lm-MenuBar-itemLabel", timeout=STEP_MS)
    return context, page


def assignments_tab(page):
    """JupyterLab's Assignments tab (nbgrader's menu > Assignment List), its lists loaded."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    page.wait_for_selector("#released_assignments_list")
    page.wait_for_function(
        """() => ['released', 'fetched', 'submitted'].every(kind => {
            const loading = document.getElementById(kind + '_assignments_list_loading');
            return loading && loading.offsetParent === null; })"""
    )


def item(page, section: str, text: str):
    return page.locator(
        f"#{section}_assignments_list .list_item:not(.nested_list_item)", has_text=text
    )


def save_notebook(page, hub: dict, name: str, path: str, nb) -> None:
    """Save a notebook through the account's Jupyter server (what JupyterLab's save does)."""
    status = page.evaluate(
        """async ([url, body]) => {
            const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || '';
            const r = await fetch(url, {method: 'PUT', body, headers: {
                'Content-Type': 'application/json', 'X-XSRFToken': decodeURIComponent(xsrf)}});
            return r.status; }""",
        [
            f"{hub['base']}user/{name}/api/contents/{path}",
            json.dumps({"type": "notebook", "format": "json", "content": nb}),
        ],
    )
    assert status == 200, f"saving {path} as {name}: HTTP {status}"


def hand_in(page, hub: dict, name: str, student, step: str) -> None:
    """Fetch the lab in the Assignments tab, work (the demo student's answers), submit."""
    assignments_tab(page)
    shot(page, f"{step}a-{name}-released")
    item(page, "released", LAB).locator("button", has_text="Fetch").click()
    item(page, "fetched", LAB).wait_for()
    release = nbformat.read(Path(f"/home/{name}/{LAB}/{LAB}.ipynb"), as_version=4)
    answered = student_notebook(student, release, source_notebook(LAB))
    save_notebook(page, hub, name, f"{LAB}/{LAB}.ipynb", json.loads(nbformat.writes(answered)))
    page.goto(f"{hub['base']}user/{name}/lab/tree/{LAB}/{LAB}.ipynb")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    shot(page, f"{step}b-{name}-works")
    assignments_tab(page)
    item(page, "fetched", LAB).locator("button", has_text="Submit").first.click()
    item(page, "submitted", LAB).wait_for()
    shot(page, f"{step}c-{name}-submitted")


def formgrader_action(page, selector: str, done: str, name: str) -> None:
    """Click a formgrader button and wait for its 'Successfully ...' dialog, then close it."""
    page.locator(selector).first.click()
    body = page.locator(".modal-body").last
    body.wait_for(state="visible", timeout=STEP_MS)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.modal-body')].some(b => b.offsetParent && "
        "/Successfully|error/i.test(b.innerText))",
        timeout=STEP_MS,
    )
    text = body.inner_text()
    shot(page, name)
    assert done in text, f"formgrader: {text[:800]}"
    page.locator(".modal-footer button").last.click()
    body.wait_for(state="hidden")


def read_feedback(page, hub: dict, name: str, step: str) -> tuple[float, str]:
    """Fetch feedback in the Assignments tab, open it; the score and the page's text."""
    assignments_tab(page)
    submitted = item(page, "submitted", LAB)
    submitted.locator("button", has_text="Fetch Feedback").click()
    submitted.locator("text=(view feedback)").wait_for()
    shot(page, f"{step}a-{name}-feedback-fetched")
    submitted.locator("text=(view feedback)").click()
    page.wait_for_timeout(1000)
    shot(page, f"{step}b-{name}-feedback-folder")
    (folder,) = Path(f"/home/{name}/{LAB}/feedback").iterdir()  # one hand-in, one feedback
    page.goto(f"{hub['base']}user/{name}/files/{LAB}/feedback/{folder.name}/{LAB}.html")
    text = page.locator("body").inner_text()
    shot(page, f"{step}c-{name}-reads-feedback")
    page.get_by_text("Passed.", exact=True).first.scroll_into_view_if_needed()
    shot(page, f"{step}d-{name}-reads-the-judge")  # a check's sentence, under its code
    score = re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", text)
    assert score, text[:1000]
    return float(score.group(1)), text


def test_a_term_on_the_hub_in_a_browser(hub, tmp_path):
    if CHROMIUM is None:
        pytest.skip("no chromium to drive: `make browser` or `sudo apt-get install chromium`")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    from graders.grade import grade_class

    instructor, (one, two) = hub["instructor"], hub["students"]
    demo = {s.name: s for s in declared_class(LAB)}
    work = {one: demo["complete"], two: demo["partial"]}
    base = hub["base"]
    with sync_api.sync_playwright() as playwright:
        from test_browser import CHROMIUM_ARGS

        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # the instructor releases the lab from the formgrader
            _, teacher = log_in(browser, hub, instructor)
            shot(teacher, "01-instructor-jupyterlab")
            teacher.goto(f"{base}user/{instructor}/formgrader")
            row = f"tr:has(td.name:has-text('{LAB}'))"
            teacher.wait_for_selector(f"{row} td.release a")
            shot(teacher, "02-formgrader")
            formgrader_action(
                teacher, f"{row} td.release a", "Successfully released", "03-released"
            )

            # student 1 fetches, works, submits before the due date
            _, first = log_in(browser, hub, one)
            hand_in(first, hub, one, work[one], "04")
            # the due date: now (after student 1's hand-in, before student 2's)
            # (a whole second, after student 1's timestamp: nbgrader's dates are in seconds)
            due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
            nbgrader(
                hub, instructor, "db", "assignment", "add", LAB,
                f"--duedate={due:%Y-%m-%d %H:%M:%S} UTC",
            )  # fmt: skip
            time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 1)
            _, second = log_in(browser, hub, two)
            hand_in(second, hub, two, work[two], "05")

            # the instructor collects, autogrades each hand-in, makes and releases feedback
            teacher.goto(f"{base}user/{instructor}/formgrader")
            teacher.wait_for_selector(f"{row} td.collect a")
            formgrader_action(
                teacher, f"{row} td.collect a", "Successfully collected", "06-collected"
            )
            teacher.goto(f"{base}user/{instructor}/formgrader/manage_submissions/{LAB}")
            for student in (one, two):
                student_row = f"tr:has(td:has-text('{student}'))"
                teacher.wait_for_selector(f"{student_row} td.autograde a")
                formgrader_action(
                    teacher, f"{student_row} td.autograde a", "Successfully autograded",
                    f"07-autograded-{student}",
                )  # fmt: skip
            teacher.goto(f"{base}user/{instructor}/formgrader")
            teacher.wait_for_selector(f"{row} td.generate-feedback a")
            formgrader_action(
                teacher, f"{row} td.generate-feedback a", "Successfully generated", "08-feedback"
            )
            formgrader_action(
                teacher, f"{row} td.release-feedback a", "Successfully released", "09-released"
            )

            # each student fetches the feedback and reads the score and the judge's sentences
            read = {}
            for step, (student, page) in (("10", (one, first)), ("11", (two, second))):
                read[student], text = read_feedback(page, hub, student, step)
                assert "Passed." in text  # the judge's sentence
                assert "BEGIN HIDDEN TESTS" not in text and "observe(" not in text
        finally:
            browser.close()

    # nbgrader's meaning of late: student 2's hand-in is late, student 1's is not
    from nbgrader.api import Gradebook

    course = Path(hub["course_root"])
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        late = {s: gb.find_submission(LAB, s).total_seconds_late for s in (one, two)}
    assert late[one] == 0 and late[two] > 0, late

    # `make autograde` on the same hand-ins: a copy of the course, everything graded again
    copy = tmp_path / "course"
    shutil.copytree(course, copy, ignore=shutil.ignore_patterns("autograded", "feedback"))
    report = grade_class(copy, labs=[LAB], workers=1, quiet=True, force=True)
    assert not report.problems, report.problems
    graded = {s: report.scores[(s, LAB)] for s in (one, two)}
    assert read == graded, f"students read {read}, make autograde gives {graded}"
    assert read == {s: work[s].score for s in (one, two)}  # the demo class's declared scores
    with Gradebook(f"sqlite:///{copy / 'gradebook.db'}") as gb:
        assert gb.find_submission(LAB, two).total_seconds_late > 0
        assert gb.find_submission(LAB, one).total_seconds_late == 0


def handed_in(hub: dict, student: str) -> tuple[Path | None, Path | None]:
    """The student's hand-in of LAB in the exchange, and their feedback page (the one given
    to their group); None, None where there are none."""
    exchange = Path(hub["exchange"])
    hand_ins = sorted((exchange / "inbound").glob(f"{student}+{LAB}+*"))
    gid = grp.getgrnam(student).gr_gid
    pages = [p for p in (exchange / "feedback").glob("*.html") if p.stat().st_gid == gid]
    if not hand_ins or not pages:
        return None, None
    assert len(pages) == 1, pages
    return hand_ins[-1], pages[0]


def test_a_student_can_reach_nothing_of_another_student_nor_the_instructor(hub):
    instructor, (one, two) = hub["instructor"], hub["students"]
    exchange = Path(hub["exchange"])
    course = Path(hub["course_root"])
    hand_in, feedback = handed_in(hub, one)
    if hand_in is None:  # the term did not run (no chromium): the same steps, by command
        assert not (exchange / "outbound" / LAB).exists(), "the term stopped half-way"
        for name, step in [
            (instructor, "release_assignment"), (one, "fetch_assignment"), (one, "submit"),
            (instructor, "collect"), (instructor, "autograde"), (instructor, "generate_feedback"),
            (instructor, "release_feedback"), (one, "fetch_feedback"),
        ]:  # fmt: skip
            nbgrader(hub, name, step, LAB)
        hand_in, feedback = handed_in(hub, one)
    notebook = hand_in / f"{LAB}.ipynb"
    released = exchange / "outbound" / LAB / f"{LAB}.ipynb"
    home_one = Path(f"/home/{one}")

    # what the accounts may do: the attempts below can succeed where permissions allow
    def allowed(name: str, command: str) -> None:
        result = as_account(hub, name, "/bin/sh", "-c", command)
        assert result.returncode == 0, f"{name} could not: {command}\n{result.stderr}"

    allowed(one, f"cat '{feedback}' > /dev/null")  # a student reads their own feedback
    allowed(two, f"cat '{released}' > /dev/null")  # and the released lab
    allowed(instructor, f"cat '{notebook}' > /dev/null")  # the instructor reads hand-ins

    attempts = {
        "list the hand-ins": f"ls '{exchange / 'inbound'}'",
        "read another's hand-in": f"cat '{notebook}'",
        "read another's timestamp": f"cat '{hand_in / 'timestamp.txt'}'",
        "read another's secret": f"cat '{hand_in / 'submission_secret.txt'}'",
        "add a file to another's hand-in": f"touch '{hand_in / 'extra.txt'}'",
        "change another's hand-in": f"echo x >> '{notebook}'",
        "rename another's hand-in": f"mv '{hand_in}' '{exchange / 'inbound' / 'mine'}'",
        "remove another's hand-in": f"rm -rf '{hand_in}'",
        "list the feedback": f"ls '{exchange / 'feedback'}'",
        "read another's feedback": f"cat '{feedback}'",
        "change another's feedback": f"echo x >> '{feedback}'",
        "remove another's feedback": f"rm -f '{feedback}'",
        "replace the released lab": f"echo x >> '{released}'",
        "add to the release": f"touch '{released.parent / 'extra.txt'}'",
        "rename the course's exchange": f"mv '{exchange}' '{exchange.parent / 'x'}'",
        "list the instructor's course": f"ls '{course}'",
        "read the course's configuration": f"cat '{course / 'nbgrader_config.py'}'",
        "read the gradebook": f"cat '{course / 'gradebook.db'}'",
        "change the gradebook": f"echo x >> '{course / 'gradebook.db'}'",
        "read the solutions": f"cat '{course / 'solutions' / LAB / LAB}.py'",
        "read the collected hand-in": f"ls '{course / 'submitted' / one}'",
        "read another's home": f"ls '{home_one}'",
        "read another's submission cache": f"ls '{home_one / '.local/share/jupyter'}'",
    }
    protected = [exchange, course / "gradebook.db", home_one / LAB]
    before = checksums(*protected)
    succeeded = []
    for what, command in attempts.items():
        result = as_account(hub, two, "/bin/sh", "-c", command)
        if result.returncode == 0:
            succeeded.append(f"{what}: {command}\n{result.stdout[:300]}")
    assert not succeeded, "a student account could:\n" + "\n".join(succeeded)
    assert checksums(*protected) == before
