"""The kernel a submission is graded in: no network, a read-only world, limits.

nbgrader starts the notebook's kernel by its kernelspec name (``python3``). For grading,
`write_kernelspec` puts a ``python3`` kernelspec first on JUPYTER_PATH whose command runs
ipykernel inside bubblewrap:

* a new network namespace (no network) and a new PID namespace (a process the notebook
  forks cannot outlive the kernel), as an unprivileged user;
* the whole file system read-only, with the course repository, the temporary folder and
  the grading scratch area hidden; only the submission's own working folder is writable,
  so the gradebook and other students' submissions are out of reach;
* an address-space cap (a memory bomb raises MemoryError in its cell instead of taking the
  machine down) and a cap on the size of any file the notebook writes.

The kernel talks to nbgrader over Unix sockets (``KernelManager.transport=ipc``), which
work across the network namespace. Where bubblewrap cannot run, grading stops with a
message instead of silently grading without a sandbox (see `available`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

KERNEL_SIDE = Path(__file__).resolve().parent / "kernel"  # grader_observe, for hidden tests
MEMORY_CAP_BYTES = 8 * 2**30  # address space; torch with dynamo maps about 4 GiB
FILE_CAP_BYTES = 64 * 2**20  # the largest file a notebook may write


def available() -> str | None:
    """None when sandboxed kernels can run here, else why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: `apt-get install bubblewrap`"
    probe = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--unshare-user",
         "--perms", "0555", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc", "true"],
        capture_output=True, text=True,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {probe.stderr.strip()[:200]}"
    return None


def kernel_argv(workdir: Path, runtime: Path, hide: list[Path], readonly: list[Path]) -> list[str]:
    """The command of the sandboxed kernel (``{connection_file}`` is filled in by Jupyter)."""
    argv = [
        shutil.which("prlimit") or "prlimit",
        f"--as={MEMORY_CAP_BYTES}",
        f"--fsize={FILE_CAP_BYTES}",
        shutil.which("bwrap") or "bwrap",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        # an unprivileged user inside: the hidden places below are read-only to it
        "--unshare-user", "--uid", "65534", "--gid", "65534",
        "--die-with-parent",
        # ipykernel polls its parent PID; inside the PID namespace its parent is bwrap's init
        "--unsetenv", "JPY_PARENT_PID",
    ]  # fmt: skip
    for path in hide:
        argv += ["--perms", "0555", "--tmpfs", str(path)]
    for path in [*readonly, KERNEL_SIDE]:
        if path.exists():
            argv += ["--ro-bind", str(path), str(path)]
    for path in (workdir, runtime):
        argv += ["--bind", str(path), str(path)]
    for path in hide:  # the folders made to hold the binds above stay read-only too
        argv += ["--remount-ro", str(path)]
    argv += ["--setenv", "PYTHONPATH", str(KERNEL_SIDE), "--chdir", str(workdir)]
    # Scratch space inside the sandbox. torch, once imported by the grader itself, exports
    # TORCHINDUCTOR_CACHE_DIR under /tmp, which the kernel would inherit and cannot write.
    for name, path in [("TMPDIR", runtime), ("TORCHINDUCTOR_CACHE_DIR", runtime / "inductor"),
                       ("TRITON_CACHE_DIR", runtime / "triton")]:  # fmt: skip
        argv += ["--setenv", name, str(path)]
    argv += [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    return argv


def write_kernelspec(jupyter_dir: Path, argv: list[str]) -> Path:
    """A ``python3`` kernelspec under jupyter_dir/kernels (put jupyter_dir on JUPYTER_PATH)."""
    spec = jupyter_dir / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "display_name": "Python 3 (grading sandbox)",
                "language": "python",
                "interrupt_mode": "message",
                "metadata": {"debugger": False},
            },
            indent=1,
        )
    )
    return spec
