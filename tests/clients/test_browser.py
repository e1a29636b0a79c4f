"""A student's view, end to end: JupyterLab with nbgrader, in a real (headless) browser.

Starts `jupyter lab` on a copy of labs/, opens a lab in Debian's chromium through Playwright,
runs every cell, and checks that the graph picture is rendered and that nbgrader's Validate
button is on the toolbar; in lab01_graph, that the picture is in the very cell the text
promises it in. The instructor's view: the class report of a graded class, opened
from disk, with every chart rendered. Screenshots land in test-output/. Skipped, with one
line, only where no chromium can be had (`make browser` installs it where it can).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from helpers import OUTPUT_PX, free_port

from graders.build.build import source_notebook
from graders.build.demo import declared_class, student_notebook
from graders.config.course import REPO
from graders.report.report import build_report

LAB = "lab02_backprop"  # draws its graph with draw(out)
SCREENSHOT = REPO / "test-output" / f"{LAB}-jupyterlab.png"
# lab01_graph: the cell after this heading draws the saved-tensors picture the text explains
TORCHVIZ_LAB = "lab01_graph"
TORCHVIZ_HEADING = "### Reading a torchviz picture"
TORCHVIZ_CELL = "draw(out, params=params, show_saved=True, show_attrs=True)"
TORCHVIZ_SCREENSHOT = REPO / "test-output" / f"{TORCHVIZ_LAB}-torchviz-jupyterlab.png"
REPORT_SCREENSHOT = REPO / "test-output" / "class-report.png"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BLANK = "blank.ipynb"  # beside the filled-in lab: the release as handed out
SCREEN_PX = 1100  # the browser's window height: no output may be taller
STEP_MS = 120_000  # the longest any one step (page load, running all cells) may take

pytestmark = pytest.mark.timeout(480)
# a picture's text alternative, its natural width, and the width of the output area it is in
PICTURE_JS = """node => ({alt: node.alt, natural: node.naturalWidth,
  area: node.closest('.jp-OutputArea-output').clientWidth})"""
KERNEL_IDLE = (
    "window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'"
)
# every output of the open notebook as shown: its height, the lines of an error's text,
# each picture's rendered and natural width and the width of the output area it is in
OUTPUTS_JS = """() => {
  const found = [];
  for (const cell of window.jupyterapp.shell.currentWidget.content.widgets) {
    if (cell.model.type !== 'code') continue;
    const model = cell.outputArea.model;
    found.push({height: cell.outputArea.node.getBoundingClientRect().height, error: 0,
                area: 0, pictures: []});
    cell.outputArea.widgets.forEach((child, i) => {
      const node = child.node.querySelector('.jp-OutputArea-output') || child.node;
      found.push({height: 0, area: node.clientWidth,
        error: i < model.length && model.get(i).type === 'error'
          ? node.innerText.trim().split('\\n').length : 0,
        pictures: [...node.querySelectorAll('img, svg')]
          .filter(p => !p.parentElement.closest('svg'))
          .map(p => ({shown: p.getBoundingClientRect().width, natural: p.naturalWidth || 0}))});
    });
  }
  return found;
}"""
ERRORS_JS = """() => {
  const errors = [];
  for (const cell of window.jupyterapp.shell.currentWidget.content.model.cells) {
    if (cell.type !== 'code') continue;
    for (const out of cell.outputs.toJSON()) {
      if (out.output_type === 'error') errors.push(out.ename + ': ' + out.evalue);
    }
  }
  return errors;
}"""


def wait_for_server(url: str, server: subprocess.Popen, log: Path, limit_s: float = 90) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited ({server.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer in {limit_s} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def jupyterlab(request, tmp_path):
    """A JupyterLab server on a copy of a lab of labs/ (LAB, or the test's parameter), with
    its own config; stopped afterwards."""
    lab = getattr(request, "param", LAB)
    root = tmp_path / "labs"
    shutil.copytree(REPO / "labs" / lab, root / lab)
    # the release with every exercise answered, so that "run all" runs to the end
    release = nbformat.read(root / lab / f"{lab}.ipynb", as_version=4)
    (complete,) = [s for s in declared_class(lab) if s.name == "complete"]
    nbformat.write(
        student_notebook(complete, release, source_notebook(lab)), root / lab / f"{lab}.ipynb"
    )
    # the release as handed out, every exercise blank; "raises-exception" lets "run all" go
    # on past a failed check (JupyterLab then sends stop_on_error false), as a student does
    for cell in release.cells:
        if cell.cell_type == "code":
            cell.metadata.setdefault("tags", []).append("raises-exception")
    nbformat.write(release, root / lab / BLANK)
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    log = tmp_path / "jupyterlab.log"
    # render every cell (no windowing), so that the page holds every output to look at
    settings = tmp_path / "settings"
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text('{"windowingMode": "none"}')
    notices = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notices.parent.mkdir(parents=True)
    notices.write_text('{"fetchNews": "false"}')  # no "get Jupyter news?" over the screenshot
    argv = [
        str(Path(sys.executable).parent / "jupyter"),
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        f"--LabApp.user_settings_dir={settings}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run commands
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        *(["--allow-root"] if os.geteuid() == 0 else []),  # containers and CI run as root
    ]
    with open(log, "w") as out:
        server = subprocess.Popen(
            argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_server(f"{base}/api/status?token={token}", server, log)
        yield base, token, log
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)


def open_and_run_all(page, base: str, token: str, lab: str) -> None:
    """Open the lab in JupyterLab, check nbgrader's Validate button, run every cell and wait
    for the kernel; no cell may fail."""
    page.set_default_timeout(STEP_MS)
    page.goto(f"{base}/lab/tree/{lab}/{lab}.ipynb?token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    # the kernel is up and idle (JupyterLab's own session object says so)
    page.wait_for_function(f"() => {KERNEL_IDLE}")
    validate = page.locator(".jp-NotebookPanel-toolbar .validate-button")
    validate.wait_for(state="visible")
    assert validate.inner_text().strip() == "Validate"
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # every code cell has run (or one failed, which stops "run all"), the kernel idle
    page.wait_for_function(
        f"""() => {{
          const cells = [...window.jupyterapp.shell.currentWidget.content.model.cells]
            .filter(c => c.type === 'code');
          const failed = cells.some(
            c => c.outputs.toJSON().some(o => o.output_type === 'error'));
          return {KERNEL_IDLE} && (failed || cells.every(c => c.executionCount));
        }}"""
    )
    errors = page.evaluate(ERRORS_JS)
    assert not errors, f"cells failed in JupyterLab: {errors[:3]}"


def shown_problems(page, what: str) -> list[str]:
    """What the open notebook shows that it should not, measured in the page: an error of
    more than one line, an output taller than the window, a picture wider than its area."""
    found = []
    for n, out in enumerate(page.evaluate(OUTPUTS_JS)):
        if out["error"] > 1:
            found.append(f"{what}: output {n} is an error of {out['error']} lines")
        if out["height"] > SCREEN_PX:
            found.append(f"{what}: a cell's outputs are {out['height']:.0f} px tall")
        for picture in out["pictures"]:
            if max(picture["shown"], picture["natural"]) > out["area"] + 1:
                found.append(f"{what}: output {n} has a picture {picture} in {out['area']} px")
    return found


def run_blank(page, lab: str) -> int:
    """Open the blank copy of the lab, run every cell (past failed checks), wait for the
    kernel; the number of error outputs."""
    path = f"{lab}/{BLANK}"  # opened beside the filled-in lab, in the same page
    opened = f"window.jupyterapp.commands.execute('docmanager:open', {{path: '{path}'}})"
    page.evaluate(f"async () => {{ await {opened}; }}")
    page.wait_for_function(
        f"() => window.jupyterapp.shell.currentWidget?.context?.path === '{path}'"
    )
    page.wait_for_function(f"() => {KERNEL_IDLE}")
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        f"""() => {{
          const cells = [...window.jupyterapp.shell.currentWidget.content.model.cells]
            .filter(c => c.type === 'code');
          return {KERNEL_IDLE} && cells.every(c => c.executionCount);
        }}"""
    )
    return len(page.evaluate(ERRORS_JS))


def browser_page(playwright):
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_MS
    )
    return browser, browser.new_page(viewport={"width": 1400, "height": 1100})


@pytest.mark.slow
def test_a_lab_runs_in_jupyterlab_with_nbgrader(jupyterlab):
    if CHROMIUM is None:
        pytest.skip("no chromium to drive: `make browser` or `sudo apt-get install chromium`")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    base, token, log = jupyterlab
    SCREENSHOT.parent.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser, page = browser_page(playwright)
        try:
            open_and_run_all(page, base, token, LAB)
            graph = page.locator(".jp-OutputArea-output img").first
            graph.wait_for(state="visible")
            graph.scroll_into_view_if_needed()
            box = graph.bounding_box()
            assert box and box["width"] > 50 and box["height"] > 50, f"graph picture is {box}"
            seen = graph.evaluate(PICTURE_JS)
            # the output area is at least as wide as tests/helpers.py's OUTPUT_PX, which the
            # executed labs' pictures are held to; each picture is shown at its own size
            assert seen["area"] >= OUTPUT_PX, seen
            assert seen["alt"] and seen["natural"] <= seen["area"], seen
            # the setup cell is collapsed: JupyterLab shows its first line, which says what it does
            placeholder = page.locator(".jp-Notebook .jp-CodeCell").first.locator(
                ".jp-InputPlaceholder"
            )
            assert placeholder.is_visible(), "the setup cell is not collapsed"
            assert "@title Setup" in placeholder.inner_text()
            page.screenshot(path=str(SCREENSHOT))
            shown = shown_problems(page, f"{LAB} filled in")
            # the same release, every exercise blank: each check says one sentence
            failed = run_blank(page, LAB)
            assert failed >= 3, f"{LAB} blank: only {failed} cells failed; were the checks run?"
            shown += shown_problems(page, f"{LAB} blank")
            assert not shown, "\n".join(shown)
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size > 10_000


# the code cell after the markdown cell that starts with the heading, marked for a locator
FIND_CELL_JS = """([heading]) => {
  const widgets = [...window.jupyterapp.shell.currentWidget.content.widgets];
  const at = widgets.findIndex(w => w.model.type === 'markdown'
    && w.model.sharedModel.getSource().startsWith(heading));
  if (at < 0 || at + 1 >= widgets.length) return null;
  const cell = widgets[at + 1];
  cell.node.setAttribute('data-course-test', 'promised-picture');
  cell.node.scrollIntoView({block: 'start'});
  return {type: cell.model.type, source: cell.model.sharedModel.getSource(),
          mimes: cell.model.type === 'code'
            ? cell.model.outputs.toJSON().flatMap(o => Object.keys(o.data || {})) : []};
}"""


@pytest.mark.parametrize("jupyterlab", [TORCHVIZ_LAB], indirect=True)
@pytest.mark.slow
def test_lab01_shows_the_torchviz_picture_in_the_cell_that_promises_it(jupyterlab):
    """After "Reading a torchviz picture" (which explains the colours of the boxes), the cell
    `draw(out, params=params, show_saved=True, show_attrs=True)` shows the picture itself."""
    if CHROMIUM is None:
        pytest.skip("no chromium to drive: `make browser` or `sudo apt-get install chromium`")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    base, token, log = jupyterlab
    TORCHVIZ_SCREENSHOT.parent.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser, page = browser_page(playwright)
        try:
            open_and_run_all(page, base, token, TORCHVIZ_LAB)
            found = page.evaluate(FIND_CELL_JS, [TORCHVIZ_HEADING])
            assert found, f"labs/{TORCHVIZ_LAB}: no cell after {TORCHVIZ_HEADING!r}"
            assert (found["type"], found["source"]) == ("code", TORCHVIZ_CELL), found
            assert "image/svg+xml" in found["mimes"], f"its outputs: {found['mimes']}"
            cell = '[data-course-test="promised-picture"] .jp-OutputArea-output'
            picture = page.locator(f"{cell} img, {cell} svg").first
            picture.wait_for(state="visible")
            if picture.evaluate("node => node.tagName") == "IMG":  # decoded, not a broken image
                page.wait_for_function(
                    "node => node.complete && node.naturalWidth > 0", arg=picture.element_handle()
                )
            box = picture.bounding_box()
            assert box and box["width"] > 200 and box["height"] > 200, f"the picture is {box}"
            page.screenshot(path=str(TORCHVIZ_SCREENSHOT))
        finally:
            browser.close()
    assert TORCHVIZ_SCREENSHOT.stat().st_size > 10_000


def text_overflows(svg: str) -> list[str]:
    """The nodes of a Graphviz SVG whose longest line of monospace text (0.6 em a character)
    is wider than the node's box: text that spills out of its box, over its neighbours."""
    import xml.etree.ElementTree as ET

    ns = {"svg": "http://www.w3.org/2000/svg"}
    spilled = []
    for node in ET.fromstring(svg).iter(f"{{{ns['svg']}}}g"):
        if node.get("class") != "node":
            continue
        box = node.find("svg:polygon", ns)
        texts = node.findall("svg:text", ns)
        if box is None or not texts:
            continue
        xs = [float(p.split(",")[0]) for p in box.get("points").split()]
        need = max(0.6 * float(t.get("font-size")) * len(t.text or "") for t in texts)
        if need > max(xs) - min(xs) + 1:
            spilled.append(f"{texts[0].text!r}: text {need:.0f} wide, box {max(xs) - min(xs):.0f}")
    return spilled


def test_graphviz_pure_boxes_hold_their_text():
    """The lab01 picture drawn with graphviz-pure, as on a laptop without Graphviz: every
    line of every box fits in the box."""
    setup = REPO / "solutions" / "common" / "setup_cell.py"
    namespace: dict = {"__name__": "__main__"}
    exec(compile(setup.read_text(), str(setup), "exec"), namespace)
    programs = namespace["_dot_programs"]()
    if not programs or Path(programs[0]).name != "graphviz-pure":
        pytest.skip(f"draw() uses {programs[:1] or 'no dot'}, not graphviz-pure")
    import torch

    Wh = torch.randn(3, 3, requires_grad=True)
    Wx = torch.randn(3, 2, requires_grad=True)
    out = (Wx @ torch.randn(2, 1) + Wh @ torch.randn(3, 1)).tanh().sum()
    picture = namespace["draw"](
        out, params={"Wh": Wh, "Wx": Wx}, show_saved=True, show_attrs=True
    )  # fmt: skip
    assert picture is not None
    assert text_overflows(picture.svg) == []


@pytest.mark.skipif(  # before the fixture grades a class for nothing
    CHROMIUM is None,
    reason="no chromium to drive: `make browser` or `sudo apt-get install chromium`",
)
@pytest.mark.slow
def test_the_class_report_renders_in_chromium(report_course):
    """report/index.html of a graded class (tests/test_report.py's), opened from disk: every
    lab's charts and the grading-time chart are decoded images, and each has its numbers."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    from helpers import REPORT_LABS as LABS

    built = build_report(report_course)
    REPORT_SCREENSHOT.parent.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_MS
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(STEP_MS)
            page.goto(built.index.as_uri())
            page.wait_for_function("() => [...document.images].every(img => img.complete)")
            images = page.evaluate(
                """() => [...document.querySelectorAll('figure img')].map(img => ({
                  section: [...document.querySelectorAll('h2')]  // the h2 above the chart
                    .filter(h => h.compareDocumentPosition(img) & Node.DOCUMENT_POSITION_FOLLOWING)
                    .pop().id,
                  width: img.naturalWidth, height: img.naturalHeight, alt: img.alt }))"""
            )
            assert images and all(i["width"] > 0 and i["height"] > 0 for i in images), images
            charts = Counter(i["section"] for i in images)
            for lab in LABS:
                assert charts[f"lab-{lab}"] == 2, charts  # scores and pass rates
            assert charts["time"] == 1, charts
            assert all(i["alt"] for i in images)
            page.screenshot(path=str(REPORT_SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert REPORT_SCREENSHOT.stat().st_size > 10_000
