"""Cutting a stack's steps into sequences: the cache budget, the halo's recomputation, the GPU regrouping."""

from __future__ import annotations

from pathweave.stacks.model import Elementwise, Pool, Step
from pathweave.stacks.plan import MAX_RECOMPUTE, gpu_sequences, plan_sequences, recompute, working_set

POOL = Pool("max", (3, 3), (1, 1), (1, 1), (1, 1), False, True, None, (56, 56))
STEP = Step(POOL, (Elementwise("clamp", lo=0.0),))


def test_a_stack_over_budget_splits_into_sequences() -> None:
    pool = Pool("max", (3, 3), (1, 1), (1, 1), (1, 1), False, True, None, (56, 56))
    step = Step(pool, (Elementwise("clamp", lo=0.0),))
    steps = (step,) * 10
    shape = (8, 64, 56, 56)
    row = 56 * 64 * 4
    whole = plan_sequences(steps, shape, budget=10**9, threads=2)
    assert len(whole) == 1 and len(whole[0].steps) == 10
    # a budget of 30 rows: blocks of r rows through k steps hold r + 2k input rows, so halos grow
    # past MAX_RECOMPUTE after a few steps and the stack splits
    tight = plan_sequences(steps, shape, budget=30 * row, threads=2)
    assert len(tight) > 1 and sum(len(s.steps) for s in tight) == 10
    for seq in tight:
        assert working_set(seq.steps, list(seq.shapes), 64, seq.block_rows) <= 30 * row
        assert recompute(seq.steps, list(seq.shapes), seq.block_rows) <= MAX_RECOMPUTE
    policy = plan_sequences(steps, shape, max_steps=5, budget=10**9, threads=2)
    assert [len(s.steps) for s in policy] == [5, 5]
    assert all(s.block_rows <= 56 for s in tight)


def test_gpu_sequences_regroup_the_cpu_ones_by_steps_only() -> None:
    tight = plan_sequences((STEP,) * 10, (8, 64, 56, 56), budget=30 * 56 * 64 * 4, threads=2)
    assert len(tight) > 1  # the CPU's cache budget split them
    (whole,) = gpu_sequences(tight)
    assert len(whole.steps) == 10 and whole.shapes == ((56, 56),) * 11 and whole.block_rows == 56
    assert (whole.batch, whole.channels) == (8, 64)
    fives = gpu_sequences(tight, max_steps=5)
    assert [len(s.steps) for s in fives] == [5, 5] and fives[1].shapes[0] == (56, 56)
