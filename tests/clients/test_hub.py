"""The course on a real JupyterHub (`make hub`, hub/), as its accounts use it.

One hub for the module, started by `make hub`'s own code (`python -m hub start`) with an
instructor and one student, stopped by it afterwards, and the machine checked to be as it
was (no account, group, home or state folder left). The commands that return at once
(add-student, remove-student, backup, destroy, restore) are called in this process, through
the same `python -m hub` entry point (`hub.cli.main`).

* the term, in headless chromium through the hub: the instructor releases lab01_graph in the
  formgrader; student 2 joins the term then (`make hub-add-student`, the hub running); each
  student fetches the lab in JupyterLab's Assignments tab, works (student 1 the complete
  answer, student 2 a partial one, handed in after the due date and backdated) and
  submits; the instructor collects in the formgrader, autogrades the late hand-in with the
  formgrader's button, runs `make autograde` (student 1's) and `make report` in a
  JupyterLab terminal, reads the lateness in the formgrader, generates and releases
  feedback; each student fetches the feedback and reads the score, the judge's sentences
  and their lateness. Screenshots of each step: test-output/hub/.
* a stop and a start mid-term; isolation (student 2 tries to reach what is not theirs);
  the walk of every file a student can read; nbgrader's own collect against forgeries, a
  backdate and a race; backup and restore into a fresh hub; then student 2 leaves
  (`make hub-remove-student`) and nothing of theirs is left but the instructor's record.

Needs root (Unix accounts), bubblewrap, npm (the proxy) and chromium; skipped with one
line without them. It takes minutes (lab01_graph is built as the instructor and graded).
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import os
import pwd
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

from graders.build.build import source_notebook
from graders.build.demo import declared_class, student_notebook
from graders.config.course import REPO

STATE = Path(os.environ.get("COURSE_HUB_STATE", "/srv/dgl-hub"))
SHOTS = REPO / "test-output" / "hub"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LAB = "lab01_graph"  # the browser's lab: the shortest to grade
LATER = "lab02_backprop"  # built with it (as `make hub` does), released only at the term's end
# the longest one step may take (a server's start, an autograde); shorter in a run that is
# meant to fail (against older code), so that it holds the machine less
STEP_MS = int(os.environ.get("HUB_STEP_MS", 300_000))

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


def start_hub(log: Path, port: int) -> tuple[subprocess.Popen, float]:
    """`python -m hub start` (what `make hub` runs); it and the seconds to a hub that answers."""
    argv = [sys.executable, "-m", "hub", "start", "--students", "1", f"--port={port}"]
    argv += ["--labs", LAB, LATER]
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    while "JupyterHub: http" not in log.read_text():
        if proc.poll() is not None or time.monotonic() - started > 900:
            pytest.fail(f"make hub did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    return proc, time.monotonic() - started


def stop_hub(proc: subprocess.Popen) -> float:
    """Ctrl-C to `make hub`; the seconds it took to stop."""
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    proc.wait(timeout=180)
    return time.monotonic() - started


def leftovers() -> list[str]:
    """What hub accounts left in the shared temporary folders (by their names and uids)."""
    from hub.accounts import hub_accounts
    from hub.cli import leftovers as found

    names = set(hub_accounts())
    return [str(p) for p in found({pwd.getpwnam(n).pw_uid for n in names}, names)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """`python -m hub start` (what `make hub` runs), with two students; its state. At the end
    Ctrl-C, then `make hub-destroy`: the machine is as it was, nothing left in /tmp."""
    from hub.cli import alive, read_state
    from hub.cli import main as hub_command

    if alive(read_state().get("pid")) or read_state():
        pytest.skip("a hub or a term is on this machine already (`make hub-destroy`)")
    before = machine()
    log = tmp_path_factory.mktemp("hub") / "hub.log"
    port = free_port()
    state = {}
    try:
        proc, took = start_hub(log, port)
        state.update(read_state(), base=f"http://127.0.0.1:{port}/", started_s=took, proc=proc)
        state["log"], state["port"] = log, port
        print(f"hub usable after {took:.0f} s")
        yield state
    finally:
        proc = state.get("proc")
        if proc is not None and proc.poll() is None:
            try:
                stop_hub(proc)
            except subprocess.TimeoutExpired:
                pass
        left = leftovers()
        hub_command(["destroy"])  # what `make hub-destroy` runs
    assert machine() == before, "make hub-destroy left the machine changed"
    assert not [p for p in left if Path(p).exists()], "make hub-destroy left files in /tmp"


# student 2 joins the term once it runs (`make hub-add-student`, the hub running, the lab
# released, the instructor's server started): then logs in, fetches, hands in and reads
# feedback in the browser like student 1, and leaves at the end (`make hub-remove-student`)
MID_TERM = ("dgl-student2", "Ada", "Lovelace")


def join_mid_term(hub: dict) -> str:
    """`make hub-add-student` of student 2, once; their account's name."""
    from hub.cli import main as hub_command
    from hub.cli import read_state

    name, first, last = MID_TERM
    if name not in hub["students"]:
        assert hub_command(["add-student", name, f"--first={first}", f"--last={last}"]) == 0
        hub["students"].append(name)
        hub["passwords"][name] = read_state()["passwords"][name]
    return name


