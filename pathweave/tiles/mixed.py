"""Strategy "tiles" for any model: the whole graph as one tile program where the tiles can run it all
(``TilesStrategy``, unchanged), else tile islands with ATen segments between them (``IslandsStrategy``).

The islands (``tiles.islands``) are fused into submodules of the rewritten graph; each becomes a
``TilesStrategy`` of its own, built and checked against PyTorch on the values that reach it when the
model runs its example inputs, and the graph around them runs as fx code. An island that fails to build
(a binder refuses a shape) or to match leaves the nodes it names (or, naming none, all of its nodes) to
ATen and the islands are proposed again, at most ``MAX_ROUNDS`` times; what still fails runs in ATen,
with a warning naming it. Nothing is refused whole.

Threads: each island has its own engines, parked right after its call (``TileIsland``), and the ATen
segments between islands run on one intra-op thread (``aten_threads``): the engines are the
parallelism. Measured on 2 Zen 4 cores (AVX-512), quiet machine, median of 25 interleaved rounds,
DistilBERT-small (3 islands) / ViT-small (5 islands), ms: sequential 1.02 / 1.67; 2 engines, ATen on 1
thread 0.89 / 1.55; 2 engines, ATen on 2 threads 3.99 / 15.99 (OpenMP's spinning threads and the woken
engines fight over the cores); 1 engine, ATen on 2 threads 1.24 / 1.64; 2 engines left spinning 1.29 /
1.68.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from pathweave.analysis.ops import refuse_shared_mutation
from pathweave.errors import ExecutionError, PathweaveError, UnsupportedError
from pathweave.frontend.graph import Captured
from pathweave.passes.pipeline import run_pipeline
from pathweave.sequential import intra_op_threads, locate_failure
from pathweave.strategy import CallGuard, Strategy
from pathweave.tiles.build import WORK_PER_TILE, TilesPerLayer
from pathweave.tiles.conv_layout import WINOGRAD_MIN_CHANNELS
from pathweave.tiles.islands import MIN_ISLAND_FLOPS, Island, IslandPlan, apply, propose
from pathweave.tiles.memory import DISTANCE
from pathweave.tiles.runtime import gemm_isa
from pathweave.tiles.strategy import PASSES, TilesStrategy

#: how often islands that fail to build are shrunk and proposed again before the rest runs in ATen
MAX_ROUNDS = 4


def build_tiles(
    captured: Captured,
    threads: int | None = None,
    tiles_per_layer: TilesPerLayer = None,
    work_per_tile: float = WORK_PER_TILE,
    check: bool = True,
    tile_scale: dict[str, float] | None = None,
    buffer_distance: int | None = DISTANCE,
    linger_ms: float | None = None,
    winograd_min_channels: int = WINOGRAD_MIN_CHANNELS,
    min_island_flops: int = MIN_ISLAND_FLOPS,
    aten_threads: int = 1,
) -> Strategy:
    """The row ``tiles``: ``TilesStrategy`` (its options, documented there) where the tiles run the whole
    graph, else ``IslandsStrategy``; ``min_island_flops``: the fewest FLOPs an island runs as tiles;
    ``aten_threads``: the intra-op threads of the ATen segments between islands."""
    options = {"tiles_per_layer": tiles_per_layer, "work_per_tile": work_per_tile, "check": check,
               "tile_scale": tile_scale, "buffer_distance": buffer_distance, "linger_ms": linger_ms,
               "winograd_min_channels": winograd_min_channels}  # fmt: skip
    refuse_shared_mutation(captured.gm, captured.name, "tiles")  # islands ran such a graph wrongly
    try:
        return TilesStrategy(captured, threads=threads, **options)
    except (UnsupportedError, ExecutionError):  # the islands keep what checks out, the rest in ATen
        return IslandsStrategy(captured, threads, options, min_island_flops, aten_threads=aten_threads)


class TileIsland(torch.nn.Module):
    """One island's tile program as a submodule of the graph around it: its inputs in, its outputs (a
    tuple) out; with ``park`` its engines park at once after the call instead of spinning."""

    def __init__(self, tiles: TilesStrategy, park: bool = True) -> None:
        super().__init__()
        self.tiles = tiles
        self.park = park

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.tiles.run_flat(list(args))
        if self.park:
            self.tiles.runtime.park()
        return out


class IslandsStrategy(Strategy):
    """Tile islands with ATen segments between them (module docstring). ``plan`` is the islands that
    were built, ``coverage`` what they hold; ``gm`` runs the model."""

    strategy = "tiles"

    def __init__(
        self,
        captured: Captured,
        threads: int | None,
        options: dict[str, Any],
        min_island_flops: int = MIN_ISLAND_FLOPS,
        park: bool = True,
        aten_threads: int | None = None,
    ) -> None:
        self.captured = captured
        self.threads = threads or torch.get_num_threads()
        self.aten_threads = aten_threads or 1
        self.guard = CallGuard(f"{captured.name} (tiles)", exclusive=True)
        self.options = options
        self.min_island_flops = min_island_flops
        rewritten = copy.deepcopy(captured.gm)
        self.passes = run_pipeline(rewritten, PASSES)
        self.plan, self.gm, built, dropped = self._build(rewritten)
        self.islands = [TileIsland(t, park) for t in built.values()]
        for name, island in zip(built, self.islands, strict=True):
            self.gm.add_submodule(name, island)
        self.coverage = self.plan.coverage(dropped)
        warnings.warn(f"{captured.name}: {self.coverage.line()}", stacklevel=3)

    def _build(
        self, rewritten: torch.fx.GraphModule
    ) -> tuple[IslandPlan, torch.fx.GraphModule, dict[str, TilesStrategy], list[int]]:
        """Propose, fuse and build the islands; shrink and again while some fail (module docstring). The
        plan, the graph with the islands fused, the built islands by submodule name, and the indices of
        the islands that still failed in the last round (they run as fx code)."""
        refused: dict[str, str] = {}
        built: dict[tuple[str, ...], TilesStrategy | Exception] = {}
        for _ in range(MAX_ROUNDS):
            plan = propose(rewritten, refused, self.min_island_flops)
            plan.verify(rewritten)
            gm = torch.fx.GraphModule(rewritten, copy.deepcopy(rewritten.graph))
            names = apply(gm, plan)
            todo = {n: isl for n, isl in zip(names, plan.islands, strict=True) if isl.nodes not in built}
            for name, inputs in _island_inputs(gm, list(todo), self.captured.example_inputs).items():
                built[todo[name].nodes] = result = self._island(gm.get_submodule(name), inputs, name)
                if isinstance(result, Exception):
                    _warn_failed(self.captured.name, todo[name], result)
            failed = [i for i, isl in enumerate(plan.islands) if isinstance(built[isl.nodes], Exception)]
            if not failed:
                break
            for i in failed:
                refused |= _refused(plan.islands[i], built[plan.islands[i].nodes])
        ok = {n: built[isl.nodes] for n, isl in zip(names, plan.islands, strict=True)}
        return plan, gm, {n: t for n, t in ok.items() if isinstance(t, TilesStrategy)}, failed

    def _island(
        self, sub: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...], name: str
    ) -> TilesStrategy | Exception:
        """One island's tile program, or why it could not be built or did not match PyTorch."""
        out_node = next(n for n in sub.graph.nodes if n.op == "output")
        captured = Captured(
            sub, pytree.tree_flatten((inputs, {}))[1], pytree.tree_flatten(tuple(out_node.args[0]))[1],
            inputs, "export", f"{self.captured.name} {name}",
        )  # fmt: skip
        try:
            return TilesStrategy(captured, threads=self.threads, **self.options)
        except (UnsupportedError, ExecutionError) as exc:
            return exc

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        with self.guard.call(), torch.no_grad(), intra_op_threads(self.aten_threads):
            try:
                return tuple(self.gm(*flat))
            except PathweaveError:
                raise  # an island's own error names its node
            except Exception as exc:  # an ATen segment's: name the node, as the sequential path does
                raise locate_failure(self.gm, flat, exc) from exc

    def quiesce(self) -> None:
        with self.guard.call():
            for island in self.islands:
                island.tiles.runtime.park()

    def set_workers(self, n: int) -> None:
        with self.guard.call():
            for island in self.islands:
                island.tiles.set_workers(n)
            self.threads = n

    def summary(self) -> str:
        layers = sum(i.tiles.graph.num_layers for i in self.islands)
        tiles = sum(i.tiles.graph.num_tiles for i in self.islands)
        isa = f", {gemm_isa()} kernels" if self.islands else ""
        workers = f"{self.threads} workers{isa}"
        return f"{layers} layers, {tiles} tiles in islands, {workers}; {self.coverage.line()}"

    def _free(self) -> None:
        for island in self.islands:
            island.tiles.close()


