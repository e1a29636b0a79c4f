"""nbgrader's exchange for the hub: the folder, with the permissions nbgrader documents and
two steps tightened so that no student reads or changes another's hand-in or feedback.

nbgrader's own layout (docs: "Exchange", jupyter/nbgrader exchange/default/):

    exchange/                 drwxrwxrwt  root        anyone may add a course; the sticky bit
                                                      (ours) stops renaming another's
    exchange/<course>/        drwxr-xr-x  instructor
      outbound/               drwxr-xr-x  instructor  released labs, readable by every student
      inbound/                drwx-wx-wx  instructor  students add hand-ins, cannot list them
                              + setgid (nbgrader's), + sticky (ours)
      feedback/               drwx--x--x  instructor  students read theirs by its hashed name

What nbgrader leaves open, and the two classes below close:

* `submit` makes each hand-in folder mode 0777 and its files 0644 ("hidden from other users
  by the timestamp" and a random suffix): whoever learns the name can read and change it.
  `PrivateSubmit` makes them 0750/0640. inbound/ is setgid, so they belong to the
  instructor's group, which reads them; other students read nothing.
* `release_feedback` writes feedback/<hash>.html 0644 (the hash of a secret that only the
  student's own cache holds). `PrivateReleaseFeedback` gives each page to the student's own
  group, mode 0640: the student reads it, the others do not.

Both are nbgrader's classes with a step added, chosen in nbgrader_config.py through
`c.ExchangeFactory` (hub/course.py writes it); so are `TrustedCollect` (the exchange, not
the student, says who handed in and when) and `GradebookRelease` (a lab enters the course's
gradebook when it is released, so that no total counts a lab the students were not given).
"""

from __future__ import annotations

import datetime
import glob
import grp
import os
import pwd
import re
import secrets
import shutil
import stat
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import ignore_patterns, notebook_hash

ROOT_MODE = 0o1777
COURSE_MODE = 0o755
MODES = {"outbound": 0o755, "inbound": 0o3733, "feedback": 0o711}


def make_exchange(root: Path, course: str, instructor: str) -> Path:
    """The exchange folder and the course's three folders, owned by the instructor, made
    before any student can take the course's name."""
    entry = pwd.getpwnam(instructor)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(ROOT_MODE)
    path = root / course
    path.mkdir()
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(COURSE_MODE)
    for name, mode in MODES.items():
        (path / name).mkdir()
        os.chown(path / name, entry.pw_uid, entry.pw_gid)
        (path / name).chmod(mode)
    return path


class GradebookRelease(ExchangeReleaseAssignment):
    """nbgrader's release_assignment; the lab enters the course's gradebook as it is released.

    The hub's course generates its labs without the gradebook (`make hub` sets
    nbgrader's `--no-db` settings, hub/course.py): a lab that is built but not given to
    the students is in no student's total in the formgrader, in no row of grades.csv and in
    no class report. Releasing it runs nbgrader's own generate_assignment for its gradebook
    step (the lab's notebooks, cells, points and checksums, exactly as `make build` records
    them), the student version it writes going to a scratch folder: what the students fetch
    is the release folder as built. A lab whose cells cannot enter the gradebook (it holds
    hand-ins of a version with other cells) is not released, and the log says why."""

    def copy_files(self):
        if self.force or not os.path.isdir(self.dest_path):  # else nbgrader's refusal
            self.enter_gradebook()
        super().copy_files()

    def enter_gradebook(self) -> None:
        import copy
        import tempfile

        from nbgrader.converters import GenerateAssignment
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config import Config

        lab, root = self.coursedir.assignment_id, self.coursedir.root
        scratch_in = os.path.join(root, "build")
        os.makedirs(scratch_in, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="release-", dir=scratch_in) as scratch:
            config = copy.deepcopy(self.config)
            config.merge(Config({
                "CourseDirectory": {"root": root, "release_directory": scratch},
                "GenerateAssignment": {"no_database": False},
                "SaveCells": {"enabled": True},
            }))  # fmt: skip
            coursedir = CourseDirectory(config=config)
            coursedir.assignment_id = lab
            generate = GenerateAssignment(coursedir=coursedir, config=config)
            generate.force = True
            try:
                generate.start()
            except Exception as error:  # nbgrader's NbGraderException, or a preprocessor's
                self.fail(
                    f"{lab} is not released: it could not enter the gradebook ({error}); "
                    "see the lines above"
                )
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            points = gb.find_assignment(lab).max_score
        self.log.info("%s entered the gradebook (%g points)", lab, points)


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit, then the hand-in readable by its owner and the instructor only."""

    def copy_files(self):
        super().copy_files()
        dest = Path(self.inbound_path) / self.assignment_filename
        for folder, dirs, files in os.walk(dest):
            for name in files:
                os.chmod(Path(folder) / name, 0o640)
            for name in dirs:
                os.chmod(Path(folder) / name, 0o2750)
        os.chmod(dest, 0o2750)


class PrivateReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's release_feedback, then each page readable by its student's group only."""

    def copy_files(self):
        super().copy_files()
        pattern = re.escape(os.path.sep).join(
            [
                self.coursedir.format_path(
                    self.coursedir.feedback_directory,
                    "(?P<student_id>.*)",
                    self.coursedir.assignment_id,
                    escape=True,
                ),
                "(?P<notebook_id>.*).html",
            ]
        )
        for html in glob.glob(os.path.join(self.src_path, "*.html")):
            found = re.match(pattern, html)
            if found is None:
                continue
            student, notebook = found.group("student_id"), found.group("notebook_id")
            folder = os.path.dirname(html)
            with open(os.path.join(folder, "submission_secret.txt")) as fh:
                secret = fh.read()
            page = (
                Path(self.dest_path) / f"{notebook_hash(secret=secret, notebook_id=notebook)}.html"
            )
            if not page.exists():
                continue
            try:
                give_to_group(page, student)
                page.chmod(0o640)
            except (KeyError, PermissionError, OSError) as error:
                page.chmod(0o600)  # closed rather than open to every student
                self.log.error(
                    "Feedback for %s kept from every student (%s): the instructor must be in "
                    "a group of the student's name",
                    student,
                    error,
                )


