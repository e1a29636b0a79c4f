"""Kernels forked from the warm process (graders/sandbox/zygote.py) hold what a kernel started alone
in bubblewrap holds, against a hand-in that tries to use what they share: the process they
were all forked from.

* Two kernels forked side by side share nothing a hand-in can use: not a user, a namespace,
  a file, a process, a socket (abstract, loopback), shared memory, a random stream, a root
  or /dev, or a watch on a file both read; and neither sees the warm process, its other
  children or a capability.
* A hand-in cannot kill its namespace's init (as under bubblewrap); one that kills its own
  kernel ends only itself: the warm process forks the next kernel as before.
* The grader's switch (c.SandboxedExecute.fork_kernels = False) and a grader that is not
  root start every kernel alone in bubblewrap, as before.
* The folder of a warm process whose grader was killed is removed by the next one made.
* A read-only folder (the course's data) made or replaced after a warm process started is
  seen by the next kernel as it is then, as a kernel started alone sees it.
* Seen from the host while a kernel starts and runs, no process between the grader and it
  (the stub nbgrader's kernel manager started, watched from its first instruction on, the
  warm process's sandbox, the warm process, the children that set up each kernel) is the
  host's root, and those that hold a capability hold it in a user namespace where host
  root is no one.
* A forked kernel reaches nothing of its parent and nothing a new namespace would give: no
  user namespace to make, no setns, ptrace or process_vm_readv on its init, no link in
  place of the sockets the grader connects to (its client reconnects through one); its mount table
  holds one fresh mount on each of its folders (the warm process's own are gone, not
  covered) and no host path of the warm process; no descriptor but its own and no shared
  writable mapping.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time

import pytest
from helpers import forked, printed_line, sandbox_client, stream_text

from graders.sandbox import sandbox, sandbox_argv, zygote

pytestmark = [
    pytest.mark.skipif(sandbox.available() is not None, reason="needs bubblewrap"),
    pytest.mark.skipif(os.getuid() != 0, reason="only a root grader forks kernels"),
    pytest.mark.timeout(300),
]

# what a kernel reports of itself, one JSON line; the test decides
SELF = """
import json, os, random, socket, numpy, torch
def _ns(name):
    return os.readlink(f"/proc/self/ns/{name}")
def _status(field):
    return open("/proc/self/status").read().split(field + ":")[1].split()[0]
print("SELF " + json.dumps({
    "uid": os.getuid(),
    "ns": {n: _ns(n) for n in ("pid", "net", "mnt", "ipc", "uts", "cgroup")},
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "caps": [_status(f) for f in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
    "no_new_privs": _status("NoNewPrivs"),
    "draws": [random.random(), float(torch.rand(1)), float(numpy.random.rand())],
    "fs": {p: os.stat(p).st_dev for p in ("/", "/dev", "/etc", "/dev/null")},
}))
"""

# a hand-in leaving things where a classmate's kernel might look
PLANT = """
import mmap, os, socket, subprocess, sys
from multiprocessing import shared_memory
for _path in ("/tmp/PLANT", "/dev/shm/PLANT", os.path.expanduser("~/PLANT")):
    open(_path, "w").write("PLANT")
_shm = shared_memory.SharedMemory(name="PLANTSHM", create=True, size=64)
_abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
_abstract.bind("\\0PLANT")
_abstract.listen()
_tcp = socket.socket()
_tcp.bind(("127.0.0.1", 47999))
_tcp.listen()
_sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True)
print("PLANTED", _sleeper.pid)
# and a watch on a file its classmates' kernels read too (the Zen of Python: no kernel imports
# it): every open or read of it by another kernel would be an event here
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
_watched = os.path.join(os.path.dirname(os.__file__), "this.py").encode()
_inotify = _libc.inotify_init1(os.O_NONBLOCK)
if _inotify >= 0:
    _libc.inotify_add_watch(_inotify, _watched, 0x20 | 0x01 | 0x10)  # open, access, close
