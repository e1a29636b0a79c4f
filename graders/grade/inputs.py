"""A class run's inputs: what every grading task shares (a `wire.Course`), what each
hand-in's grade depends on (its key), what a resumed run leaves as it is, and the order the
hand-ins are graded in. graders/grade/grade.py uses them; the reference files are
graders/formats/references.py's, the grading log graders/formats/gradelog.py's, the gradebook
graders/formats/gradebook.py's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from graders.config.course import LABS, REPO, configured_data_root, lab_source, notebooks
from graders.formats import gradebook, gradelog, references
from graders.formats.wire import Course
from graders.grade.intake import HandIn


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def released_notebooks(root: Path, lab: str) -> list[str]:
    """The notebooks released of `lab` (labs/<lab>/*.ipynb), by name: a lab's one, an
    instructor's assignment's every one."""
    return notebooks(root / "labs" / lab) or [lab]


NOT_RELEASED = ("__pycache__", ".ipynb_checkpoints", "feedback")  # CourseDirectory.ignore


def released_files(folder: Path) -> dict[str, bytes]:
    """The files and folders released beside an assignment's notebooks, as every kernel of it
    gets them (read-only, in its working folder): each regular file by its path in `folder`
    ("data.txt", "data/train.csv"), folders at any depth. Left out, as plain nbgrader's
    autograde leaves them out when it copies the source's files beside a hand-in: notebooks,
    caches and what CourseDirectory.ignore names; and every link (never followed)."""
    found: dict[str, bytes] = {}

    def walk(here: Path, parts: tuple[str, ...]) -> None:
        for entry in sorted(here.iterdir()):
            name = entry.name
            if name in NOT_RELEASED or name.endswith((".ipynb", ".pyc")) or entry.is_symlink():
                continue
            if entry.is_dir():
                walk(entry, (*parts, name))
            elif entry.is_file():
                found["/".join((*parts, name))] = entry.read_bytes()

    if folder.is_dir():
        walk(folder, ())
    return found


def release_files(root: Path, lab: str) -> dict[str, bytes]:
    """`released_files` of labs/<lab>/: for a lab of the course, only what `make build`
    released beside it (solutions/<lab>/files/), never what running the lab in the
    repository left there (lab 5's downloaded data/); for an instructor's assignment,
    everything released with it."""
    if lab not in LABS:
        return released_files(root / "labs" / lab)
    found = {}
    for name in released_files(lab_source(lab).parent / "files"):
        path, parts = root / "labs" / lab, name.split("/")
        for part in parts:
            path = path / part
            if path.is_symlink():
                break
        else:
            if path.is_file():
                found[name] = path.read_bytes()
    return found


def course_inputs(root: Path, labs: list[str], labs_only: Path) -> Course:
    """What every task of the class shares, as data (no shared file system is assumed): by
    assignment, each released notebook, its reference records and times, and the files and
    folders released with it."""
    where = references.folder(root)
    observed, timings, releases, files = {}, {}, {}, {}
    for lab in labs:
        folder = root / "labs" / lab
        names = released_notebooks(root, lab)
        releases[lab] = {n: (folder / f"{n}.ipynb").read_text(encoding="utf-8") for n in names}
        observed[lab] = {n: references.observations(references.path(where, lab, n)) for n in names}
        timings[lab] = {n: references.times(references.path(where, lab, n)) for n in names}
        files[lab] = release_files(root, lab)
    return Course(
        config=(REPO / "nbgrader_config.py").read_text(),
        gradebook=labs_only.read_bytes(),
        references=observed,
        releases=releases,
        files=files,
        timings=timings,
        data_root=str(configured_data_root()),  # c.CourseData.root, resolved once here
    )


def longest_first(hand_ins: list[HandIn], root: Path) -> list[HandIn]:
    """The hand-ins in the order to grade them: the labs whose solution took longest to run
    (`make build` timed it: build/reference/<lab>.json, and for an instructor's assignment
    every notebook's file, summed) first, so that a class run does not end on one long hand-in
    while the other workers wait; otherwise as found."""
    where = references.folder(root)  # a lab timed by no build yet: 0, in the order found
    seconds = {
        lab: sum(
            references.seconds(references.path(where, lab, n))
            for n in released_notebooks(root, lab)
        )
        for lab in {h.lab for h in hand_ins}
    }
    return sorted(hand_ins, key=lambda h: -seconds[h.lab])


def hand_in_key(hand_in: HandIn, course: Course) -> str:
    """What a grade depends on: the notebooks, the release (its notebooks and files) and the
    reference records."""
    lab = hand_in.lab
    released, observed = course["releases"][lab], course["references"][lab]
    single = list(released) == [lab]  # a lab: its key as it was before assignments had more
    made_of = [hand_in.notebooks[n] for n in sorted(hand_in.notebooks)]
    made_of += [hand_in.timestamp or "", *(released[n] for n in sorted(released))]
    made_of.append(json.dumps(observed[lab] if single else observed, sort_keys=True))
    if not single:  # which notebook each is
        made_of.append(json.dumps(sorted(hand_in.notebooks)))
    files = course.get("files", {}).get(lab) or {}
    if files:
        made_of += [f"{name}\0{_sha(data)}" for name, data in sorted(files.items())]
    return _sha("\n".join(_sha(part) for part in made_of))


def already_graded(root: Path, labs: list[str]) -> set[tuple[str, str]]:
    with gradebook.opened(gradebook.of(root)) as gb:
        return {
            (sub.student.id, assignment.name)
            for assignment in gb.assignments
            if assignment.name in labs
            for sub in assignment.submissions
        }


def not_graded_yet(root: Path, hand_ins: list[HandIn], keys: dict, labs: list[str]) -> list[HandIn]:
    """The hand-ins not graded yet from the same inputs (their key in the log, their
    submission in the gradebook): what a resumed run grades."""
    log = gradelog.latest(gradelog.read(root)[0])
    in_book = already_graded(root, labs)
    done = {k for k, key in keys.items() if k in in_book and log.get(k, {}).get("key") == key}
    return [h for h in hand_ins if (h.student, h.lab) not in done]


def expected_count(root: Path, hand_ins: list[HandIn], labs: list[str], force: bool) -> int:
    """How many hand-ins this run will likely grade, known before the references are checked
    (from the reference files as they are): the size of the local cluster to start at once.
    A guess only; the run grades what the checked references say."""
    if force:
        return len(hand_ins)
    try:
        where = references.folder(root)
        course = {"releases": {}, "references": {}, "files": {}}
        for lab in labs:
            folder, names = root / "labs" / lab, released_notebooks(root, lab)
            course["releases"][lab] = {
                n: (folder / f"{n}.ipynb").read_text(encoding="utf-8") for n in names
            }
            course["references"][lab] = {
                n: references.observations(references.path(where, lab, n)) for n in names
            }
            course["files"][lab] = release_files(root, lab)
        keys = {(h.student, h.lab): hand_in_key(h, course) for h in hand_ins}
        return len(not_graded_yet(root, hand_ins, keys, labs))
    except Exception:  # noqa: BLE001 - missing or damaged: the references step remakes them
        return len(hand_ins)