def _island_inputs(
    gm: torch.fx.GraphModule, names: list[str], example: tuple[torch.Tensor, ...]
) -> dict[str, tuple[torch.Tensor, ...]]:
    """The values that reach each named island when ``gm`` (its islands still fx code) runs ``example``."""
    seen: dict[str, tuple[torch.Tensor, ...]] = {}

    def record(module: torch.nn.Module, args: tuple) -> None:
        seen[names[modules.index(module)]] = tuple(a.detach().clone() for a in args)

    modules = [gm.get_submodule(name) for name in names]
    hooks = [m.register_forward_pre_hook(record) for m in modules]
    try:
        with torch.no_grad():
            gm(*example)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _named(island: Island, exc: Exception) -> list[str]:
    """The island's nodes that the build error names (``UnsupportedError.nodes``)."""
    return [n for n in getattr(exc, "nodes", []) if n in island.nodes]


def _refused(island: Island, exc: Exception) -> dict[str, str]:
    """The island's nodes to leave outside: those the error names, or all where it names none of them."""
    why = f"its island failed to build: {_brief(exc)}"
    return dict.fromkeys(_named(island, exc) or island.nodes, why)


def _warn_failed(model: str, island: Island, exc: Exception) -> None:
    named = _named(island, exc)
    ops = ", ".join(f"{op} x{n}" for op, n in island.ops.items())
    leave = f"nodes {', '.join(named)} leave it for ATen" if named else "it runs in ATen"
    warnings.warn(
        f"{model}: an island of {len(island.nodes)} nodes ({ops}) failed to build, {leave}: "
        f"{type(exc).__name__}: {_brief(exc)}",
        stacklevel=5,
    )


def _brief(exc: Exception) -> str:
    """An error's message on one line, cut at 240 characters."""
    return " ".join(str(exc).split())[:240]
