"""One grading task: a hand-in's bytes in, its grades, graded notebook and feedback out.

`grade` runs nbgrader's own autograde and generate_feedback on one hand-in (a lab's notebook,
or every notebook of an instructor's assignment it holds), in a scratch course made for it
(a copy of the class's assignment-only gradebook, each notebook restored to its release's
nbgrader metadata, nbgrader's timestamp.txt when there is one; the files and folders
released with the assignment, which the sandbox puts read-only beside the notebook). nbgrader sees
the student as ``student``, whatever the real folder's name is (spaces, glob characters, a
leading dash...); the grader's side puts the real name back when it merges.

The kernel runs in the sandbox (graders/sandbox/sandbox.py) with a working folder of its own, so
nothing it writes is in the scratch course: what comes back is what nbgrader made of the
kernel's messages (scores decided by graders/judge/judge.py, the graded notebook and the feedback
page), plus per-phase timings and, when something went wrong, why. Every failure is caught
here and reported as a reason: a task never raises for a hand-in's sake.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sqlite3
import stat
import tempfile
import time
import warnings
from pathlib import Path

import nbformat

from graders.config.nbgrader_cli import make_api_factory
from graders.formats import events as sandbox_events
from graders.formats import gradebook, references, timings, wire
from graders.formats.timings import TOTAL, Clock, Phase
from graders.formats.verdict import VERDICT, Verdict, Verdicts
from graders.formats.wire import Course, LocalJob, Result, Scores
from graders.judge import overwrite
from graders.sandbox import sandbox_host, sandbox_kernel
from graders.sandbox.sandbox_argv import KERNEL_THREADS

# nbgrader's add_submission trips a harmless SQLAlchemy autoflush warning in every task; in a
# Dask worker it would reach the instructor's terminal once per hand-in
warnings.filterwarnings("ignore", message=".*not in session, add operation along.*")

NEUTRAL_ID = "student"
MAX_FEEDBACK_BYTES = 5 * 2**20
TOO_BIG_FEEDBACK = (
    "<html><body><p>The feedback page of this notebook was over {limit} MB and is not "
    "shown; your grade is in the gradebook. Ask your instructor.</p></body></html>"
)


def assignments_only(gradebook: Path, out: Path) -> Path:
    """A copy of `gradebook` with the labs (cells, checksums, due dates) and no students."""
    shutil.copyfile(gradebook, out)
    with sqlite3.connect(out) as db:
        for table in ("comment", "grade", "submitted_notebook", "submitted_assignment", "student"):
            db.execute(f"DELETE FROM {table}")  # noqa: S608 (our own table names)
    with sqlite3.connect(out) as db:
        db.execute("VACUUM")
    return out


def restore_metadata(nb, release):
    """Give every nbgrader cell its metadata as released (points, type of cell, lock), and
    take it from cells that were not released as such (a forged or duplicated test cell):
    the release's own metadata, by the function nbgrader's sanitizing step of this course
    uses with the gradebook's (graders/judge/overwrite.py, `RestoreMetadata`). nbgrader then
    restores the cells' sources from the gradebook as usual."""
    released = {
        c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]
        for c in release.cells
        if "nbgrader" in c.get("metadata", {})
    }
    return overwrite.restore(nb, released)


def failure_reason(log: str) -> str:
    """Why nbgrader could not grade a notebook, from its log (one hand-in's)."""
    if "Kernel died" in log or "DeadKernelError" in log:
        return "the kernel died while running the notebook (os._exit, a crash or out of memory)"
    errors = [line.split("] ", 1)[-1] for line in log.splitlines() if "| ERROR]" in line]
    return errors[0][:300] if errors else "nbgrader autograde failed"


def _scores(db_path: Path, lab: str) -> Scores:
    with gradebook.opened(db_path) as gb:
        sub = gb.find_submission(lab, NEUTRAL_ID)
        notebooks = {}
        for nb in sub.notebooks:
            notebooks[nb.name] = {
                "late_penalty": nb.late_submission_penalty,
                "grades": {
                    g.name: {
                        "auto_score": g.auto_score,
                        "manual_score": g.manual_score,
                        "extra_credit": g.extra_credit,
                        "needs_manual_grade": bool(g.needs_manual_grade),
                    }
                    for g in nb.grades
                },
                "comments": {c.name: c.auto_comment for c in nb.comments},
            }
        stamp = sub.timestamp.isoformat() if sub.timestamp else None
        return {"timestamp": stamp, "notebooks": notebooks}