"""

# what the planting kernel heard of its classmate's, afterwards
HEAR = """
try:
    _heard = len(os.read(_inotify, 4096)) if _inotify >= 0 else 0
except BlockingIOError:
    _heard = 0
print("HEARD", _heard)
"""

# a classmate's kernel looking for them
LOOK = """
import os, socket
from multiprocessing import shared_memory
_found = [p for p in ("/tmp/PLANT", "/dev/shm/PLANT", os.path.expanduser("~/PLANT"))
          if os.path.exists(p)]
try:
    shared_memory.SharedMemory(name="PLANTSHM")
    _found.append("shm")
except OSError:
    pass
for _family, _address in ((socket.AF_UNIX, "\\0PLANT"), (socket.AF_INET, ("127.0.0.1", 47999))):
    try:
        socket.socket(_family, socket.SOCK_STREAM).connect(_address)
        _found.append(repr(_address))
    except OSError:
        pass
open(os.path.join(os.path.dirname(os.__file__), "this.py")).read()
print("FOUND", _found)
"""


def test_two_forked_kernels_share_nothing_a_hand_in_can_use(tmp_path):
    first = sandbox_client(tmp_path, [PLANT, SELF, HEAR])
    with first.setup_kernel():
        assert forked(first)
        first.execute_cell(first.nb.cells[0], 0)
        first.execute_cell(first.nb.cells[1], 1)
        planted = printed_line(first.nb.cells[0], "PLANTED")
        second = sandbox_client(tmp_path, [LOOK, SELF])
        second.execute()  # while the first kernel, and what it started, still run
        assert forked(second)
        first.execute_cell(first.nb.cells[2], 2)
    one = json.loads(printed_line(first.nb.cells[1], "SELF"))
    two = json.loads(printed_line(second.nb.cells[1], "SELF"))
    assert printed_line(second.nb.cells[0], "FOUND") == "[]"
    assert one["uid"] != two["uid"]
    assert all(me["uid"] in sandbox_argv.KERNEL_UIDS for me in (one, two))
    for name, value in one["ns"].items():
        assert two["ns"][name] != value, f"both kernels in one {name} namespace"
    # each sees its own init (1), its kernel (2) and what it started: not the warm process,
    # nor the other kernel, nor what that one left running
    assert one["pids"][:2] == [1, 2] and int(planted) in one["pids"]
    assert two["pids"] == [1, 2]
    for me in (one, two):
        assert me["caps"] == ["0000000000000000"] * 5 and me["no_new_privs"] == "1"
    for a, b in zip(one["draws"], two["draws"], strict=True):  # random, torch, numpy
        assert a != b, "two forked kernels drew the same random numbers"
    # its root and /dev are file systems of its own: not its sibling's, nor the warm
    # process's (whose state, and its siblings', they would otherwise show it)
    warm = os.stat(f"/proc/{_warm_python()}/root").st_dev
    warm_dev = os.stat(f"/proc/{_warm_python()}/root/dev").st_dev
    for folder, parents in (("/", warm), ("/dev", warm_dev)):
        assert one["fs"][folder] != two["fs"][folder], f"both kernels see one {folder}"
        assert parents not in (one["fs"][folder], two["fs"][folder]), f"the warm process's {folder}"
    for me in (one, two):  # its /etc is on its own root; its devices are the machine's
        assert me["fs"]["/etc"] == me["fs"]["/"] and me["fs"]["/dev/null"] != me["fs"]["/dev"]
    # no watch on a file both read tells one kernel what the other does
    assert printed_line(first.nb.cells[2], "HEARD") == "0"


def test_a_hand_in_that_kills_its_init_and_itself_ends_only_itself(tmp_path):
    killer = sandbox_client(
        tmp_path,
        [
            # a namespace's init ignores what is sent from inside (Python's SIGINT handler too)
            "import os, signal\nfor s in ('SIGINT', 'SIGTERM', 'SIGKILL'):\n"
            "    os.kill(1, getattr(signal, s))",
            "print('alive')",
            "os.kill(os.getpid(), signal.SIGKILL)",
            "print('still alive')",
        ],
    )
    try:
        killer.execute()
    except Exception:  # noqa: BLE001 - its kernel died, as it asked
        pass
    assert "alive" in stream_text(killer.nb.cells[1])
    assert "still alive" not in stream_text(killer.nb.cells[3])
    after = sandbox_client(tmp_path, ["print('next', 6 * 7)"])
    after.execute()
    assert "next 42" in stream_text(after.nb.cells[0])
    assert forked(killer) and forked(after)


def test_switched_off_or_not_root_a_kernel_starts_alone(tmp_path, monkeypatch):
    command = ["python", "-m", "ipykernel_launcher", "-f", "/tmp/x/connection.json"]
    private = tmp_path / "kernel-x"
    assert zygote.usable(private, command)
    assert not zygote.usable(private, ["R", "--slave", "-f", "x"])  # not ipykernel
    assert not zygote.usable(private, command, fork=False)  # c.SandboxedExecute.fork_kernels
    monkeypatch.setattr(zygote.os, "getuid", lambda: 1000)
    assert not zygote.usable(private, command)
    monkeypatch.undo()
    alone = sandbox_client(tmp_path, ["print('alone')"], fork=False)
    alone.execute()
    assert "alone" in stream_text(alone.nb.cells[0])
    assert not forked(alone) and "bwrap" in alone.started[0]


def test_a_killed_graders_warm_process_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(zygote.tempfile, "gettempdir", lambda: str(tmp_path))
    abandoned, live, unclaimed = (tmp_path / f"{zygote.PREFIX}{n}" for n in ("a", "b", "c"))
    for folder in (abandoned, live, unclaimed):
        folder.mkdir()
    (abandoned / "claim").write_text("")
    (live / "claim").write_text("")
    held = open(live / "claim")  # noqa: SIM115 - a live grader's lock, held through the sweep
    fcntl.flock(held, fcntl.LOCK_EX)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "claim").write_text("")
    (tmp_path / f"{zygote.PREFIX}link").symlink_to(elsewhere)
    zygote._remove_abandoned()
    held.close()
    assert not abandoned.exists()
    assert live.is_dir() and unclaimed.is_dir() and (elsewhere / "claim").exists()


def test_a_read_only_folder_replaced_after_the_warm_process_started_is_seen_as_it_is(tmp_path):
    data = tmp_path / "data"  # a course's data root, prepared again between two kernels
    data.mkdir()
    (data / "version").write_text("one")
    cell = f"print('SEEN', open('{data}/version').read())"
    first = sandbox_client(tmp_path, [cell], readonly=[data])
    first.execute()
    fresh = tmp_path / "data.new"
    fresh.mkdir()
    (fresh / "version").write_text("two")
    data.rename(tmp_path / "data.old")
    fresh.rename(data)
    second = sandbox_client(tmp_path, [cell], readonly=[data])
    second.execute()
    assert forked(first) and forked(second)
    assert printed_line(first.nb.cells[0], "SEEN") == "one"
    assert printed_line(second.nb.cells[0], "SEEN") == "two"


def _descendants(root: int) -> list[int]:
    """`root` and every process below it, as the host sees them."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{entry}/stat").read()  # noqa: PTH123, SIM115
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _warm_process() -> zygote.Zygote:
    return zygote._zygotes[(os.getpid(), (), ())]


