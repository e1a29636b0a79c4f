"""The kernel a hand-in is graded in: an allow-list of what it may see, as a host-unprivileged
user, with limits.

nbgrader's Execute step is `SandboxedExecute` (nbgrader_config.py), whose
`SandboxKernelManager` starts each notebook's kernel inside bubblewrap:

* **What it sees** (an allow-list): the system's programs and libraries (/usr and its
  links), the Python environment that runs the grader, graders/kernel (``grader_observe``
  for the hidden tests), declared read-only data (the MNIST cache), a working folder and a
  private runtime folder made fresh for this kernel, and a read-only copy of matplotlib's
  font list, made by the grader's own matplotlib (without it every kernel would scan the
  fonts again, a third of a second a hand-in). Nothing else of the machine exists in
  its view: no /etc, /home, /root, other courses, the repository, the gradebook, the
  instructor's files or other hand-ins.
* **Who it is**: when the grader runs as root, the kernel runs as a host user id of its own
  that owns nothing (a fresh number above 200000, so two kernels never share one); otherwise
  bubblewrap's user namespace maps it to the grader's own, unprivileged, user. No
  capabilities, no new privileges.
* **Its environment** is an allow-list too: PATH, HOME, the locale, the thread count and the
  scratch folders below; no variable of the grader's (tokens, credentials) passes.
* **Its working folder** is a size-capped tmpfs inside the sandbox, not nbgrader's
  autograded folder: whatever the kernel writes (files, links, a replacement notebook) dies
  with the sandbox, and nothing the grader does afterwards reads, copies or follows it.
* **Limits**: no network; new PID/IPC/UTS namespaces (a forked process dies with the
  kernel); memory for all its processes together and a process count (a cgroup, v2 or v1,
  where the machine lets the grader make one, else per-process address space and
  RLIMIT_NPROC), a per-process address-space cap (a large allocation raises MemoryError in
  its own cell), a cap on any one file, a small private /dev/shm, and a wall-clock budget for
  the whole notebook.

The kernel talks to nbgrader over Unix sockets in its private runtime folder (ipc
transport), which work across the network namespace. Where bubblewrap cannot run, `available`
says why; `graders.grade` then refuses to grade, and a plain ``nbgrader autograde`` grades
without a sandbox after saying so once in its log.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from functools import cache
from pathlib import Path

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError
from nbgrader.preprocessors import Execute
from traitlets import Dict, default

KERNEL_SIDE = Path(__file__).resolve().parent / "kernel"  # grader_observe, for hidden tests
MEMORY_CAP_BYTES = 8 * 2**30  # address space per process; torch with dynamo maps about 4 GiB
GROUP_MEMORY_BYTES = 6 * 2**30  # resident memory of all the kernel's processes (cgroup)
PROCESS_CAP = 256  # processes and threads of one kernel
FILE_CAP_BYTES = 64 * 2**20  # the largest file a notebook may write
WORKDIR_BYTES = 256 * 2**20  # the kernel's working folder (tmpfs), all files together
PRIVATE_BYTES = 8 * 2**20  # its runtime folder (connection file, sockets): a tmpfs as root
SHM_BYTES = 64 * 2**20  # its /dev/shm
FONT_LIST_MAX_BYTES = 2**20  # matplotlib's font list, given to each kernel (a few dozen kB)
KILL_GRACE_S = 60  # a kernel still running this long after its notebook's budget is killed
# torch threads of a graded kernel (and of the reference run, so both compute alike): the
# kernels run side by side, one per core, and more threads than cores make torch crawl
KERNEL_THREADS = 1
SETTINGS_ENV = "COURSE_SANDBOX"  # JSON settings from the grader to SandboxKernelManager
WORKDIR = "/home/student"  # the kernel's working folder and HOME, inside the sandbox
LOG = logging.getLogger("graders.sandbox")
KERNEL_STARTS: list[float] = []  # seconds each kernel of this process took to start (timings)


def _bwrap() -> str | None:
    return shutil.which("bwrap")


@cache
def available() -> str | None:
    """None when sandboxed kernels can run here, else why not."""
    if _bwrap() is None:
        return "bubblewrap (bwrap) is not installed: `apt-get install bubblewrap`"
    probe = subprocess.run(
        [*_namespaces(), *_system_binds(), "--dev", "/dev", "--proc", "/proc",
         *_drop_privileges(os.getuid() + 1 if os.getuid() == 0 else None), "/bin/true"],
        capture_output=True, text=True,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {probe.stderr.strip()[:200]}"
    return None


def _namespaces() -> list[str]:
    argv = [_bwrap() or "bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc"]
    argv += ["--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.getuid() != 0:  # an unprivileged grader: a user namespace, "nobody" inside
        argv += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    return argv


def _drop_privileges(uid: int | None) -> list[str]:
    """As root, bubblewrap mounts with root's rights; the kernel then runs as `uid`."""
    if uid is None:
        return []
    return [
        "--", shutil.which("setpriv") or "/usr/bin/setpriv",
        f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
    ]  # fmt: skip