def as_account(hub: dict, name: str, *argv: str, **kwargs) -> subprocess.CompletedProcess:
    """argv as the account; a student's inside the view their server runs in (hub/runtime.py)."""
    from hub.accounts import as_user
    from hub.runtime import student_view

    path = f"{Path(hub['python']).parent}:/usr/local/bin:/usr/bin:/bin"
    if name != hub["instructor"]:
        argv = (*student_view(f"/home/{name}", STATE), *argv)
    kwargs.setdefault("timeout", 600)
    return as_user(name, list(argv), path=path, **kwargs)


def in_terminal(page, hub: dict, name: str, script: str, limit_s: float = 120) -> str:
    """Run a shell script in a JupyterLab terminal of `name`'s server (the page is logged in
    as them): what a student types; its output (it writes ~/.probe/out, then ~/.probe/done)."""
    probe = Path(f"/home/{name}/.probe")
    shutil.rmtree(probe, ignore_errors=True)
    command = f"mkdir -p ~/.probe; ( {script} ) > ~/.probe/out 2>&1; touch ~/.probe/done"
    page.evaluate(
        """async ([base, name, command]) => {
            const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || '';
            const r = await fetch(`${base}user/${name}/api/terminals`, {method: 'POST',
                headers: {'X-XSRFToken': decodeURIComponent(xsrf)}});
            const t = await r.json();
            const ws = new WebSocket(
                `${base.replace('http', 'ws')}user/${name}/terminals/websocket/${t.name}`);
            await new Promise((ok, no) => { ws.onopen = ok; ws.onerror = no; });
            ws.send(JSON.stringify(['stdin', command + '\\r']));
        }""",
        [hub["base"], name, command],
    )
    deadline = time.monotonic() + limit_s
    while not (probe / "done").exists():
        assert time.monotonic() < deadline, f"{name}'s terminal did not finish: {script}"
        time.sleep(0.1)
    return (probe / "out").read_text()


# the student's own hand-in, made by hand after the due date: named to sort after any other,
# its timestamp.txt saying a time long before the due date, its files' times set back too
# (with the secret of their last hand-in by nbgrader, from their cache: to fetch feedback)
BACKDATE = """
e='{two}+{lab}+2099-12-31 00:00:00.000000 UTC+early'
cache=~/.local/share/jupyter/nbgrader_cache/{course}
last=$(ls -t $cache | grep '^{two}+{lab}+' | head -1)
cd {inbound} && rm -rf "$e" 2>/dev/null; mkdir "$e" && cp ~/{lab}/{lab}.ipynb "$e/" \\
  && cp "$cache/$last/submission_secret.txt" "$e/" \\
  && echo '2000-01-01 00:00:00.000000 UTC' > "$e/timestamp.txt" \\
  && touch -d 2000-01-01 "$e"/* "$e" && echo backdated
"""

FORGE = """
cd {inbound}
# a hand-in named for the classmate, later than theirs, with a timestamp.txt of its own
forged={one}+{lab}+2099-01-01\\ 00:00:00.000000\\ UTC+forged
mkdir "$forged" && cp ~/{lab}/{lab}.ipynb "$forged/" && echo '2099-01-01 00:00:00.000000 UTC' \\
  > "$forged/timestamp.txt" && echo made forgery
# one as a link to the student's own work, named for the classmate
ln -s ~/{lab} '{one}+{lab}+2099-01-02 00:00:00.000000 UTC+link' && echo made link
# a file where nbgrader expects a folder, and a name nbgrader cannot parse
touch '{one}+{lab}+not-a-time+x' && echo made junk
# a folder of their own in the exchange's root, which anyone may write (nbgrader's 1777)
mkdir ../../squat && echo made squat
{backdate}
echo "the checkout: $(ls {repo} 2>&1 | head -1)"
echo "the instructor's course: $(ls {course} 2>&1 | head -1)"
echo "processes: $(ls /proc | grep -c '^[0-9]')"
"""


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


def begin_log_in(browser, hub: dict, name: str):
    """JupyterHub's login form, filled in and sent as `name`: the hub starts their server,
    and the browser opens their JupyterLab, while the test goes on (`end_log_in` waits)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(STEP_MS)
    page.goto(hub["base"] + "hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", hub["passwords"][name])
    page.click("#login_submit")
    return page


def end_log_in(page, name: str):
    """The page `begin_log_in` sent, once it shows `name`'s JupyterLab."""
    page.wait_for_url(f"**/user/{name}/lab**", timeout=STEP_MS)
    page.wait_for_selector(".jp-LabShell", timeout=STEP_MS)
    page.wait_for_selector(".lm-MenuBar-itemLabel", timeout=STEP_MS)
    return page


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
    assignments_tab(page)  # the tab again: its lists read anew
    item(page, "fetched", LAB).locator("button", has_text="Submit").first.click()
    item(page, "submitted", LAB).wait_for()
    shot(page, f"{step}c-{name}-submitted")


def formgrader_action(page, selector: str, done: str, name: str) -> str:
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
    return text


def read_feedback(page, hub: dict, name: str, step: str) -> tuple[float, str]:
    """Fetch feedback in the Assignments tab, open it; the score and the page's text."""
    assignments_tab(page)
    submitted = item(page, "submitted", LAB)
    submitted.locator("button", has_text="Fetch Feedback").click()
    submitted.locator("text=(view feedback)").wait_for()
    shot(page, f"{step}a-{name}-feedback-fetched")
    (folder,) = Path(f"/home/{name}/{LAB}/feedback").iterdir()  # one hand-in, one feedback
    page.goto(f"{hub['base']}user/{name}/files/{LAB}/feedback/{folder.name}/{LAB}.html")
    text = page.locator("body").inner_text()
    shot(page, f"{step}c-{name}-reads-feedback")
    page.get_by_text("Passed.", exact=True).first.scroll_into_view_if_needed()
    shot(page, f"{step}d-{name}-reads-the-judge")  # a check's sentence, under its code
    score = re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", text)
    assert score, text[:1000]
    return float(score.group(1)), text


