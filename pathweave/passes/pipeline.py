"""The pass pipelines, listed in one place, and the runner that checks the graph after each pass."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch.fx

from pathweave.errors import PlanError
from pathweave.passes import (
    canonical,
    channels_last,
    fold_bn,
    fuse_conv,
    fuse_linear,
    merge_siblings,
    prune,
    relu_inplace,
)
from pathweave.passes.util import drop_unused_constants

#: the sequential fast CPU path
FAST_CPU: tuple[ModuleType, ...] = (
    canonical,
    prune,
    fold_bn,
    merge_siblings,
    fuse_conv,
    fuse_linear,
    relu_inplace,
    channels_last,
)


@dataclass(frozen=True)
class PassReport:
    name: str
    rewrites: int


def run_pipeline(gm: torch.fx.GraphModule, passes: tuple[ModuleType, ...]) -> list[PassReport]:
    """Propose and apply each pass in order; lint after each so a broken rewrite fails where it happens."""
    reports = []
    for p in passes:
        matches = p.propose(gm)
        apply_pass(gm, p, matches)
        reports.append(PassReport(p.__name__.rsplit(".", 1)[-1], len(matches)))
    return reports


def apply_pass(gm: torch.fx.GraphModule, p: ModuleType, matches: list) -> None:
    """Apply ``matches`` of pass ``p``, lint, drop constants nothing reads any more, recompile."""
    p.apply(gm, matches)
    try:
        gm.graph.lint()
        drop_unused_constants(gm)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise PlanError(f"pass {p.__name__.rsplit('.', 1)[-1]} left an invalid graph: {first}") from exc
    gm.recompile()
