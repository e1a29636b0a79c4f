"""Intake: find the hand-ins under submitted/<student>/<lab>/ and take from each only what
grading needs, as bytes, without trusting the folder.

From a hand-in folder only the notebooks of the release are read (a lab's one, named after
it; each notebook an instructor's own assignment released; each a regular file, never
through a link, at most MAX_NOTEBOOK_BYTES) and nbgrader's timestamp.txt (when the student
handed in; late submissions keep their meaning). Both are opened without following links and without
blocking (a named pipe is refused, not waited on). Every other entry is counted and
ignored, never copied, opened or followed. Whatever a folder holds, intake answers with a
`HandIn` or a `Problem` that names the path and says what is wrong; it never raises.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

MAX_NOTEBOOK_BYTES = 50 * 2**20
MAX_TIMESTAMP_BYTES = 200
MAX_LISTED = 10_000  # entries of one folder looked at; the rest are not even counted


@dataclass
class Problem:
    where: str
    reason: str
    student: str | None = None  # set when the hand-in is known: it is recorded as 0
    lab: str | None = None


@dataclass
class HandIn:
    student: str  # the folder's name, as it is (any characters)
    lab: str
    notebook: bytes  # the notebook named after the lab (a lab's only one)
    timestamp: str | None = None
    ignored: list[str] = field(default_factory=list)  # other entries of the folder
    where: str = ""  # submitted/<student>/<lab>, for messages
    intake_s: float = 0.0  # seconds intake took on it
    # every notebook read, by name (an assignment of several notebooks); {lab: notebook} else
    notebooks: dict[str, bytes] = field(default_factory=dict)
    # the release's notebooks that could not be read, each with why: graded 0 (as nbgrader
    # grades a notebook missing from a hand-in), the others graded
    left_out: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.notebooks:
            self.notebooks = {self.lab: self.notebook}


class Refused(Exception):
    """A file intake will not read; the message says why, in words."""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes, opened without following
    a link and without blocking; raises Refused."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise Refused("missing") from None
    except OSError as error:
        if path.is_symlink():
            raise Refused("a symbolic link (not followed)") from None
        raise Refused(f"cannot be opened ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if info.st_size > limit:
            raise Refused(
                f"{info.st_size / 2**20:.0f} MB, over the {limit / 2**20:.0f} MB limit "
                "(usually a huge output saved in it: clear the outputs and grade it by hand)"
            )
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(f"over the {limit / 2**20:.0f} MB limit")
        return data
    finally:
        os.close(fd)


def notebook_problem(data: bytes) -> str | None:
    """Why `data` cannot be graded as a notebook, or None if it can."""
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as error:  # nbformat raises several kinds for broken JSON
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return f"not a valid notebook file ({first[:120]})"
    if not isinstance(nb.get("cells"), list) or not nb.cells:
        return "the notebook has no cells"
    return None


def parse_timestamp(data: bytes) -> str | None:
    """nbgrader's timestamp.txt, as nbgrader would read it, or None when it is not one."""
    from nbgrader.utils import parse_utc

    try:
        text = data.decode("utf-8").strip()
        parse_utc(text)
    except Exception:  # nbgrader's parser raises several kinds
        return None
    return text if text and len(text) < MAX_TIMESTAMP_BYTES else None


def _entries(folder: Path) -> list[os.DirEntry]:
    entries = []
    with os.scandir(folder) as it:
        for entry in it:
            entries.append(entry)
            if len(entries) >= MAX_LISTED:
                break
    return sorted(entries, key=lambda e: e.name)


def _real_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def take(
    student: str, lab: str, folder: Path, where: str, names: list[str] | None = None
) -> HandIn | Problem:
    """One hand-in folder -> the notebooks' bytes and timestamp, or why it cannot be graded.
    `names`: the notebooks released (default: the one named after the lab)."""
    started = time.monotonic()
    result = _take(student, lab, folder, where, names or [lab])
    if isinstance(result, HandIn):
        result.intake_s = time.monotonic() - started
    return result


def _found(folder: Path) -> str:
    try:
        found = [e.name for e in _entries(folder) if e.name.endswith(".ipynb")]
    except OSError:
        found = []
    return ", ".join(found) or "no notebook"


