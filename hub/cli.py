"""`python -m hub start` (`make hub`), `stop` (`make hub-stop`), `destroy` (`make hub-destroy`).

A term persists: start makes the accounts, the course, the exchange and the hub's state the
first time, and resumes them (the same accounts, passwords, homes, gradebook, hand-ins and
feedback) every later time; it starts JupyterHub, prints the address and the accounts, and
waits. Ctrl-C (or SIGTERM, or `make hub-stop`) stops JupyterHub and every account's server
and keeps everything. destroy removes the term: the accounts, their homes, /srv/dgl-hub,
and what the accounts left in /tmp (also after a crash: the accounts are found by their
prefix and mark).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hub import INSTRUCTOR, PREFIX, REPO, STATE, course_id, student_names
from hub.accounts import (
    create_account,
    exists,
    hub_accounts,
    join_group,
    kill_processes,
    remove_accounts,
)
from hub.course import configure_account, install_course
from hub.exchange import make_exchange
from hub.runtime import proxy, user_python

DEFAULT_LABS = ["lab01_graph", "lab02_backprop"]
STATE_FILE = STATE / "private" / "hub.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def identity(pid: int | None) -> str | None:
    """Who process `pid` is, in a way no other process shares: the machine's boot and the
    kernel's start time of the process; None where there is no such process. A pid alone
    names another process after a machine restart (or once the hub's process has died):
    `make hub-stop` would signal it, and `make hub` refuse to start."""
    if not pid:
        return None
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return f"{boot} {fields[19]}"  # stat's field 22, starttime, after the name's ")"


def running(state: dict) -> int | None:
    """The pid of the term's `make hub` if that very process still runs, else None."""
    pid = state.get("pid")
    if pid and state.get("pid_identity") and identity(pid) == state["pid_identity"]:
        return pid
    return None


def read_state() -> dict:
    try:
        return json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return {}


def set_up(students: int, port: int, ip: str, labs: list[str], say=None) -> dict:
    """Everything but JupyterHub itself; the state JupyterHub's config reads."""
    say = say or functools.partial(print, flush=True)
    if os.geteuid() != 0:
        raise SystemExit(
            "make hub: run as root (it creates Unix accounts and starts their servers)"
        )
    if shutil.which("bwrap") is None:
        raise SystemExit("make hub: grading needs bubblewrap (`make sandbox`)")
    if running(read_state()):
        raise SystemExit(
            f"make hub: a hub runs already (pid {read_state()['pid']}): `make hub-stop`"
        )
    earlier = read_state()
    if earlier.get("passwords") and all(exists(n) for n in earlier["passwords"]):
        say(f"resuming the term in {STATE}: its accounts, course, exchange and gradebook")
        # what ran of the term's hub before (after a crash or a machine restart, nothing
        # stopped it): stopped, and JupyterHub's database, whose servers and their pids are
        # all gone now, made anew (JupyterHub would poll, then signal, a pid the database
        # holds, whatever process has it since; its users come from hub.json again)
        halt()
        (STATE / "private" / "jupyterhub.sqlite").unlink(missing_ok=True)
        earlier.update(
            pid=os.getpid(), pid_identity=identity(os.getpid()), ip=ip, port=port,
            hub_port=free_port(), proxy_api_port=free_port(), python=str(user_python(STATE)),
            proxy=str(proxy()), resumed=True,
        )  # fmt: skip
        STATE_FILE.write_text(json.dumps(earlier, indent=1))
        return earlier
    if STATE.exists() or hub_accounts():
        raise SystemExit(
            f"make hub: {STATE} or hub accounts exist, but no whole term to resume "
            "(an interrupted first start?): `make hub-destroy` removes them"
        )
    started = time.monotonic()
    STATE.mkdir(parents=True)
    STATE.chmod(0o755)
    (STATE / "private").mkdir(mode=0o700)
    python = user_python(STATE)
    accounts = {INSTRUCTOR: create_account(INSTRUCTOR)}
    for name in student_names(students):
        accounts[name] = create_account(name)
        join_group(INSTRUCTOR, name)  # to give the student their feedback (hub/exchange.py)
    course = course_id()
    exchange = make_exchange(STATE / "exchange", course, INSTRUCTOR)
    say(f"building the course as {INSTRUCTOR}: {' '.join(labs)}")
    names = {name: ["Student", str(n)] for n, name in enumerate(student_names(students), 1)}
    root = install_course(INSTRUCTOR, python, labs, names)
    for name in accounts:
        configure_account(
            name, course, STATE / "exchange", root if name == INSTRUCTOR else None, python
        )
    state = {
        "pid": os.getpid(),
        "pid_identity": identity(os.getpid()),
        "ip": ip,
        "port": port,
        "hub_port": free_port(),
        "proxy_api_port": free_port(),
        "python": str(python),
        "proxy": str(proxy()),
        "instructor": INSTRUCTOR,
        "students": student_names(students),
        "passwords": accounts,
        "course_id": course,
        "course_root": str(root),
        "exchange": str(exchange),
        "labs": labs,
        "setup_s": round(time.monotonic() - started, 1),
        "roster_token": secrets.token_hex(32),
        "names": names,
    }
    STATE_FILE.write_text(json.dumps(state, indent=1))
    STATE_FILE.chmod(0o600)
    return state


def launch(state: dict, log) -> subprocess.Popen:
    argv = [sys.executable, "-m", "jupyterhub", "-f", str(REPO / "hub" / "jupyterhub_config.py")]
    env = dict(os.environ, COURSE_HUB_STATE=str(STATE))
    return subprocess.Popen(
        argv, cwd=STATE / "private", env=env, stdout=log, stderr=subprocess.STDOUT
    )


def wait_ready(state: dict, hub: subprocess.Popen, limit_s: float = 120) -> str:
    url = f"http://{state['ip']}:{state['port']}/hub/api"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if hub.poll() is not None:
            raise SystemExit(f"JupyterHub exited ({hub.returncode}): see {STATE / 'private'}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return f"http://{state['ip']}:{state['port']}/"
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"JupyterHub did not answer at {url} in {limit_s:.0f} s")


def stop_process(proc_or_pid, grace_s: float = 30) -> None:
    pid = proc_or_pid if isinstance(proc_or_pid, int) else proc_or_pid.pid
    if not alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if isinstance(proc_or_pid, subprocess.Popen):
            if proc_or_pid.poll() is not None:
                return
        elif not alive(pid):
            return
        time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)


