"""What the hub runs: the accounts' Python, the view a student's server runs in, and
JupyterHub's proxy.

An account's server, its kernels and the instructor's grading run as that account, so they
need an interpreter it may execute, and a student's must hold nothing secret. The hub makes
one under its state folder, kept for the term: this environment's interpreter (its binary
copied, with its library path made relative; libpython and the standard library as hard
links) and a virtual environment of it whose site-packages, share/ and etc/ are hard-linked
copies of this environment's (`cp -al`, compiled bytecode included: the accounts cannot
write it, and without it every process of theirs compiles each module it imports again),
less the course's editable install (which maps `graders` into the checkout). Nothing in it
links to, or names, the checkout. (The system's
/usr/bin/python3.11 would not do: Debian's 3.11.2 lacks fixes of `re` that the installed
soupsieve needs, and nbgrader's feedback fails.)
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from hub import REPO

PROXY = REPO / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
# the hub's modules that the accounts' nbgrader loads (nbgrader_config.py names their classes)
SHARED = ("__init__.py", "exchange.py", "lateness.py")
NOBODY = 65534


def runs_unprivileged(python: Path) -> bool:
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    # through a shell: a process of the account starts it, as the accounts' servers start
    # their kernels (setpriv's own exec can reach what the account's processes cannot)
    argv += ["/bin/sh", "-c", '"$0" -c "import jupyterhub"', str(python)]
    result = subprocess.run(argv, cwd="/", capture_output=True, env={"PATH": "/usr/bin:/bin"})
    return result.returncode == 0


def _link_entries(source: Path, target: Path, skip: tuple[str, ...] = ()) -> None:
    """target/<entry> for each entry of `source` whose name matches no pattern of `skip`: a
    copy made of hard links (`cp -al`: no disk, one process for the whole tree; links stay
    links), real copies where the two are on different filesystems."""
    target.mkdir(parents=True, exist_ok=True)
    left_out = [p for p in source.iterdir() if any(fnmatch.fnmatch(p.name, s) for s in skip)]
    entries = [str(p) for p in sorted(source.iterdir()) if p not in left_out]
    if not entries:
        return
    if subprocess.run(["cp", "-al", "--", *entries, str(target)], capture_output=True).returncode:
        for entry in entries:  # another filesystem (cross-device links): copies instead
            shutil.rmtree(target / Path(entry).name, ignore_errors=True)
        done = subprocess.run(["cp", "-a", "--", *entries, str(target)], capture_output=True)
        if done.returncode:
            raise SystemExit(f"copying {source} to {target} failed: {done.stderr.decode()}")


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
    skipped = ("site-packages", "test", "idlelib", "tkinter")
    _link_entries(base / "lib" / f"python{version}", cpython / "lib" / f"python{version}", skipped)
    return binary


# what of this environment the accounts' copy leaves out: the course's own package, installed
# editable from the checkout (its finder, its .pth and its record; the finder maps `graders`
# to the checkout's files), and the finder's compiled bytecode
LEFT_OUT = ("__editable__*", "dynamic_graphs_labs*", "_dynamic_graphs_labs*")


def user_python(state: Path) -> Path:
    """The accounts' Python: a virtual environment under `state` holding copies (hard links)
    of this environment's interpreter and packages, and nothing of the checkout: no link into
    it, no path to it, no editable install of the course. Students' servers and kernels run
    it inside `student_view`, where the checkout does not exist; the instructor's course
    brings its own graders/ (its nbgrader_config.py puts its folder on the path). Kept for
    the term, and made anew at the next start after this environment changed (an upgrade
    writes new files: the copy would keep the old ones)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    bridge = state / "python"
    python = bridge / "bin" / "python"
    lib = bridge / "lib" / f"python{version}"
    made_of = bridge / MADE_OF
    if python.exists() and made_of.is_file() and made_of.read_text() == environment_id():
        # made by an earlier start of this term, of this environment as it is now: kept,
        # the hub's modules renewed
        share_hub_modules(lib / "site-packages" / "hub")
        return python
    if bridge.exists() or (state / "cpython").exists():  # of the environment before an upgrade
        print("the accounts' Python is made anew: the course's environment changed", flush=True)
        for old in (bridge, state / "cpython"):
            shutil.rmtree(old, ignore_errors=True)
    interpreter = _interpreter(state, version)
    site = Path(sysconfig.get_paths()["purelib"])
    (bridge / "bin").mkdir(parents=True)
    for name in ("python", "python3", f"python{version}"):
        (bridge / "bin" / name).symlink_to(interpreter)
    lib.mkdir(parents=True)
    _link_entries(site, lib / "site-packages", LEFT_OUT)
    for pattern in LEFT_OUT:
        for compiled in (lib / "site-packages" / "__pycache__").glob(pattern):
            compiled.unlink()
    for name in ("share", "etc"):
        if (Path(sys.prefix) / name).is_dir():
            _link_entries(Path(sys.prefix) / name, bridge / name, LEFT_OUT)
    share_hub_modules(lib / "site-packages" / "hub")
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
    if not runs_unprivileged(python):
        raise SystemExit(f"the hub's accounts cannot run {python}: see {state}")
    made_of.write_text(environment_id())
    made_of.chmod(0o644)
    return python


MADE_OF = "environment-id"  # in the accounts' Python: what it was made of (environment_id)


def environment_id() -> str:
    """What the accounts' Python copies: this interpreter's version and every distribution
    installed in this environment, by name and version (site-packages' *.dist-info), as one
    hash. An upgrade (`pip install -U`, a new torch) changes it."""
    site = Path(sysconfig.get_paths()["purelib"])
    names = sorted(p.name for p in site.glob("*.dist-info"))
    return hashlib.sha256("\n".join([sys.version, *names]).encode()).hexdigest()


def share_hub_modules(package: Path) -> None:
    """The hub's own exchange classes, which every account's nbgrader_config.py names, in the
    accounts' Python: copied at every start of the term, so that a fix of the checkout's
    hub/exchange.py reaches a running term at its next `make hub`."""
    package.mkdir(exist_ok=True)
    for name in SHARED:
        if (
            not (package / name).is_file()
            or (package / name).read_bytes() != (REPO / "hub" / name).read_bytes()
        ):
            shutil.copyfile(REPO / "hub" / name, package / name)
            (package / name).chmod(0o644)
            for compiled in (package / "__pycache__").glob(f"{name[:-3]}.*.pyc"):
                compiled.unlink()


def _system_path(path: str) -> list[str]:
    """bwrap arguments for /bin, /lib, ...: the same symlink where the machine has one."""
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    return ["--ro-bind-try", path, path]


def student_view(home: str, state: Path) -> list[str]:
    """What a student's server, terminals and kernels see of the machine (a bwrap argv to
    put before the command): the system (/usr, /etc), the accounts' Python (read-only), the
    exchange, their own home, a /tmp of their own, and their own processes only. Nothing
    else exists there: no checkout of the course (whatever its permissions), no other home,
    no /srv/dgl-hub/private, no /root."""
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for path in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.lexists(path):
            argv += _system_path(path)
    for name in ("cpython", "python"):
        argv += ["--ro-bind", str(state / name), str(state / name)]
    argv += ["--bind", str(state / "exchange"), str(state / "exchange")]
    argv += ["--bind", home, home, "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    return [*argv, "--chdir", home]


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
