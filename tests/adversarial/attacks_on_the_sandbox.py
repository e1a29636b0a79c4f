"""Attacks on the sandbox (tests/adversarial/test_escape.py): code a hostile hand-in runs to
reach out of its kernel: links made from inside, probes for secrets, a fork bomb, files that
fill the disk, and processes that hold memory together."""

from __future__ import annotations

# 2c. While it runs, the kernel makes links in its working folder and its private runtime
# folder to the gradebook, the reference records, a classmate's notebook and /; puts links
# to a classmate's notebook wherever its own graded notebook might be; and replaces its
# connection file by a link to the gradebook. Nothing of it may reach the host.
LINKS_FROM_THE_KERNEL = """
import json
import os
import sys

_private = os.path.dirname(sys.argv[sys.argv.index("-f") + 1])
_made, _read = [], []
_targets = {
    "gradebook.db": _ROOT + "/gradebook.db",
    "reference": _ROOT + "/build/reference",
    "solution.ipynb": _ROOT + f"/build/source/{_LAB}/{_LAB}.ipynb",
    "classmate.ipynb": _CLASSMATE,
    "everything": "/",
}
for _folder in (os.getcwd(), _private):
    for _name, _target in _targets.items():
        _link = os.path.join(_folder, _name)
        try:
            os.symlink(_target, _link)
            _made.append(_link)
            with open(_link, "rb") as _fh:
                _fh.read(1)
            _read.append(_link)
        except OSError:
            pass
_own = [
    f"{_LAB}.ipynb",
    f"{_ROOT}/autograded/{_ME}/{_LAB}/{_LAB}.ipynb",
    f"{_ROOT}/submitted/{_ME}/{_LAB}/{_LAB}.ipynb",
    os.path.join(_private, "..", "..", "autograded", "student", _LAB, f"{_LAB}.ipynb"),
    os.path.join(_private, "..", "..", "submitted", "student", _LAB, f"{_LAB}.ipynb"),
]
for _path in _own:
    try:
        os.makedirs(os.path.dirname(_path) or ".", exist_ok=True)
        if os.path.lexists(_path):
            os.remove(_path)
        os.symlink(_CLASSMATE, _path)
        _made.append(_path)
    except OSError:
        pass
try:
    _connection = sys.argv[sys.argv.index("-f") + 1]
    os.symlink(_ROOT + "/gradebook.db", _connection + ".link")
    os.replace(_connection + ".link", _connection)
    _made.append(_connection)
except OSError:
    pass
print("LINKS " + json.dumps({"made": _made, "read": _read}))
"""

# 6. What the sandbox lets the kernel see and do, in cells added after the last test cell
# (so that the score does not depend on how long they take). Each reports in one line; the
# test, not the kernel, decides. (The secret's value is given only to tell if it was seen.)
PROBE_SECRETS = """
import json
import os


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return None


def _list(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


_report = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid()}
_report["read"] = {p: _read(p) is not None for p in _FILES}
_report["listed"] = {p: _list(p) for p in _FOLDERS}
_seen = {"os.environ": json.dumps(dict(os.environ))}
for _pid in _list("/proc") or []:
    if _pid.isdigit():
        _seen[f"/proc/{_pid}/environ"] = _read(f"/proc/{_pid}/environ")
        _seen[f"/proc/{_pid}/cmdline"] = _read(f"/proc/{_pid}/cmdline")
_seen.update({p: _read(p) for p in _FILES})
_report["secret_seen_in"] = sorted(k for k, v in _seen.items() if v and _SECRET in v)
_report["environ"] = sorted(os.environ)
_report["proc_1_environ"] = _read("/proc/1/environ")
print("SECRETS " + json.dumps(_report))
"""

# A fork bomb, bounded by a loop (and by 10 s): as many sleeping processes as it can start
# (posix_spawn, which does not copy the kernel's memory), then all killed, whatever happens.
PROBE_FORKS = """
import errno
import json
import os
import signal
import time

_pids, _error, _until = [], None, time.monotonic() + 10
try:
    for _ in range(2000):
        if time.monotonic() > _until:
            _error = "out of time"
            break
        try:
            _pids.append(os.posix_spawn("/bin/sleep", ["sleep", "600"], {}))
        except OSError as e:
            _error = errno.errorcode.get(e.errno, str(e.errno))
            break
    print("FORKS " + json.dumps({"started": len(_pids), "error": _error}), flush=True)
finally:
    for _pid in _pids:
        os.kill(_pid, signal.SIGKILL)
    for _pid in _pids:
        os.waitpid(_pid, 0)
"""

# Files: 1 GiB into /dev/shm, and more than the working folder's cap into /tmp and into the
# private runtime folder (the one host folder it may write, for its connection and sockets).
PROBE_FILLS = """
import errno
import json
import os
import sys


def _fill(folder, total, chunk=8 << 20, per_file=32 << 20):
    done, error, files = 0, None, []
    blob = b"x" * chunk
    try:
        while done < total:
            files.append(os.path.join(folder, f"fill-{len(files)}"))
            with open(files[-1], "wb") as fh:
                written = 0
                while written < per_file and done < total:
                    fh.write(blob)
                    fh.flush()
                    written += chunk
                    done += chunk
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
    for path in files:
        try:
            os.remove(path)
        except OSError:
            pass
    return {"mib": done >> 20, "error": error}


_private = os.path.dirname(sys.argv[sys.argv.index("-f") + 1])
print("FILLS " + json.dumps({
    "shm": _fill("/dev/shm", 1 << 30),
    "tmp": _fill("/tmp", 288 << 20),
    "private": _fill(_private, 96 << 20),
}))
"""

# Memory over eight processes, 1.5 GiB each, held until the end. The children volunteer to
# the out-of-memory killer (oom_score_adj), so that the cgroup's cap stops them and not the
# kernel; the parent waits for the cap's first kill (at most HOG_WAIT_S), says how many
# held their 1.5 GiB then and how many the cap killed, and then kills the rest.
HOG_WAIT_S = 12

MEMORY_HOG = """
import json
import os
import signal
import time

_read_end, _write_end = os.pipe()
_children, _ended = [], {}
try:
    for _ in range(8):
        _pid = os.fork()
        if _pid == 0:
            try:
                os.close(_read_end)
                with open("/proc/self/oom_score_adj", "w") as fh:
                    fh.write("1000")
                _blob = b"\\x01" * (1536 << 20)
                os.write(_write_end, b"%d\\n" % os.getpid())
                time.sleep(600)
            finally:
                os._exit(0)
        _children.append(_pid)
    os.close(_write_end)
    os.set_blocking(_read_end, False)
    _deadline = time.monotonic() + _WAIT_S
    while not _ended and time.monotonic() < _deadline:
        for _pid in _children:
            _done, _status = os.waitpid(_pid, os.WNOHANG)
            if _done:
                _ended[_pid] = _status
        time.sleep(0.1)
    try:
        _allocated = {int(n) for n in os.read(_read_end, 4096).split()}
    except BlockingIOError:
        _allocated = set()
    _alive = [_pid for _pid in _children if _pid not in _ended]
    print("HOG " + json.dumps({
        "children": len(_children),
        "allocated": len(_allocated),
        "killed_by_the_cap": sum(os.WIFSIGNALED(s) for s in _ended.values()),
        "alive_at_the_end": len(_alive),
        "holding_at_the_end": len(_allocated & set(_alive)),
    }), flush=True)
finally:
    _alive = [_pid for _pid in _children if _pid not in _ended]
    for _pid in _alive:
        os.kill(_pid, signal.SIGKILL)
    for _pid in _alive:
        os.waitpid(_pid, 0)
"""
