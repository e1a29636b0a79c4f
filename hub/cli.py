"""`python -m hub start` (`make hub`) and `python -m hub stop` (`make hub-stop`).

start: makes the accounts, the course, the exchange and the hub's state, starts JupyterHub,
prints the address and the accounts, and waits; Ctrl-C (or SIGTERM, or `make hub-stop`)
stops JupyterHub and removes everything the hub made. stop: the same removal, also after a
crash (the accounts are found by their prefix and mark).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from hub import INSTRUCTOR, REPO, STATE, course_id, student_names
from hub.accounts import create_account, hub_accounts, join_group, remove_accounts
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
    if alive(read_state().get("pid")):
        raise SystemExit(
            f"make hub: a hub runs already (pid {read_state()['pid']}): `make hub-stop`"
        )
    if STATE.exists() or hub_accounts():
        say("removing what an earlier hub left")
        tear_down(say=lambda *_: None)
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
    root = install_course(INSTRUCTOR, python, labs)
    for name in accounts:
        configure_account(name, course, STATE / "exchange", root if name == INSTRUCTOR else None)
    state = {
        "pid": os.getpid(),
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


def tear_down(say=print) -> None:
    """Stop JupyterHub and its proxy where they still run, remove the accounts and STATE."""
    private = STATE / "private"
    for name in ("jupyterhub.pid", "jupyterhub-proxy.pid"):
        try:
            stop_process(int((private / name).read_text().strip()), grace_s=15)
        except (OSError, ValueError):
            pass
    names = remove_accounts()
    shutil.rmtree(STATE, ignore_errors=True)
    say(f"hub stopped; removed {len(names)} account(s) and {STATE}")


def start(args) -> int:
    try:
        state = set_up(args.students, args.port, args.ip, args.labs)
    except BaseException:  # a half-made hub is removed again (not one that runs already)
        if not alive(read_state().get("pid")) or read_state().get("pid") == os.getpid():
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
            tear_down()
    return 0


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
    sub.add_parser("stop", help="stop the hub and remove everything it made")
    args = parser.parse_args(argv)
    if args.command == "start":
        return start(args)
    if os.geteuid() != 0:
        raise SystemExit("make hub-stop: run as root")
    pid = read_state().get("pid")
    if alive(pid) and pid != os.getpid():
        stop_process(pid, grace_s=90)  # it removes everything itself on the way out
    tear_down()
    return 0