def test_a_term_on_the_hub_in_a_browser(hub):
    if CHROMIUM is None:
        pytest.skip("no chromium to drive: `make browser` or `sudo apt-get install chromium`")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    instructor, one, two = hub["instructor"], hub["students"][0], MID_TERM[0]
    demo = {s.name: s for s in declared_class(LAB)}
    work = {one: demo["complete"], two: demo["partial"]}
    base = hub["base"]
    with sync_api.sync_playwright() as playwright:
        from test_browser import CHROMIUM_ARGS

        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # the instructor and student 1 log in; their servers start together
            teacher, first = (begin_log_in(browser, hub, n) for n in (instructor, one))
            # the instructor releases the lab from the formgrader
            end_log_in(teacher, instructor)
            shot(teacher, "01-instructor-jupyterlab")
            # the formgrader opens inside JupyterLab, from nbgrader's menu
            teacher.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
            teacher.get_by_text("Formgrader", exact=True).click()
            frame = teacher.frame_locator("iframe").first
            frame.locator("text=Manage Assignments").first.wait_for()
            shot(teacher, "01b-formgrader-in-jupyterlab")
            teacher.goto(f"{base}user/{instructor}/formgrader")
            row = f"tr:has(td.name:has-text('{LAB}'))"
            later = f"tr:has(td.name:has-text('{LATER}'))"
            teacher.wait_for_selector(f"{row} td.release a")
            teacher.wait_for_selector(f"{later} td.release a")  # built, to release later
            shot(teacher, "02-formgrader")
            # a lab enters the gradebook when it is released, not when it is built: no
            # total, grades.csv or report counts a lab the students were not given
            course = Path(hub["course_root"])
            assert gradebook_points(course) == {}, gradebook_points(course)
            formgrader_action(
                teacher, f"{row} td.release a", "Successfully released", "03-released"
            )
            points = gradebook_points(course)
            assert list(points) == [LAB] and points[LAB] > 0, points
            # mid-term, the hub and the instructor's server running: student 2 joins
            # (`make hub-add-student`) and logs in; they hand in late and read their feedback
            # below, in the browser as student 1 does
            assert join_mid_term(hub) == two
            second = begin_log_in(browser, hub, two)

            # student 1 fetches, works, submits before the due date
            end_log_in(first, one)
            hand_in(first, hub, one, work[one], "04")
            # the due date: now (after student 1's hand-in, before student 2's, which waits
            # for it to pass; a whole second after student 1's timestamp, since nbgrader's
            # dates are in seconds; the gradebook says below that it held)
            due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
            set_due_date(course, due)
            end_log_in(second, two)
            while datetime.now(UTC) <= due:
                time.sleep(0.1)
            hand_in(second, hub, two, work[two], "05")

            # student 2, in a JupyterLab terminal: a hand-in named for student 1 (three
            # ways), and their own late hand-in backdated (its name, timestamp.txt, mtimes)
            inbound = Path(hub["exchange"]) / "inbound"
            backdate = BACKDATE.format(inbound=inbound, two=two, lab=LAB, course=hub["course_id"])
            said = in_terminal(second, hub, two, FORGE.format(
                inbound=inbound, lab=LAB, one=one, backdate=backdate, repo=REPO,
                course=hub["course_root"],
            ))  # fmt: skip
            for done in ("made forgery", "made link", "made junk", "made squat", "backdated"):
                assert done in said, said
            # the server's view: no checkout, no instructor's course, its own processes
            assert "the checkout: ls: cannot access" in said, said
            assert "the instructor's course: ls: cannot access" in said, said
            assert int(said.rsplit("processes: ", 1)[1].split()[0]) < 15, said

            # the instructor collects, autogrades each hand-in, makes and releases feedback
            teacher.goto(f"{base}user/{instructor}/formgrader")
            teacher.wait_for_selector(f"{row} td.collect a")
            # student 2 forging as the button works
            with racing(hub, "race-formgrader", most=100):
                collected = formgrader_action(
                    teacher, f"{row} td.collect a", "Successfully collected", "06-collected"
                )
            refused = [line for line in collected.splitlines() if "Refused" in line]
            raced = [line for line in refused if "+race-formgrader" in line]
            forged = [line for line in refused if line not in raced]
            assert len(forged) == 3, collected  # the forgery, the link, the file
            assert all(one in line for line in forged), forged
            assert sum(f"handed in by {two}" in line for line in forged) == 1, forged
            assert raced and all(f"named for {one} but was handed in by {two}" in x for x in raced)
            # each hand-in graded once, each by one of the two ways: the formgrader's
            # Autograde button (nbgrader's own autograde) on the late one, then, in the
            # instructor's terminal, the course's Python and commands in the course:
            # `make autograde` on student 1's, `make report` the class report and the
            # grades CSV (the whole gradebook: both students)
            teacher.goto(f"{base}user/{instructor}/formgrader/manage_submissions/{LAB}")
            student_row = f"tr:has(td:has-text('{two}'))"
            teacher.wait_for_selector(f"{student_row} td.autograde a")
            formgrader_action(
                teacher, f"{student_row} td.autograde a", "Successfully autograded",
                f"07-autograded-{two}",
            )  # fmt: skip
            said = in_terminal(teacher, hub, instructor, (
                "cd ~/course && for c in python nbgrader make; do command -v $c; done && "
                f"make autograde ARGS='--student {one}' && make report && ls grades.csv "
                "grades-wide.csv report/index.html && echo REPORTED"
            ), limit_s=600)  # fmt: skip
            assert "REPORTED" in said and said.count(str(Path(hub["python"]).parent)) >= 2, said
            assert "grading 1 hand-in" in said, said
            made = grades_csv(course / "grades.csv")
            # lateness in the formgrader: the view of each graded submission opens with it
            seen = {}
            for student in (one, two):
                teacher.goto(f"{base}user/{instructor}/formgrader/submissions/"
                             f"{submission_id(course, student)}")  # fmt: skip
                teacher.wait_for_selector("#notebook-container")  # (the page has two)
                seen[student] = teacher.locator("body").inner_text()
                shot(teacher, f"07b-formgrader-lateness-{student}")
            assert "On time" in seen[one] and "Late by" not in seen[one], seen[one][:600]
            assert "Late by" in seen[two] and "On time" not in seen[two], seen[two][:600]
            teacher.goto(f"{base}user/{instructor}/formgrader")
            teacher.wait_for_selector(f"{row} td.generate-feedback a")
            formgrader_action(
                teacher, f"{row} td.generate-feedback a", "Successfully generated", "08-feedback"
            )
            released = formgrader_action(
                teacher, f"{row} td.release-feedback a", "Successfully released", "09-released"
            )
            # every page given to its student, student 2's too (who joined after the
            # instructor's server started: its process is not in their group)
            assert "[ERROR]" not in released, released
            # each student's total in the formgrader: over the released lab only; then the
            # next lab is released from the formgrader and enters the gradebook, and the totals
            totals = formgrader_totals(teacher, hub, "09b-formgrader-totals")
            teacher.goto(f"{base}user/{instructor}/formgrader")
            teacher.wait_for_selector(f"{later} td.release a")
            formgrader_action(
                teacher, f"{later} td.release a", "Successfully released", "09c-released-later"
            )
            points = gradebook_points(course)
            assert sorted(points) == [LAB, LATER] and points[LATER] > 0, points
            totals_later = formgrader_totals(teacher, hub, "09d-formgrader-totals-later")

            # each student fetches the feedback and reads the score, the judge's sentences
            # and when they handed in: student 1 on time, student 2 late
            read = {}
            for step, (student, page) in (("10", (one, first)), ("11", (two, second))):
                read[student], text = read_feedback(page, hub, student, step)
                assert "Passed." in text  # the judge's sentence
                assert "BEGIN HIDDEN TESTS" not in text and "observe(" not in text
                assert ("Late by" in text) == (student == two), text[:1000]
                assert ("On time" in text) == (student == one), text[:1000]
        finally:
            browser.close()

    # nbgrader's meaning of late: student 2's hand-in is late (the exchange's time, not the
    # backdated one), student 1's is not
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        late = {s: gb.find_submission(LAB, s).total_seconds_late for s in (one, two)}
    assert late[one] == 0 and late[two] > 0, late
    # the scores: what the students read (student 1 graded by `make autograde`, student 2
    # by the formgrader's button) and what grades.csv says of both, are the demo class's
    # declared scores
    declared = {s: work[s].score for s in (one, two)}
    assert read == declared, f"students read {read}, the declared scores are {declared}"
    assert {s: made[s][0] for s in (one, two)} == declared, made
    assert not made[one][1] and made[two][1], made  # late in grades.csv too
    assert set(made) == {one, two}, made  # grades.csv: the released lab's rows only
    # the formgrader's totals: out of the released lab's points, then of both labs'; each
    # student by name (`make hub`'s roster, and the one `make hub-add-student` gave)
    names = {one: "1, Student", two: f"{MID_TERM[2]}, {MID_TERM[1]}"}
    assert totals == {s: f"{names[s]}: {declared[s]:g} / {points[LAB]:g}" for s in names}, totals
    both = points[LAB] + points[LATER]
    assert totals_later == {s: f"{names[s]}: {declared[s]:g} / {both:g}" for s in names}, (
        totals_later
    )


