"""A verdict the student's code cannot reach.

A test cell runs in the student's kernel, after the student's code, so anything it
computes there can be subverted: a replaced ``run_cell`` that never runs the test, a
silenced traceback, a patched ``torch.allclose``. nbgrader's verdict (did the cell raise?)
is therefore only half of the grade. The other half comes from here, outside the kernel:

* hidden tests call ``observe(name, value)`` (defined in every lab's setup cell) on what the
  student's code produced for the hidden inputs; each call leaves a JSON record in the cell's
  outputs and nothing in the kernel knows what the right value is;
* the grader runs the instructor's solution notebook, in a kernel no student code touched,
  and records the same observations there (`reference_observations`);
* `verdicts` compares, cell by cell, the student's records with the reference's, in order,
  with the tolerances the *reference* asked for.

A test cell earns its points only if nbgrader passes it and its observations match. Forging
a record only helps by writing the right values, which is solving the exercise.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

import nbformat

MIME = "application/vnd.dyngraph.observation+json"


def records(nb) -> dict[str, list[dict]]:
    """The observation records of each test cell (by grade_id), in output order."""
    found: dict[str, list[dict]] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        rows = found.setdefault(meta["grade_id"], [])
        for output in cell.get("outputs", []):
            data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
            if MIME in data:
                record = data[MIME]
                rows.append(json.loads(record) if isinstance(record, str) else dict(record))
    return found


def _close(ref, got, rtol: float, atol: float) -> bool:
    if isinstance(ref, bool) or ref is None or isinstance(ref, str):
        return type(ref) is type(got) and ref == got
    if isinstance(ref, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return False
        return math.isclose(ref, got, rel_tol=rtol, abs_tol=atol)
    if isinstance(ref, list):
        return (
            isinstance(got, list)
            and len(ref) == len(got)
            and all(_close(r, g, rtol, atol) for r, g in zip(ref, got, strict=True))
        )
    if isinstance(ref, dict):
        return (
            isinstance(got, dict)
            and ref.keys() == got.keys()
            and all(_close(ref[k], got[k], rtol, atol) for k in ref)
        )
    return False


def compare(reference: list[dict], student: list[dict]) -> str | None:
    """None when the student's records match the reference's, else why not (no values)."""
    for i, ref in enumerate(reference):
        if i >= len(student):
            return f"the check stopped before recording {ref['name']!r}"
        got = student[i]
        if got.get("name") != ref["name"]:
            return f"expected a record of {ref['name']!r} next, found {got.get('name')!r}"
        rtol, atol = float(ref.get("rtol", 1e-5)), float(ref.get("atol", 1e-8))
        if not _close(ref.get("value"), got.get("value"), rtol, atol):
            return f"{ref['name']!r} is not what the reference solution gives"
    if len(student) > len(reference):
        return f"unexpected extra record {student[len(reference)].get('name')!r}"
    return None


def verdicts(reference: dict[str, list[dict]], student_nb) -> dict[str, str]:
    """Test cells (grade_id -> reason) whose observations do not match the reference."""
    student = records(student_nb)
    failed = {}
    for grade_id, expected in reference.items():
        if expected:
            reason = compare(expected, student.get(grade_id, []))
            if reason:
                failed[grade_id] = reason
    return failed


def reference_observations(
    solution: Path, timeout: int = 600, threads: int | None = None
) -> dict[str, list[dict]]:
    """Run the instructor's solution notebook (trusted code only) and collect its records
    (with the students' number of torch threads, so that both compute alike)."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    nb = nbformat.read(solution, as_version=4)
    with tempfile.TemporaryDirectory(prefix="reference-") as tmp:
        km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=f"{tmp}/kernel")
        client = NotebookClient(
            nb,
            km=km,
            timeout=timeout,
            resources={"metadata": {"path": tmp}},
            allow_errors=True,
        )
        from graders.sandbox import KERNEL_SIDE

        env = dict(os.environ, NBGRADER_EXECUTION="autograde", PYTHONPATH=str(KERNEL_SIDE))
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        try:
            client.execute(env=env)
        finally:  # the client does not stop a kernel it was handed
            run_sync(km.shutdown_kernel)(now=True)
    return records(nb)


def cached_reference(solution: Path, cache: Path) -> dict[str, list[dict]]:
    """`reference_observations` of `solution`, kept in `cache` and reused while the notebook,
    the kernel-side code that records (graders/kernel/), torch and the kernels' thread count
    are the same (once per release, not per grading)."""
    from importlib.metadata import version

    from graders.sandbox import KERNEL_SIDE, KERNEL_THREADS

    made_of = f"torch {version('torch')}, {KERNEL_THREADS} thread(s), ".encode()
    recorder = b"".join(path.read_bytes() for path in sorted(KERNEL_SIDE.glob("*.py")))
    key = hashlib.sha256(made_of + recorder + solution.read_bytes()).hexdigest()
    try:
        saved = json.loads(cache.read_text())
        if saved["key"] == key:
            return saved["observations"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing, stale or damaged: make it again
    observed = reference_observations(solution, threads=KERNEL_THREADS)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".tmp")
    partial.write_text(json.dumps({"key": key, "observations": observed}))
    partial.replace(cache)
    return observed


def mark_failures(nb, failed: dict[str, str]) -> None:
    """Say in the graded notebook (and so in the feedback) which checks were overruled."""
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in failed and cell.cell_type == "code":
            cell.outputs.append(
                nbformat.v4.new_output(
                    "error",
                    ename="IndependentCheckFailed",
                    evalue=failed[grade_id],
                    traceback=[
                        "The grader's own check of this part's results failed: " + failed[grade_id]
                    ],
                )
            )
