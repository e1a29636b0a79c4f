"""The sandbox as an instructor without root runs it: bubblewrap's user namespace, the same
allow-list of paths and environment, the kernel's user owning nothing outside.

These tests run here as root, so they drop to an unprivileged host user first (setpriv) and
run the argv that `kernel_argv` builds for a non-root grader, with a shell as the "kernel"
(this machine's Python lives under /root, which an unprivileged user cannot enter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from graders.sandbox import sandbox_argv

NOBODY = 65534

pytestmark = pytest.mark.skipif(
    os.getuid() != 0 or shutil.which("setpriv") is None or sandbox_argv.available() is not None,
    reason="needs root (to become an unprivileged user), setpriv and bubblewrap",
)


def unprivileged(argv: list[str]) -> subprocess.CompletedProcess:
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run([*drop, *argv], capture_output=True, text=True, timeout=60)


@pytest.fixture
def open_tmp():
    """A folder an unprivileged user can reach (pytest's own are root's only)."""
    path = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_unprivileged_grader_gets_the_same_allow_list(open_tmp, monkeypatch):
    tmp_path = open_tmp
    private = tmp_path / "kernel-x"
    private.mkdir()
    os.chown(private, NOBODY, NOBODY)
    monkeypatch.setattr(sandbox_argv.os, "getuid", lambda: 1000)  # argv for a non-root grader
    monkeypatch.setattr(sandbox_argv, "python_paths", lambda: [])
    monkeypatch.setattr(sandbox_argv, "KERNEL_SIDE", Path("/nonexistent"))
    monkeypatch.setattr(sandbox_argv, "_nproc_cap", lambda: 4096)
    monkeypatch.setenv("COURSE_TEST_SECRET", "s3cr3t-token")
    script = (
        "id -u; echo TOP $(ls /); env; "
        "echo data > /home/student/file && echo WROTE-WORKDIR; "
        "echo x > /usr/x 2>/dev/null || echo REFUSED-USR; "
        f"echo x > {private}/sock && echo WROTE-PRIVATE; "
        "cat /etc/passwd 2>/dev/null || echo NO-PASSWD"
    )
    argv = sandbox_argv.kernel_argv(["/bin/sh", "-c", script], private, readonly=[], threads=1)
    assert "--unshare-user" in argv and "setpriv" not in " ".join(argv)
    result = unprivileged(argv)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(NOBODY)
    # the root of its world: system folders, its home, /tmp, and the private folder's path
    top = set(next(line for line in lines if line.startswith("TOP ")).split()[1:])
    assert top <= {"bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc",
                   "sbin", "tmp", "usr", tmp_path.parts[1]}  # fmt: skip
    assert "s3cr3t-token" not in result.stdout and "COURSE_TEST_SECRET" not in result.stdout
    assert "WROTE-WORKDIR" in lines and "REFUSED-USR" in lines and "NO-PASSWD" in lines
    assert "WROTE-PRIVATE" in lines
    # what it wrote in its private folder belongs to the unprivileged user, not root
    assert (private / "sock").stat().st_uid == NOBODY
    assert not (tmp_path / "file").exists()  # the working folder died with the sandbox


def test_a_root_grader_runs_the_kernel_as_a_user_of_its_own(tmp_path):
    private = tmp_path / "kernel-y"
    private.mkdir()
    uid = 234_567
    os.chown(private, uid, uid)
    argv = sandbox_argv.kernel_argv(
        ["/bin/sh", "-c", "id -u; cat /proc/self/status | grep CapEff"],
        private,
        readonly=[],
        uid=uid,
    )
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(uid)
    assert "CapEff:\t0000000000000000" in result.stdout
