"""The course's instructor tooling (README: *Layout*; CONTRIBUTING.md: one hand-in's path).

Every process of the grader imports this package first, and so leaves out one optional
import: jsonschema, which nbformat uses to validate notebooks, imports `rfc3987_syntax` when it
is installed (jupyter_server's dependencies bring it), and that package builds some forty
Earley parsers for the IRI formats at import, about 2 s of CPU in every process that reads a
notebook (jsonschema issue #1428). No schema the grader validates has an IRI format (nbformat's
have no formats at all), and jsonschema treats the package as not installed. A process that
imported it already keeps it (tests/test_init.py).
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
