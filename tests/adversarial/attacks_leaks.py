"""Attacks that leak (tests/adversarial/test_leaks.py): code a hostile hand-in runs to carry the
hidden tests' code out, through hooks, the input history or the judge's own sentence."""

from __future__ import annotations

# 3. Hidden code printed into the outputs: every cell's source from event hooks (into the
# test cells), and from an answer cell, the sources run so far, as text, HTML and a record.
LEAK_HOOKS = """
_ip = get_ipython()
_ip.events.register("pre_run_cell", lambda info: print("BEFORE", info.raw_cell))
_ip.events.register("post_run_cell", lambda result: print("AFTER", result.info.raw_cell))
"""

LEAK_HISTORY = """
from IPython.display import HTML, display

_ran = "\\n".join(In)
print("HISTORY", _ran)
display(HTML("<pre>" + _ran + "</pre>"))
_mime = "application/vnd.dyngraph." + "observation+json"  # not in this cell's own text
display({_mime: {"name": _ran, "value": 0, "rtol": 0, "atol": 0}}, raw=True)
get_ipython().set_next_input(_ran, replace=True)
"""

# 3b. Hidden code carried by the judge's own sentence: a hook keeps the names of the
# records of test_backward_twice, clears them, and records under the first name a tensor
# whose dtype is the hidden code (its shape is the visible check's, a scalar's). The judge
# quotes the dtype it got ("has dtype ..., not the dtype the solution gives").
LEAK_THROUGH_THE_JUDGE = """
import grader_observe as _observe_module
from IPython.display import clear_output
from IPython.display import display as _display

_names = []


def _note_names(*objs, **kwargs):
    for obj in objs:
        if isinstance(obj, dict) and _observe_module.MIME in obj:
            _names.append(obj[_observe_module.MIME]["name"])
    return _display(*objs, **kwargs)


def _leak(result):
    source = result.info.raw_cell or ""
    if source.startswith("_w = torch.tensor(2.0") and "BEGIN HIDDEN" in source and _names:
        hidden = source[source.index("BEGIN HIDDEN") :][:9000]
        value = {"tensor": 0.0, "shape": [], "dtype": hidden}
        clear_output()
        _display(
            {_observe_module.MIME: {"name": _names[0], "value": value, "rtol": 0, "atol": 0}},
            raw=True,
        )
    _names.clear()


_observe_module.display = _note_names
get_ipython().events.register("post_run_cell", _leak)
"""