def set_due_date(course: Path, due: datetime) -> None:
    """The lab's due date in the course's gradebook (what the formgrader's Edit and `nbgrader
    db assignment add --duedate` write), here, without starting nbgrader as the instructor."""
    from nbgrader.api import Gradebook

    database = course / "gradebook.db"
    owner = database.stat().st_uid, database.stat().st_gid
    with Gradebook(f"sqlite:///{database}") as gb:
        gb.update_or_create_assignment(LAB, duedate=due.replace(tzinfo=None))
    assert (database.stat().st_uid, database.stat().st_gid) == owner
    assert not list(course.glob("gradebook.db-*")), "root left a file of the gradebook's"


def gradebook_points(course: Path) -> dict[str, float]:
    """Each lab in the course's gradebook, with its points (what the formgrader's totals and
    grades.csv add up)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {a.name: a.max_score for a in gb.assignments}


def formgrader_totals(page, hub: dict, name: str) -> dict[str, str]:
    """The formgrader's Manage Students page: each student's name as it lists it ("last,
    first") and total ("score / points"), as "name: score / points"."""
    page.goto(f"{hub['base']}user/{hub['instructor']}/formgrader/manage_students")
    page.wait_for_function(
        "n => [...document.querySelectorAll('td.score')].filter(t => t.innerText.includes('/'))"
        ".length >= n",
        arg=len(hub["students"]),
    )
    shot(page, name)
    row = "tr:has(td.id:text-is('{}')) td.{}"
    return {
        s: f"{page.locator(row.format(s, 'name')).inner_text().strip()}: "
        f"{page.locator(row.format(s, 'score')).inner_text().strip()}"
        for s in hub["students"]
    }


def grades_csv(path: Path) -> dict[str, tuple[float, bool]]:
    """grades.csv (nbgrader's export): each student's score of LAB, and whether its time is
    after the due date; a row of another lab fails (only LAB is released)."""
    import csv

    from nbgrader.utils import parse_utc

    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["assignment"] for r in rows} == {LAB}, rows
    return {
        r["student_id"]: (float(r["score"]), parse_utc(r["timestamp"]) > parse_utc(r["duedate"]))
        for r in rows
    }


