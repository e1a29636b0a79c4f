"""The grader's package (graders/__init__.py): a process that imports it first reads and
validates notebooks without building jsonschema's IRI parsers, and validation still fails a
broken notebook."""

from __future__ import annotations

import subprocess
import sys

from graders.config.course import REPO

PROBE = """
import sys
import graders
import nbformat
nb = nbformat.read("labs/lab01_graph/lab01_graph.ipynb", as_version=4)
nbformat.validate(nb)
del nb.cells[0]["source"]
try:
    nbformat.validate(nb)
    print("a broken notebook passed")
except nbformat.ValidationError:
    pass
print("loaded" if sys.modules.get("rfc3987_syntax") is not None else "left out")
"""


def test_the_graders_processes_validate_notebooks_without_the_iri_parsers():
    ran = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == ["left", "out"], ran.stdout
