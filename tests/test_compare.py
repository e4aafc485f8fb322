"""``compare.mismatch``: the one rule for comparing outputs."""

from __future__ import annotations

import torch

from pathweave.compare import mismatch


def test_absolute_tolerance_can_scale_with_the_output() -> None:
    want = torch.tensor([1e6, 0.5, -3.0])
    got = want + torch.tensor([0.0, 2.0, 0.0])  # 2.0 off on a value that came from numbers near 1e6
    assert mismatch([got], [want], 1e-3, 1e-4) == "output 0 differs by up to 2"
    assert mismatch([got], [want], 1e-3, 1e-5, scale_atol=True) is None  # 1e-5 * 1e6 = 10
    assert mismatch([got], [want], 1e-3, 1e-7, scale_atol=True) is not None  # 0.1 < 2


def test_shapes_and_nan() -> None:
    a = torch.tensor([1.0, float("nan")])
    assert mismatch([a], [a.clone()], 1e-3, 1e-4) is None
    assert mismatch([torch.tensor([1.0, 2.0])], [a], 1e-3, 1e-4) is not None
    assert "shape" in mismatch([torch.zeros(3)], [torch.zeros(2)], 1e-3, 1e-4)
    assert mismatch([torch.zeros(1)], [], 1e-3, 1e-4) == "1 outputs where 0 are expected"
