"""Shared lab code and text (solutions/common/) is written once and put into each lab by the
build (graders/build/includes.py): includes expand to exactly the lines they stand for, a bad
include names its file and line, and no lab keeps a copy of a fragment."""

from __future__ import annotations

import pytest

from graders.build import includes
from graders.build.build import SourceError, source_notebook
from graders.config.course import LABS, SOLUTIONS

NET = (
    "class Net:\n    def f(self):\n"
    "        ### BEGIN SOLUTION\n        return 1\n        ### END SOLUTION\n"
)
PROSE = "**How it works.** Run the cells.\n\nThen submit.\n"


@pytest.fixture
def common(tmp_path):
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "how.md").write_text(PROSE)
    (tmp_path / "setup_cell.py").write_text("x = 1\n")  # the setup cell is no fragment
    (tmp_path / "README.md").write_text("What is here.\n")
    return tmp_path


def test_an_include_expands_to_its_fragment(common):
    text = (
        "# %% [markdown]\n# # Lab\n#\n# %course-include how.md\n\n# %%\n# %course-include net.py\n"
    )
    expanded = includes.expand(text, common=common)
    assert expanded == (
        "# %% [markdown]\n# # Lab\n#\n# **How it works.** Run the cells.\n#\n# Then submit.\n\n"
        "# %%\nclass Net:\n    def f(self):\n        return 1\n"
    )
    exercise = includes.expand("# %course-include net.py --exercise\n", common=common)
    assert exercise == NET, "the exercise keeps its solution marks"
    assert includes.fragments(common) == ["how.md", "net.py"]


def test_fold_is_the_way_back(common):
    lab = "# %%\nimport torch\n\n# %%\n" + includes.expand(
        "# %course-include net.py\n", common=common
    )
    lab += "\n# %% [markdown]\n" + "\n".join(includes.rendered("how.md", common=common)) + "\n"
    folded = includes.fold(lab, common=common)
    assert includes.included(folded) == [("net.py", False), ("how.md", False)]
    assert includes.expand(folded, common=common) == lab
    exercise = "# %% nbgrader={}\n" + NET
    assert (
        includes.fold(exercise, common=common)
        == "# %% nbgrader={}\n# %course-include net.py --exercise\n"
    )


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ("# %course-include nothing.py", r"line 3: no shared fragment 'nothing.py'.*net\.py"),
        ("# %course-include setup_cell.py", "line 3: no shared fragment 'setup_cell.py'"),
        ("# %course-include net.py --solution", "line 3: cannot read"),
    ],
)
def test_a_bad_include_names_file_and_line(common, tmp_path, monkeypatch, line, complaint):
    source = tmp_path / "lab99.py"
    source.write_text(f"# %%\nx = 1\n{line}\n")
    monkeypatch.setattr(includes, "COMMON", common)
    with pytest.raises(SourceError, match=complaint) as error:
        source_notebook("lab99", path=source)
    assert str(source) in str(error.value)


def test_a_fragment_holds_no_cell_header(common):
    (common / "two.py").write_text("x = 1\n\n# %%\ny = 2\n")
    with pytest.raises(includes.IncludeError, match=r"two\.py: a fragment is part of one cell"):
        includes.expand("# %course-include two.py", common=common)


@pytest.mark.parametrize("lab", LABS)
def test_no_lab_keeps_a_copy_of_a_shared_fragment(lab):
    """Each copy of solutions/common/'s fragments became an include (`python -m
    graders.build.includes fold`); a copy pasted back would drift from the others."""
    text = (SOLUTIONS / lab / f"{lab}.py").read_text(encoding="utf-8")
    assert includes.fold(text) == text, f"{lab} copies a shared fragment: run the fold"
    assert includes.lab_text(lab).count("\n") >= text.count("\n")


def test_the_shared_fragments_are_used():
    used = {
        name for lab in LABS for name, _ in includes.included(includes.lab_source(lab).read_text())
    }
    assert used == set(includes.fragments()), "a fragment no lab includes"
