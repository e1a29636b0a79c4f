"""What each local Dask worker imports as it starts (graders/grade/warm.py, the engine's
preload): only imports, of modules that exist, among them what a grading task runs first
(the task, the sandbox, the judge and nbgrader's apps), so that a worker's first task starts
its kernel at once."""

from __future__ import annotations

import ast
import importlib.util

from graders.grade import engine, warm


def test_the_workers_preload_only_imports_what_a_task_needs():
    assert engine.PRELOAD == [warm.__name__]
    tree = ast.parse(open(warm.__file__, encoding="utf-8").read())
    body = [node for node in tree.body if not isinstance(node, ast.Expr)]  # the docstring
    assert all(isinstance(node, ast.Import | ast.ImportFrom) for node in body), "it only imports"
    names = {alias.name for node in body if isinstance(node, ast.Import) for alias in node.names}
    assert {"graders.grade.task", "graders.sandbox.sandbox", "nbgrader.apps"} <= names
    assert all(importlib.util.find_spec(name) is not None for name in names)
