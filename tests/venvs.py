"""A fresh virtual environment made quickly from this one's installed files: what tests of a
student's laptop or of a grading machine without torch install, without unpacking gigabytes
of wheels that this environment already holds in the same versions.

`link_installed(venv, requirements)` puts into `venv` every distribution that pip would
install for `requirements` and that this environment holds in a version the requirement
accepts: its files as installed (hard links, or copies across filesystems), its record, and
the bytecode `make install` compiled for it. pip, run afterwards on the same requirements,
finds those satisfied and installs only the rest, so what pip resolves is still tested.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def new_venv(venv: Path, with_pip: bool = False) -> None:
    """An empty venv of this Python; without pip of its own unless asked (ensurepip takes
    4-13 s): this environment's pip installs into it with `pip_into`."""
    bare = [] if with_pip else ["--without-pip"]
    subprocess.run([sys.executable, "-m", "venv", *bare, str(venv)], check=True)


def pip_into(venv: Path) -> list[str]:
    """The command line of this environment's pip, installing into `venv`."""
    return [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]


def closure(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """The distributions installed here that `requirements` need (on this platform), each
    with all it requires in turn; a name not installed here is left to pip."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [Requirement(line) for line in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            continue  # pip picks another version: its own install
        found[name] = dist
        extras = req.extras or {""}
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                todo.append(sub)
    return list(found.values())


def link_installed(venv: Path, requirements: list[str]) -> int:
    """Put into `venv` what pip would install for `requirements`, where this environment
    holds the same distributions: their installed files and records, hard-linked (copied
    across filesystems). pip then finds those requirements satisfied and installs the rest.
    Returns the number of files."""
    purelib = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site = Path(purelib)
    count = 0
    for dist in closure(requirements):
        root = Path(dist.locate_file("")).resolve()
        for entry in dist.files or []:
            source = Path(dist.locate_file(entry)).resolve()
            if root not in source.parents or not source.is_file():
                continue  # console scripts in bin/ (their #! names this Python); nothing else
            target = site / source.relative_to(root)
            pairs = [(source, target)]
            if source.suffix == ".py":  # its bytecode (make install compiles it): same source
                cached = importlib.util.cache_from_source(str(source))
                if os.path.isfile(cached):
                    pairs.append(
                        (Path(cached), Path(importlib.util.cache_from_source(str(target))))
                    )
            for a, b in pairs:
                b.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(a, b)
                except OSError:
                    shutil.copy2(a, b)
                count += 1
        count += write_scripts(venv, dist)
    return count


def write_scripts(venv: Path, dist: importlib.metadata.Distribution) -> int:
    """The console scripts of `dist` in venv/bin, as pip writes them: `#!` this venv's Python,
    then a call of the entry point. Returns how many."""
    written = 0
    for entry in dist.entry_points:
        if entry.group != "console_scripts":
            continue
        module, _, attr = entry.value.partition(":")
        head = attr.split(".")[0] if attr else None
        call = f"{attr}()" if attr else "None"
        script = venv / "bin" / entry.name
        script.write_text(
            f"#!{venv / 'bin' / 'python'}\n"
            "import sys\n"
            + (f"from {module} import {head}\n" if head else f"import {module}\n")
            + f"sys.exit({call})\n"
        )
        script.chmod(0o755)
        written += 1
    return written