def _notebook(folder: Path, name: str) -> bytes | str:
    """The bytes of folder/name if it can be graded as a notebook, else why not."""
    try:
        data = read_regular(folder / name, MAX_NOTEBOOK_BYTES)
    except Refused as why:
        return "missing" if str(why) == "missing" else f"the notebook is {why}"
    return notebook_problem(data) or data


def _take(student: str, lab: str, folder: Path, where: str, names: list[str]) -> HandIn | Problem:
    files = [f"{name}.ipynb" for name in names]
    got, left_out = {}, []
    for name, file in zip(names, files, strict=True):
        data = _notebook(folder, file)
        if isinstance(data, bytes):
            got[name] = data
        elif len(names) == 1 and data == "missing":
            return Problem(where, f"expected {file}, found {_found(folder)}", student, lab)
        elif len(names) == 1:
            return Problem(f"{where}/{file}", data, student, lab)
        else:  # one notebook of several: that notebook only is graded 0
            left_out.append(f"{file}: {'not handed in' if data == 'missing' else data}")
    if not got:
        expected = ", ".join(files)
        return Problem(where, f"expected {expected}, found {_found(folder)}", student, lab)
    timestamp, ignored = None, []
    stamp = folder / "timestamp.txt"  # by name: however many files are beside it
    if stamp.exists() or stamp.is_symlink():
        try:
            timestamp = parse_timestamp(read_regular(stamp, MAX_TIMESTAMP_BYTES))
        except Refused:
            timestamp = None
        if timestamp is None:
            ignored.append("timestamp.txt (not a timestamp nbgrader can read)")
    try:
        others = [e.name for e in _entries(folder) if e.name not in (*files, "timestamp.txt")]
    except OSError:
        others = []
    ignored = sorted(ignored + others)  # in the folder's order, timestamp.txt's note in place
    first = got.get(lab, next(iter(got.values())))
    return HandIn(student, lab, first, timestamp, ignored, where, notebooks=got, left_out=left_out)


def discover(
    root: Path, labs: list[str], names: dict[str, list[str]] | None = None
) -> tuple[list[HandIn], list[Problem]]:
    """Every gradable hand-in under root/submitted, and a problem for everything else.
    `names`: each assignment's released notebooks (default: a lab's one, named after it)."""
    names = names or {}
    submitted = root / "submitted"
    found: list[HandIn] = []
    problems: list[Problem] = []
    if not submitted.is_dir():
        return found, [Problem("submitted", "no submitted/ folder: nothing to grade")]
    try:
        students = _entries(submitted)
    except OSError as error:
        return found, [Problem("submitted", f"cannot be listed ({error.strerror})")]
    for student in students:
        where = f"submitted/{student.name}"
        try:
            student.name.encode("utf-8")
        except UnicodeEncodeError:
            shown = student.name.encode("utf-8", "replace").decode("utf-8")
            problems.append(Problem(f"submitted/{shown}", "a folder name that is not UTF-8 "
                                    "text: rename it, then grade again (ignored)"))  # fmt: skip
            continue
        if not _real_folder(student):
            what = "a link" if student.is_symlink() else "a file"
            problems.append(Problem(where, f"{what} where a student folder belongs (ignored)"))
            continue
        folder = Path(student.path)
        for lab in labs:  # each lab by name: however many entries the folder holds
            lab_folder = folder / lab
            lab_where = f"{where}/{lab}"
            if not (lab_folder.exists() or lab_folder.is_symlink()):
                continue
            if lab_folder.is_symlink() or not lab_folder.is_dir():
                what = "a link" if lab_folder.is_symlink() else "a file"
                reason = f"{what} where a lab folder belongs (not followed)"
                problems.append(Problem(lab_where, reason, student.name, lab))
                continue
            result = take(student.name, lab, lab_folder, lab_where, names.get(lab))
            (found if isinstance(result, HandIn) else problems).append(result)
        try:
            entries = _entries(folder)
        except OSError as error:
            problems.append(Problem(where, f"cannot be listed ({error.strerror})"))
            continue
        for entry in entries:
            if entry.name not in labs:
                problems.append(
                    Problem(f"{where}/{entry.name}", f"there is no lab named {entry.name!r}")
                )
    return found, problems
