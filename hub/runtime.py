"""What the hub runs: a Python every account can start, with this environment's packages
(JupyterLab, nbgrader, torch, the course's grader), and JupyterHub's proxy.

An account's server, its kernels and the instructor's grading run as that account, so they
need an interpreter it may execute. Where this environment's Python lives somewhere they
cannot enter (a pyenv under /root, as on the course's machines), the hub makes a *bridge*
under its state folder, removed with it: the same interpreter (its binary copied, with its
library path made relative; libpython and the standard library as hard links) and a virtual
environment of it whose site-packages, share/ and etc/ are this environment's. (The
system's /usr/bin/python3.11 would not do: Debian's 3.11.2 lacks fixes of `re` that the
installed soupsieve needs, and nbgrader's feedback fails.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from hub import REPO

PROXY = REPO / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
NOBODY = 65534


def runs_unprivileged(python: Path) -> bool:
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    # through a shell: a process of the account starts it, as the accounts' servers start
    # their kernels (setpriv's own exec can reach what the account's processes cannot)
    argv += ["/bin/sh", "-c", '"$0" -c "import jupyterhub"', str(python)]
    result = subprocess.run(argv, cwd="/", capture_output=True, env={"PATH": "/usr/bin:/bin"})
    return result.returncode == 0


def _link_tree(source: Path, target: Path, ignore) -> None:
    """A copy of `source` made of hard links (no disk, no time), copies where links fail."""

    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, ignore=ignore, copy_function=link, symlinks=True)


def _interpreter(state: Path, version: str) -> Path:
    """The environment's base interpreter, where the accounts can run it: its binary (a
    copy, its library path made relative), libpython and the standard library (hard links)."""
    base = Path(sys.base_prefix)
    cpython = state / "cpython"
    (cpython / "bin").mkdir(parents=True)
    binary = cpython / "bin" / f"python{version}"
    data = (base / "bin" / f"python{version}").read_bytes()
    runpath = str(base / "lib").encode() + b"\0"
    if data.count(runpath) == 1:  # RUNPATH /root/...: $ORIGIN/../lib, the same length
        data = data.replace(runpath, b"$ORIGIN/../lib".ljust(len(runpath), b"\0"))
    binary.write_bytes(data)
    binary.chmod(0o755)
    (cpython / "lib").mkdir()
    for library in (base / "lib").glob(f"libpython{version}*"):
        (cpython / "lib" / library.name).hardlink_to(library) if not library.is_symlink() else (
            cpython / "lib" / library.name
        ).symlink_to(library.readlink())
    skipped = shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter")
    _link_tree(base / "lib" / f"python{version}", cpython / "lib" / f"python{version}", skipped)
    return binary


def user_python(state: Path) -> Path:
    """This environment's python, or a bridge to it that the accounts can run."""
    here = Path(sys.prefix) / "bin" / "python"
    if runs_unprivileged(here):
        return here
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = _interpreter(state, version)
    bridge = state / "python"
    site = Path(sysconfig.get_paths()["purelib"])
    (bridge / "bin").mkdir(parents=True)
    for name in ("python", "python3", f"python{version}"):
        (bridge / "bin" / name).symlink_to(interpreter)
    lib = bridge / "lib" / f"python{version}"
    lib.mkdir(parents=True)
    (lib / "site-packages").symlink_to(site)
    for name in ("share", "etc"):
        if (Path(sys.prefix) / name).is_dir():
            (bridge / name).symlink_to(Path(sys.prefix) / name)
    # the environment's scripts (alembic, which nbgrader calls by name; jupyter; nbgrader)
    for script in (Path(sys.prefix) / "bin").iterdir():
        try:
            first, rest = script.read_bytes().split(b"\n", 1)
        except (OSError, ValueError):
            continue
        if first.startswith(b"#!" + str(Path(sys.prefix) / "bin" / "python").encode()):
            if not (bridge / "bin" / script.name).exists():
                (bridge / "bin" / script.name).write_bytes(
                    f"#!{bridge}/bin/python\n".encode() + rest
                )
                (bridge / "bin" / script.name).chmod(0o755)
    (bridge / "pyvenv.cfg").write_text(
        f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
        f"version = {sys.version.split()[0]}\n"
    )
    python = bridge / "bin" / "python"
    if not runs_unprivileged(python):
        raise SystemExit(
            f"the hub's accounts cannot run {sys.executable} (its folder is closed to them), "
            f"nor the bridge {python}: install the course into a Python they can run"
        )
    return python


def proxy() -> Path:
    """configurable-http-proxy, installed by `npm ci` from hub/package-lock.json."""
    if not PROXY.exists():
        if shutil.which("npm") is None:
            raise SystemExit("JupyterHub's proxy needs node and npm (`apt-get install npm`)")
        print("installing JupyterHub's proxy (npm ci in hub/)", flush=True)
        result = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=REPO / "hub",
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise SystemExit(f"npm ci failed in hub/:\n{result.stdout}{result.stderr}")
    return PROXY
