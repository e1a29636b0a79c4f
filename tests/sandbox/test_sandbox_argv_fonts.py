"""What every sandboxed kernel gets from the grader besides its notebook: matplotlib's font
list, read-only. Each kernel's configuration folder starts empty, and a matplotlib without a
font list scans the machine's fonts again (about a third of a second of every hand-in). The
list must be one the kernel cannot change (the next hand-in's kernel gets it too), and only
one whose fonts the kernel can see."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from graders.sandbox import sandbox, sandbox_argv, sandbox_kernel

pytestmark = pytest.mark.timeout(300)

HOSTILE = """
import hashlib, os, matplotlib
from matplotlib import font_manager
name = f"fontlist-v{font_manager.FontManager.__version__}.json"
path = os.path.join(matplotlib.get_cachedir(), name)
print("FONTS", len(font_manager.fontManager.ttflist))
print("SHA", hashlib.sha256(open(path, "rb").read()).hexdigest())
def overwrite(): open(path, "w").write('{"ttflist": []}')
def remove(): os.remove(path)
def rename(): os.rename(path, path + ".old")
def chmod(): os.chmod(path, 0o666)
for attempt in (overwrite, remove, rename, chmod):
    try:
        attempt()
        print("CHANGED", attempt.__name__)
    except OSError:
        print("REFUSED", attempt.__name__)
"""


def run_in_sandbox(source: str, tmp_path: Path) -> tuple[str, str]:
    """(stdout, stderr) of one cell run in a sandboxed kernel."""
    nb = new_notebook(cells=[new_code_cell(source)])
    client = NotebookClient(
        nb,
        timeout=120,
        allow_errors=True,
        kernel_manager_class=sandbox_kernel.SandboxKernelManager,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    streams = {"stdout": "", "stderr": ""}
    for output in nb.cells[0].outputs:
        if output.output_type == "stream":
            streams[output.name] += output.text
        elif output.output_type == "error":
            streams["stderr"] += f"{output.ename}: {output.evalue}"
    return streams["stdout"], streams["stderr"]


@pytest.mark.skipif(sandbox.available() is not None, reason="needs bubblewrap")
def test_the_kernel_reads_the_graders_font_list_and_cannot_change_it(tmp_path, monkeypatch):
    given = sandbox_argv.matplotlib_font_list()
    assert given is not None, "this machine's font list names only fonts the kernel sees"
    name, data = given
    import matplotlib

    graders_own = Path(matplotlib.get_cachedir()) / name
    before = graders_own.read_bytes()
    for _ in range(2):  # the second kernel gets the list whole, whatever the first one did
        out, err = run_in_sandbox(HOSTILE, tmp_path)
        assert f"SHA {hashlib.sha256(data).hexdigest()}" in out, (out, err)
        assert "FONTS 0" not in out and "FONTS" in out
        for attempt in ("overwrite", "remove", "rename", "chmod"):
            assert f"REFUSED {attempt}" in out, (out, err)
        # no rebuild (it would try to write the read-only list and log it), no warning
        assert "font" not in err.lower() and "cache" not in err.lower(), err
    assert graders_own.read_bytes() == before


def test_a_font_list_naming_a_font_the_kernel_cannot_see_is_not_given(tmp_path):
    def font_list(*fnames: str) -> Path:
        path = tmp_path / "fontlist.json"
        entries = [{"fname": f, "name": "X", "__class__": "FontEntry"} for f in fnames]
        path.write_text(json.dumps({"_version": "1", "ttflist": entries, "afmlist": []}))
        return path

    seen = font_list("fonts/ttf/DejaVuSans.ttf", "/usr/share/fonts/truetype/x.ttf")
    assert sandbox_argv.font_list_for_kernel(seen) == seen.read_bytes()
    for hidden in ("/root/.fonts/x.ttf", "/home/teacher/.local/share/fonts/x.ttf",
                   "/usr/../root/x.ttf", "/opt/fonts/x.ttf", "../../etc/x.ttf"):  # fmt: skip
        assert sandbox_argv.font_list_for_kernel(font_list("fonts/ttf/a.ttf", hidden)) is None, (
            hidden
        )
    (tmp_path / "broken.json").write_text("{not json")
    assert sandbox_argv.font_list_for_kernel(tmp_path / "broken.json") is None
    assert sandbox_argv.font_list_for_kernel(tmp_path / "missing.json") is None
    (tmp_path / "big.json").write_bytes(b" " * (sandbox_argv.FONT_LIST_MAX_BYTES + 1))
    assert sandbox_argv.font_list_for_kernel(tmp_path / "big.json") is None