def _warm_python() -> int:
    """The warm process itself (its forks, kernels included, share its command line)."""

    def named(pid: int) -> bool:
        try:
            return b"grading_zygote" in open(f"/proc/{pid}/cmdline", "rb").read()  # noqa: SIM115
        except OSError:
            return False

    for pid in _descendants(_warm_process().process.pid):
        parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])  # noqa: SIM115
        if named(pid) and not named(parent):
            return pid
    raise AssertionError("no warm process")


def _status(pid: int) -> dict:
    """Who process `pid` is on the host, and what it may do."""
    status = open(f"/proc/{pid}/status").read()  # noqa: PTH123, SIM115
    return {
        "uids": [int(u) for u in status.split("Uid:")[1].split()[:4]],
        "gids": [int(g) for g in status.split("Gid:")[1].split()[:4]],
        "caps": int(status.split("CapEff:")[1].split()[0], 16),
        "permitted": int(status.split("CapPrm:")[1].split()[0], 16),
        "no_new_privs": status.split("NoNewPrivs:")[1].split()[0],
        "userns": os.readlink(f"/proc/{pid}/ns/user"),
        "map": open(f"/proc/{pid}/uid_map").read().split(),  # noqa: SIM115
    }


def _watch_stubs(stop: threading.Event, seen: list[dict]) -> None:
    """Every state of this process's forked kernels' stubs, from as soon after they start as
    the host lets one see them (their command line theirs, not the grader's fork's) until
    `stop`: polled every millisecond or so, each change of one kept."""
    me = os.getpid()
    while not stop.is_set():
        for task in os.listdir(f"/proc/{me}/task"):
            try:
                children = open(f"/proc/{me}/task/{task}/children").read().split()  # noqa: SIM115
            except OSError:
                continue
            for pid in children:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:  # first: after its exec
                        if os.fsencode(zygote.STUB) not in fh.read():
                            continue
                    state = {"pid": int(pid), **_status(int(pid))}
                except OSError:  # ended meanwhile
                    continue
                if state not in seen[-3:]:  # each change of it, once
                    seen.append(state)
        time.sleep(0.001)  # a stub's set-up takes milliseconds; the grader needs the cores