def submission_id(course: Path, student: str) -> str:
    """The gradebook's id of the student's graded notebook of LAB (the formgrader's URL)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return gb.find_submission_notebook(LAB, LAB, student).id


def test_the_term_survives_a_stop_and_a_start(hub):
    """Ctrl-C mid-term, then `make hub` again: the same accounts and passwords, homes,
    exchange, gradebook, hand-ins and feedback, and a hub that logs them in again."""
    from hub.cli import STATE_FILE, read_state
    from hub.cli import main as hub_command

    course = Path(hub["course_root"])
    kept = [Path(hub["exchange"]), course / "gradebook.db", course / "submitted",
            *(Path(f"/home/{n}") for n in hub["students"])]  # fmt: skip
    before, accounts = checksums(*kept), machine()
    stopped_s = stop_hub(hub["proc"])
    assert "the term is kept" in hub["log"].read_text(), hub["log"].read_text()[-2000:]
    assert checksums(*kept) == before and machine() == accounts
    # as after a machine restart, the pids the term kept (its own, JupyterHub's, the
    # proxy's, a student's server's in JupyterHub's database) name another process, here
    # one of root's: `make hub-stop` signals it not, and `make hub` resumes the term
    stranger = subprocess.Popen(["sleep", "600"])
    # and the hub's modules in the accounts' Python are renewed at each start (a fix of the
    # checkout's hub/exchange.py reaches the term): here, a stale copy
    shared = next((STATE / "python" / "lib").glob("python3*/site-packages/hub/exchange.py"))
    shared.write_text(shared.read_text() + "# a stale copy\n")
    try:
        STATE_FILE.write_text(json.dumps({**read_state(), "pid": stranger.pid}))
        for name in ("jupyterhub.pid", "jupyterhub-proxy.pid"):
            (STATE / "private" / name).write_text(f"{stranger.pid}\n")
        database = STATE / "private" / "jupyterhub.sqlite"
        stale_server(database, hub["students"][0], stranger.pid)
        assert hub_command(["stop"]) == 0
        assert stranger.poll() is None, "make hub-stop signalled a process not the hub's"
        proc, hub["restarted_s"] = start_hub(hub["log"], hub["port"])
        assert stranger.poll() is None, "make hub signalled a process not the hub's"
        assert running_servers(database) == [], "JupyterHub took a process for a server"
    finally:
        stranger.kill()
        stranger.wait()
    hub["proc"] = proc
    assert "resuming the term" in hub["log"].read_text()
    assert shared.read_bytes() == (REPO / "hub" / "exchange.py").read_bytes()
    assert read_state()["passwords"] == hub["passwords"]
    assert checksums(*kept) == before
    print(f"stopped in {stopped_s:.0f} s, usable again after {hub['restarted_s']:.0f} s")
    # a student logs in with the same password (JupyterHub's login form, PAM)
    name = hub["students"][0]
    assert http_log_in(hub, name, hub["passwords"][name])


def stale_server(database: Path, name: str, pid: int) -> None:
    """JupyterHub's database saying that `name`'s server runs as process `pid`: what it
    holds after a machine restart (nothing stopped the servers)."""
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(database)) as db, db:
        server = db.execute(
            "insert into servers (proto, ip, port, base_url, cookie_name) values "
            "('http', '127.0.0.1', ?, ?, 'x')",
            (free_port(), f"/user/{name}/"),
        ).lastrowid
        user = db.execute("select id from users where name = ?", (name,)).fetchone()[0]
        state = json.dumps({"pid": pid})
        if not db.execute(
            "update spawners set server_id = ?, state = ? where user_id = ? and name = ''",
            (server, state, user),
        ).rowcount:  # their server never started (no browser): its record, made here
            db.execute(
                "insert into spawners (user_id, name, server_id, state) values (?, '', ?, ?)",
                (user, server, state),
            )


def running_servers(database: Path) -> list[str]:
    """The users whose server JupyterHub's database says runs."""
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(database)) as db:
        rows = db.execute(
            "select users.name from spawners join users on spawners.user_id = users.id "
            "where spawners.server_id is not null"
        ).fetchall()
    return [name for (name,) in rows]