def _system_binds() -> list[str]:
    """/usr read-only, and the top-level links or folders that lead into it (/bin, /lib...)."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_symlink():
            argv += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            argv += ["--ro-bind", str(top), str(top)]
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in ("ld.so.cache", "localtime"):  # the dynamic linker's cache; the time zone
        path = Path("/etc") / name
        if path.exists():
            argv += ["--ro-bind", str(path.resolve()), str(path)]
    return argv


def python_paths() -> list[Path]:
    """The folders the kernel's Python needs: this environment and the one it was made from."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent}
    paths |= {Path(p) for p in sysconfig.get_paths().values() if p}
    roots = sorted(p.resolve() for p in paths if p.exists())
    return [p for p in roots if not any(q != p and q in p.parents for q in roots)]


def python_links() -> list[tuple[Path, Path]]:
    """(where it leads, the path as the grader names it) for each of those folders that the
    grader reaches through a link (``.venv -> /elsewhere/venv``): the kernel is started
    through the path as named (sys.executable, unresolved), so the sandbox shows the
    environment there too, not only where the link leads."""
    named = {Path(sys.prefix), Path(sys.executable).parent.parent}
    links = []
    for path in sorted(named):
        path = Path(os.path.abspath(path))
        if path.exists() and path.resolve() != path and not str(path).startswith("/usr/"):
            links.append((path.resolve(), path))
    return links


def _linked(links: list[tuple[Path, Path]], bound: list[Path], taken: set[Path]) -> list[str]:
    """Bind each link's target read-only at the link's own path (a link inside a folder
    already bound is seen there as it is, and needs nothing more)."""
    argv = []
    for target, path in links:
        if path in taken or any(path.is_relative_to(root) for root in bound):
            continue
        for parent in reversed(path.parents):
            if parent != Path("/") and parent not in taken:
                argv += ["--perms", "0755", "--dir", str(parent)]
                taken.add(parent)
        argv += ["--ro-bind", str(target), str(path)]
        taken.add(path)
    return argv


def _readonly(paths: list[Path], taken: set[Path]) -> list[str]:
    """Bind `paths` read-only, with each parent made as a plain, traversable folder."""
    argv = []
    for path in paths:
        if not path.exists() or str(path).startswith("/usr/"):
            continue
        for parent in reversed(path.parents):
            if parent != Path("/") and parent not in taken:
                argv += ["--perms", "0755", "--dir", str(parent)]
                taken.add(parent)
        argv += ["--ro-bind", str(path), str(path)]
        taken.add(path)
    return argv


def kernel_env(private: Path, threads: int | None, extra: dict[str, str]) -> dict[str, str]:
    """The kernel's whole environment: nothing of the grader's passes unless named here."""
    bindir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": WORKDIR,
        "USER": "student",
        "LOGNAME": "student",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(KERNEL_SIDE),
        "PYTHONDONTWRITEBYTECODE": "1",
        "NBGRADER_EXECUTION": "autograde",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    if threads:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = str(threads)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # see the machine notes
        if name in os.environ:
            env[name] = os.environ[name]
    # Scratch space of this kernel only (torch, once imported by the grader itself, exports
    # TORCHINDUCTOR_CACHE_DIR under /tmp, which the kernel would inherit and cannot write).
    for name, sub in {"TMPDIR": "tmp", "IPYTHONDIR": "ipython", "MPLCONFIGDIR": "matplotlib",
                      "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton",
                      "XDG_CACHE_HOME": "cache"}.items():  # fmt: skip
        env[name] = f"{WORKDIR}/.{sub}"
    env.update(extra)
    return env