def verdicts(graded) -> Verdicts:
    """The judge's verdict of each test cell (graders/formats/verdict.py), by grade_id, with
    the cell's index."""
    found = {}
    for index, cell in enumerate(graded.cells):
        meta = cell.get("metadata", {})
        if VERDICT in meta and "nbgrader" in meta:
            verdict = Verdict.from_metadata(meta[VERDICT], index)
            if verdict is not None:
                found[meta["nbgrader"]["grade_id"]] = verdict
    return found


SCRATCH_PREFIX = "course-"
CLAIM_SUFFIX = ".claim"
ABANDONED_AFTER_S = 60  # a claim this old that no process holds is a dead grader's


def _claim_scratch() -> tuple[Path, int]:
    """A new scratch folder in the temporary folder, with a claim beside it: a file locked by
    this process until the folder is removed. The system drops the lock when the process
    ends, however it ends, which is how `sweep_abandoned` tells a dead grader's folder."""
    while True:
        fd, claim = tempfile.mkstemp(prefix=SCRATCH_PREFIX, suffix=CLAIM_SUFFIX)
        fcntl.flock(fd, fcntl.LOCK_EX)
        scratch = Path(claim[: -len(CLAIM_SUFFIX)])
        try:
            scratch.mkdir(mode=0o700)
            return scratch, fd
        except FileExistsError:  # a folder of that name without its claim: another name
            os.unlink(claim)
            os.close(fd)


def _drop_scratch(scratch: Path, fd: int) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
    Path(f"{scratch}{CLAIM_SUFFIX}").unlink(missing_ok=True)
    os.close(fd)


