"""The labs work where students are: outside this repository, without Graphviz, from Colab.

* every release notebook, its exercises filled from the solution, runs top to bottom in a
  folder outside the repository, in a sandboxed kernel that cannot see the repository, and,
  as released, says in one sentence per check what is left to do (both read from the graded
  class's complete and blank students, tests/conftest.py's `graded`);
* `draw` (the shared setup cell, solutions/common/setup_cell.py) gives a picture with Graphviz's
  `dot` or graphviz-pure, and a text drawing without them, never a traceback;
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from helpers import errors, student_view_problems

from graders.build.build import source_notebook
from graders.config.course import LABS, REPO, SOLUTIONS
from graders.sandbox import sandbox, sandbox_argv, sandbox_kernel

SETUP_CELL = SOLUTIONS / "common" / "setup_cell.py"
LAB_BUDGET_S = 120  # the longest one cell may take


def setup_namespace() -> dict:
    """The names the shared setup code defines, as a notebook's setup cell would."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(SETUP_CELL.read_text(), str(SETUP_CELL), "exec"), namespace)
    return namespace


def small_graph():
    W = torch.randn(3, 3, requires_grad=True)
    x = torch.randn(3, requires_grad=True)
    return (W @ x).tanh().sum(), {"W": W}


# ---- the shared setup cell ------------------------------------------------------------------


@pytest.mark.parametrize("lab", LABS)
def test_every_lab_starts_with_the_shared_setup(lab):
    text = (SOLUTIONS / lab / f"{lab}.py").read_text()
    setup = text.split('"grade_id": "setup"}', 1)[-1].split("\n# %%", 1)[0]
    assert "# %course-setup" in setup, (
        f"solutions/{lab}: the setup cell should start with '# %course-setup' "
        "(the build puts solutions/common/setup_cell.py there)"
    )
    assert "def draw(" not in setup, f"solutions/{lab}: draw() belongs in the shared setup"


LAB_LINES = 1300  # a lab's text source stays under this (issue 51): an afternoon's work


def test_every_lab_stays_under_its_length_limit():
    long = {}
    for lab in LABS:
        lines = (SOLUTIONS / lab / f"{lab}.py").read_text(encoding="utf-8").count("\n")
        if lines >= LAB_LINES:
            long[lab] = lines
    assert not long, f"labs of {LAB_LINES} source lines or more (tighten them): {long}"


@pytest.mark.parametrize("lab", LABS)
def test_build_expands_the_shared_setup(lab):
    setup = next(c for c in source_notebook(lab).cells if c.get("id") == "setup")
    assert "%course-setup" not in setup.source
    assert SETUP_CELL.read_text().strip() in setup.source


def test_draw_makes_a_picture_with_a_dot_program():
    programs = setup_namespace()["_dot_programs"]()
    assert programs, "neither Graphviz's dot nor graphviz-pure is installed (pip install -e .)"
    out, params = small_graph()
    picture = setup_namespace()["draw"](out, params=params)
    assert picture is not None, "draw() fell back to text although a dot program exists"
    svg = picture._repr_svg_()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "TanhBackward0" in svg and ">W" in svg  # a node and the named leaf


def branches(k):
    """A graph of k parallel sin(x * j) branches, 2k + 3 nodes side by side."""
    x = torch.ones(3, requires_grad=True)
    return sum((x * j).sin() for j in range(k))


def test_a_big_graph_is_drawn_no_wider_than_the_output_area_with_a_text_alternative():
    """draw() of a graph somewhat wider than the output area (Graphviz's natural size): the
    picture is at most WIDEST_PT wide, still readable (shrunk no more than SMALLEST_SCALE),
    its HTML form an <img> whose alt says what the graph holds."""
    namespace = setup_namespace()
    if not namespace["_dot_programs"]():
        pytest.skip("no dot program (pip install -e .)")
    picture = namespace["draw"](branches(7))
    width = float(re.search(r'<svg width="([0-9.]+)pt"', picture.svg).group(1))
    assert width <= namespace["WIDEST_PT"]
    assert svg_scale(picture.svg) >= namespace["SMALLEST_SCALE"], svg_scale(picture.svg)
    page = picture._repr_html_()
    assert page.startswith('<img alt="the autograd graph: ') and "7 SinBackward0" in page


