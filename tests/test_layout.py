"""The shape CONTRIBUTING.md promises: no two modules of graders/ import each other, not even
through others or inside a function; the class report imports nothing of grading. (The
release imports nothing of the repository: tests/test_build.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

from graders.config.course import REPO

GRADING = {"grade.engine", "grade.dispatch", "grade.task", "sandbox.sandbox",
           "sandbox.sandbox_kernel", "judge.judge", "sandbox.zygote", "grade.grade"}  # fmt: skip


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imported(path: Path) -> set[str]:
    """Every module named by an import anywhere in the file (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


FILES = {module_name(p): p for p in (REPO / "graders").rglob("*.py")}


def graders_graph() -> dict[str, set[str]]:
    return {name: (imported(path) & FILES.keys()) - {name} for name, path in FILES.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def test_no_module_of_the_grader_imports_itself_through_others():
    graph = graders_graph()
    assert len(graph) > 30, sorted(graph)  # the walk found the package
    circles = sorted(name for name in graph if name in reachable(graph, name))
    assert not circles, f"modules in an import circle: {circles}"


def test_the_class_report_imports_nothing_of_grading():
    graph = graders_graph()
    uses = reachable(graph, "graders.report.report")
    assert "graders.report.report_page" in uses  # the walk follows the report's own modules
    grading = sorted(uses & {f"graders.{name}" for name in GRADING})
    assert not grading, f"graders.report reaches the grading stack: {grading}"
    outside = set().union(*(imported(FILES[name]) for name in uses | {"graders.report.report"}))
    engines = {n for n in outside if n.split(".")[0] in ("dask", "distributed", "nbclient")}
    assert not engines, f"graders.report reaches {sorted(engines)}"
