"""Reference-making, a step of the build: run each lab's solution notebook (trusted code only)
and keep its records in build/reference/<lab>.json (graders/formats/references.py), which the judge
compares every hand-in with. `make build` calls `prepare_references` (graders/build/build.py), the
class run too (to remake what is stale), and a plain ``nbgrader autograde`` in the repository
through the judge (`cached_reference`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import nbformat

from graders.formats import references
from graders.formats.budgets import CellTime, cell_times
from graders.formats.records import Observations, records, test_cells
from graders.formats.references import ReferenceFile
from graders.sandbox.sandbox_argv import KERNEL_SIDE, KERNEL_THREADS


def reference_run(
    solution: Path,
    timeout: int = 600,
    threads: int | None = None,
    strict: bool = True,
    data_env: dict[str, str] | None = None,
) -> tuple[Observations, list[CellTime]]:
    """Run the instructor's solution notebook (trusted code only) under grading conditions
    (``NBGRADER_EXECUTION`` set, so labs that train shorter while graded do here too; the
    students' number of torch threads, so that both compute alike) and collect its records
    and how long each code cell took (the hand-ins' time budgets follow from these). A test
    cell of the solution that fails is the instructor's mistake: it stops here, by name
    (`strict`, a lab of the course); in an instructor's own notebook it is said and the run
    kept (`strict` False): plain nbgrader releases and grades such a notebook (nbgrader's own
    tests use sources whose solution is still a stub), and an ordinary notebook's checks
    need no records, only the cell times for its budgets. `data_env`: where the course data is
    (graders.config.course.prepare_data), added to the kernel's own environment."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    nb = nbformat.read(solution, as_version=4)
    with tempfile.TemporaryDirectory(prefix="reference-") as tmp:
        work = Path(tmp) / "work"  # the files and folders released beside it, as students have
        shutil.copytree(solution.parent, work, ignore=_only_released, symlinks=False)
        km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=f"{tmp}/kernel")
        client = NotebookClient(
            nb, km=km, timeout=timeout, resources={"metadata": {"path": str(work)}},
            allow_errors=True,
        )  # fmt: skip
        running: list[int] = []  # the index of the cell that runs, for a sentence
        client.on_cell_start = lambda cell, cell_index: running.append(cell_index)
        env = dict(os.environ, **(data_env or {}))
        env.update(NBGRADER_EXECUTION="autograde", PYTHONPATH=str(KERNEL_SIDE))
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        try:
            client.execute(env=env)
        except CellTimeoutError:  # an endless loop, as in nbgrader's own test notebooks
            raise RuntimeError(
                f"{solution}: cell {running[-1] if running else '?'} of the notebook ran past "
                f"{timeout} s "
                "when `make build` ran it for its reference (an endless loop?); every notebook "
                "of an assignment runs once, top to bottom, in a fresh kernel"
            ) from None
        finally:  # the client does not stop a kernel it was handed
            run_sync(km.shutdown_kernel)(now=True)
    for _, cell in test_cells(nb):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                said = (
                    f"{solution}: the solution fails its own test cell "
                    f"{cell.metadata.nbgrader['grade_id']!r}: {output.ename}: {output.evalue}"
                )
                if strict:
                    raise RuntimeError(said)
                print(f"note: {said} (its hand-ins are graded as nbgrader grades them)",
                      file=sys.stderr)  # fmt: skip
    return records(nb), cell_times(nb)


def _only_released(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n.endswith(".ipynb") or n in (".ipynb_checkpoints", "__pycache__")}


def beside(solution: Path, skip: Path) -> bytes:
    """The files released beside a notebook (its assignment's data), as bytes for a key; empty
    where there are none (every lab). `skip`: a folder left out (where references are kept)."""
    parts = []
    for path in sorted(solution.parent.rglob("*")):
        rel = path.relative_to(solution.parent)
        if path == skip or skip in path.parents:
            continue
        if path.is_file() and not _only_released(str(path.parent), [rel.parts[0], path.name]):
            parts.append(str(rel).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return b"".join(parts)


def reference_observations(
    solution: Path, timeout: int = 600, threads: int | None = None
) -> Observations:
    """The records of `reference_run`."""
    return reference_run(solution, timeout, threads)[0]


def cached_reference(
    solution: Path, cache: Path, strict: bool = True, data_env: dict[str, str] | None = None
) -> Observations:
    """`reference_observations` of `solution`, kept in `cache` and reused while the notebook,
    the kernel-side code that records (graders/kernel/), torch and the kernels' thread count
    are the same (once per release, not per grading). `data_env`: see `reference_run`."""
    from importlib.metadata import version

    made_of = (
        f"torch {version('torch')}, {KERNEL_THREADS} thread(s), "
        f"format {references.VERSION}, "  # an older file lacks what this one keeps: remade
    ).encode()
    recorder = b"".join(path.read_bytes() for path in sorted(KERNEL_SIDE.glob("*.py")))
    key = hashlib.sha256(
        made_of + recorder + solution.read_bytes() + beside(solution, cache.parent)
    ).hexdigest()
    try:
        saved = references.read(cache)
        if saved["key"] == key and references.timing(cache) is not None:
            return saved["observations"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing, stale or damaged: make it again
    started = time.monotonic()
    observed, cells = reference_run(
        solution, threads=KERNEL_THREADS, strict=strict, data_env=data_env
    )
    seconds = round(time.monotonic() - started, 2)  # what a hand-in of this lab may cost
    references.write(
        cache,
        ReferenceFile(
            version=references.VERSION, key=key, observations=observed, seconds=seconds, cells=cells
        ),
    )
    return observed


class Located(NamedTuple):
    folder: Path  # where the reference files are
    file: Path  # the notebook's
    observed: Observations | None  # its records, where it was checked fresh (else None)


def course_reference(config, reference_dir: str, lab: str, notebook: str, remake: bool) -> Located:
    """Where an nbgrader step configured by `config` finds the reference file of `lab`'s
    `notebook`: in `reference_dir` where the grader gave one (a task's copy), else in the
    course's build/reference/. Where `remake` and the course's source notebook is here (a
    plain nbgrader run in the repository), the file is first made again if stale
    (`cached_reference`) and its records come back too; what making it raised is raised.
    The sandbox (for the cell times) and the judge (for the records) both find it here."""
    from nbgrader.coursedir import CourseDirectory

    from graders.config.course import LABS

    coursedir = CourseDirectory(config=config)
    folder = Path(reference_dir) if reference_dir else references.folder(Path(coursedir.root))
    file = references.path(folder, lab, notebook)
    source = Path(coursedir.format_path(coursedir.source_directory, ".", lab))
    source = source / f"{notebook}.ipynb"
    if remake and source.is_file():
        return Located(folder, file, cached_reference(source, file, strict=lab in LABS))
    return Located(folder, file, None)


def prepare_references(root: Path, labs: list[str], workers: int | None = None) -> None:
    """Run every notebook of each assignment's source folder once (a lab's one, an
    instructor's assignment's every notebook) and keep its records and cell times in
    build/reference/ (`make build` does this, so that grading a class only reads them)."""
    from concurrent.futures import ThreadPoolExecutor

    from graders.config.course import LABS, notebooks, prepare_data

    data_env = prepare_data(labs)  # for the solutions' kernels only
    where = references.folder(root)
    jobs = []
    for lab in labs:
        source = root / "build" / "source" / lab
        names = notebooks(source)
        if not names:
            raise SystemExit(f"{source / f'{lab}.ipynb'} is missing: run `make build` first.")
        jobs += [
            (source / f"{name}.ipynb", references.path(where, lab, name), lab in LABS, data_env)
            for name in names
        ]

    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        list(pool.map(lambda job: cached_reference(*job), jobs))