def test_nothing_between_the_grader_and_a_forked_kernel_is_host_root(tmp_path):
    client = sandbox_client(tmp_path, ["import os; print('KERNEL', os.getuid())", "1 + 1"])
    seen, stubs = {}, []
    # a watch on the stub from its very start: before it has handed the kernel over too
    stop, early = threading.Event(), []
    watcher = threading.Thread(target=_watch_stubs, args=(stop, early), daemon=True)
    watcher.start()
    try:
        _run_and_watch(client, seen, stubs)
    finally:
        stop.set()
        watcher.join()
    kernel = int(printed_line(client.nb.cells[0], "KERNEL"))
    # bubblewrap and its init, the warm process, and for the kernel: C, I, the kernel
    assert len(seen) >= 6 and kernel in [me["uids"][0] for me in seen.values()], seen
    host = os.readlink("/proc/self/ns/user")
    for pid, me in seen.items():
        assert 0 not in me["uids"], f"process {pid} of the warm process's tree is host root"
        assert 0 not in me["gids"], f"process {pid} of the warm process's tree is host root"
        assert me["userns"] != host, f"process {pid} is in the host's user namespace"
        outside = me["map"][1::3]  # inside, outside, count: who is who on the host
        assert "0" not in outside, f"host root is someone in process {pid}'s namespace"
    assert any(me["caps"] for me in seen.values())  # the warm process's own, there only
    # the stub, in the host's namespaces, is the warm process's unprivileged host user from
    # its first instruction on, with no capability (the grader hands the kernel over itself)
    warm = _warm_process().uid
    stub = stubs[0]["pid"]
    assert [me for me in early if me["pid"] == stub], "the watch never saw the stub"
    for me in early:
        assert 0 not in me["uids"] + me["gids"], f"the stub was host root: {me}"
        assert me["caps"] == me["permitted"] == 0, f"the stub held a capability: {me}"
    for me in stubs:
        assert me["uids"] == [warm] * 4 and me["gids"] == [warm] * 4, me
        assert me["caps"] == me["permitted"] == 0 and me["no_new_privs"] == "1", me


def _run_and_watch(client, seen: dict, stubs: list) -> None:
    """The client's cells run; at each moment a cell has run, the state of its stub and of
    every process of the warm process's tree."""
    with client.setup_kernel():
        assert forked(client)
        stub = client.km.provisioner.process.pid  # what nbgrader's kernel manager started
        for index, cell in enumerate(client.nb.cells):
            client.execute_cell(cell, index)
            stubs.append({"pid": stub, **_status(stub)})
            for pid in _descendants(_warm_process().process.pid):
                try:
                    seen[pid] = _status(pid)
                except OSError:  # ended meanwhile
                    continue


