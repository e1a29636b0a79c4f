"""The release in labs/ is what `make build` makes from solutions/, and it works."""

from __future__ import annotations

import ast
import json
import re

import pytest

from graders.build.build import SourceError, full_nbgrader_metadata, main, source_notebook
from graders.config.course import LABS, REPO


def release_path(lab):
    return REPO / "labs" / lab / f"{lab}.ipynb"


def test_every_lab_has_a_release():
    assert LABS, "no lab found under solutions/"
    released = sorted(p.name for p in (REPO / "labs").iterdir() if p.is_dir())
    assert released == LABS, "labs/ and solutions/ disagree: run `make build`"


@pytest.mark.parametrize("lab", LABS)
@pytest.mark.slow
def test_release_is_not_stale(course, lab):
    fresh = json.loads((course / "labs" / lab / f"{lab}.ipynb").read_text())
    committed = json.loads(release_path(lab).read_text())
    assert committed == fresh, f"labs/{lab} is stale: run `make build` and commit labs/"


@pytest.mark.parametrize("lab", LABS)
def test_release_needs_nothing_from_this_repository(lab):
    nb = json.loads(release_path(lab).read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert not re.search(r"^\s*(from|import)\s+(graders|data|solutions)\b", code, re.M)
    assert "BEGIN SOLUTION" not in code and "BEGIN HIDDEN TESTS" not in code


# `nbgrader validate` of every solution, and `nbgrader validate --invert` of every release:
# tests/clients/test_real_clients.py, from a user's shell (no PYTHONPATH), as an instructor
# runs them.


@pytest.mark.parametrize("lab", LABS)
@pytest.mark.slow
def test_every_check_records_observations_for_the_judge(course, lab):
    """A test cell's points must not rest on the student's kernel alone (graders/judge/judge.py):
    each one's hidden tests record what the student's code produced."""
    nb = json.loads((course / "build" / "source" / lab / f"{lab}.ipynb").read_text())
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("grade") and cell["cell_type"] == "code":
            source = "".join(cell["source"])
            hidden = source.partition("BEGIN HIDDEN TESTS")[2]
            assert "observe(" in hidden, f"{lab}: {meta['grade_id']} records no observation"


def bound_names(nodes) -> set[str]:
    """The names a list of statements binds (assignments, loops, defs, imports, parameters)."""
    names = set()
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def names_taken_from_failed_checks(nb) -> list[str]:
    """'<cell> uses <name> from <test cell>' for each name a cell takes from an earlier test
    cell that binds it only after its first check: when that check fails, the rest of its cell
    does not run, the name never exists, and this cell fails too, for nothing it got wrong.
    (Definitions and imports at the top of a test cell always run, hidden ones included.)"""
    from_test_cell, found = {}, []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        code = "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line
            for line in cell.source.splitlines()
        )
        body = ast.parse(code).body
        loaded = {
            n.id
            for n in ast.walk(ast.Module(body, []))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        found += [
            f"{meta.get('grade_id', cell.id)} uses {name} from {from_test_cell[name]}"
            for name in sorted(loaded - bound_names(body))
            if name in from_test_cell
        ]
        safe = len(body)  # in a test cell, only what comes before its first check is safe
        if meta.get("grade") and not meta.get("solution"):
            kinds = ast.FunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom
            safe = next((i for i, node in enumerate(body) if not isinstance(node, kinds)), safe)
        for name in bound_names(body[:safe]):
            from_test_cell.pop(name, None)
        for name in bound_names(body[safe:]) - bound_names(body[:safe]):
            from_test_cell[name] = meta["grade_id"]
    return found


@pytest.mark.parametrize("lab", LABS)
def test_a_failed_check_cannot_fail_another_cell(lab):
    assert names_taken_from_failed_checks(source_notebook(lab)) == []


def test_a_name_from_after_a_check_is_found(tmp_path):
    source = tmp_path / "lab99.py"
    source.write_text(
        GOOD_CELLS
        + '\n# %% nbgrader={"grade": true, "points": 1, "grade_id": "t1"}\n'
        + "def _early():\n    return 1\n\n\ncheck(x == 1)\n_late = 2\n"
        + '\n# %% nbgrader={"grade": true, "points": 1, "grade_id": "t2"}\n'
        + "assert _early() + _late == 3\n"
    )
    assert names_taken_from_failed_checks(source_notebook("lab99", path=source)) == [
        "t2 uses _late from t1"
    ]


def test_short_metadata_is_expanded():
    meta = full_nbgrader_metadata({"grade": True, "points": 2, "grade_id": "t"}, "here")
    assert meta == {
        "grade": True,
        "grade_id": "t",
        "locked": True,
        "schema_version": 3,
        "solution": False,
        "task": False,
        "points": 2,
    }
    answer = full_nbgrader_metadata({"solution": True, "grade_id": "a"}, "here")
    assert answer["solution"] and not answer["locked"] and "points" not in answer


@pytest.mark.parametrize(
    "short, complaint",
    [
        ({"solution": True}, "needs a grade_id"),
        ({"grade": True, "grade_id": "t"}, "needs points"),
        ({"grade": True, "grade_id": "t", "points": 0}, "positive number"),
        ({"solutoin": True, "grade_id": "a"}, "unknown nbgrader key.*'solutoin'"),
    ],
)
def test_bad_metadata_is_reported(short, complaint):
    with pytest.raises(SourceError, match=complaint):
        full_nbgrader_metadata(short, "lab.py, cell 3")


GOOD_CELLS = """# %%
import torch

# %% nbgrader={"solution": true, "grade_id": "answer"}
x = 1
"""


@pytest.mark.parametrize(
    "header, complaint",
    [
        # a missing brace: jupytext would keep the cell, quietly without its metadata
        ('# %% nbgrader={"grade": true, "grade_id": "check", "points": 1', "line 7: cannot read"),
        ('# %% nbgrader={"grade": true, "grade_id": "answer", "points": 1}', "lines 4, 7:.*twice"),
        ('# %% nbgrader={"grade": true, "grade_id": "check"}', "line 7:.*needs points"),
        ("# %% nbgrader=3", "line 7:.*JSON object"),
    ],
)
def test_a_broken_source_names_file_and_line(tmp_path, header, complaint):
    source = tmp_path / "lab99.py"
    source.write_text(GOOD_CELLS + "\n" + header + "\nassert x == 1\n")
    with pytest.raises(SourceError, match=complaint) as error:
        source_notebook("lab99", path=source)
    assert str(source) in str(error.value)


def test_a_good_source_builds(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(GOOD_CELLS)
    nb = source_notebook("good", path=good)
    assert [c.id for c in nb.cells] == ["top--1", "answer"]
    assert nb.cells[1].metadata["nbgrader"]["solution"] is True


def test_inserting_a_cell_renames_only_its_neighbours(tmp_path):
    """A plain cell is named after the nearest nbgrader cell above it: small release diffs."""
    ids = []
    for extra in ("", "# %%\nnew = 1\n\n"):
        source = tmp_path / "lab.py"
        source.write_text(extra + GOOD_CELLS + "\n# %%\nprint(x)\n\n# %%\nprint(x + 1)\n")
        ids.append([c.id for c in source_notebook("lab", path=source).cells])
    assert ids[0] == ["top--1", "answer", "answer--1", "answer--2"]
    assert ids[1] == ["top--1", "top--2", "answer", "answer--1", "answer--2"]


def test_changing_the_graded_cells_of_a_graded_lab_is_refused_in_plain_words(tmp_path, monkeypatch):
    """nbgrader keeps a lab's graded cells fixed once it has hand-ins: the build says so and
    what to do, not nbgrader's traceback."""
    import graders.build.build
    from graders.formats import gradebook

    source = tmp_path / "labx.py"
    monkeypatch.setattr(graders.build.build, "lab_source", lambda lab: source)
    source.write_text(GOOD_CELLS)
    graders.build.build.build(root=tmp_path, labs=["labx"], release=tmp_path / "labs")
    assert (tmp_path / "labs" / "labx" / "labx.ipynb").is_file()
    with gradebook.opened(gradebook.of(tmp_path)) as gb:
        gb.add_student("someone")
        gb.add_submission("labx", "someone")
    source.write_text(
        GOOD_CELLS + '\n# %% nbgrader={"grade": true, "grade_id": "check", "points": 1}\nassert x\n'
    )
    with pytest.raises(SystemExit) as refused:
        graders.build.build.build(root=tmp_path, labs=["labx"], release=tmp_path / "labs")
    said = str(refused.value)
    assert "labx adds or removes graded cells" in said and "make clean" in said, said
    assert "Traceback" not in said


def test_make_build_reports_a_bad_lab_in_one_line(capsys):
    assert main(["lab99", "--no-reference"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("make build: no such lab: lab99") and "Traceback" not in err


@pytest.mark.parametrize(
    "toml, complaint",
    [
        ("[complete]\nscore = ", "not valid TOML"),
        ("complete = 3\n", "should be a table"),
        ("[complete]\nscore = 3\nfil = ['a']\n", "knows no \\['fil'\\]"),
        (None, "is missing"),
    ],
)
def test_a_broken_demo_class_is_named(tmp_path, monkeypatch, toml, complaint):
    from graders.build import demo

    (tmp_path / "lab99").mkdir()
    if toml is not None:
        (tmp_path / "lab99" / "demo.toml").write_text(toml)
    monkeypatch.setattr(demo, "SOLUTIONS", tmp_path)
    with pytest.raises(SourceError, match=complaint) as error:
        demo.declared_class("lab99")
    assert str(tmp_path / "lab99" / "demo.toml") in str(error.value)


def shared_setup_names() -> set[str]:
    """What solutions/common/setup_cell.py defines at its top level: every lab has these."""
    tree = ast.parse((REPO / "solutions" / "common" / "setup_cell.py").read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


@pytest.mark.parametrize("lab", LABS)
def test_a_lab_uses_the_shared_helpers_and_does_not_redefine_them(lab):
    """attempt, defined, check, GRADING, draw...: once, in the setup cell, not again per lab
    (their copies drifted: messages cut at different lengths, GRADING with two meanings)."""
    shared = shared_setup_names() - {"IN_COLAB"}
    assert {"attempt", "defined", "check", "GRADING"} <= shared
    path = REPO / "solutions" / lab / f"{lab}.py"
    redefined = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in shared:
            redefined.append(f"line {node.lineno}: {node.name}")
        if isinstance(node, ast.Assign):
            redefined += [
                f"line {node.lineno}: {t.id} ="
                for t in node.targets
                if getattr(t, "id", None) in shared
            ]
    assert not redefined, f"{path.name} redefines the setup cell's {', '.join(redefined)}"
