"""How a stack's steps are cut into sequences and blocks of rows: the cache budget and the halo's cost.

A task (sample, block of output rows) walks backwards from its block to the rows every earlier step
must produce (the halo that overlapping pooling needs), then computes them step by step, so that a
block's intermediates stay in cache from the first step to the last. Rows of the halo are computed by
both neighbouring blocks; block sizes are chosen so the working set fits half the core's L2 cache,
and the recomputation that small blocks cost is what limits how many steps join one sequence.
"""

from __future__ import annotations

import torch

from pathweave.machine import l2_bytes
from pathweave.stacks.model import Sequence, Step

#: fraction of the per-core L2 cache one task's working set may use
L2_SHARE = 0.5
#: the most halo recomputation a sequence may cost (rows computed / rows needed)
MAX_RECOMPUTE = 1.25


def gpu_sequences(sequences: list[Sequence], max_steps: int | None = None) -> list[Sequence]:
    """The steps of ``sequences`` regrouped for the Triton kernels: a program computes a whole plane, so
    no cache budget or halo splits them, only ``max_steps`` per sequence (None: all in one)."""
    steps = [st for seq in sequences for st in seq.steps]
    shapes = [sequences[0].shapes[0], *[hw for seq in sequences for hw in seq.shapes[1:]]]
    n = max_steps or len(steps)
    first = sequences[0]
    return [
        Sequence(
            tuple(steps[i : i + n]),
            first.channels,
            first.batch,
            tuple(shapes[i : i + n + 1]),
            shapes[min(i + n, len(steps))][0],
        )  # fmt: skip
        for i in range(0, len(steps), n)
    ]


def working_set(steps: tuple[Step, ...], shapes: list[tuple[int, int]], channels: int, rows: int) -> int:
    """Bytes a task keeps hot at once for ``rows`` output rows: the largest input + output rows of one
    step (a step's input is dead once the step is done; its output feeds the next step)."""
    most, r = 0, rows
    for i in range(len(steps) - 1, -1, -1):
        r_in = steps[i].rows_in(r)
        most = max(most, r * shapes[i + 1][1] + r_in * shapes[i][1])
        r = r_in
    return most * channels * 4


def recompute(steps: tuple[Step, ...], shapes: list[tuple[int, int]], rows: int) -> float:
    """Rows a block computes over all its steps (halos included), per row the steps need at least."""
    done, need, r = 0.0, 0.0, rows
    for i in range(len(steps) - 1, -1, -1):
        done += min(r, shapes[i + 1][0]) * shapes[i + 1][1]
        need += rows * shapes[i + 1][0] / shapes[-1][0] * shapes[i + 1][1]
        r = steps[i].rows_in(r)
    return done / need


def _block_rows(steps: tuple[Step, ...], shapes: list[tuple[int, int]], c: int, cap: int, budget: int) -> int:
    rows = 1
    while rows < cap and working_set(steps, shapes, c, rows + 1) <= budget:
        rows += 1
    return rows


def plan_sequences(
    steps: tuple[Step, ...],
    in_shape: tuple[int, int, int, int],
    max_steps: int | None = None,
    budget: int | None = None,
    threads: int | None = None,
) -> list[Sequence]:
    """Greedy: a sequence takes the next step while, at the largest block that fits ``budget`` (capped so
    that every thread gets two tasks), the halo recomputation stays under MAX_RECOMPUTE, and while it
    has fewer than ``max_steps`` steps (BrainSlug's step policies; None: unrestricted)."""
    budget = budget or int(l2_bytes() * L2_SHARE)
    threads = threads or torch.get_num_threads()
    n, c, h, w = in_shape
    seqs: list[Sequence] = []
    start, hw = 0, (h, w)
    while start < len(steps):
        shapes, rows = [hw], 1
        end = start
        while end < len(steps) and (max_steps is None or end - start < max_steps):
            out = steps[end].pool.out_hw if steps[end].pool else shapes[-1]
            trial, trial_shapes = steps[start : end + 1], [*shapes, out]
            cap = max(1, min(out[0], -(-out[0] * n // (2 * threads))))
            trial_rows = _block_rows(trial, trial_shapes, c, cap, budget)
            fits = working_set(trial, trial_shapes, c, trial_rows) <= budget
            if end > start and not (fits and recompute(trial, trial_shapes, trial_rows) <= MAX_RECOMPUTE):
                break
            shapes, rows, end = trial_shapes, trial_rows, end + 1
        seqs.append(Sequence(steps[start:end], c, n, tuple(shapes), rows))
        start, hw = end, shapes[-1]
    return seqs