def test_a_graph_too_big_to_read_in_the_output_area_says_so_in_one_line(capsys):
    """draw() of 50 branches (Graphviz's natural size about nine output areas wide): no picture
    shrunk to unreadable labels (the old draw() gave one, at a ninth of its size), one line
    that says what the graph holds and to draw a smaller part."""
    namespace = setup_namespace()
    if not namespace["_dot_programs"]():
        pytest.skip("no dot program (pip install -e .)")
    picture = namespace["draw"](branches(50))
    assert picture is None, f"a picture at {svg_scale(picture.svg):.2f} of its size"
    printed = capsys.readouterr().out.strip()
    assert printed.count("\n") == 0 and "50 SinBackward0" in printed, printed
    assert "too big a graph to read" in printed and "smaller part" in printed, printed


def test_calls_of_draws_each_call_of_a_module_as_one_box():
    """A module called five times in one graph (lab 7's cell at each node of a tree): with
    `calls=`, each call is one box naming how many operations it stands for, and the
    module's weight is one leaf that feeds all five boxes."""
    namespace = setup_namespace()
    if not namespace["_dot_programs"]():
        pytest.skip("no dot program (pip install -e .)")
    cell = torch.nn.Linear(4, 4)
    with namespace["calls_of"](cell) as calls:
        h = torch.ones(1, 4)
        for _ in range(5):
            h = cell(h).tanh() * 2
    picture = namespace["draw"](h.sum(), params=dict(cell.named_parameters()), calls=calls)
    assert picture is not None
    source = picture.source
    assert [f"cell call {n}" in source for n in range(1, 7)] == [True] * 5 + [False], source
    assert source.count("(2 operations)") == 5, source  # t() of the weight, then addmm
    weight = re.search(r'(\S+) \[label="weight\\n\(4, 4\)"', source).group(1)
    assert sorted(re.findall(rf"{weight} -> (\S+)", source)) == [f"call{n}" for n in range(1, 6)]
    assert "MulBackward0" in source and "TanhBackward0" in source  # between the calls
    assert "drawn with each of the 5 calls of the cell as one box" in picture.alt
    assert svg_scale(picture.svg) >= namespace["SMALLEST_SCALE"]


SMALLEST_SCALE = 0.6  # the setup cell's: shrunk more, a graph's labels are under 11 px


def unreadable_pictures(nb) -> list[str]:
    """The graph pictures of an executed notebook shrunk to fit the output area so far that
    their labels cannot be read (lab 7's tree graph was drawn at 0.38 of its size)."""
    found = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            inline = re.search(
                r'src="data:image/svg\+xml;base64,([^"]+)"', data.get("text/html", "")
            )
            svg = (
                base64.b64decode(inline.group(1)).decode() if inline else data.get("image/svg+xml")
            )
            if svg and "viewBox" in svg and svg_scale(svg) < SMALLEST_SCALE:
                found.append(
                    f"cell {cell.get('id')!r}: a graph drawn at {svg_scale(svg):.2f} of its size"
                )
    return found


def svg_scale(svg: str) -> float:
    """How much a Graphviz SVG is shrunk: its drawn width over its natural width (viewBox)."""
    width = float(re.search(r'<svg width="([0-9.]+)pt"', svg).group(1))
    natural = float(re.search(r'viewBox="[0-9.-]+ [0-9.-]+ ([0-9.]+)', svg).group(1))
    return width / natural


