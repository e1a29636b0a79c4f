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
