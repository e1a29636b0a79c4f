"""The hub's Unix accounts: one instructor and N students, each with a password, a private
home (0700) and a group of its own; removed again by `remove_accounts`.

Each student's group also holds the instructor: released feedback is given to the student's
group only (hub/exchange.py), and the instructor's process must be able to hand it over.
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import signal
import subprocess
import time
from pathlib import Path

from hub import MARK, PREFIX


def _run(*argv: str, stdin: str | None = None) -> None:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def create_account(name: str) -> str:
    """A Unix user `name` with a group of its own and a random password; the password."""
    if not name.startswith(PREFIX):
        raise ValueError(f"hub accounts start with {PREFIX}: {name}")
    if exists(name):
        raise SystemExit(f"a user {name} exists already: `make hub-destroy` first")
    _run(
        "useradd", "--create-home", "--user-group", "--shell", "/bin/bash", "--comment", MARK, name
    )
    home = Path(pwd.getpwnam(name).pw_dir)
    home.chmod(0o700)
    password = secrets.token_urlsafe(12)
    _run("chpasswd", stdin=f"{name}:{password}\n")
    return password


def join_group(user: str, group: str) -> None:
    _run("usermod", "--append", "--groups", group, user)


def hub_accounts() -> list[str]:
    """Every account this hub created (by name prefix and GECOS mark), even after a crash."""
    return [
        p.pw_name for p in pwd.getpwall() if p.pw_name.startswith(PREFIX) and p.pw_gecos == MARK
    ]


def _processes(uids: set[int]) -> list[int]:
    """The pids of the processes running as one of `uids`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid in uids:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_processes(uids: set[int], grace_s: float = 3) -> None:
    """End every process running as one of `uids` (the hub's accounts only): SIGTERM, and
    SIGKILL for what is still there after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _processes(uids)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace_s
        while _processes(uids) and time.monotonic() < deadline:
            time.sleep(0.1)


def remove_accounts() -> list[str]:
    """Remove the hub's accounts, their homes, mail spools and groups; their names."""
    names = hub_accounts()
    kill_processes({pwd.getpwnam(n).pw_uid for n in names})
    for name in names:
        subprocess.run(["userdel", "--remove", name], capture_output=True)
    for group in grp.getgrall():  # a user's own group goes with it; any left over here
        if group.gr_name in names:
            subprocess.run(["groupdel", group.gr_name], capture_output=True)
    return names


def as_user(name: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run argv as the account `name` (its uid, gid and groups, its home, a clean
    environment), from its home."""
    entry = pwd.getpwnam(name)
    env = {
        "HOME": entry.pw_dir,
        "USER": name,
        "LOGNAME": name,
        "PATH": kwargs.pop("path", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        **kwargs.pop("env", {}),
    }
    drop = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"]
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run([*drop, *argv], env=env, cwd=kwargs.pop("cwd", entry.pw_dir), **kwargs)
