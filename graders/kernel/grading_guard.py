"""The last step of a grading kernel's start, in the kernel itself, before ipykernel: what the
sandbox's namespaces do not cover.

The kernel keyring is not a namespace: a kernel inherits the session keyring of the grader
that started it (its keys: a Kerberos ticket, a token), and per-user keyrings outlive the
kernel, so a key one kernel leaves readable would be read by a later one (a channel between
hand-ins). So the kernel joins a new, empty session keyring of its own, and then a seccomp
filter refuses (EPERM) the keyring's system calls, add_key, request_key and keyctl, as
Docker's default profile does; every other system call is as before. `seal` does both; it
needs no privilege beyond no-new-privileges, which every grading kernel has.

Run as ``python -m grading_guard -m ipykernel_launcher -f FILE`` (graders/sandbox_argv.py
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
X32_BIT = 0x40000000  # x86_64's x32 system calls: refused too (no kernel here uses them)
KEYCTL_JOIN_SESSION_KEYRING = 1
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, EPERM = 0x7FFF0000, 0x00050000, 1
LD_ABS_W, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06


def _filter(arch: int, add_key: int, request_key: int, keyctl: int) -> bytes:
    """A classic BPF program: another architecture's calls, x32's and the keyring's are
    refused with EPERM, everything else allowed."""

    def op(code, jt, jf, k):
        return struct.pack("HBBI", code, jt, jf, k)

    deny = SECCOMP_RET_ERRNO | EPERM
    return b"".join(
        [
            op(LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
            op(JEQ_K, 1, 0, arch),
            op(RET_K, 0, 0, deny),  # a 32-bit or other entry: different numbers, refused
            op(LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
            op(JGE_K, 3, 0, X32_BIT),
            op(JEQ_K, 2, 0, add_key),
            op(JEQ_K, 1, 0, request_key),
            op(JEQ_K, 0, 1, keyctl),
            op(RET_K, 0, 0, deny),
            op(RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ]
    )


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
    """Join a new session keyring, then refuse the keyring's system calls; None when done,
    else why not."""
    why_not = new_session_keyring()
    if why_not is not None:
        return why_not
    numbers = SYSCALLS[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    program = _filter(*numbers)
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