def test_a_dot_on_path_comes_first(tmp_path, monkeypatch):
    """Graphviz's own `dot` (here: a stand-in on PATH) is preferred to graphviz-pure."""
    pure = shutil.which("graphviz-pure", path=os.path.dirname(sys.executable))
    if pure is None:
        pytest.skip("graphviz-pure is not installed beside this Python")
    (tmp_path / "dot").symlink_to(pure)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    namespace = setup_namespace()
    assert namespace["_dot_programs"]()[0] == str(tmp_path / "dot")
    assert namespace["draw"](small_graph()[0]) is not None


def no_dot_anywhere(tmp_path, monkeypatch):
    """PATH without any dot program, and a Python whose folder holds none either."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "executable", str(empty / "python"))


def test_without_a_dot_program_draw_prints_the_graph_as_text(tmp_path, monkeypatch, capsys):
    no_dot_anywhere(tmp_path, monkeypatch)
    namespace = setup_namespace()
    assert namespace["_dot_programs"]() == []
    out, params = small_graph()
    assert namespace["draw"](out, params=params) is None
    text = capsys.readouterr().out
    assert "[1] SumBackward0 <- [2]" in text
    assert "TanhBackward0" in text and "MvBackward0" in text
    assert "AccumulateGrad (leaf W (3, 3))" in text
    assert "pip install graphviz-pure" in text  # the one line on how to get pictures
    assert "Traceback" not in text


def test_a_broken_dot_program_falls_back_to_text(tmp_path, monkeypatch, capsys):
    no_dot_anywhere(tmp_path, monkeypatch)
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "dot").write_text("#!/bin/sh\necho 'dot: cannot load plugins' >&2\nexit 1\n")
    (broken / "dot").chmod(0o755)
    monkeypatch.setenv("PATH", str(broken))
    namespace = setup_namespace()
    assert namespace["_dot_programs"]() == [str(broken / "dot")]
    assert namespace["draw"](small_graph()[0]) is None
    assert "[1] SumBackward0" in capsys.readouterr().out


def test_without_torchviz_draw_prints_the_graph_as_text(monkeypatch, capsys):
    namespace = setup_namespace()
    monkeypatch.setitem(sys.modules, "torchviz", None)  # `import torchviz` now fails
    assert namespace["draw"](small_graph()[0]) is None
    text = capsys.readouterr().out
    assert "[1] SumBackward0" in text and "pip install torchviz" in text


def test_draw_of_a_leaf_and_of_odd_input_never_raises(tmp_path, monkeypatch, capsys):
    no_dot_anywhere(tmp_path, monkeypatch)
    draw = setup_namespace()["draw"]
    assert draw(torch.ones(2, requires_grad=True)) is None
    assert draw("not a tensor") is None
    text = capsys.readouterr().out
    assert "no grad_fn" in text and "Traceback" not in text


def test_text_drawing_is_cut_short_for_big_graphs():
    namespace = setup_namespace()
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(100):
        y = y * 1.01
    text = namespace["graph_text"](y)
    assert "more nodes" in text and len(text.splitlines()) < 50


def test_setup_installs_only_what_is_missing():
    calls = []

    class Recorder:
        @staticmethod
        def run(argv, **kwargs):
            calls.append(argv)

    namespace = setup_namespace()
    namespace["subprocess"] = Recorder  # what install_missing runs pip with
    namespace["install_missing"]("torch", "tqdm")
    assert calls == []
    namespace["install_missing"]("torch", "no_such_package_for_this_test")
    assert len(calls) == 1 and calls[0][:4] == [sys.executable, "-m", "pip", "install"]
    assert calls[0][-1] == "no_such_package_for_this_test" and "torch" not in calls[0]


def test_a_demo_that_runs_a_wrong_answer_says_one_sentence():
    """`your_code` (the setup cell) around a demo's call of an answer: the answer's error is
    one sentence naming the answer and the error's first line; an exercise not done yet and a
    failed check go through as they are."""
    namespace = setup_namespace()
    your_code, answer_failed = namespace["your_code"], namespace["AnswerFailed"]
    with pytest.raises(answer_failed) as raised, your_code("hvp"):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\n(a second line)")
    (shown,) = raised.value._render_traceback_()
    assert shown.startswith(
        "AnswerFailed: this demo stopped at an error while it ran your `hvp` (RuntimeError: "
        "mat1 and mat2 shapes cannot be multiplied): its check above says what to fix"
    )
    for passing in (NotImplementedError("Exercise 2"), namespace["CheckFailed"]("a check")):
        with pytest.raises(type(passing)), your_code("hvp"):
            raise passing
    with your_code("hvp"):
        pass


class OldShell:
    """What the setup cell meets in IPython 5 to 7, older than ours as Colab's is:
    set_custom_exc and `_render_traceback_` as today (read in 5.5.0's and 7.34.0's
    interactiveshell.py), but no
    compile._filename_map (new in IPython 8.0): a cell's code is named <ipython-input-N-hash>
    by IPython's compiler, or /tmp/ipykernel_<pid>/<hash>.py by ipykernel 6's."""

    class compile:
        pass

    class InteractiveTB:
        @staticmethod
        def structured_traceback(etype, value, tb, tb_offset=None):
            return ["-" * 75, "a whole traceback", "..."] * 10

    def __init__(self):
        self.shown = []

    def _showtraceback(self, etype, value, stb):
        self.shown.append(stb)


@pytest.mark.parametrize(
    ("cell_file", "where"),
    [("<ipython-input-7-2b1f0e1a9c3d>", "Cell In[7], line 2"), (None, "line 2 of a cell")],
)
def test_on_ipython_7_a_blank_exercise_and_a_failed_check_say_one_sentence(
    cell_file, where, monkeypatch, tmp_path
):
    import IPython

    cell_file = cell_file or str(tmp_path / "ipykernel_4242" / "3160684747.py")
    shell = OldShell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    namespace = setup_namespace()
    exercise = "def answer(x):\n    raise NotImplementedError('Exercise 1: write answer')\n"
    exec(compile(exercise, cell_file, "exec"), namespace)
    with pytest.raises(NotImplementedError) as raised:
        namespace["answer"](1)
    namespace["_not_done_yet"](shell, raised.type, raised.value, raised.tb)
    assert shell.shown == [
        [
            f"NotImplementedError: `answer` is not written yet ({where}: Exercise 1: write "
            "answer) Write it in its exercise cell and run that cell, then this one."
        ]
    ]
    with pytest.raises(AssertionError) as raised:
        exec(compile("\ncheck(False, 'the gradient should be 3')", cell_file, "exec"), namespace)
    shown = raised.value._render_traceback_()
    assert shown == [f"CheckFailed: the gradient should be 3 ({where})"]


def test_check_says_what_is_wrong():
    namespace = setup_namespace()
    namespace["check"](True, "never shown")
    with pytest.raises(AssertionError, match="expected 3, got 4: the gradient accumulated"):
        namespace["check"](False, "expected 3, got 4: the gradient accumulated")
    assert issubclass(namespace["CheckFailed"], AssertionError)


@pytest.mark.parametrize("lab", LABS)
def test_visible_checks_explain_themselves(lab):
    """A student's checks (the release's test cells) use check(), never a bare assert."""
    release = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", as_version=4)
    tests = [c for c in release.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert tests, f"{lab} has no test cell"
    for cell in tests:
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        bare = [line for line in cell.source.splitlines() if re.match(r"\s*assert\b", line)]
        assert not bare, f"{lab}/{grade_id}: use check(condition, message), not {bare[0]!r}"
        assert "check(" in cell.source, f"{lab}/{grade_id}: a visible check calls check()"


# ---- every release notebook, filled in, outside the repository ------------------------------


def execute_outside(nb, workdir: Path, scratch: Path) -> None:
    """Run `nb` in the grading sandbox, like the grader: the repository and every course
    variable out of sight, the lab's release folder (`workdir`) the kernel's only files."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    scratch.mkdir(parents=True)
    (scratch / "runtime").mkdir()
    sandbox_kernel.write_kernelspec(scratch / "jupyter")
    specs = KernelSpecManager(kernel_dirs=[str(scratch / "jupyter" / "kernels")])
    files = [str(p) for p in workdir.iterdir() if p.suffix != ".ipynb"]
    km = sandbox_kernel.SandboxKernelManager(
        kernel_name="python3",
        kernel_spec_manager=specs,
        sandbox={
            "runtime": str(scratch / "runtime"),
            "threads": 1,
            "files": [str(p) for p in files],
        },
    )
    # The sandbox's environment is a student machine's (no course variables); it sets
    # NBGRADER_EXECUTION, so the labs train for less (a full run of every lab takes over
    # 6 minutes here); what is tested is what the notebook needs.
    client = NotebookClient(nb, km=km, timeout=LAB_BUDGET_S, allow_errors=True)
    try:
        client.execute()
    finally:  # the client does not stop a kernel it was handed
        run_sync(km.shutdown_kernel)(now=True)


