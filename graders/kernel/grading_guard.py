"""The last step of a grading kernel's start, in the kernel itself, before ipykernel: what the
sandbox's namespaces do not cover.

The kernel keyring is not a namespace: a kernel inherits the session keyring of the grader
that started it (its keys: a Kerberos ticket, a token), and per-user keyrings outlive the
kernel, so a key one kernel leaves readable would be read by a later one (a channel between
hand-ins). So the kernel joins a new, empty session keyring of its own, and then a seccomp
filter refuses (EPERM) what a grading kernel has no use for, as container runtimes' default
profiles do (Docker's, without CAP_SYS_ADMIN):

* the keyring: add_key, request_key, keyctl;
* namespaces: unshare, setns, and clone with any CLONE_NEW* flag (a user namespace is the
  usual way around the sandbox's locked mounts and its capabilities); clone3, whose flags
  a filter cannot read, answers ENOSYS, so the C library falls back to clone;
* mounts: mount, umount2, pivot_root, chroot, and the new mount API (open_tree,
  move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr);
* other processes: ptrace, process_vm_readv/writev, pidfd_getfd, process_madvise, kcmp;
* the kernel's own machinery: bpf, perf_event_open, userfaultfd, io_uring, kernel modules,
  kexec, reboot, swap, acct, quotactl, syslog, open_by_handle_at, lookup_dcookie;
* watches on files (inotify, fanotify): every kernel reads the same Python and system
  files, so a watch on one would tell a kernel when a classmate's, running beside it,
  opens or reads it (a channel between hand-ins; a grading kernel watches nothing).

Every other system call is as before (fork, threads, subprocesses and torch's compilers
included); a kernel holds no capability either way, so most of these would fail later on a
permission check: the filter stops them before any of the code behind them runs. `seal`
does both; it needs no privilege beyond no-new-privileges, which every grading kernel has.

Run as ``python -m grading_guard -m ipykernel_launcher -f FILE`` (graders/sandbox/sandbox_argv.py
starts kernels alone this way), or called by a kernel forked from the warm process
(grading_zygote.py). Standard library only.
"""

import ctypes
import platform
import runpy
import struct
import sys

# (the kernel's audit architecture, add_key, request_key, keyctl) per machine
SYSCALLS = {
    "x86_64": (0xC000003E, 248, 249, 250),
    "aarch64": (0xC00000B7, 217, 218, 219),
}
# every other call refused, per machine (asm/unistd_64.h; asm-generic/unistd.h for aarch64)
REFUSED = {
    "x86_64": {
        "ptrace": 101, "syslog": 103, "pivot_root": 155, "chroot": 161, "acct": 163,
        "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
        "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212,
        "kexec_load": 246, "unshare": 272, "perf_event_open": 298, "open_by_handle_at": 304,
        "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
        "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
        "inotify_init": 253, "inotify_add_watch": 254, "inotify_init1": 294,
        "fanotify_init": 300, "fanotify_mark": 301,
    },
    "aarch64": {
        "lookup_dcookie": 18, "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51,
        "quotactl": 60, "acct": 89, "unshare": 97, "kexec_load": 104, "init_module": 105,
        "delete_module": 106, "syslog": 116, "ptrace": 117, "reboot": 142, "swapon": 224,
        "swapoff": 225, "perf_event_open": 241, "open_by_handle_at": 265, "setns": 268,
        "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "finit_module": 273,
        "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294, "inotify_init1": 26,
        "inotify_add_watch": 27, "fanotify_init": 262, "fanotify_mark": 263,
    },
}  # fmt: skip
# the same number on every architecture (the table they share from 403 on)
REFUSED_EVERYWHERE = {
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
}  # fmt: skip
CLONE = {"x86_64": 56, "aarch64": 220}  # its flags are its first argument on both
CLONE3 = 435
# CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NEW_ANY = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
CLONE_NEW_ANY |= 0x20000000 | 0x40000000
X32_BIT = 0x40000000  # x86_64's x32 system calls: refused too (no kernel here uses them)
KEYCTL_JOIN_SESSION_KEYRING = 1
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, EPERM, ENOSYS = 0x7FFF0000, 0x00050000, 1, 38
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
ARG0_LOW = 16  # seccomp_data: nr, arch, instruction pointer, then args (little-endian)


def refused(machine: str) -> dict[str, int]:
    """Each system call the filter refuses with EPERM on `machine`, by name (clone with a
    CLONE_NEW* flag too; clone3 gets ENOSYS)."""
    numbers = SYSCALLS[machine]
    keyring = dict(zip(("add_key", "request_key", "keyctl"), numbers[1:], strict=True))
    return {**keyring, **REFUSED[machine], **REFUSED_EVERYWHERE}


def _filter(machine: str) -> bytes:
    """A classic BPF program: another architecture's calls, x32's and `refused`'s are
    refused with EPERM, clone with a new namespace too, clone3 with ENOSYS; everything
    else allowed."""

    def op(code, jt, jf, k):
        return struct.pack("HBBI", code, jt, jf, k)

    deny, allow = SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    numbers = sorted(refused(machine).values())
    # after the checks: [allow] [clone: load flags, test, allow] [deny] [ENOSYS]
    checks = [(JGE_K, X32_BIT, "deny"), (JEQ_K, CLONE[machine], "clone")]
    checks += [(JEQ_K, CLONE3, "nosys")] + [(JEQ_K, nr, "deny") for nr in numbers]
    after = len(checks)  # the distance from the last check to the allow that follows it
    targets = {"clone": after + 1, "deny": after + 4, "nosys": after + 5}
    program = [
        op(LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        op(JEQ_K, 1, 0, SYSCALLS[machine][0]),
        op(RET_K, 0, 0, deny),  # a 32-bit or other entry: different numbers, refused
        op(LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
    ]
    for index, (code, value, target) in enumerate(checks):
        program.append(op(code, targets[target] - index - 1, 0, value))
    program += [
        op(RET_K, 0, 0, allow),
        op(LD_ABS_W, 0, 0, ARG0_LOW),  # clone: its flags
        op(JSET_K, 1, 0, CLONE_NEW_ANY),
        op(RET_K, 0, 0, allow),
        op(RET_K, 0, 0, deny),
        op(RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),
    ]
    return b"".join(program)


def supported() -> bool:
    """Whether this machine's system call numbers are known here (x86_64, aarch64)."""
    return platform.machine() in SYSCALLS


def new_session_keyring() -> str | None:
    """Leave the inherited session keyring for a new, empty one; None, or why not."""
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        return f"no keyring call known for {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(numbers[3], KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        return f"no new session keyring: errno {ctypes.get_errno()}"
    return None


def seal() -> str | None:
    """Join a new session keyring, then refuse the system calls the module's docstring
    lists; None when done, else why not."""
    why_not = new_session_keyring()
    if why_not is not None:
        return why_not
    libc = ctypes.CDLL(None, use_errno=True)
    program = _filter(platform.machine())
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buffer, 0, 0) != 0:
        return f"no seccomp filter: errno {ctypes.get_errno()}"
    return None


if __name__ == "__main__":
    why_not = seal()
    if why_not is not None:  # the grader starts it this way only where it can seal
        print(f"grading_guard: {why_not}", file=sys.stderr)
        sys.exit(1)
    if sys.argv[1:2] != ["-m"] or len(sys.argv) < 3:
        sys.exit("usage: python -m grading_guard -m MODULE ARGS...")
    module = sys.argv[2]
    sys.argv = [sys.argv[0], *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
