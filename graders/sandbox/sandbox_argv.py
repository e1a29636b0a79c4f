"""The sandbox's command line: what a grading kernel sees, who it is, its environment and
its limits, as bubblewrap (and prlimit) arguments. graders/sandbox/sandbox.py says why each is so;
graders/sandbox/sandbox_host.py keeps the host's side (cgroups, mounts, dead kernels).

`kernel_argv` wraps a kernel's command; `available` says whether bubblewrap runs here at all.
Nothing here starts a kernel or changes the host: it only builds lists of strings (and reads
the machine: /proc, the Python environment, matplotlib's font list).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path

KERNEL_SIDE = Path(__file__).resolve().parents[1] / "kernel"  # grader_observe, for hidden tests
MEMORY_CAP_BYTES = 8 * 2**30  # address space per process; torch with dynamo maps about 4 GiB
GROUP_MEMORY_BYTES = 6 * 2**30  # resident memory of all the kernel's processes (cgroup)
PROCESS_CAP = 256  # processes and threads of one kernel
FILE_CAP_BYTES = 64 * 2**20  # the largest file a notebook may write
WORKDIR_BYTES = 256 * 2**20  # the kernel's working folder (tmpfs), all files together
PRIVATE_BYTES = 8 * 2**20  # its runtime folder (connection file, sockets): a tmpfs as root
SHM_BYTES = 64 * 2**20  # its /dev/shm
FONT_LIST_MAX_BYTES = 2**20  # matplotlib's font list, given to each kernel (a few dozen kB)
# torch threads of a graded kernel (and of the reference run, so both compute alike): the
# kernels run side by side, one per core, and more threads than cores make torch crawl
KERNEL_THREADS = 1
WORKDIR = "/home/student"  # the kernel's working folder and HOME, inside the sandbox
# its scratch folders, under WORKDIR (made by the kernel's own user; kernel_env names them)
SCRATCH = (".tmp", ".ipython", ".matplotlib", ".inductor", ".triton", ".cache")


@cache
def kernel_side(name: str):
    """A module of graders/kernel (standard library only at import), as the grader's own:
    the kernel side is not a package, and is on the kernels' path, not the grader's."""
    spec = importlib.util.spec_from_file_location(name, KERNEL_SIDE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ipykernel_command(command: list[str]) -> bool:
    """Whether `command` starts ipykernel as its launcher does (``PYTHON -m
    ipykernel_launcher ... -f FILE``, what nbgrader's kernelspecs give)."""
    return command[1:3] == ["-m", "ipykernel_launcher"] and "-f" in command


def guarded(command: list[str]) -> list[str]:
    """A kernel's command (``python -m ipykernel_launcher ...``) started through
    graders/kernel/grading_guard.py, which seals the kernel's keyring first, where this
    machine's system calls are known; any other command as it is."""
    if ipykernel_command(command) and kernel_side("grading_guard").supported():
        return [command[0], "-m", "grading_guard", *command[1:]]
    return command


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


def _parent_dirs(path: Path, taken: set[Path]) -> list[str]:
    """Make each parent of `path` not made yet a plain, traversable folder."""
    argv = []
    for parent in reversed(path.parents):
        if parent != Path("/") and parent not in taken:
            argv += ["--perms", "0755", "--dir", str(parent)]
            taken.add(parent)
    return argv


def _linked(links: list[tuple[Path, Path]], bound: list[Path], taken: set[Path]) -> list[str]:
    """Bind each link's target read-only at the link's own path (a link inside a folder
    already bound is seen there as it is, and needs nothing more)."""
    argv = []
    for target, path in links:
        if path in taken or any(path.is_relative_to(root) for root in bound):
            continue
        argv += _parent_dirs(path, taken)
        argv += ["--ro-bind", str(target), str(path)]
        taken.add(path)
    return argv


def _readonly(paths: list[Path], taken: set[Path]) -> list[str]:
    """Bind `paths` read-only, with each parent made as a plain, traversable folder."""
    argv = []
    for path in paths:
        if not path.exists() or str(path).startswith("/usr/"):
            continue
        argv += _parent_dirs(path, taken)
        argv += ["--ro-bind", str(path), str(path)]
        taken.add(path)
    return argv


def kernel_env(threads: int | None, extra: dict[str, str]) -> dict[str, str]:
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
    names = ("TMPDIR", "IPYTHONDIR", "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR",
             "TRITON_CACHE_DIR", "XDG_CACHE_HOME")  # fmt: skip
    for name, sub in zip(names, SCRATCH, strict=True):
        env[name] = f"{WORKDIR}/{sub}"
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


def _allow_list(readonly: list[Path], taken: set[Path]) -> list[str]:
    """What a kernel sees besides the system (and its own binds): its /tmp, the Python
    environment, graders/kernel and `readonly`, read-only; /dev, /proc, its /dev/shm and its
    working folder. `taken` gets the folders made or bound."""
    # first: binds below /tmp stay visible; capped like the working folder
    argv = ["--size", str(WORKDIR_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
    taken |= {Path("/usr"), Path("/tmp")}
    bound = [*python_paths(), KERNEL_SIDE, *readonly]
    argv += _readonly(bound, taken)
    argv += _linked(python_links(), [Path("/usr"), *bound], taken)
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--size", str(SHM_BYTES), "--perms", "1777", "--tmpfs", "/dev/shm"]
    argv += ["--perms", "0755", "--dir", "/home"]
    argv += ["--size", str(WORKDIR_BYTES), "--perms", "0777", "--tmpfs", WORKDIR]
    return argv


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
    taken: set[Path] = set()
    argv += _allow_list(readonly, taken)
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
    for name, value in kernel_env(threads, env or {}).items():
        argv += ["--setenv", name, value]
    # the scratch folders the environment names, made by the kernel's own user in its tmpfs
    made = [f"{WORKDIR}/{sub}" for sub in SCRATCH]
    argv += _drop_privileges(uid) or ["--"]
    script = "mkdir -p " + " ".join(made) + ' && exec "$@"'
    return [*argv, "/bin/sh", "-c", script, "sh", *guarded(command)]


# What the warm process keeps to set up each kernel forked from it (graders/sandbox/zygote.py), and
# drops in each kernel before any of its cells runs: capabilities of its own user namespace
# only, whose root is an unprivileged host user (ZYGOTE_UIDS), never the host's root
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_NET_ADMIN",
               "CAP_KILL")  # fmt: skip
# Host ids no one else is given: above every range shadow's useradd hands out as subordinate
# ids (login.defs: SUB_UID_MIN..SUB_UID_MAX, 100,000..600,100,000 by default) and systemd's
# containers' (524,288..1,879,048,191), in the range systemd leaves unused, below 2**31; and
# whatever this machine gives out all the same (/etc/subuid, /etc/subgid, its users and
# groups: `taken_ids`) is never drawn nor mapped
KERNEL_UIDS = range(1_900_000_000, 2_000_000_000)  # a root grader's kernels: a host user each
ZYGOTE_UIDS = range(2_000_000_000, 2_100_000_000)  # the root of a warm process's user namespace
SUBID_FILES = ("/etc/subuid", "/etc/subgid")
MAP_LINES = 340  # the most lines a uid_map may hold


@cache
def taken_ids() -> tuple[range, ...]:
    """The host ids this machine gives someone: every subordinate range of /etc/subuid and
    /etc/subgid (rootless containers' users), and its users' and groups' own ids (through the
    system's name service), merged and sorted. Read once per grading process."""
    import grp
    import pwd

    spans = []
    for name in SUBID_FILES:
        try:
            lines = Path(name).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.strip().split(":")
            if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                spans.append((int(fields[1]), int(fields[1]) + int(fields[2])))
    spans += [(user.pw_uid, user.pw_uid + 1) for user in pwd.getpwall()]
    spans += [(group.gr_gid, group.gr_gid + 1) for group in grp.getgrall()]
    merged: list[list[int]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return tuple(range(start, stop) for start, stop in merged)


def free_ids(ids: range) -> list[range]:
    """The parts of `ids` no one on this machine holds (`taken_ids`), at most enough of them
    for a uid_map beside its root's line."""
    parts, start = [], ids.start
    for taken in taken_ids():
        if taken.stop <= start or taken.start >= ids.stop:
            continue
        if taken.start > start:
            parts.append(range(start, taken.start))
        start = max(start, taken.stop)
    if start < ids.stop:
        parts.append(range(start, ids.stop))
    return parts[: MAP_LINES - 1]


def draw_id(ids: range) -> int:
    """A host id drawn from `ids` that no one on this machine holds."""
    parts = free_ids(ids)
    index = secrets.randbelow(sum(len(part) for part in parts) or 1)
    for part in parts:
        if index < len(part):
            return part[index]
        index -= len(part)
    raise RuntimeError(
        f"no free host id in {ids.start}-{ids.stop - 1}: /etc/subuid, /etc/subgid or the "
        "machine's users hold all of them"
    )


def user_map(root: int) -> str:
    """A warm process's uid_map (and gid_map): its root is host user `root`, and the kernels'
    users (the free parts of KERNEL_UIDS) are themselves; no other host user, host root least
    of all, is anyone there."""
    kernels = "".join(f"{p.start} {p.start} {len(p)}\n" for p in free_ids(KERNEL_UIDS))
    return f"0 {root} 1\n{kernels}"


# the number of values each option of the allow-list takes (`by_descriptor`)
ARITY = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--perms": 1, "--dir": 1, "--tmpfs": 1,
         "--size": 1, "--dev": 1, "--proc": 1}  # fmt: skip


def staged(options: list[str], stage: Path) -> tuple[list[str], list[str]]:
    """bubblewrap `options` with the source of each bind replaced by a path under `stage`,
    and the commands (sh) that bind each source there: a sandbox that is not the host's
    root needs a way to what it binds (the grader's Python may live under /root, which no
    other user may traverse; bubblewrap resolves every source's path as its own user)."""
    argv, commands, index = [], [], 0
    while index < len(options):
        option = options[index]
        if option not in ARITY:
            raise ValueError(f"no arity known for bubblewrap option {option!r}")
        values = options[index + 1 : index + 1 + ARITY[option]]
        if option in ("--ro-bind", "--bind"):
            source, there = values[0], shlex.quote(str(stage / str(len(commands))))
            made = f"mkdir {there}" if Path(source).is_dir() else f": > {there}"
            commands.append(f"{made} && mount --rbind {shlex.quote(source)} {there}")
            argv += [option, str(stage / str(len(commands) - 1)), values[1]]
        else:
            argv += [option, *values]
        index += 1 + ARITY[option]
    return argv, commands


def zygote_argv(
    command: list[str],
    readonly: list[Path],
    fonts: tuple[str, int] | None,
    userns: int,
    stage: Path,
) -> list[str]:
    """`command` (the warm process kernels are forked from) in a sandbox with a kernel's
    allow-list (a root grader only): the same system, Python and read-only folders, the
    same environment and font list (`fonts`: its name, and a descriptor to read it from),
    no network. It runs in the user namespace `userns` (a descriptor; graders/sandbox/zygote.py
    makes it with `user_map`) as that namespace's root, and keeps the capabilities there
    that set up each kernel's own namespaces, mounts and user (graders/kernel/
    grading_zygote.py), and no cgroup or rlimit of its own: each kernel gets its own.
    Nothing of a kernel's own (its private folder, its lab's files) is in it: each comes
    with the request for that kernel.

    What it binds, the host's root binds first under `stage` (a folder of the grader's, that
    a tmpfs covers in a mount namespace of this sandbox's alone: `staged`), where bubblewrap
    finds it."""
    options, binds = staged([*_system_binds(), *_allow_list(readonly, set())], stage)
    script = " && ".join([f"mount -t tmpfs -o mode=0755,size=64k tmpfs {shlex.quote(str(stage))}",
                          *binds])  # fmt: skip
    argv = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--"]
    argv += ["/bin/sh", "-c", f'{script} && exec "$@"', "sh"]
    argv += [shutil.which("nsenter") or "nsenter", f"--user=/proc/self/fd/{userns}", "--"]
    argv += [_bwrap() or "bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc"]
    argv += ["--unshare-uts", "--new-session", "--clearenv"]
    for cap in ZYGOTE_CAPS:
        argv += ["--cap-add", cap]
    argv += options
    if fonts is not None:  # copied into its own tmpfs: no host path of it shows
        argv += ["--perms", "0777", "--dir", f"{WORKDIR}/.matplotlib"]
        name, fd = fonts
        argv += ["--perms", "0444", "--ro-bind-data", str(fd), f"{WORKDIR}/.matplotlib/{name}"]
    argv += ["--chdir", WORKDIR]
    for name, value in kernel_env(KERNEL_THREADS, {}).items():
        argv += ["--setenv", name, value]
    return [*argv, "--", *command]


def bound_under_tmp(readonly: list[Path]) -> list[str]:
    """The folders a sandbox binds below /tmp (its Python, graders/kernel, read-only folders
    or the links to them, where they live there): a kernel forked in it covers /tmp with a
    tmpfs of its own, and binds these again on top."""
    named = [*python_paths(), KERNEL_SIDE, *readonly, *(path for _, path in python_links())]
    tmp = Path("/tmp")
    return sorted({str(p) for p in named if tmp in Path(p).parents and Path(p).exists()})


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
