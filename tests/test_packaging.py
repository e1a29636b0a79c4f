"""pyproject.toml and environment.yml must ask for the same packages with the same ranges."""

import re
import tomllib

import yaml

from graders.config.course import REPO

# conda-forge names that differ from PyPI's
CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib"}
CONDA_ONLY = {"python", "graphviz", "pip"}  # the interpreter, the dot binary, the installer


def split(requirement: str) -> tuple[str, str]:
    requirement = requirement.split("#")[0].strip()
    name, spec = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", requirement).groups()
    return name.lower(), spec.replace(" ", "")


def pyproject_requirements() -> dict[str, str]:
    with open(REPO / "pyproject.toml", "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    return dict(split(d) for d in deps)


def conda_requirements() -> dict[str, str]:
    """The dependencies of environment.yml, conda's and pip's, under their PyPI names."""
    deps = yaml.safe_load((REPO / "environment.yml").read_text())["dependencies"]
    listed = [d for d in deps if isinstance(d, str)]
    listed += [p for d in deps if isinstance(d, dict) for p in d.get("pip", [])]
    found = {}
    for requirement in listed:
        name, spec = split(requirement)
        if name not in CONDA_ONLY:
            found[CONDA_TO_PYPI.get(name, name)] = spec
    return found


def test_environment_yml_matches_pyproject():
    assert conda_requirements() == pyproject_requirements()


def test_versions_are_ranges_not_pins():
    for name, spec in pyproject_requirements().items():
        assert "==" not in spec, f"{name} is pinned ({spec}); declare a range"
        assert spec, f"{name} has no version range"


def test_parser_sees_a_difference(tmp_path):
    """The comparison above is not vacuous: a changed range is noticed."""
    pyproject = pyproject_requirements()
    assert "torch" in pyproject and "torchviz" in pyproject and len(pyproject) >= 10
    changed = dict(conda_requirements(), torch=">=1.0")
    assert changed != pyproject


def torch_range() -> tuple[str, str]:
    """pyproject.toml's torch range as (oldest, newest): >=2.10,<2.16 -> 2.10, 2.15."""
    spec = pyproject_requirements()["torch"]
    found = re.fullmatch(r">=(\d+)\.(\d+),<(\d+)\.(\d+)", spec)
    assert found, f"pyproject.toml's torch range {spec!r} is not '>=A.B,<C.D'"
    a, b, c, d = map(int, found.groups())
    assert c == a and d > b, f"torch {spec}: the range's newest is {c}.{d - 1}"
    return f"{a}.{b}", f"{c}.{d - 1}"


SETUP_CELL = REPO / "solutions" / "common" / "setup_cell.py"


def test_the_torch_range_is_the_same_everywhere():
    """The tested range, declared once in pyproject.toml, is the README's (its laptop line and
    its sentence) and the setup cell's, which tells a student outside it."""
    oldest, newest = torch_range()
    floor, bound = pyproject_requirements()["torch"].split(",")
    readme = (REPO / "README.md").read_text()
    assert f'pip install "torch{floor},{bound}" torchvision ' in readme
    assert f"the labs are written for torch {oldest} to {newest}" in readme
    tested = re.search(r'^TESTED_TORCH = \("([\d.]+)", "([\d.]+)"\)$', SETUP_CELL.read_text(), re.M)
    assert tested and tested.groups() == (oldest, newest), tested


def torch_range_note():
    """The setup cell's own function, run alone."""
    import ast

    tree = ast.parse(SETUP_CELL.read_text())
    wanted = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name == "torch_range_note"
        or isinstance(node, ast.Assign)
        and ast.unparse(node.targets[0]) == "TESTED_TORCH"
    ]
    namespace = {"re": re}
    exec(compile(ast.Module(wanted, []), str(SETUP_CELL), "exec"), namespace)
    return namespace["torch_range_note"]


def test_the_setup_cell_says_when_torch_is_outside_the_range():
    note = torch_range_note()
    oldest, newest = torch_range()
    for inside in (f"{oldest}.0", f"{newest}.0+cu130", "2.14.1"):
        assert note(inside) is None, inside
    older, newer = note("2.9.1+cu126"), note("2.16.0.dev20270101")
    assert "torch 2.9.1+cu126 is older than" in older and "may fail" in older
    assert "torch 2.16.0.dev20270101 is newer than" in newer
    for said in (older, newer):
        assert f"torch {oldest} to {newest}" in said and said.count(". ") == 0