def give_to_group(path: Path, group: str) -> None:
    """`path` (the instructor's) to `group`. A process may give a file only to a group it is
    in, and a process's groups are those its account had when it started: the instructor's
    server, started before a student joined the term (`make hub-add-student`), is not in the
    new student's group, though the account is. Then nbgrader's feedback page is handed over
    through `sg` (setuid; it reads the groups as they are now and admits a member only)."""
    import shlex
    import subprocess

    gid = grp.getgrnam(group).gr_gid
    try:
        os.chown(path, -1, gid)
        return
    except PermissionError:
        me = pwd.getpwuid(os.getuid()).pw_name
        if me not in grp.getgrnam(group).gr_mem or not shutil.which("sg"):
            raise
    command = f"chgrp -h -- {gid} {shlex.quote(str(path))}"
    done = subprocess.run(
        ["sg", group, "-c", command], stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=60, start_new_session=True,
    )  # fmt: skip
    if done.returncode or os.lstat(path).st_gid != gid:
        raise PermissionError(f"sg {group}: {done.stderr.strip() or done.returncode}")


def handed_in_at(folder: str) -> float:
    """When a hand-in last changed, as the kernel records it: the latest ctime of the folder
    and of everything in it. ctime is set by the kernel on every change of a file or folder
    (writing, renaming, linking, chmod, touch); no user can set it, nor move it backwards."""
    latest = os.lstat(folder).st_ctime
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            latest = max(latest, os.lstat(os.path.join(parent, name)).st_ctime)
    return latest


TIMES = ".handed-in-times.json"  # in the course's exchange folder: the instructor's, 0600


def record_times(course: Path, times: dict[str, float], instructor: str) -> None:
    """After a restore (which sets every file's ctime to now): when each hand-in was really
    handed in, with the ctime it has now. `TrustedCollect` uses a recorded time only while
    the hand-in has not changed since (its ctime is still the recorded one)."""
    import json

    inbound = course / "inbound"
    record = {
        name: [when, handed_in_at(str(inbound / name))]
        for name, when in times.items()
        if (inbound / name).is_dir()
    }
    path = course / TIMES
    path.write_text(json.dumps(record))
    entry = pwd.getpwnam(instructor)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o600)


