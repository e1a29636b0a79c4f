"""What the kernel side records (graders/kernel/grader_observe.py): tensors, numpy values and
containers become JSON the judge can read."""

import numpy as np
import torch

from graders.kernel.grader_observe import encode


def test_encode_handles_tensors_numpy_and_containers():
    got = encode({"t": torch.tensor([[1.0, 2.0]]), "a": np.arange(3), "s": np.float64(0.5)})
    assert got == {
        "t": {"tensor": [[1.0, 2.0]], "shape": [1, 2], "dtype": "torch.float32"},
        "a": [0, 1, 2],
        "s": 0.5,
    }
    assert encode(float("nan")) == "nan"