def http_log_in(hub: dict, name: str, password: str) -> bool:
    """JupyterHub's login form, by HTTP: whether it lets `name` in."""
    import http.cookiejar
    import urllib.parse
    import urllib.request

    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    page = opener.open(hub["base"] + "hub/login").read().decode()
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page)
    fields = {"username": name, "password": password}
    form = urllib.parse.urlencode({**fields, **({"_xsrf": xsrf.group(1)} if xsrf else {})})
    try:
        answer = opener.open(hub["base"] + "hub/login?next=%2Fhub%2Fhome", form.encode())
    except urllib.error.HTTPError:
        return False
    return "/hub/login" not in answer.geturl()


def handed_in(hub: dict, student: str) -> tuple[Path | None, Path | None]:
    """The student's hand-in of LAB in the exchange, and their feedback page (the one given
    to their group); None, None where there are none."""
    exchange = Path(hub["exchange"])
    uid, gid = pwd.getpwnam(student).pw_uid, grp.getgrnam(student).gr_gid
    hand_ins = sorted(  # the student's own (not a forgery named for them: test_hub's term)
        p
        for p in (exchange / "inbound").glob(f"{student}+{LAB}+*")
        if p.is_dir() and not p.is_symlink() and p.stat().st_uid == uid
    )
    pages = [p for p in (exchange / "feedback").glob("*.html") if p.stat().st_gid == gid]
    if not hand_ins or not pages:
        return None, None
    assert len(pages) == 1, pages
    return hand_ins[-1], pages[0]


def test_a_student_can_reach_nothing_of_another_student_nor_the_instructor(hub):
    instructor, one, two = hub["instructor"], hub["students"][0], join_mid_term(hub)
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
    # the feedback page of the student who joined mid-term (handed to their group by the
    # instructor's server through `sg`): theirs to read, and student 1's not
    _, page_two = handed_in(hub, two)
    if page_two is not None:
        assert (page_two.stat().st_mode & 0o777, page_two.stat().st_gid) == (
            0o640,
            grp.getgrnam(two).gr_gid,
        )
        allowed(two, f"cat '{page_two}' > /dev/null")
        assert as_account(hub, one, "/bin/sh", "-c", f"cat '{page_two}'").returncode != 0

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


def secret_lines() -> tuple[set[str], set[str]]:
    """Lines of the course's secrets (solutions/): its hidden tests, and its solutions; each
    as written and as a notebook's JSON holds it, leaving out any line the release holds."""
    released = "".join(p.read_text() for p in (REPO / "labs").glob("*/*.ipynb"))
    lines = {"HIDDEN TESTS": set(), "SOLUTION": set()}
    for source in (REPO / "solutions").glob("*/*.py"):
        inside = None
        for line in source.read_text().splitlines():
            found = re.search(r"### (BEGIN|END) (SOLUTION|HIDDEN TESTS)", line)
            if found:
                inside = found.group(2) if found.group(1) == "BEGIN" else None
                continue
            text = line.strip()
            if inside and len(text) >= 30:
                lines[inside] |= {text, json.dumps(text)[1:-1]}
    hidden, solutions = ({x for x in v if x not in released} for v in lines.values())
    return hidden, solutions - hidden


WALK = r"""
cd ~/.walk
find / \( -path /proc -o -path /sys -o -path /dev -o -path ~/.walk \) -prune \
  -o -type f -readable -fprint0 all -newerct @{since} -size -1025k -fprint0 read
echo $(tr -cd '\0' < all | wc -c) $(tr -cd '\0' < read | wc -c) \
  $(grep -zc '^{python}/' read) $(grep -zc '^{exchange}/' read)
# hidden tests in none; solutions in none but the student's own files (their answers)
xargs -0 grep -lF -f secrets -- < read
true
"""