def font_list_for_kernel(path: Path) -> bytes | None:
    """The bytes of matplotlib font list `path`, where every font it names is one a kernel
    sees too: matplotlib's own (named relative to its data folder) or the system's, under
    /usr. None for any other list (a font in someone's home, a file that is not a list)."""
    try:
        if path.stat().st_size > FONT_LIST_MAX_BYTES:
            return None
        data = path.read_bytes()
        listed = json.loads(data)
        fonts = listed["ttflist"] + listed["afmlist"]
        names = [font["fname"] for font in fonts]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    for name in names:
        if not isinstance(name, str):
            return None
        parts = Path(name).parts
        if ".." in parts or (Path(name).is_absolute() and parts[:2] != ("/", "usr")):
            return None
    return data


@cache
def matplotlib_font_list() -> tuple[str, bytes] | None:
    """(file name, bytes) of the font list the grader's own matplotlib keeps, for each
    kernel's configuration folder, which starts empty: without it matplotlib scans the
    machine's fonts again in every kernel (about 0.35 s of a hand-in on a 2-core machine).
    Read once per grader process; None where there is no list fit for a kernel."""
    try:
        import matplotlib
        from matplotlib import font_manager  # reads the list, or makes it the first time

        name = f"fontlist-v{font_manager.FontManager.__version__}.json"
        data = font_list_for_kernel(Path(matplotlib.get_cachedir()) / name)
    except Exception:  # noqa: BLE001 - without it the kernel only starts slower
        return None
    return None if data is None else (name, data)