def sweep_abandoned(root: str | None = None, older_than_s: float = ABANDONED_AFTER_S) -> list[Path]:
    """Remove what graders killed outright left in the temporary folder (a lost Dask worker,
    an out-of-memory kill): each scratch folder whose claim no process holds any more, with
    its kernels' mounts and cgroups. Live graders' folders, on this machine or sharing its
    temporary folder, are never touched: their claims are locked. The folders removed."""
    removed = []
    for claim in Path(root or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*{CLAIM_SUFFIX}"):
        try:
            fd = os.open(claim, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:  # gone meanwhile, a link, or not ours to open
            continue
        try:
            info = os.fstat(fd)
            if (
                not stat.S_ISREG(info.st_mode)
                or info.st_uid != os.getuid()
                or time.time() - info.st_mtime < older_than_s  # a claim being made
            ):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its grader is alive
                continue
            try:
                if os.lstat(claim).st_ino != info.st_ino:  # removed and made anew meanwhile
                    continue
            except OSError:
                continue
            scratch = claim.with_name(claim.name[: -len(CLAIM_SUFFIX)])
            for private in _kernels_in(scratch):
                sandbox_host.release_abandoned(private)
            shutil.rmtree(scratch, ignore_errors=True)
            claim.unlink(missing_ok=True)
            removed.append(scratch)
        finally:
            os.close(fd)
    return removed


def _kernels_in(scratch: Path):
    """The kernels' private folders in a scratch folder, where `grade` makes them (no link
    followed)."""
    for folder in scratch.glob("task-*"):
        runtime = folder / "runtime"
        if not folder.is_symlink() and not runtime.is_symlink() and runtime.is_dir():
            yield from runtime.glob("kernel-*")


def run(course: Course, job: wire.Job) -> Result:
    """The grading task, as an engine runs it on any machine: everything it needs comes in
    `course` (what every hand-in of the class shares: nbgrader_config.py's text, the
    assignments-only gradebook's bytes, each lab's reference records and release files) and
    `job` (one hand-in: lab, notebook text, timestamp, limits); nothing is read from the
    instructor's file system. The result is plain data (see `grade`)."""
    begun = time.time()
    try:
        os.getcwd()
    except OSError:  # started in a folder removed since: nbgrader reads and restores it
        os.chdir(tempfile.gettempdir())
    try:
        sweep_abandoned()
    except Exception as error:  # noqa: BLE001 - tidying up never costs a hand-in
        sandbox_host.LOG.warning("could not sweep abandoned scratch folders: %s", error)
    scratch, claim = _claim_scratch()
    try:
        lab = job["lab"]
        (scratch / "nbgrader_config.py").write_text(course["config"])
        (scratch / "labs.db").write_bytes(course["gradebook"])
        where = scratch / "reference"
        timed = course.get("timings", {}).get(lab) or {}  # the per-notebook budgets' source
        for name, observed in course["references"][lab].items():
            references.write(
                references.path(where, lab, name), references.task_copy(observed, timed.get(name))
            )
        files = scratch / "files"
        files.mkdir()
        for name, data in course.get("files", {}).get(lab, {}).items():
            write_released(files, name, data)
        from graders.config.course import prepare_data  # the worker's own copy of the data

        data = prepare_data([lab], course.get("data_root")).get("COURSE_DATA_ROOT")
        local = LocalJob(
            **job,
            gradebook=str(scratch / "labs.db"),
            reference_dir=str(where),
            files=sorted(str(p) for p in files.iterdir()),
            data_root=data,
            releases=course["releases"][lab],
            scratch_root=str(scratch),
        )
        result = grade(api_factory(scratch / "nbgrader_config.py", course["config"]), local)
    except Exception as error:  # noqa: BLE001 - a hand-in never stops the class
        result = {"ok": False, "reason": f"the grader failed on this hand-in: {error}"}
    finally:
        _drop_scratch(scratch, claim)
    result.setdefault("timings", {})
    result.setdefault("clock", Clock()).started_at = begun
    return result


def write_released(folder: Path, name: str, data: bytes) -> Path:
    """One released file (`name`: its path in the release folder, "data/train.csv") under
    `folder`, readable by every kernel; a path that would leave `folder` raises ValueError."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{name!r} is not a path inside an assignment's release")
    target = folder.joinpath(*parts)
    for parent in reversed(target.parents):
        if folder in parent.parents and not parent.is_dir():
            parent.mkdir()
            parent.chmod(0o755)
    target.write_bytes(data)
    target.chmod(0o644)
    return target


_FACTORIES: dict[str, object] = {}


def api_factory(config_file: Path, text: str):
    """One `make_api_factory` per configuration text, per worker process."""
    key = hashlib.sha256(text.encode()).hexdigest()
    if key not in _FACTORIES:
        _FACTORIES[key] = make_api_factory(config_file)
    return _FACTORIES[key]


def _scratch_course(scratch: Path, job: LocalJob) -> tuple[dict, Path]:
    """Lay out the scratch course of one hand-in in `scratch`: the notebook restored to the
    release's metadata (and its timestamp), the gradebook, the kernelspec and the runtime
    folder. The nbgrader configuration changes that name them (the kernel manager finds the
    kernelspec and the runtime folder through the sandbox's settings: this process's
    environment is left alone), and the events file."""
    lab = job["lab"]
    folder = scratch / "submitted" / NEUTRAL_ID / lab
    folder.mkdir(parents=True)
    for name, text in job["notebooks"].items():  # those of the release (graders/grade/intake.py)
        release = nbformat.reads(job["releases"][name], as_version=4)
        nb = restore_metadata(nbformat.reads(text, as_version=4), release)
        nbformat.write(nb, folder / f"{name}.ipynb")
    if job.get("timestamp"):
        (folder / "timestamp.txt").write_text(job["timestamp"])
    shutil.copyfile(job["gradebook"], gradebook.of(scratch))
    runtime = scratch / "runtime"
    runtime.mkdir()
    runtime.chmod(0o711)
    sandbox_kernel.write_kernelspec(scratch / "jupyter")
    events, timings = runtime / "events.jsonl", scratch / "timings.jsonl"
    data = job.get("data_root")
    settings = sandbox_kernel.Settings(
        runtime=str(runtime),
        readonly=[data] if data else [],
        files=job.get("files", []),
        env={"COURSE_DATA_ROOT": data} if data else {},
        threads=KERNEL_THREADS,
        events=str(events),
        timings=str(timings),
        kernelspecs=str(scratch / "jupyter" / "kernels"),  # the kernel manager's, first
        # limits the caller gave replace the per-lab budgets (graders/formats/budgets.py) wholesale
        flat=bool(job.get("budget_s") or job.get("cell_timeout")),
    )
    if job.get("budget_s"):
        settings["budget_s"] = job["budget_s"]
    changes = {
        "SandboxedExecute": {"settings": dict(settings), "reference_dir": job["reference_dir"]},
        "JudgeRecords": {"reference_dir": job["reference_dir"], "timings": str(timings)},
        # the same page, its templates compiled once per worker (graders/judge/feedback.py)
        "GenerateFeedback": {"exporter_class": "graders.judge.feedback.CachedHTMLExporter"},
    }
    if job.get("cell_timeout"):
        changes["Execute"] = {"timeout": job["cell_timeout"]}
    return changes, events


def _autograde(api, scratch: Path, job: LocalJob, events: Path, result: Result) -> bool:
    """nbgrader autograde of the scratch course; fills `result` (scores, verdicts and the
    graded notebook, or why not). True when it graded."""
    lab, took = job["lab"], result["timings"]
    mark = time.monotonic()
    answer = api.autograde(lab, NEUTRAL_ID, force=True, create=True)
    autograde = time.monotonic() - mark
    measured = timings.read(scratch / "timings.jsonl")
    took[Phase.KERNEL_START] = measured.get(Phase.KERNEL_START, 0.0)
    took[Phase.CHECKS] = measured.get(Phase.CHECKS, 0.0)
    took[Phase.EXECUTION] = autograde - took[Phase.KERNEL_START] - took[Phase.CHECKS]
    # when (epoch) its kernel was up: the class run's first kernel
    result["clock"].kernel_up_at = timings.first_end(scratch / "timings.jsonl", Phase.KERNEL_START)
    log = str(answer.get("log", "")) + "\n" + str(answer.get("error", ""))
    graded_folder = scratch / "autograded" / NEUTRAL_ID / lab
    paths = {name: graded_folder / f"{name}.ipynb" for name in job["notebooks"]}
    if not answer.get("success") or not all(p.is_file() for p in paths.values()):
        if events.is_file():
            result["reason"] = f"stopped after {sandbox_events.reason(events)}"
        else:
            result["reason"] = failure_reason(log)
        return False
    single = len(job["releases"]) == 1  # the class report's names of test cells
    result["autograded"], result["verdicts"] = {}, {}
    for name, path in paths.items():
        text = result["autograded"][name] = path.read_text(encoding="utf-8")
        for grade_id, verdict in verdicts(nbformat.reads(text, as_version=4)).items():
            result["verdicts"][grade_id if single else f"{name}/{grade_id}"] = verdict
    result["scores"] = _scores(gradebook.of(scratch), lab)
    result["ok"] = True
    return True


def _feedback(api, scratch: Path, lab: str, result: Result) -> None:
    """nbgrader generate_feedback: a page for each graded notebook (capped), or why not."""
    mark = time.monotonic()
    feedback = api.generate_feedback(lab, NEUTRAL_ID, force=True)
    result["timings"][Phase.FEEDBACK] = time.monotonic() - mark
    pages = {
        name: scratch / "feedback" / NEUTRAL_ID / lab / f"{name}.html"
        for name in result["autograded"]
    }
    if not feedback.get("success") or not all(p.is_file() for p in pages.values()):
        result["feedback_problem"] = "nbgrader generate_feedback did not write it"
        return
    result["feedback"] = {}
    for name, page in pages.items():
        html = page.read_bytes()
        if len(html) > MAX_FEEDBACK_BYTES:
            html = TOO_BIG_FEEDBACK.format(limit=MAX_FEEDBACK_BYTES // 2**20).encode()
        result["feedback"][name] = html.decode("utf-8", "replace")


def grade(api_for, job: LocalJob) -> Result:
    """Grade one hand-in (`job`: see graders.formats.wire.LocalJob). `api_for(root,
    config_changes)`: an nbgrader API on a course. Never raises: a failure is a result with a
    reason."""
    took, started = {}, time.monotonic()
    result = Result(ok=False, reason=None, timings=took, clock=Clock())
    scratch = Path(tempfile.mkdtemp(prefix="task-", dir=job.get("scratch_root")))
    try:
        changes, events = _scratch_course(scratch, job)
        api = api_for(str(scratch), changes)
        took[Phase.INTAKE] = time.monotonic() - started
        with gradebook.scratch(gradebook.of(scratch)):
            if _autograde(api, scratch, job, events, result) and job.get("feedback", True):
                _feedback(api, scratch, job["lab"], result)
        return result
    except Exception as error:  # a hand-in must never stop the class: say why, move on
        result["reason"] = f"the grader failed on this hand-in: {type(error).__name__}: {error}"
        return result
    finally:
        took[TOTAL] = time.monotonic() - started
        shutil.rmtree(scratch, ignore_errors=True)