def needs_sandbox():
    why_not = sandbox.available()
    if why_not:
        pytest.skip(f"no sandbox to hide the repository: {why_not}")


def test_the_outside_kernel_cannot_see_the_repository(tmp_path):
    """What the test below relies on: a notebook that needs the repository fails there."""
    needs_sandbox()
    workdir = tmp_path / "student"
    workdir.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import graders"),
        nbformat.v4.new_code_cell(f"open({str(REPO / 'README.md')!r}).read()"),
        nbformat.v4.new_code_cell("import os; print(os.getcwd())"),
    ]
    execute_outside(nb, workdir, tmp_path / "scratch")
    problems = errors(nb)
    assert len(problems) == 2, problems
    assert "ModuleNotFoundError" in problems[0] and "FileNotFoundError" in problems[1]
    assert nb.cells[2].outputs[0]["text"].strip() == sandbox_argv.WORKDIR


def graded_notebook(course: Path, student: str, lab: str):
    """The notebook of demo student `student` (complete: every exercise filled in from the
    solution; blank: the release as handed out) as the graded class ran it (tests/conftest.py,
    `graded`): in the grading sandbox, the repository and every course variable out of sight
    (the test above), the lab's released files the kernel's only files, top to bottom."""
    return nbformat.read(course / "autograded" / student / lab / f"{lab}.ipynb", as_version=4)


