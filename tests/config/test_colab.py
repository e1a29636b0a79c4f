"""graders/config/colab.py: every Open-in-Colab link, in the README and at the top of each lab,
opens that lab's release notebook in the repository that course.toml names."""

from __future__ import annotations

import re
import subprocess

import nbformat
import pytest

from graders.config import colab
from graders.config.course import LABS, REPO

LINK = re.compile(r"https://colab\.research\.google\.com/github/[^)\s]+")


def links(text: str) -> list[str]:
    return LINK.findall(text)


def test_the_readme_links_every_lab_where_course_toml_says():
    where = colab.published()
    assert where.repository, "course.toml names no GitHub repository and origin is not on GitHub"
    found = links(colab.README.read_text())
    assert sorted(found) == sorted(where.url(lab) for lab in LABS), (
        "README.md's Colab links are not one per lab where course.toml says: run `make build`"
    )


@pytest.mark.parametrize("lab", LABS)
def test_each_release_opens_itself_in_colab(lab):
    notebook = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    found = links(notebook.cells[0].source)
    assert found == [colab.published().url(lab)], f"labs/{lab}: stale badge, run `make build`"


def test_the_readme_table_is_current():
    text = colab.README.read_text()
    assert colab.readme(text, colab.published(), LABS) == text, "run `make build`"


def write(tmp_path, text):
    settings = tmp_path / "course.toml"
    settings.write_text(text)
    return settings


def test_an_empty_setting_takes_origin_on_github(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    remote = "git@github.com:someone/their-course.git"
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", remote], check=True)
    where = colab.published(write(tmp_path, 'github = ""\n'), root=tmp_path)
    assert where.repository == "someone/their-course"
    assert where.url("lab01_graph").endswith(
        "someone/their-course/blob/main/labs/lab01_graph/lab01_graph.ipynb"
    )


def test_no_github_origin_gives_no_badge(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    where = colab.published(write(tmp_path, ""), root=tmp_path)
    assert where.repository == "" and colab.badge(where, "lab01_graph") == ""


@pytest.mark.parametrize(
    "text, complaint",
    [
        ('github = "not a repository"', "not a GitHub repository"),
        ('github = "a/b"\nbranch = "../x"', "not a branch name"),
        ("github = [1]", "strings"),
        ("github = ", "cannot read it as TOML"),
    ],
)
def test_a_bad_setting_names_the_file(tmp_path, text, complaint):
    settings = write(tmp_path, text)
    with pytest.raises(colab.SettingError, match=complaint) as raised:
        colab.published(settings, root=tmp_path)
    assert str(settings) in str(raised.value)


def test_a_readme_without_markers_is_named(tmp_path):
    with pytest.raises(colab.SettingError, match="markers are missing") as raised:
        colab.readme("no table here", colab.published(), LABS, tmp_path / "README.md")
    assert "README.md" in str(raised.value)
