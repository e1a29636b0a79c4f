"""How long each lab takes a student: the release, every exercise filled in, run top to bottom.

The notebook is the release as the demo class's `complete` student hands it in (the answers
are the solutions; no hidden check), run in a plain kernel without NBGRADER_EXECUTION (student
mode: the training labs train in full), one lab at a time so that each has the machine's
cores, as on a student's laptop. Prints a row per lab: the whole run and its slowest cell, in
seconds; the README's table of run times comes from this script.

    python benchmarks/lab_times.py                 # every lab
    python benchmarks/lab_times.py lab05_dynamicnet
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import nbformat
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient

from graders.build.build import source_notebook
from graders.build.demo import declared_class, student_notebook
from graders.config.course import LABS, REPO, SOLUTIONS, prepare_data, unknown_labs


def student_run(lab: str, timeout: int = 1200) -> tuple[float, float, str]:
    """(seconds in all, seconds of the slowest cell, its first line), student mode."""
    release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    complete = next(s for s in declared_class(lab) if s.name == "complete")
    notebook = student_notebook(complete, release, source_notebook(lab))
    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
    env.update(prepare_data([lab]))
    with tempfile.TemporaryDirectory(prefix=f"{lab}-") as folder:
        files = SOLUTIONS / lab / "files"
        if files.is_dir():
            shutil.copytree(files, folder, dirs_exist_ok=True)
        kernel = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=f"{folder}/kernel")
        client = NotebookClient(
            notebook, km=kernel, timeout=timeout, resources={"metadata": {"path": folder}}
        )
        times = []

        async def timed(cell, index, **kwargs):
            start = time.monotonic()
            result = await original(cell, index, **kwargs)
            times.append((time.monotonic() - start, cell.source.strip().splitlines()[:1]))
            return result

        original, client.async_execute_cell = client.async_execute_cell, timed
        started = time.monotonic()
        try:
            client.execute(env=env)
        finally:  # the client does not stop a kernel it was handed
            run_sync(kernel.shutdown_kernel)(now=True)
        total = time.monotonic() - started
    slowest, first = max(times, key=lambda pair: pair[0])
    return total, slowest, (first or [""])[0][:60]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*")
    args = parser.parse_args(argv)
    if complaint := unknown_labs(args.labs):
        print(complaint, file=sys.stderr)
        return 2
    print(f"{'lab':28} {'student mode':>13} {'slowest cell':>13}")
    for lab in args.labs or LABS:
        total, slowest, first = student_run(lab)
        print(f"{lab:28} {total:12.1f}s {slowest:12.1f}s  {first}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