def course_began() -> int:
    """When the course's secrets could first exist anywhere: its first commit (committer
    time), less a day for clocks that differ; 0 (all time) where git cannot say, as in a
    shallow clone."""
    git = ["git", "-C", str(REPO)]
    shallow = subprocess.run([*git, "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)  # fmt: skip
    roots = subprocess.run([*git, "log", "--max-parents=0", "--format=%ct", "HEAD"],
                           capture_output=True, text=True)  # fmt: skip
    if shallow.stdout.strip() != "false" or roots.returncode or not roots.stdout.split():
        return 0
    return min(int(x) for x in roots.stdout.split()) - 86400


def test_a_student_reads_no_secret_anywhere(hub):
    """As a student, in the view their server runs in: every file they can read is walked
    and counted, and every one of them that can hold course code is read: the ones holding
    lines of a hidden test, or of a solution (in a file that is not the student's own
    work): none.

    A file is read unless its ctime is before the course's first commit. The kernel sets a
    file's ctime to the current time at every change of its bytes or its inode (write,
    truncate, rename, link, chmod, utime) and no unprivileged process can set it back, so
    such a file has held the same bytes since before any line of the course existed: the
    system image's own files (/usr/lib/google-cloud-sdk, 1980 here). Everything made since
    is read: the hub's state (the accounts' Python, each file a new link of this
    environment's, so a new ctime; the exchange), the homes, /tmp, /etc's changed files,
    and any package installed since."""
    two = join_mid_term(hub)
    walk = Path(f"/home/{two}/.walk")
    walk.mkdir(exist_ok=True)
    hidden, solutions = secret_lines()
    (walk / "secrets").write_text("\n".join(sorted(hidden | solutions)) + "\n")
    for path in (walk, walk / "secrets"):
        shutil.chown(path, two, two)
    started = time.monotonic()
    script = WALK.format(since=course_began(), python=STATE / "python", exchange=STATE / "exchange")
    result = as_account(hub, two, "/bin/sh", "-c", script)
    lines = result.stdout.split("\n")
    readable, read, in_python, in_exchange = (int(x) for x in lines[0].split())
    candidates = sorted({x for x in lines[1:] if x})
    # a file holds secret code where it holds three or more of its lines: one or two are
    # a library's line that a hidden test also has (`warnings.simplefilter("ignore")`)
    held = {}
    for name in candidates:
        text = Path(name).read_text(errors="replace")
        info, account = Path(name).stat(), pwd.getpwnam(two)
        mine = info.st_uid == account.pw_uid or info.st_gid == account.pw_gid  # their work
        held[name] = sorted(x for x in (hidden if mine else hidden | solutions) if x in text)
    holding = {name: found for name, found in held.items() if len(found) >= 3}
    print(f"{two} can read {readable} files; {read} changed since the course began, read "
          f"({in_python} of the accounts' Python, {in_exchange} of the exchange); "
          f"{len(candidates)} share a line with a secret, {len(holding)} hold secret code "
          f"({time.monotonic() - started:.0f} s): {dict(list(held.items())[:5])}")  # fmt: skip
    assert readable > 1000 and in_python > 1000 and in_exchange > 0, result.stderr[-2000:]
    assert holding == {}, holding
    shutil.rmtree(walk)


RACE = """
i=0
while [ ! -e ~/.race-stop ] && [ $i -lt {most} ]; do
  i=$((i + 1)); d="{inbound}/{one}+{lab}+2099-02-01 00:00:00.$i UTC+{tag}$i"
  mkdir "$d" && cp ~/{lab}/{lab}.ipynb "$d/" && echo '2099-02-01 00:00:00 UTC' > "$d/timestamp.txt"
done
"""


@contextlib.contextmanager
def racing(hub: dict, tag: str, most: int = 400):
    """Student 2, in their view, adding hand-ins named for student 1 (each later than the
    last, `most` at most, named ...+<tag><n>) from the block's start, once begun, to its
    end."""
    one, two = hub["students"][0], MID_TERM[0]
    inbound = Path(hub["exchange"]) / "inbound"
    race = subprocess.Popen(
        [*_student_argv(hub, two), "/bin/sh", "-c",
         RACE.format(inbound=inbound, one=one, lab=LAB, tag=tag, most=most)],
        env={"HOME": f"/home/{two}", "PATH": "/usr/bin:/bin"}, cwd=f"/home/{two}",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not list(inbound.glob(f"{one}+{LAB}+*+{tag}*")) and race.poll() is None:
            assert time.monotonic() < deadline, "the race did not start"
            time.sleep(0.05)
        yield
    finally:
        Path(f"/home/{two}/.race-stop").touch()
        race.wait(timeout=60)
        Path(f"/home/{two}/.race-stop").unlink()


def test_collect_by_command_takes_no_forgery_nor_backdate_and_survives_a_race(hub):
    """nbgrader's own `collect --update`, as the instructor, while student 2 keeps adding
    hand-ins named for student 1 (a race), after student 2 handed in late again and
    backdated it every way a student can."""
    from nbgrader.utils import parse_utc

    instructor, one, two = hub["instructor"], hub["students"][0], join_mid_term(hub)
    inbound = Path(hub["exchange"]) / "inbound"
    course = Path(hub["course_root"])
    if not (Path(f"/home/{two}") / LAB).is_dir():
        nbgrader(hub, two, "fetch_assignment", LAB)
    mine = sorted(inbound.glob(f"{one}+{LAB}+*"))
    assert mine and (course / "submitted" / one / LAB).is_dir(), "the term did not run"
    before = checksums(course / "submitted" / one, *mine)

    # student 2 hands in now (late), then backdates it every way a student can
    handed = datetime.now(UTC).replace(tzinfo=None)
    nbgrader(hub, two, "submit", LAB)
    backdate = BACKDATE.format(inbound=inbound, two=two, lab=LAB, course=hub["course_id"])
    assert "backdated" in as_account(hub, two, "/bin/sh", "-c", backdate).stdout

    with racing(hub, "race-command"):  # collect while the race is on
        said = nbgrader(hub, instructor, "collect", "--update", LAB)
    refused = [line for line in said.splitlines() if "Refused" in line]
    assert refused and all(one in x and two in x for x in refused), said
    assert f"Updating submission: {two}" in said, said
    assert checksums(course / "submitted" / one, *mine) == before  # student 1's, untouched
    stamp = (course / "submitted" / two / LAB / "timestamp.txt").read_text()
    assert parse_utc(stamp) >= handed.replace(microsecond=0), (stamp, handed)


def _student_argv(hub: dict, name: str) -> list[str]:
    """setpriv to `name`, then the student's view: how a student's process runs."""
    from hub.runtime import student_view

    entry = pwd.getpwnam(name)
    drop = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"]
    return [*drop, *student_view(entry.pw_dir, STATE)]


def contents(*roots: Path) -> dict[str, str]:
    """Each file's bytes and owner's name (a restore makes the accounts again: new uids)."""
    sums = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                owner = pwd.getpwuid(path.stat().st_uid).pw_name
                sums[str(path)] = f"{owner} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return sums


def test_a_backup_restores_into_a_fresh_hub(hub, tmp_path):
    """`make hub-backup`, `make hub-destroy`, `make hub-restore FROM=...`, `make hub`: the
    same accounts and passwords, gradebook, hand-ins (and their times: collecting again
    changes nothing), feedback and homes. (The start after the restore also makes the
    accounts' Python anew, as after an upgrade of the course's environment.)"""
    from hub.cli import main as hub_command
    from hub.cli import read_state
    from hub.runtime import environment_id

    course, one, two = Path(hub["course_root"]), hub["students"][0], join_mid_term(hub)
    kept = [Path(hub["exchange"]), course / "gradebook.db", course / "submitted",
            course / "feedback", *(Path(f"/home/{n}") for n in hub["students"])]  # fmt: skip
    before = contents(*kept)
    archive = tmp_path / "term.tar.gz"
    assert hub_command(["backup", f"--to={archive}"]) == 0  # what `make hub-backup` runs
    stop_hub(hub["proc"])
    assert hub_command(["destroy"]) == 0
    assert not STATE.exists() and not Path(f"/home/{one}").exists()
    started = time.monotonic()
    assert hub_command(["restore", str(archive)]) == 0
    restored_s = time.monotonic() - started
    # the accounts' Python as an upgrade of the course's environment leaves it: a copy
    # recorded as made of another environment (here only its record, and a file of its
    # own): `make hub` makes it anew, so that the upgrade reaches the term
    made_of = STATE / "python" / "environment-id"
    made_of.parent.mkdir()
    made_of.write_text("an environment before an upgrade")
    (STATE / "python" / "stale").touch()
    hub["proc"], took = start_hub(hub["log"], hub["port"])
    assert "made anew" in hub["log"].read_text(), hub["log"].read_text()[-2000:]
    assert made_of.read_text() == environment_id() and not (STATE / "python" / "stale").exists()
    print(f"restored after {restored_s:.0f} s, usable (its Python made anew) after "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
    assert read_state()["passwords"] == hub["passwords"]
    after = contents(*kept)
    ledger = str(Path(hub["exchange"]) / ".handed-in-times.json")  # the restore's record
    assert after.pop(ledger).startswith(hub["instructor"] + " ")
    assert after == before
    assert http_log_in(hub, one, hub["passwords"][one])
    stamps = {s: (course / "submitted" / s / LAB / "timestamp.txt").read_text() for s in (one, two)}
    said = nbgrader(hub, hub["instructor"], "collect", "--update", LAB)
    assert f"No newer submission to collect: {one}" in said, said
    assert stamps == {
        s: (course / "submitted" / s / LAB / "timestamp.txt").read_text() for s in (one, two)
    }
    leaves(hub, two)


def leaves(hub: dict, name: str) -> None:
    """`make hub-remove-student`, the hub running: nothing of the student is left on the
    machine (account, group, home, mail, processes, JupyterHub user, hand-ins and feedback in
    the exchange, its record of their hand-ins' times, files in the temporary folders, the
    gradebook row) but the instructor's record of them: their collected and graded work
    and their grades, under the course's removed/, out of every later grading."""
    from nbgrader.api import Gradebook

    from hub.accounts import _processes
    from hub.cli import leftovers as found
    from hub.cli import main as hub_command

    course, entry = Path(hub["course_root"]), pwd.getpwnam(name)
    kept = {kind: (course / kind / name / LAB / f"{LAB}.ipynb").read_bytes()
            for kind in ("submitted", "autograded") if (course / kind / name).is_dir()}  # fmt: skip
    assert hub_command(["remove-student", name]) == 0
    hub["students"].remove(name)
    assert not http_log_in(hub, name, hub["passwords"].pop(name))
    assert name not in Path("/etc/passwd").read_text() + Path("/etc/group").read_text()
    assert not Path(entry.pw_dir).exists() and not (Path("/var/mail") / name).exists()
    assert not _processes({entry.pw_uid}) and not found({entry.pw_uid}, {name})
    theirs = [
        p
        for p in Path(hub["exchange"]).rglob("*")
        if p.lstat().st_uid == entry.pw_uid or p.lstat().st_gid == entry.pw_gid
    ]
    assert theirs == [] and not list((Path(hub["exchange"]) / "inbound").glob(f"{name}+*"))
    ledger = json.loads((Path(hub["exchange"]) / ".handed-in-times.json").read_text())
    assert ledger and all((Path(hub["exchange"]) / "inbound" / k).is_dir() for k in ledger)
    assert not [k for k in ledger if k.startswith(f"{name}+")], ledger
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert name not in {s.id for s in gb.students}
    assert not any(
        (course / kind / name).exists() for kind in ("submitted", "autograded", "feedback")
    )
    (record,) = (course / "removed").glob(f"{name}-*")
    assert pwd.getpwuid(record.stat().st_uid).pw_name == hub["instructor"]
    assert record.stat().st_mode & 0o077 == 0
    for kind, data in kept.items():
        assert (record / kind / LAB / f"{LAB}.ipynb").read_bytes() == data, kind
    if "autograded" in kept:  # the term ran in the browser: graded, late
        (row,) = json.loads((record / "grades.json").read_text())
        partial = {s.name: s for s in declared_class(LAB)}["partial"].score
        assert (row["lab"], row["score"], row["seconds_late"] > 0) == (LAB, partial, True), row