class TrustedCollect(ExchangeCollect):
    """nbgrader's collect, where the exchange and not the student says who handed in and when.

    * Who: the Unix owner of the hand-in's folder. A folder whose name claims another
      account is refused (an error in the log naming both) and never collected, so the
      named student's hand-in stays as it was; so is a link, or a name nbgrader cannot read.
    * When: `handed_in_at`, the kernel's record of the hand-in's last change. The
      timestamp in the folder's name and the timestamp.txt inside it (both written by the
      student's own process) are ignored; the collected copy's timestamp.txt is rewritten
      with the trusted time, which nbgrader's autograde reads for lateness.
    * A hand-in changing while it is copied is copied again, with the time of its last state.
    """

    def _path_to_record(self, path):
        name = os.path.basename(path)
        claimed = name.rsplit("+", 3)[0]
        try:
            info = os.lstat(path)
        except OSError as error:
            self.log.error("Refused %s: %s", path, error)
            return None
        if not stat.S_ISDIR(info.st_mode):
            self.log.error(
                "Refused %s: not a folder (a link or a file), made by %s", path, _owner(info.st_uid)
            )
            return None
        owner = _owner(info.st_uid)
        if owner != claimed:
            self.log.error(
                "Refused %s: it is named for %s but was handed in by %s (forged hand-in; "
                "%s's own hand-ins are unchanged)",
                path,
                claimed,
                owner,
                claimed,
            )
            return None
        try:
            when = handed_in_at(path)
        except OSError as error:
            self.log.error("Refused %s (handed in by %s): %s", path, owner, error)
            return None
        changed = when
        recorded = self._recorded_times().get(name)
        if recorded and recorded[1] == when:  # restored from a backup, unchanged since
            when = recorded[0]
        self._when = {**getattr(self, "_when", {}), path: (changed, when)}
        timestamp = datetime.datetime.fromtimestamp(when, datetime.UTC)
        return {"username": owner, "filename": name, "timestamp": timestamp.replace(tzinfo=None)}

    def _recorded_times(self) -> dict:
        import json

        try:
            with open(os.path.join(self.root, self.coursedir.course_id, TIMES)) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return {}

    def init_src(self):
        """nbgrader's init_src, from the trusted records: each student's latest hand-in (or,
        with --before-duedate, their latest one on time)."""
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(self.inbound_path, f"{student}+{self.coursedir.assignment_id}+*")
        by_student = {}
        for path in sorted(glob.glob(pattern)):
            record = self._path_to_record(path)
            if record is not None:
                by_student.setdefault(record["username"], []).append(record)
        self.src_records = []
        for records in by_student.values():
            records.sort(key=lambda r: r["timestamp"], reverse=True)
            on_time = [r for r in records if self.duedate and r["timestamp"] <= self.duedate]
            use_on_time = self.duedate is not None and self.before_duedate and on_time
            self.src_records.append(on_time[0] if use_on_time else records[0])

    def do_copy(self, src, dest):
        try:
            self._copy(src, dest)
        except (OSError, shutil.Error, RuntimeError) as error:
            shutil.rmtree(dest, ignore_errors=True)
            self.log.error("Could not collect %s: %s", src, error)

    def _copy(self, src, dest):
        """nbgrader's copy (its ignore, include and size limits), following no link: links
        and special files are left out, with a line in the log. Copied again while the
        hand-in changes under us; then its timestamp.txt says the trusted time."""
        for _ in range(5):
            before = handed_in_at(src)
            if os.path.exists(dest):
                shutil.rmtree(dest)
            if self.get_size(src) > 1000 * self.coursedir.max_dir_size:
                raise RuntimeError(f"{src} is larger than CourseDirectory.max_dir_size")
            shutil.copytree(src, dest, ignore=self._ignore(), symlinks=True)
            for folder, dirs, files in os.walk(dest):  # a name that became a link meanwhile
                for name in dirs + files:
                    if os.path.islink(os.path.join(folder, name)):
                        os.unlink(os.path.join(folder, name))
            after = handed_in_at(src)
            if after == before:
                break
        secret = os.path.join(dest, "submission_secret.txt")
        if not os.path.isfile(secret):  # not made by nbgrader's submit: release_feedback
            # would stop at it for the whole class; the student cannot fetch its feedback
            self.log.warning("%s has no submission_secret.txt: not made by nbgrader submit", src)
            with open(secret, "w") as fh:
                fh.write(secrets.token_hex(16))
        changed, recorded = getattr(self, "_when", {}).get(src, (None, None))
        when = datetime.datetime.fromtimestamp(
            recorded if after == changed else after, datetime.UTC
        )
        with open(os.path.join(dest, "timestamp.txt"), "w") as fh:
            fh.write(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))

    def _ignore(self):
        nbgraders = ignore_patterns(
            exclude=self.coursedir.ignore,
            include=self.coursedir.include,
            max_file_size=self.coursedir.max_file_size,
            log=self.log,
        )

        def skip(folder, names):
            left = set(nbgraders(folder, names))
            for name in names:
                path = os.path.join(folder, name)
                if os.path.islink(path) or not (os.path.isfile(path) or os.path.isdir(path)):
                    self.log.error("Left out %s of a hand-in: not a plain file or folder", path)
                    left.add(name)
            return left

        return skip


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