# JupyterHub's pid files, and what the command line of the process each names holds when it
# is the hub's: after a machine restart or a crash they may name any other process since
PID_FILES = {
    "jupyterhub.pid": str(REPO / "hub" / "jupyterhub_config.py"),
    "jupyterhub-proxy.pid": str(REPO / "hub" / "node_modules"),
}


def runs(pid: int, mark: str) -> bool:
    """Whether process `pid` runs with `mark` in its command line."""
    try:
        return mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def halt() -> None:
    """Stop JupyterHub, its proxy and every process of the hub's accounts; keep the term's
    files. A pid file names the hub's process only while that process runs: it is removed,
    and a process it names that is not the hub's is left alone."""
    private = STATE / "private"
    for name, mark in PID_FILES.items():
        try:
            pid = int((private / name).read_text().strip())
        except (OSError, ValueError):
            continue
        if runs(pid, mark):
            stop_process(pid, grace_s=15)
        (private / name).unlink(missing_ok=True)
    kill_processes({pwd.getpwnam(n).pw_uid for n in hub_accounts()})


def leftovers(uids: set[int], names: set[str]) -> list[Path]:
    """What the accounts made in the machine's shared temporary folders (torch's
    /tmp/torchinductor_<user>, the grader's /tmp/grading-kernels-<uid>, anything else)."""
    found = []
    for tmp in (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")):
        try:
            entries = list(tmp.iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                owner = entry.lstat().st_uid
            except OSError:
                continue
            named = any(entry.name.endswith(f"_{n}") or entry.name.endswith(f"-{u}")
                        for n in names for u in uids)  # fmt: skip
            if owner in uids or (named and entry.name.startswith(("torchinductor", "grading"))):
                found.append(entry)
    return found


def tear_down(say=print) -> None:
    """Remove the term: stop everything, remove the accounts, their homes, what they left
    in the temporary folders, and STATE."""
    halt()
    names = hub_accounts()
    uids = {pwd.getpwnam(n).pw_uid for n in names}
    for entry in leftovers(uids, set(names)):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    removed = remove_accounts()
    shutil.rmtree(STATE, ignore_errors=True)
    say(f"the term is removed: {len(removed)} account(s), their homes, {STATE}")


def start(args) -> int:
    fresh = not read_state()
    try:
        state = set_up(args.students, args.port, args.ip, args.labs)
    except BaseException:  # a half-made first start is removed again (never a term)
        if fresh and not read_state().get("resumed") and not running(read_state()):
            tear_down(say=lambda *_: None)
        raise
    log_path = STATE / "private" / "jupyterhub.log"
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with open(log_path, "w") as log:
        hub = launch(state, log)
        try:
            address = wait_ready(state, hub)
            print(f"\nJupyterHub: {address}  (log: {log_path})", flush=True)
            print(f"the course: {state['course_id']}, labs built: {' '.join(state['labs'])}")
            for name, password in state["passwords"].items():
                role = "instructor" if name == state["instructor"] else "student"
                print(f"  {role:10}  {name:20}  password {password}")
            print("stop: Ctrl-C here, or `make hub-stop`", flush=True)
            while not stopping and hub.poll() is None:
                time.sleep(0.5)
        finally:
            stop_process(hub)
            halt()
            print(f"hub stopped; the term is kept in {STATE} and the accounts' homes "
                  "(`make hub` resumes it, `make hub-destroy` removes it)", flush=True)  # fmt: skip
    return 0


def hub_api(state: dict, method: str, path: str) -> int | None:
    """A call of JupyterHub's REST API as the roster service; its HTTP status, None where no
    hub runs."""
    if not running(state):
        return None
    url = f"http://{state['ip']}:{state['port']}/hub/api/{path}"
    request = urllib.request.Request(url, method=method)
    request.add_header("Authorization", f"token {state['roster_token']}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def instructor_nbgrader(state: dict, *args: str) -> None:
    from hub.accounts import as_user

    python = state["python"]
    path = f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin"
    result = as_user(INSTRUCTOR, [python, "-m", "nbgrader", *args], path=path,
                     cwd=state["course_root"])  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"nbgrader {' '.join(args)} failed:\n{result.stderr[-2000:]}")


def add_student(name: str, first: str, last: str, email: str | None = None) -> str:
    """A student joins the term: their account (password, home, group, Jupyter settings),
    their gradebook row with their name, and their JupyterHub user if the hub runs."""
    state = read_state()
    if not state:
        raise SystemExit("make hub-add-student: no term here (`make hub` makes one)")
    if not name.startswith(PREFIX):
        name = PREFIX + name
    password = create_account(name)
    join_group(INSTRUCTOR, name)
    configure_account(name, state["course_id"], STATE / "exchange", None, Path(state["python"]))
    extra = [f"--email={email}"] if email else []
    instructor_nbgrader(state, "db", "student", "add", name, f"--first-name={first}",
                        f"--last-name={last}", *extra)  # fmt: skip
    state["students"].append(name)
    state["passwords"][name] = password
    state.setdefault("names", {})[name] = [first, last]
    STATE_FILE.write_text(json.dumps(state, indent=1))
    hub_api(state, "POST", f"users/{name}")
    print(f"student {name} ({first} {last}) added: password {password}")
    return password


def grades_of(course: Path, name: str) -> list[dict]:
    """The student's row of the gradebook: each hand-in's time, lateness and score."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            student = gb.find_student(name)
        except Exception:  # no row: nothing graded to keep
            return []
        return [
            {
                "lab": sub.assignment.name,
                "handed_in": sub.timestamp.isoformat() if sub.timestamp else None,
                "seconds_late": sub.total_seconds_late,
                "score": sub.score,
                "late_penalty": sub.late_submission_penalty,
                "max_score": sub.max_score,
            }
            for sub in student.submissions
        ]


def archive_student(course: Path, name: str) -> Path:
    """What the instructor holds of a leaving student, kept for the record and out of every
    later grading: their collected, graded and feedback copies move from the course's
    submitted/, autograded/ and feedback/ (which `make autograde` and the formgrader grade)
    to removed/<name>-<time>/, with grades.json, their gradebook row as it was."""
    entry = pwd.getpwnam(INSTRUCTOR)
    kept = course / "removed" / f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    kept.mkdir(parents=True)
    for folder in (kept.parent, kept):
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        folder.chmod(0o700)
    for kind in ("submitted", "autograded", "feedback"):
        if (course / kind / name).is_dir():
            shutil.move(course / kind / name, kept / kind)
    record = kept / "grades.json"
    record.write_text(json.dumps(grades_of(course, name), indent=1))
    os.chown(record, entry.pw_uid, entry.pw_gid)
    return kept


def owned_by(root: Path, uid: int) -> list[Path]:
    """Everything under `root` that `uid` owns, its folders' contents left out: what an
    account made in the exchange, by any name (a hand-in named for a classmate, a folder in
    the exchange's root, which anyone may write, a link)."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            try:
                if path.lstat().st_uid == uid:
                    found.append(path)
            except OSError:
                continue
        dirs[:] = [d for d in dirs if Path(folder, d) not in found]
    return found


def forget_times(course: Path) -> None:
    """The exchange's record of when each hand-in was handed in (a restore's,
    `hub.exchange.record_times`), less the hand-ins that are gone (a removed student's, and
    what they made under a classmate's name)."""
    from hub.exchange import TIMES

    ledger = course / TIMES
    try:
        times = json.loads(ledger.read_text())
    except (OSError, ValueError):
        return
    kept = {k: v for k, v in times.items() if (course / "inbound" / k).is_dir()}
    if kept != times:
        ledger.write_text(json.dumps(kept))  # as it was: the instructor's, 0600


def remove_student(name: str) -> None:
    """A student leaves the term: their JupyterHub user and server, processes, account,
    home, group, hand-ins and feedback in the exchange, gradebook row, files in /tmp. What
    the instructor collected and graded of them is kept for the record (`archive_student`)."""
    state = read_state()
    if not name.startswith(PREFIX):
        name = PREFIX + name
    if not state or name not in state["students"]:
        raise SystemExit(f"make hub-remove-student: {name} is not a student of this term")
    kept = archive_student(Path(state["course_root"]), name)
    hub_api(state, "DELETE", f"users/{name}")
    entry = pwd.getpwnam(name)
    kill_processes({entry.pw_uid})
    inbound = STATE / "exchange" / state["course_id"] / "inbound"
    made = [*leftovers({entry.pw_uid}, {name}), *inbound.glob(f"{name}+*")]
    made += owned_by(STATE / "exchange", entry.pw_uid)  # forgeries too, whatever their names
    for path in made:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for page in (STATE / "exchange" / state["course_id"] / "feedback").glob("*.html"):
        if page.stat().st_gid == entry.pw_gid:
            page.unlink()
    forget_times(STATE / "exchange" / state["course_id"])
    instructor_nbgrader(state, "db", "student", "remove", name, "--force")
    subprocess.run(["userdel", "--remove", name], capture_output=True)
    subprocess.run(["groupdel", name], capture_output=True)
    state["students"].remove(name)
    state["passwords"].pop(name, None)
    state.get("names", {}).pop(name, None)
    STATE_FILE.write_text(json.dumps(state, indent=1))
    print(f"student {name} removed; their collected and graded work is kept in {kept}")


BACKUPS = Path(os.environ.get("COURSE_HUB_BACKUPS", "/srv/dgl-hub-backups"))


def backup(to: Path | None = None) -> Path:
    """The whole term in one archive (root's, 0600): hub.json, the accounts (names, groups,
    password hashes), their homes (the instructor's course and gradebook with them), the
    exchange, and when each hand-in in it was handed in (`handed_in_at`, which a restore
    cannot keep in the files' ctimes). The hub may run."""
    import io
    import tarfile

    from hub.exchange import handed_in_at

    state = read_state()
    if not state:
        raise SystemExit("make hub-backup: no term here")
    if to is None:
        BACKUPS.mkdir(mode=0o700, exist_ok=True)
    target = to or BACKUPS / f"term-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz"
    shadow = {line.split(":")[0]: line.split(":")[1]
              for line in Path("/etc/shadow").read_text().splitlines()}  # fmt: skip
    names = [state["instructor"], *state["students"]]
    inbound = STATE / "exchange" / state["course_id"] / "inbound"
    meta = {
        "state": state,
        "hashes": {n: shadow[n] for n in names},
        "handed_in": {p.name: handed_in_at(str(p)) for p in inbound.iterdir() if p.is_dir()},
    }
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = json.dumps(meta).encode()
        info = tarfile.TarInfo("term.json")
        info.size, info.mode = len(data), 0o600
        tar.addfile(info, io.BytesIO(data))
        tar.add(STATE / "exchange", arcname="exchange")
        for name in names:
            tar.add(pwd.getpwnam(name).pw_dir, arcname=f"homes/{name}")
    print(f"the term is backed up in {target}")
    return target


def restore(source: Path) -> None:
    """A term from `backup`'s archive, on a machine with none: the accounts with their
    passwords, homes, the exchange (the hand-ins' times kept); `make hub` then resumes it,
    making the accounts' Python of this machine's environment."""
    import tarfile

    from hub.exchange import record_times

    if read_state() or hub_accounts():
        raise SystemExit("make hub-restore: a term is here already (`make hub-destroy` first)")
    with tarfile.open(source) as tar:
        meta = json.loads(tar.extractfile("term.json").read())
        state = meta["state"]
        names = [state["instructor"], *state["students"]]
        for name in names:
            create_account(name)
            subprocess.run(["chpasswd", "-e"], input=f"{name}:{meta['hashes'][name]}\n",
                           text=True, check=True, capture_output=True)  # fmt: skip
        for name in state["students"]:
            join_group(INSTRUCTOR, name)
        STATE.mkdir(parents=True)
        STATE.chmod(0o755)
        (STATE / "private").mkdir(mode=0o700)
        homes = {f"homes/{n}": pwd.getpwnam(n).pw_dir for n in names}
        for member in tar.getmembers():
            top = "/".join(member.name.split("/")[:2])
            if member.name == "term.json":
                continue
            if top in homes:
                member.name = homes[top] + member.name[len(top) :]
            elif member.name.split("/")[0] == "exchange":
                member.name = str(STATE) + "/" + member.name
            else:
                continue
            tar.extract(member, "/", filter="fully_trusted")  # root's own archive
    course = STATE / "exchange" / state["course_id"]
    record_times(course, meta["handed_in"], state["instructor"])
    # the accounts' Python: made by `make hub` as it resumes the term (hub.runtime.user_python)
    state.update(python=str(STATE / "python" / "bin" / "python"), pid=None)
    STATE_FILE.write_text(json.dumps(state, indent=1))
    STATE_FILE.chmod(0o600)
    print(f"the term of {source} is restored: `make hub` resumes it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("start", help="set up and run the hub (Ctrl-C stops and cleans up)")
    run.add_argument("--students", type=int, default=int(os.environ.get("HUB_STUDENTS", 2)))
    run.add_argument("--port", type=int, default=int(os.environ.get("HUB_PORT", 8000)))
    run.add_argument("--ip", default=os.environ.get("HUB_IP", "127.0.0.1"))
    run.add_argument(
        "--labs", nargs="+", default=os.environ.get("HUB_LABS", " ".join(DEFAULT_LABS)).split()
    )
    sub.add_parser("stop", help="stop the hub and every server; keep the term")
    sub.add_parser("destroy", help="stop the hub and remove the term and all it made")
    add = sub.add_parser("add-student", help="a student joins the term (account, gradebook)")
    add.add_argument("name")
    add.add_argument("--first", required=True)
    add.add_argument("--last", required=True)
    add.add_argument("--email")
    remove = sub.add_parser("remove-student", help="a student leaves the term")
    remove.add_argument("name")
    save = sub.add_parser("backup", help="the whole term in one archive")
    save.add_argument("--to", type=Path)
    load = sub.add_parser("restore", help="a term from a backup, where there is none")
    load.add_argument("source", type=Path)
    args = parser.parse_args(argv)
    if args.command == "start":
        return start(args)
    if os.geteuid() != 0:
        raise SystemExit(f"make hub-{args.command}: run as root")
    if args.command == "add-student":
        add_student(args.name, args.first, args.last, args.email)
        return 0
    if args.command == "remove-student":
        remove_student(args.name)
        return 0
    if args.command == "backup":
        backup(args.to)
        return 0
    if args.command == "restore":
        restore(args.source)
        return 0
    if os.geteuid() != 0:
        raise SystemExit(f"make hub-{args.command}: run as root")
    pid = running(read_state())
    if pid and pid != os.getpid():
        stop_process(pid, grace_s=90)  # it stops its servers on the way out
    halt()
    if args.command == "destroy":
        tear_down()
    else:
        print(f"hub stopped; the term is kept in {STATE} (`make hub-destroy` removes it)")
    return 0
