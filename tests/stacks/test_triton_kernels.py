"""BrainSlug's stacks on GPU: Triton kernels generated per sequence, checked in Triton's interpreter
(no GPU needed) against eager, and on CUDA where there is one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pathweave.stacks.model import Elementwise, Pool, Step
from pathweave.stacks.plan import gpu_sequences, plan_sequences
from pathweave.stacks.triton_kernels import triton_source

POOL = Pool("max", (3, 3), (1, 1), (1, 1), (1, 1), False, True, None, (56, 56))
STEP = Step(POOL, (Elementwise("clamp", lo=0.0),))


def test_identical_sequences_share_one_source() -> None:
    a = plan_sequences((STEP,) * 3, (1, 8, 56, 56), budget=10**9, threads=2)
    b = plan_sequences((STEP,) * 3, (1, 8, 56, 56), budget=10**9, threads=2)
    src, params, scratch = triton_source(gpu_sequences(a)[0])
    assert src == triton_source(gpu_sequences(b)[0])[0]
    assert src.count("tl.debug_barrier()") == 2  # between the three steps
    assert params == [] and scratch == 2 * 56 * 56


_INTERPRETED = r"""
import os, sys
os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on CPU tensors
sys.path.insert(0, sys.argv[1])
import torch
from test_collapse import CASES, Chain
from pathweave.frontend.capture import capture
from pathweave.stacks import collapse as stacks
from pathweave.stacks.module import StackModule
from pathweave.stacks.plan import gpu_sequences
from pathweave.passes.pipeline import run_pipeline
from pathweave.stacks.triton_kernels import TritonSequence, run_sequences

def check(name, model, x, max_steps, equal_nan=False):
    gm = capture(model, x).gm
    run_pipeline(gm, (stacks.Policy(max_steps),))
    (mod,) = [m for m in gm.modules() if isinstance(m, StackModule)]
    kernels = [TritonSequence(s) for s in gpu_sequences(mod.sequences, max_steps)]
    with torch.no_grad():
        want = model(x)
    got = run_sequences(kernels, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=equal_nan, msg=name)
    print("ok", name, len(kernels))

for name, layers in CASES.items():
    for max_steps in (1, None):
        x = torch.randn(2, 5, 17, 13, generator=torch.Generator().manual_seed(0))
        check(f"{name}, max_steps {max_steps}", Chain(*layers(5)).eval(), x, max_steps)
x = torch.randn(1, 4, 7, 7)
x[0, 1, 3, 3] = float("nan")
check("nan", Chain(torch.nn.MaxPool2d(3, 1, 1), torch.nn.ReLU()).eval(), x, None, equal_nan=True)
"""


def test_kernels_match_eager_in_the_interpreter(tmp_path) -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "PATHWEAVE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _INTERPRETED, str(Path(__file__).parent)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("ok ")]
    assert len(lines) == 15 and "ok nan 1" in lines
    assert any(ln.startswith("ok pool_bn_relu x3, max_steps 1 3") for ln in lines)  # one kernel per step


@pytest.mark.gpu
def test_stacks_strategy_on_cuda(outputs_close) -> None:
    import pathweave
    from pathweave.stacks.strategy import StacksStrategy
    from pathweave.zoo.load import load_model

    loaded = load_model("poolstack:4", batch=2, small=True)
    model = loaded.model.cuda()
    inputs = tuple(t.cuda() for t in loaded.inputs)
    fast = pathweave.optimize(model, *inputs, strategy="stacks")
    assert isinstance(fast, StacksStrategy) and len(fast.stacks) == 1
    with torch.no_grad():
        outputs_close(fast(*inputs), model(*inputs), 1e-4, 1e-5)
    model.cpu()
