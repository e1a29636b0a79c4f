"""A fresh virtual environment with one torch of the course's range and the README's laptop
packages: what a student gets from the README's pip line, with the torch chosen.

    python tests/student/torch_env.py oldest|newest|2.12.0 [--venv DIR]

makes (or reuses, when it already holds that torch) DIR (default .scratch/torch-VERSION) and
prints its path. `make torch-check TORCH=...` runs the claims tests and every lab's solution in
it; tests/student/test_laptop.py makes one with the range's oldest torch.

The range is pyproject.toml's `torch>=A.B,<C.D`: "oldest" is the newest patch of A.B,
"newest" the newest release below C.D. pip picks the torchvision that goes with the torch.
Where pip's configuration caps torch (a constraints file, as on the course's machines), the
cap is lifted for this one install: the point is the torch asked for.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
# what the claims tests need besides the README's packages (jupytext: the labs' text sources);
# ipykernel: the kernel jupyterlab brings, named so that a kernel can run without jupyterlab
TEST_PACKAGES = ["pytest", "jupytext", "ipykernel"]


def readme_pip_line() -> list[str]:
    """The packages of the README's laptop install line, the torch requirement first."""
    text = (REPO / "README.md").read_text()
    line = re.search(r'^pip install ("torch[^"]*" torchvision [^\n`]+)$', text, re.M)
    assert line, 'README.md has no laptop line `pip install "torch>=..." torchvision ...`'
    return [p.strip('"') for p in line.group(1).split()]


def torch_range() -> tuple[str, str]:
    """pyproject.toml's torch range as (floor, bound): `torch>=2.10,<2.16` -> ("2.10", "2.16")."""
    with open(REPO / "pyproject.toml", "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"torch\s*[<>=]", d)]
    found = re.fullmatch(r"torch\s*>=\s*(\d+\.\d+)\s*,\s*<\s*(\d+\.\d+)", spec.strip())
    assert found, f"pyproject.toml: torch's range {spec!r} is not 'torch>=A.B,<C.D'"
    return found.group(1), found.group(2)


def torch_requirement(which: str) -> str:
    """The pip requirement for "oldest", "newest" or an exact version such as 2.12.0."""
    floor, bound = torch_range()
    if which == "oldest":
        major, minor = map(int, floor.split("."))
        return f"torch>={floor},<{major}.{minor + 1}"
    if which == "newest":
        return f"torch>={floor},<{bound}"
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", which):
        raise SystemExit(f"TORCH={which!r}: say oldest, newest or a version such as 2.12.0")
    return f"torch=={which}"


def installed_torch(venv: Path) -> str | None:
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import torch, torchvision; print(torch.__version__)"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def pip_environment() -> dict[str, str]:
    """os.environ for pip with any configured constraints file lifted (only for torch's sake:
    the constraints of the course's machines cap torch at the release they hold)."""
    env = dict(os.environ, PIP_CONSTRAINT=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    return env


def make_env(venv: Path, which: str, python: str = sys.executable, log=print) -> Path:
    """`venv` with the README's packages, torch as `which` asks, and TEST_PACKAGES."""
    requirement = torch_requirement(which)
    have = installed_torch(venv)
    if have and SpecifierSet(requirement.removeprefix("torch")).contains(have.split("+")[0]):
        log(f"{venv}: torch {have} already")
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    packages = [requirement, *readme_pip_line()[1:], *TEST_PACKAGES]
    start = time.monotonic()
    # --no-compile: pip would compile every module of every package (about a minute of CPU);
    # Python writes the bytecode of what is imported the first time it is imported
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
        + packages,
        capture_output=True,
        text=True,
        env=pip_environment(),
    )
    if install.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(packages)} failed:\n{install.stderr[-3000:]}")
    log(
        f"{venv}: torch {installed_torch(venv)} and the README's packages "
        f"installed in {time.monotonic() - start:.0f} s"
    )
    return venv


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("torch", help="oldest, newest, or a version such as 2.12.0")
    parser.add_argument("--venv", type=Path, help="default: .scratch/torch-TORCH")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    venv = args.venv or REPO / ".scratch" / f"torch-{args.torch}"
    try:
        make_env(venv.resolve(), args.torch, args.python, log=lambda m: print(m, file=sys.stderr))
    except RuntimeError as error:
        raise SystemExit(str(error)) from None
    print(venv)


if __name__ == "__main__":
    main()
