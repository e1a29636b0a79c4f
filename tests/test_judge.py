"""The independent check: records compare by name, order and value, with the reference's
tolerances; anything the student adds, drops or changes is caught."""

import numpy as np
import torch

from graders.judge import compare
from graders.kernel.grader_observe import encode


def record(name, value, rtol=1e-5, atol=1e-8):
    return {"name": name, "value": encode(value), "rtol": rtol, "atol": atol}


def test_encode_handles_tensors_numpy_and_containers():
    got = encode({"t": torch.tensor([[1.0, 2.0]]), "a": np.arange(3), "s": np.float64(0.5)})
    assert got == {
        "t": {"tensor": [[1.0, 2.0]], "shape": [1, 2], "dtype": "torch.float32"},
        "a": [0, 1, 2],
        "s": 0.5,
    }
    assert encode(float("nan")) == "nan"


def test_equal_records_pass_and_tolerances_come_from_the_reference():
    ref = [record("g", torch.tensor([1.0, 2.0]), atol=1e-6)]
    assert compare(ref, [record("g", torch.tensor([1.0, 2.0 + 1e-7]))]) is None
    # the student's record asks for a huge tolerance: ignored
    assert compare(ref, [record("g", torch.tensor([1.0, 2.1]), rtol=1e9, atol=1e9)])


def test_differences_are_caught_without_revealing_values():
    ref = [record("a", 1), record("b", [True, "x"])]
    assert "stopped before" in compare(ref, [record("a", 1)])
    assert "extra" in compare(ref, [*[record("a", 1), record("b", [True, "x"])], record("c", 0)])
    assert "'b'" in compare(ref, [record("a", 1), record("b", [True, "y"])])
    assert "expected a record of 'a'" in compare(ref, [record("b", [True, "x"]), record("a", 1)])
    shape = compare([record("t", torch.zeros(2))], [record("t", torch.zeros(1, 2))])
    assert shape and "0" not in shape  # names only, no values
    assert compare([record("n", 1)], [record("n", True)])  # a bool is not a number


def test_the_reference_is_made_again_when_the_recorder_changes(tmp_path, monkeypatch):
    """The cached reference is stale when graders/kernel/ changes (how values are recorded)."""
    import graders.sandbox
    from graders import judge

    kernel = tmp_path / "kernel"
    kernel.mkdir()
    (kernel / "grader_observe.py").write_text("# version 1\n")
    monkeypatch.setattr(graders.sandbox, "KERNEL_SIDE", kernel)
    runs = []
    monkeypatch.setattr(
        judge, "reference_observations", lambda solution, threads: runs.append(1) or {"t": []}
    )
    solution, cache = tmp_path / "lab.ipynb", tmp_path / "reference" / "lab.json"
    solution.write_text("{}")
    for _ in range(2):
        assert judge.cached_reference(solution, cache) == {"t": []}
    assert len(runs) == 1
    (kernel / "grader_observe.py").write_text("# version 2\n")
    judge.cached_reference(solution, cache)
    assert len(runs) == 2
