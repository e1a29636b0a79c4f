"""Where the course is published, and the Open-in-Colab links that point there.

One setting, `course.toml` at the repository's root, says which GitHub repository and branch
the links open (an empty `github` means git's `origin`, when that is on GitHub). `make build`
puts a badge at the top of every lab (`badge`) and writes the README's lab table (`readme`)
from it; tests/test_colab.py checks every link against it.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from graders.config.course import REPO, lab_source

SETTINGS = REPO / "course.toml"
README = REPO / "README.md"
REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?/[A-Za-z0-9._-]+")
GITHUB_REMOTE = re.compile(
    r"(?:https://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
    r"(?P<repository>[^/]+/[^/]+?)(?:\.git)?/?$"
)
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
TABLE_START = "<!-- labs: written by `make build` from each lab's title and course.toml -->"
TABLE_END = "<!-- /labs -->"


class SettingError(ValueError):
    """course.toml, or the README's lab table, cannot be used; the message names the file."""


@dataclass(frozen=True)
class Published:
    repository: str  # "owner/name" on GitHub, or "" when the course is not published there
    branch: str

    def url(self, lab: str) -> str:
        return (
            f"https://colab.research.google.com/github/{self.repository}"
            f"/blob/{self.branch}/labs/{lab}/{lab}.ipynb"
        )


def origin_repository(root: Path = REPO) -> str:
    """'owner/name' of git's origin when it is on GitHub, else ''."""
    try:
        url = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    found = GITHUB_REMOTE.match(url)
    return found["repository"] if found else ""


def published(settings: Path = SETTINGS, root: Path = REPO) -> Published:
    """The repository and branch the Colab links open, from `settings` (course.toml)."""
    try:
        values = tomllib.loads(settings.read_text(encoding="utf-8")) if settings.exists() else {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SettingError(f"{settings}: cannot read it as TOML ({error})") from None
    repository, branch = values.get("github", ""), values.get("branch", "main")
    if not isinstance(repository, str) or not isinstance(branch, str):
        raise SettingError(f"{settings}: github and branch should be strings in quotes")
    repository = repository.strip() or origin_repository(root)
    if repository and not REPOSITORY.fullmatch(repository):
        raise SettingError(
            f"{settings}: github = {repository!r} is not a GitHub repository;"
            ' write it as "owner/repository"'
        )
    if not re.fullmatch(r"[\w./-]+", branch) or ".." in branch:
        raise SettingError(f"{settings}: branch = {branch!r} is not a branch name")
    return Published(repository, branch)


def badge(where: Published, lab: str) -> str:
    """The markdown line of the Open-in-Colab badge of `lab` ('' when not on GitHub)."""
    if not where.repository:
        return ""
    return f"[![Open In Colab]({BADGE_IMAGE})]({where.url(lab)})"


def title(lab: str) -> str:
    """What the lab is about, from its title line ('# # Lab 3: Gradients accumulate ...')."""
    for line in lab_source(lab).read_text(encoding="utf-8").splitlines():
        found = re.match(r"#\s*#\s+Lab\s+\d+\s*:\s*(.+)", line)
        if found:
            return found[1].strip()
    return lab


def table(where: Published, labs: list[str]) -> str:
    rows = ["| lab | topic | open |", "|---|---|---|"]
    for lab in labs:
        link = f"[Colab]({where.url(lab)})" if where.repository else "(not published on GitHub)"
        rows.append(f"| [{lab}](labs/{lab}/) | {title(lab)} | {link} |")
    return "\n".join(rows)


def readme(text: str, where: Published, labs: list[str], path: Path = README) -> str:
    """`text` (the README) with its lab table written anew between the two markers."""
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise SettingError(
            f"{path}: the lab table's markers are missing; put {TABLE_START!r} and"
            f" {TABLE_END!r} on lines of their own where the table goes"
        )
    head, tail = text[: start + len(TABLE_START)], text[end:]
    return f"{head}\n{table(where, labs)}\n{tail}"