@pytest.mark.parametrize("lab", LABS)
def test_release_runs_outside_the_repository(lab, course, graded):
    """Read from the graded class's run of the complete student: it ran the release filled in
    from the solution, which is what this test ran by itself before (11 labs, about 80 s)."""
    assert REPO not in course.parents
    nb = graded_notebook(course, "complete", lab)
    problems = errors(nb)
    assert not problems, f"{lab}, filled in, fails outside the repository:\n" + "\n".join(problems)
    shown = student_view_problems(nb) + unreadable_pictures(nb)
    assert not shown, f"{lab}, filled in, shows a student too much:\n" + "\n".join(shown)
    if lab in {"lab01_graph", "lab02_backprop"}:
        pictures = [
            o
            for c in nb.cells
            for o in c.get("outputs", [])
            if "image/svg+xml" in o.get("data", {})
        ]
        assert pictures, (
            f"{lab} draws graphs, but no picture came out (is graphviz-pure installed?)"
        )


@pytest.mark.parametrize("lab", LABS)
def test_a_blank_release_says_one_sentence_where_work_is_left(lab, course, graded):
    """The release as handed out, every exercise blank, run top to bottom (the graded class's
    blank student): each check (and each cell that needs an exercise) says in one line what is
    not done yet, never a traceback; no output longer than a screen, no picture wider than the
    output area."""
    nb = graded_notebook(course, "blank", lab)
    checks = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    failed = [c for c in checks if any(o.output_type == "error" for o in c.outputs)]
    assert failed, f"{lab}: no check failed on the blank release: were the exercises run?"
    shown = student_view_problems(nb) + unreadable_pictures(nb)
    assert not shown, f"{lab}, as released, shows a student too much:\n" + "\n".join(shown)