# a hand-in that tries to reach the process it was forked from, or its siblings' ways
REACH = """
import ctypes, errno, glob, json, os
_libc = ctypes.CDLL(None, use_errno=True)
def _errno(done):
    return errno.errorcode.get(ctypes.get_errno(), "?") if done < 0 else "done"
_mnt = os.open("/proc/self/ns/mnt", os.O_RDONLY)  # its init's is not even open to it
_setns = _errno(_libc.setns(_mnt, 0))
os.close(_mnt)
_read, _write = os.pipe()  # a kernel has threads: a child of its own has not
_child = os.fork()
if _child == 0:
    os.write(_write, _errno(_libc.unshare(0x10000000 | 0x20000)).encode())
    os._exit(0)
os.close(_write)
_unshared = os.read(_read, 64).decode()
os.close(_read)
os.waitpid(_child, 0)
_buffer = ctypes.create_string_buffer(8)
_iov = (ctypes.c_void_p * 2)(ctypes.addressof(_buffer), 8)
# its sockets' folder is the grader's (root's) way to it: a link put there in place of a
# socket would be followed by the grader's reconnecting client to any socket of the host
import ipykernel.connect
_replaced = []
for _folder in [os.path.dirname(ipykernel.connect.get_connection_file())]:
    for _name in [*os.listdir(_folder), "planted"]:
        _path = os.path.join(_folder, _name)
        try:
            if os.path.lexists(_path):
                os.unlink(_path)
            os.symlink("/run/host-daemon.sock", _path)
            _replaced.append(_name)
        except OSError:
            pass
_fds = {}
for _fd in os.listdir("/proc/self/fd"):
    try:
        _fds[_fd] = os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:  # the listing's own
        pass
print("REACH " + json.dumps({
    "unshare_user": _errno(_libc.unshare(0x10000000)),
    "unshare_user_mount": _unshared,
    "setns": _setns,
    "ptrace_init": _errno(_libc.ptrace(16, 1, None, None)),  # PTRACE_ATTACH
    "read_init": _errno(_libc.process_vm_readv(1, _iov, 1, _iov, 1, 0)),
    "mounts": [line.split()[3:5] for line in open("/proc/self/mountinfo")],
    "mountinfo": open("/proc/self/mountinfo").read(),
    "sockets": glob.glob("/tmp/grading-zygote-*") + glob.glob("/tmp/*/socket"),
    "fds": _fds,
    "replaced": _replaced,
    "shared_writable": [m for m in open("/proc/self/maps") if m.split()[1][1::2] == "ws"],
}))
"""


def test_a_forked_kernel_reaches_nothing_of_its_parent_nor_a_new_namespace(tmp_path):
    client = sandbox_client(tmp_path, [REACH])
    client.execute()
    assert forked(client)
    reach = json.loads(printed_line(client.nb.cells[0], "REACH"))
    for attempt in ("unshare_user", "unshare_user_mount", "setns", "ptrace_init", "read_init"):
        assert reach[attempt] == "EPERM", (attempt, reach[attempt])
    assert _warm_process().folder.name not in reach["mountinfo"], reach["mountinfo"]
    assert reach["sockets"] == []
    points = [point for _root, point in reach["mounts"]]
    for folder in ("/tmp", "/dev/shm", "/home/student", "/proc", "/dev/pts"):
        assert points.count(folder) == 1, f"{folder}: {reach['mountinfo']}"
    mine = ("/dev/null", "pipe:", "socket:", "anon_inode:", "/home/student/")
    assert all(target.startswith(mine) for target in reach["fds"].values()), reach["fds"]
    assert reach["shared_writable"] == []
    assert reach["replaced"] == [], "the kernel replaced what the grader connects to"
