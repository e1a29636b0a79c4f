"""The shape CONTRIBUTING.md promises: graders/ is a few packages, each with a face that names
what it offers; imports between packages go one way, as `RULES` says (the formats import
nothing of the course, the judge and the sandbox never import the build, the report imports
nothing of grading), with no circle between packages and none between modules, not even
through others or inside a function. Each rule is also shown to fail on a deliberately bad
import (the tests named `..._caught`). (The release imports nothing of the repository:
tests/test_build.py.)"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from graders.config.course import REPO

GRADERS = REPO / "graders"
# Each package of graders/, lowest first, and the packages it may import: an import from a
# package to one not named here breaks the layout. graders/kernel/ is the code that runs in the
# student's kernel, on its path: the grader imports of it only the records' MIME type.
RULES = {
    "kernel": set(),
    "config": set(),
    "formats": {"kernel"},  # nothing of the course but the kernel side's MIME type
    "sandbox": {"config", "formats"},
    "judge": {"config", "formats", "sandbox"},  # the sandbox's reference run; never the build
    "grade": {"config", "formats", "sandbox", "judge"},
    "report": {"config", "formats"},  # nothing of grading
    "build": {"config", "formats", "sandbox", "judge", "grade", "report"},
}
GRADING = {"sandbox", "judge", "grade", "build"}
ENGINES = ("dask", "distributed", "nbclient")  # what the report must not start either


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return name.removesuffix(".__init__")


@functools.cache
def imported(path: Path) -> frozenset[str]:
    """Every module named by an import anywhere in the file (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return frozenset(names)


FILES = {module_name(p): p for p in GRADERS.rglob("*.py")}


def graders_graph(files: dict[str, Path] = FILES) -> dict[str, set[str]]:
    return {name: (imported(path) & files.keys()) - {name} for name, path in files.items()}


def package_of(module: str) -> str | None:
    """The package of graders/ a module is in (None: graders/__init__.py itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def module_circles(graph: dict[str, set[str]]) -> list[str]:
    return sorted(name for name in graph if name in reachable(graph, name))


def package_arrows(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which packages each package imports."""
    arrows: dict[str, set[str]] = {}
    for name, uses in graph.items():
        if (source := package_of(name)) is not None:
            used = {package_of(u) for u in uses} - {source, None}
            arrows[source] = arrows.get(source, set()) | used
    return arrows


def package_circles(graph: dict[str, set[str]]) -> list[str]:
    arrows = package_arrows(graph)
    return sorted(p for p in arrows if p in reachable(arrows, p))


def broken_rules(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a package to one its rule leaves out, in words."""
    return sorted(
        f"{name} imports {used} ({source} may import only {sorted(RULES[source])})"
        for name, uses in graph.items()
        if (source := package_of(name)) in RULES
        for used in uses
        if package_of(used) not in (None, source, *RULES[source])
    )


def outside_the_packages(files: dict[str, Path]) -> list[str]:
    """Modules of graders/ that no package of `RULES` holds (graders/__init__.py aside)."""
    return sorted(name for name in files if package_of(name) not in (None, *RULES))


def report_reaches(graph: dict[str, set[str]], files: dict[str, Path]) -> list[str]:
    """What the class report reaches of grading, or of a grading engine, through any import."""
    report = {name for name in graph if package_of(name) == "report"}
    uses = report.union(*(reachable(graph, name) for name in report))
    grading = {name for name in uses if package_of(name) in GRADING}
    outside = set().union(*(imported(files[name]) for name in uses))
    return sorted(grading | {name for name in outside if name.split(".")[0] in ENGINES})


def face_problems(package: Path) -> list[str]:
    """What a package's __init__.py lacks: a docstring, and `__all__` naming its modules."""
    init = package / "__init__.py"
    modules = sorted(p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__"))
    if not init.is_file():
        return [f"{package.name} has no __init__.py"]
    tree = ast.parse(init.read_text())
    problems = [] if ast.get_docstring(tree) else [f"{package.name}/__init__.py has no docstring"]
    offered = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["__all__"]
    ]
    if offered != [modules]:
        problems.append(f"{package.name}/__init__.py's __all__ is {offered}, its modules {modules}")
    return problems


def test_graders_is_a_few_packages_each_with_a_face():
    top = sorted(p.name for p in GRADERS.iterdir() if p.suffix == ".py" or any(p.glob("*.py")))
    assert top == sorted(["__init__.py", *RULES]), top
    assert len(RULES) <= 8
    assert len(FILES) > 40, sorted(FILES)  # the walk found the modules in the packages
    assert not outside_the_packages(FILES)
    for package in set(RULES) - {"kernel"}:  # the kernel side is a folder on the kernel's path
        assert not face_problems(GRADERS / package)


def test_imports_between_packages_go_one_way():
    graph = graders_graph()
    assert package_arrows(graph)["build"] >= {"grade", "report", "sandbox"}  # arrows are seen
    assert not broken_rules(graph)
    assert not package_circles(graph)


def test_no_module_of_the_grader_imports_itself_through_others():
    graph = graders_graph()
    circles = module_circles(graph)
    assert not circles, f"modules in an import circle: {circles}"


def test_the_class_report_imports_nothing_of_grading():
    graph = graders_graph()
    assert "graders.report.report_page" in reachable(graph, "graders.report.report")
    assert not report_reaches(graph, FILES)


def with_import(module: str, line: str, tmp_path: Path) -> dict[str, Path]:
    """FILES with `module` as it is plus `line`, an import inside a function at its end."""
    changed = tmp_path / f"{module}.py"
    changed.write_text(f"{FILES[module].read_text()}\n\ndef _later():\n    {line}\n")
    return {**FILES, module: changed}


@pytest.mark.parametrize(
    "module, line",
    [
        ("graders.formats.verdict", "from graders.config.course import REPO"),
        ("graders.formats.records", "import graders.sandbox.sandbox_argv"),
        ("graders.judge.judge", "from graders.build.build import source_notebook"),
        ("graders.sandbox.sandbox", "from graders.build import demo"),
        ("graders.sandbox.zygote", "from graders.judge.judge import JudgeRecords"),
        ("graders.report.report_data", "from graders.grade import task"),
        ("graders.grade.task", "from graders.report.report_numbers import numbers"),
        ("graders.config.course", "from graders.formats import gradebook"),
    ],
)
def test_an_import_against_the_rules_is_caught(module, line, tmp_path):
    broken = broken_rules(graders_graph(with_import(module, line, tmp_path)))
    assert broken and all(b.startswith(f"{module} imports graders.") for b in broken), broken


def test_a_circle_between_packages_is_caught(tmp_path):
    graph = graders_graph(
        with_import("graders.config.course", "import graders.build.demo", tmp_path)
    )
    assert {"build", "config"} <= set(package_circles(graph))


def test_a_circle_between_modules_is_caught(tmp_path):
    files = with_import("graders.formats.gradebook", "from graders.grade import merge", tmp_path)
    assert module_circles(graders_graph(files)) == [
        "graders.formats.gradebook",
        "graders.grade.merge",
    ]


@pytest.mark.parametrize(
    "line", ["from graders.sandbox import sandbox_kernel", "import distributed"]
)
def test_the_report_reaching_grading_is_caught(line, tmp_path):
    files = with_import("graders.report.report_numbers", line, tmp_path)
    assert report_reaches(graders_graph(files), files)


def test_a_module_outside_the_packages_and_a_face_that_lies_are_caught(tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text("import graders.formats.wire\n")
    assert outside_the_packages({**FILES, "graders.stray": stray}) == ["graders.stray"]
    package = tmp_path / "formats"
    package.mkdir()
    for path in (GRADERS / "formats").glob("*.py"):
        (package / path.name).write_text(path.read_text())
    (package / "new_format.py").write_text('"""A format the face does not name."""\n')
    problems = face_problems(package)
    assert len(problems) == 1 and "'new_format'" in problems[0], problems


PATH_NAMED = re.compile(r"(?<![\w/.])graders/[\w/]+\.py\b")
MODULE_NAMED = re.compile(r"(?<![\w.])graders\.(\w+)")


def stale_names(files: dict[str, Path]) -> list[str]:
    """Where a module of graders/ names a file of graders/ that is not there, or a module of a
    package that is not one (``graders/task.py`` or ``graders.task`` for graders/grade/task.py):
    its words must lead a reader to the file they mean."""
    found = []
    for name, path in sorted(files.items()):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            named = [p for p in PATH_NAMED.findall(line) if not (REPO / p).is_file()]
            named += [f"graders.{m}" for m in MODULE_NAMED.findall(line) if m not in RULES]
            found += [f"{name}:{number} names {n}" for n in named]
    return found


def test_the_graders_words_name_each_module_by_its_package():
    assert not stale_names(FILES)


def test_a_stale_name_is_caught(tmp_path):
    old = tmp_path / "old.py"
    old.write_text('"""Read by graders/task.py and graders.judge.judge."""\nX = "graders.inputs"\n')
    assert stale_names({"graders.grade.old": old}) == [
        "graders.grade.old:1 names graders/task.py",
        "graders.grade.old:2 names graders.inputs",
    ]


# The modules of graders/ that write the process's environment, and why. A kernel's own
# environment is built as a dict and given to it; settings travel through nbgrader's
# configuration (traitlets) and the sandbox's settings.
WRITES_ENVIRON = {
    "graders.kernel.grading_zygote": "the forked kernel's own environment, in its own process",
    "graders.config.nbgrader_cli": "PATH while nbgrader runs in this process (it calls alembic)",
    # (a task's kernelspec folder reaches the kernel manager through the sandbox's settings,
    # `kernelspecs`, no longer as JUPYTER_PATH set for the whole process)
}
ENVIRON_WRITES = {"update", "pop", "clear", "setdefault", "popitem", "__setitem__"}


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def environ_writers(files: dict[str, Path]) -> list[str]:
    """The modules that write os.environ (an item set or deleted, update, pop, ...)."""

    def is_environ(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    found = set()
    for name, path in files.items():
        for node in ast.walk(parsed(path)):
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete) and any(
                isinstance(t, ast.Subscript) and is_environ(t.value) for t in targets
            ):
                found.add(name)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ENVIRON_WRITES and is_environ(node.func.value):
                    found.add(name)
                elif node.func.attr == "putenv":
                    found.add(name)
    return sorted(found)


def test_no_module_writes_the_environment_but_for_a_process_that_needs_it():
    assert environ_writers(FILES) == sorted(WRITES_ENVIRON)


def test_a_write_to_the_environment_is_caught(tmp_path):
    for line in ('os.environ["COURSE_X"] = "1"', "os.environ.update(data)", "del os.environ[k]"):
        files = with_import("graders.grade.grade", line, tmp_path)
        assert "graders.grade.grade" in environ_writers(files), line