def kernel_argv(
    command: list[str],
    private: Path,
    readonly: list[Path],
    threads: int | None = None,
    env: dict[str, str] | None = None,
    uid: int | None = None,
    group: list[Path] | None = None,
    files: list[Path] | None = None,
    fonts: Path | None = None,
) -> list[str]:
    """`command` (the kernel's) in the sandbox. `private` (its connection file and sockets)
    is the only host folder it may write; its working folder is a tmpfs of its own.
    `uid`: the host user it runs as (root graders only). `group`: cgroup folders it joins.
    `files`: read-only files put in its working folder (a lab's data beside the notebook).
    `fonts`: matplotlib's font list, read-only in its configuration folder."""
    argv = []
    if group:  # join the cgroups first, then become the sandbox (sh is trusted, ours)
        joins = " && ".join(f"echo $$ > {p}/cgroup.procs" for p in group)
        argv += ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh"]
    argv += [
        shutil.which("prlimit") or "prlimit",
        f"--as={MEMORY_CAP_BYTES}",
        f"--fsize={FILE_CAP_BYTES}",
        f"--nproc={PROCESS_CAP if uid is not None else _nproc_cap()}",
        "--core=0",
        *_namespaces(),
        "--clearenv",
        *_system_binds(),
    ]
    # first: binds below /tmp stay visible; capped like the working folder
    argv += ["--size", str(WORKDIR_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
    taken: set[Path] = {Path("/usr"), Path("/tmp")}
    bound = [*python_paths(), KERNEL_SIDE, *readonly]
    argv += _readonly(bound, taken)
    argv += _linked(python_links(), [Path("/usr"), *bound], taken)
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--size", str(SHM_BYTES), "--perms", "1777", "--tmpfs", "/dev/shm"]
    argv += ["--perms", "0755", "--dir", "/home"]
    argv += ["--size", str(WORKDIR_BYTES), "--perms", "0777", "--tmpfs", WORKDIR]
    for path in files or []:  # declared files beside the notebook, read-only
        argv += ["--ro-bind", str(path), f"{WORKDIR}/{Path(path).name}"]
    if fonts is not None:  # a folder the kernel's user may write in, holding the list
        argv += ["--perms", "0777", "--dir", f"{WORKDIR}/.matplotlib"]
        argv += ["--ro-bind", str(fonts), f"{WORKDIR}/.matplotlib/{fonts.name}"]
    for parent in reversed(private.parents):
        if parent != Path("/") and parent not in taken:
            argv += ["--perms", "0755", "--dir", str(parent)]
            taken.add(parent)
    argv += ["--bind", str(private), str(private), "--chdir", WORKDIR]
    for name, value in kernel_env(private, threads, env or {}).items():
        argv += ["--setenv", name, value]
    # the scratch folders the environment names, made by the kernel's own user in its tmpfs
    made = [f"{WORKDIR}/.{sub}" for sub in
            ("tmp", "ipython", "matplotlib", "inductor", "triton", "cache")]  # fmt: skip
    argv += _drop_privileges(uid) or ["--"]
    script = "mkdir -p " + " ".join(made) + ' && exec "$@"'
    return [*argv, "/bin/sh", "-c", script, "sh", *command]


def _nproc_cap() -> int:
    """RLIMIT_NPROC counts all processes of the user: an unprivileged grader's own count, plus
    room for one kernel."""
    uid = os.getuid()
    mine = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"Uid:\t{uid}\t" in status.read_text():
                mine += 1
        except OSError:
            continue
    return mine + PROCESS_CAP


class MemoryGroups:
    """cgroups that cap one kernel's processes together (memory, tmpfs included, and count).

    cgroup v2 where the grader may make groups in its own part of the tree (systemd gives a
    user one), else cgroup v1's memory and pids controllers where writable (a root grader in
    most containers), else none: `why_not` says so."""

    def __init__(self) -> None:
        self.v2 = self._v2_base()
        self.v1 = None if self.v2 else self._v1_bases()
        self.why_not = None
        if not self.v2 and not self.v1:
            self.why_not = (
                "no writable cgroup (v2 or v1 memory+pids) for the kernels: memory is capped "
                f"per process ({MEMORY_CAP_BYTES // 2**30} GiB of address space) and "
                f"processes by RLIMIT_NPROC, not for all of a kernel's processes together"
            )

    @staticmethod
    def _v2_base() -> Path | None:
        try:
            own = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        line = next((row for row in own if row.startswith("0::")), None)
        if line is None:
            return None
        base = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
        controllers = base / "cgroup.controllers"
        try:
            if not {"memory", "pids"} <= set(controllers.read_text().split()):
                return None
            probe = base / f"grading-probe-{secrets.token_hex(4)}"
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return None
        return base

    @staticmethod
    def _v1_bases() -> dict[str, Path] | None:
        bases = {}
        for controller in ("memory", "pids"):
            root = Path("/sys/fs/cgroup") / controller
            try:
                probe = root / f"grading-probe-{secrets.token_hex(4)}"
                probe.mkdir()
                probe.rmdir()
            except OSError:
                return None
            bases[controller] = root
        return bases

    def make(self, name: str) -> list[Path]:
        """New groups for one kernel, limits set; [] when there are none to make."""
        made = []
        try:
            if self.v2:
                group = self.v2 / name
                group.mkdir()
                made.append(group)
                (group / "memory.max").write_text(str(GROUP_MEMORY_BYTES))
                (group / "memory.swap.max").write_text("0")
                (group / "pids.max").write_text(str(PROCESS_CAP))
            elif self.v1:
                memory = self.v1["memory"] / name
                memory.mkdir()
                made.append(memory)
                (memory / "memory.limit_in_bytes").write_text(str(GROUP_MEMORY_BYTES))
                swap = memory / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(GROUP_MEMORY_BYTES))
                pids = self.v1["pids"] / name
                pids.mkdir()
                made.append(pids)
                (pids / "pids.max").write_text(str(PROCESS_CAP))
        except OSError as error:
            LOG.warning("could not make the kernel's cgroup (%s): rlimits only", error)
            self.remove(made)
            return []
        return made

    def named(self, name: str) -> list[Path]:
        """The groups `make(name)` makes, whether or not they exist."""
        if self.v2:
            return [self.v2 / name]
        return [base / name for base in (self.v1 or {}).values()]

    @staticmethod
    def remove(groups: list[Path]) -> None:
        for group in groups:
            for _ in range(500):  # the last processes take a few ms to leave; 5 s at most
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


@cache
def memory_groups() -> MemoryGroups:
    return MemoryGroups()


def protections_missing() -> list[str]:
    """The protections this machine cannot give (said once per class run)."""
    missing = []
    if available():
        missing.append(available())
    if memory_groups().why_not:
        missing.append(memory_groups().why_not)
    if os.getuid() != 0:
        missing.append(
            "the kernel's runtime folder (its connection file and sockets) is a host folder "
            "with no size cap when the grader is not root; files there are capped at "
            f"{FILE_CAP_BYTES // 2**20} MB each"
        )
    return missing


def _mount_tmpfs(folder: Path, uid: int) -> bool:
    """Make `folder` a small tmpfs owned by `uid` (root only); False where that fails."""
    options = f"size={PRIVATE_BYTES},mode=0700,uid={uid},gid={uid},nodev,nosuid,noexec"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    return done.returncode == 0


def _mount_points() -> set[bytes]:
    """Where something is mounted, as this process sees it (mountinfo escapes blanks)."""
    try:
        lines = Path("/proc/self/mountinfo").read_bytes().splitlines()
    except OSError:
        return set()
    unescape = re.compile(rb"\\([0-7]{3})")
    return {
        unescape.sub(lambda m: bytes([int(m[1], 8)]), line.split()[4])
        for line in lines
        if len(line.split()) > 4
    }


def _sandboxes_of(private: Path, groups: list[Path]) -> set[int]:
    """The processes of the kernel whose private folder is `private`: its bubblewrap (which
    binds that folder, an argument the kernel cannot change), and whatever is in its
    cgroups."""
    found = set()
    argument = b"\0" + os.fsencode(private) + b"\0"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if argument in b"\0" + fh.read():
                    found.add(int(pid))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    for group in groups:
        try:
            found.update(int(p) for p in (group / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            continue
    return found - {os.getpid()}


def release_abandoned(private: Path) -> None:
    """The host side of a kernel whose grader was killed outright (SIGKILL, a lost Dask
    worker) and so could not throw it away. bubblewrap's --die-with-parent usually ends the
    kernel with its grader, but not always (in tests, a grader killed just after starting
    its kernel left the inner sandbox running): so any process of it still running is
    killed, then its private tmpfs is unmounted and its cgroups removed. graders.task finds
    such kernels; their folders it removes itself."""
    groups = memory_groups().named(f"grading-{private.name}")
    for pid in _sandboxes_of(private, groups):
        try:
            os.kill(pid, signal.SIGKILL)  # a sandbox's init: the whole sandbox ends with it
        except OSError:
            continue
    if os.fsencode(private) in _mount_points():
        subprocess.run(["umount", "-l", str(private)], capture_output=True)
    MemoryGroups.remove(groups)


# A Unix socket's path holds at most 107 bytes: the kernel's are <runtime>/kernel-<8>/kernel-<n>
SOCKET_PATH_MAX = 107
SOCKET_TAIL = len("/kernel-xxxxxxxx/kernel-99")


def _private_root() -> Path:
    """The folder under which each kernel gets its private runtime folder."""
    root = Path(tempfile.gettempdir()) / f"grading-kernels-{os.getuid()}"
    root.mkdir(mode=0o711, exist_ok=True)
    return root


def _runtime_root(asked: str | None) -> Path:
    """The runtime folder asked for, where its path leaves room for the kernel's sockets
    (a deep temporary folder, as on some clusters, would not), else the machine's own."""
    for root in ([Path(asked)] if asked else []) + [_private_root()]:
        if len(os.fsencode(root)) + SOCKET_TAIL <= SOCKET_PATH_MAX:
            return root
    raise RuntimeError(
        f"the temporary folder {tempfile.gettempdir()} has too long a path for the kernel's "
        f"sockets (a socket's path holds {SOCKET_PATH_MAX} bytes): set TMPDIR to a shorter one"
    )


class SandboxKernelManager(AsyncKernelManager):
    """Starts every kernel in a sandbox of its own.

    The private folder holds the connection file and the Unix sockets; it is made fresh for
    this kernel (an unguessable name) and removed after it. The working folder is a tmpfs
    inside the sandbox. A kernel still running after the whole-notebook budget is killed,
    and the kill is written to the events file so the grader can say why.
    """

    sandbox = Dict(help="runtime, readonly, files, threads, budget_s, events, env (graders.task)")

    @default("sandbox")
    def _sandbox_default(self):
        return json.loads(os.environ.get(SETTINGS_ENV) or "{}")

    _watchdog: threading.Timer | None = None
    _private: Path | None = None
    _groups: list[Path] = []

    async def _async_pre_start_kernel(self, **kw):
        self._start_clock = time.monotonic()
        runtime = _runtime_root(self.sandbox.get("runtime"))
        private = Path(tempfile.mkdtemp(prefix="kernel-", dir=runtime))
        self._private = private
        uid = None
        self._mounted = False
        if os.getuid() == 0:  # a host user of its own, that owns nothing
            uid = 200_000 + secrets.randbelow(800_000)
            self._mounted = _mount_tmpfs(private, uid)  # the one host folder it writes: capped
            os.chown(private, uid, uid)
        private.chmod(0o700)
        self.transport, self.ip = "ipc", str(private / "kernel")  # sockets cross namespaces
        self.connection_file = str(private / "connection.json")
        command, kw = await super()._async_pre_start_kernel(**kw)
        # a signal would end bubblewrap, not interrupt the cell: interrupts go by message,
        # whichever kernelspec nbgrader found (plain `nbgrader autograde` uses the default)
        self.kernel_spec.interrupt_mode = "message"
        if uid is not None:
            os.chown(self.connection_file, uid, uid)
        self._groups = memory_groups().make(f"grading-{private.name}")
        fonts = None
        given = matplotlib_font_list()
        if given is not None:  # a copy of its own, beside its sockets
            name, data = given
            fonts = private / name
            fonts.write_bytes(data)
            fonts.chmod(0o444)
        argv = kernel_argv(
            command,
            private,
            readonly=[Path(p) for p in self.sandbox.get("readonly", [])],
            threads=self.sandbox.get("threads", KERNEL_THREADS),
            env=self.sandbox.get("env", {}),
            uid=uid,
            group=self._groups,
            files=[Path(p) for p in self.sandbox.get("files", [])],
            fonts=fonts,
        )
        kw.pop("cwd", None)  # never nbgrader's autograded folder
        kw["stdout"] = kw["stderr"] = subprocess.DEVNULL  # its words reach us as messages only
        kw["env"] = {}  # the sandbox sets the kernel's environment (an allow-list)
        return argv, kw

    async def _async_post_start_kernel(self, **kw):
        await super()._async_post_start_kernel(**kw)
        KERNEL_STARTS.append(time.monotonic() - getattr(self, "_start_clock", time.monotonic()))
        budget = self.sandbox.get("budget_s")
        if budget:  # SandboxedExecute interrupts at the budget; this is for a kernel that hangs
            budget += KILL_GRACE_S
            self._watchdog = threading.Timer(budget, self._over_budget, args=(budget,))
            self._watchdog.daemon = True
            self._watchdog.start()

    def _over_budget(self, budget: float) -> None:
        process = getattr(self.provisioner, "process", None)
        if process is None or process.poll() is not None:
            return
        events = self.sandbox.get("events")
        if events:
            with open(events, "a") as fh:
                fh.write(json.dumps({"kernel": str(self._private), "budget_s": budget}) + "\n")
        process.kill()  # bwrap; --die-with-parent takes the kernel with it

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False):
        """Killed at once: everything the notebook said has arrived by then, and a polite
        shutdown_request costs a second or more per hand-in (the interpreter tearing torch
        down) for nothing; the sandbox is thrown away whole."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        try:
            await super()._async_shutdown_kernel(now=True, restart=restart)
        finally:
            self._throw_away()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        """What nbclient calls, instead of a shutdown, when the kernel has already ended by
        itself (killed for its memory or its budget, or by its own code)."""
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:
            self._throw_away()

    def _throw_away(self) -> None:
        """The sandbox's host side, once the kernel is gone: its cgroups, the mount and the
        private folder (links in it are removed, never followed). Safe to call twice."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        MemoryGroups.remove(self._groups)
        if self._private is not None:
            if getattr(self, "_mounted", False):
                subprocess.run(["umount", "-l", str(self._private)], capture_output=True)
                self._mounted = False
            shutil.rmtree(self._private, ignore_errors=True)

    async def _async_wait(self, pollinterval: float = 0.01) -> None:
        """Until the killed kernel has ended: polled every 10 ms, not jupyter_client's 100 ms
        (a tenth of a second a hand-in, spent waiting)."""
        await super()._async_wait(pollinterval=pollinterval)

    # jupyter_client binds these to its own coroutine functions at class creation, so the
    # overrides above must be named here too, or nbclient's calls never reach them
    shutdown_kernel = _async_shutdown_kernel
    cleanup_resources = _async_cleanup_resources


class SandboxedExecute(Execute):
    """nbgrader's Execute, with each kernel in the sandbox wherever bubblewrap runs (also
    under a plain ``nbgrader autograde``), and a budget for the whole notebook when the
    grader sets one (graders.grade sets COURSE_SANDBOX).

    The budget shortens the per-cell timeout as it runs out. The cell running when it ends
    gets a timeout error that names the budget, and the cells after it are not run (an error
    saying so), so the checks that finished in time keep their points. The same holds for a
    cell that ignores the interrupt after its own time limit: the notebook is graded up to
    there instead of failing as a whole. Limits are also noted, by cell, in
    ``resources["sandbox_limits"]``, measured here and so out of the kernel's reach
    (graders/judge.py words the verdict from them).
    """

    _warned = False

    def __init__(self, *args, **kwargs):
        self._settings = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
        self._sandboxed = available() is None
        if self._sandboxed:
            kwargs.setdefault("kernel_manager_class", SandboxKernelManager)
        elif not SandboxedExecute._warned:
            SandboxedExecute._warned = True
            LOG.warning("grading WITHOUT a sandbox: %s", available())
        super().__init__(*args, **kwargs)
        self._deadline = self._stuck = None

    def preprocess(self, nb, resources=None, km=None):
        budget = self._settings.get("budget_s")
        self._deadline = time.monotonic() + budget if budget else None
        self._stuck = None  # why the kernel can run nothing more
        resources = resources if resources is not None else {}
        self._limits = resources.setdefault("sandbox_limits", {})
        return super().preprocess(nb, resources, km)

    def _left(self) -> float:
        return self._deadline - time.monotonic()

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        if self._deadline is None:
            return timeout
        left = max(1, math.ceil(self._left()))
        return left if timeout is None else min(timeout, left)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, index)
        if self._deadline is not None and self._left() <= 0:
            used_up = f"not run: {self._budget()} was used up"
            cell.outputs = [_error("NotebookBudgetExceeded", used_up)]
            self._limits[index] = used_up
            return cell, resources
        if self._stuck:
            cell.outputs = [_error("KernelUnresponsive", f"not run: {self._stuck}")]
            self._limits[index] = f"not run: {self._stuck}"
            return cell, resources
        timeout = self._get_timeout(cell)
        started = time.monotonic()
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except CellTimeoutError:  # interrupted, and still busy: nothing more can run in it
            self._stuck = f"cell {index} did not stop when the kernel was interrupted"
            cell.outputs.append(_error("KernelUnresponsive", self._stuck + " after its time limit"))
            self._limits[index] = self._stuck + " after its time limit"
        elapsed = time.monotonic() - started
        if timeout is not None and elapsed >= timeout - 0.5 and index not in self._limits:
            self._limits[index] = f"stopped at the time limit of {timeout:g} s for one cell"
        if self._deadline is not None and self._left() <= 0:
            ran_out = f"{self._budget()} ran out while this cell was running"
            self._limits[index] = ran_out
            for output in cell.outputs:
                if output.get("ename") in ("CellTimeoutError", "KernelUnresponsive"):
                    output.ename = "NotebookBudgetExceeded"
                    output.evalue = ran_out
                    output.traceback = [f"NotebookBudgetExceeded: {output.evalue}"]
        return cell, resources

    def _budget(self) -> str:
        return f"the whole-notebook budget of {self._settings['budget_s']:g} s"


def _error(ename: str, evalue: str):
    return nbformat.v4.new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


def write_kernelspec(jupyter_dir: Path) -> Path:
    """A ``python3`` kernelspec of this Python under jupyter_dir/kernels (put jupyter_dir on
    JUPYTER_PATH); interrupts go by message, since a signal would stop at bubblewrap."""
    spec = jupyter_dir / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (grading sandbox)",
                "language": "python",
                "interrupt_mode": "message",
                "metadata": {"debugger": False},
            },
            indent=1,
        )
    )
    return spec
