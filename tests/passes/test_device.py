"""Moving a captured graph to another device: node-named devices are rewritten ("meta" stands in for CUDA)."""

from __future__ import annotations

import pytest
import torch

import pathweave
from pathweave.errors import PlanError
from pathweave.passes import device


class _Positions(torch.nn.Module):
    """Makes a tensor on the input's device, which capture writes down as ``device=cpu``."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[-1], device=x.device)
        return x.unsqueeze(-1) * self.emb(pos)


def test_named_devices_are_moved_and_the_original_is_kept() -> None:
    captured = pathweave.capture(_Positions().eval(), torch.randn(2, 8))
    named = device.propose(captured.gm, "meta")
    assert [m.old for m in named] and all(m.old == "cpu" for m in named)
    moved = device.to_device(captured.gm, "meta")
    assert device.propose(moved, "meta") == []
    (out,) = moved(torch.randn(2, 8, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 8, 4)
    assert device.propose(captured.gm, "meta") == named  # the captured graph is untouched
    assert device.propose(captured.gm, "cpu") == []


def test_verify_names_the_node_left_behind() -> None:
    captured = pathweave.capture(_Positions().eval(), torch.randn(2, 8))
    gm = captured.gm
    with pytest.raises(PlanError, match="still names device cpu"):
        device.verify(gm, "meta")
