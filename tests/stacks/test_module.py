"""The module a stack becomes: which kernels it runs on which device."""

from __future__ import annotations

import sys

import pytest
import torch

from pathweave.errors import MissingDependencyError
from pathweave.stacks.model import Elementwise, Pool, Step
from pathweave.stacks.module import StackModule
from pathweave.stacks.plan import plan_sequences

POOL = Pool("max", (3, 3), (1, 1), (1, 1), (1, 1), False, True, None, (56, 56))
STEP = Step(POOL, (Elementwise("clamp", lo=0.0),))


def test_stacks_on_a_device_without_triton_raise_an_install_hint(monkeypatch) -> None:
    """Off the CPU a stack runs Triton kernels; without Triton the error says what to install (the
    strategy turns it into a loud fallback to the plain graph). Checked through the module's device
    dispatch on a CPU tensor."""
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton now raises ImportError
    seq = plan_sequences((STEP,) * 2, (1, 4, 56, 56), budget=10**9, threads=2)
    mod = StackModule(seq, device="meta")
    assert mod._fns == []  # nothing compiled for a device that runs Triton
    with pytest.raises(MissingDependencyError, match=r"pathweave\[gpu\]"):
        mod._on_device(torch.randn(1, 4, 56, 56))
