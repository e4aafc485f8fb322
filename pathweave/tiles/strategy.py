"""ASPEN on CPU end to end: strategy "tiles".

The captured graph is rewritten for tile kernels (constants and size-only ops folded, batch norm folded
into the convolutions, activations and residual adds fused into their epilogues; with
PATHWEAVE_TILES_FUSE_DW=1 large depthwise convolutions into the 1x1 convolutions after them), cut into a
tile graph, given a kernel row per layer, and run by the native engines: one per worker thread, no
barriers, the GIL released for the whole inference. At build time the result on the example inputs is
compared with the rewritten graph run by PyTorch; a mismatch raises ``ExecutionError`` (nothing wrong is
ever returned).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from pathweave.compare import mismatch
from pathweave.errors import ExecutionError, PathweaveError, UnsupportedError
from pathweave.frontend.graph import Captured
from pathweave.passes import canonical, dedupe, fold_bn, fold_sizes, prune
from pathweave.passes.pipeline import run_pipeline
from pathweave.sequential import locate_failure
from pathweave.strategy import CallGuard, Strategy
from pathweave.tiles import commute_pool as tile_commute_pool
from pathweave.tiles import conv1d as tile_conv1d
from pathweave.tiles import conv_transpose as tile_conv_transpose
from pathweave.tiles import fuse_depthwise as tile_fuse_depthwise
from pathweave.tiles import fuse_epilogue as tile_fuse
from pathweave.tiles import fuse_matmul as tile_fuse_matmul
from pathweave.tiles import fuse_scale as tile_fuse_scale
from pathweave.tiles import sdpa as tile_sdpa
from pathweave.tiles.abi import OP_LAYER
from pathweave.tiles.blocked import inplace_residuals, row_split_depthwise
from pathweave.tiles.build import WORK_PER_TILE, TilesPerLayer, build_tile_graph
from pathweave.tiles.conv_layout import WINOGRAD_MIN_CHANNELS
from pathweave.tiles.islands import Coverage
from pathweave.tiles.memory import DISTANCE, concat_slots, plan_buffers
from pathweave.tiles.nodes import plan_nodes
from pathweave.tiles.ops import require_kernels
from pathweave.tiles.program import TileProgram, build_program, layer_itemsizes, output_layers
from pathweave.tiles.runtime import TileRuntime, gemm_isa

#: the rewrites before a graph is cut into tiles (also those of the tile islands, ``tiles.mixed``)
PASSES = (canonical, fold_sizes, prune, dedupe, tile_conv1d, tile_conv_transpose, fold_bn, tile_sdpa,
          tile_fuse, tile_commute_pool, tile_fuse_depthwise, tile_fuse_scale, tile_fuse_matmul)  # fmt: skip
#: the tile kernels against PyTorch on the same rewritten graph: float sums in another order
CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-4


class TilesStrategy(Strategy):
    strategy = "tiles"

    def __init__(
        self,
        captured: Captured,
        threads: int | None = None,
        tiles_per_layer: TilesPerLayer = None,
        work_per_tile: float = WORK_PER_TILE,
        check: bool = True,
        tile_scale: dict[str, float] | None = None,
        buffer_distance: int | None = DISTANCE,
        linger_ms: float | None = None,
        winograd_min_channels: int = WINOGRAD_MIN_CHANNELS,
        inplace: bool = True,
    ) -> None:
        """``winograd_min_channels``: the fewest input and output channels of a 3x3 convolution that runs
        Winograd (``conv_layout``; 10**9 keeps every convolution direct). ``inplace``: residual 1x1 layers
        may write their output over their residual (``blocked.inplace_residuals``; False for A/B)."""
        self.captured = captured
        self.threads = threads or torch.get_num_threads()
        # one inference at a time: every call shares the program's input and activation buffers
        # (concurrent requests run together through ``CoExecutor``)
        self.guard = CallGuard(f"{captured.name} (tiles)", exclusive=True)
        self.tile_scale = dict(tile_scale or {})
        self.winograd_min_channels = winograd_min_channels
        self.inplace = inplace
        try:
            self._plan(tiles_per_layer, work_per_tile, buffer_distance)
        except PathweaveError:
            raise
        except Exception as exc:  # a builder that breaks must cost this strategy, never a raw error
            raise UnsupportedError(
                f"{captured.name}: the tile graph could not be built ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); use another strategy",
            ) from exc
        ops = np.full(self.graph.num_tiles, OP_LAYER, dtype=np.int32)
        self.runtime = TileRuntime.from_graph(self.graph, ops, self.threads)
        if linger_ms is not None:  # how long idle workers spin before they park (TileRuntime.linger_ms)
            self.runtime.linger_ms = linger_ms
        g = self.graph
        self.runtime.set_program(self.program.layers, g.tile_layer, g.tile_lo, g.tile_hi,
                                 self.program.scratch_floats)  # fmt: skip
        if check:
            self.check()

    def _plan(
        self, tiles_per_layer: TilesPerLayer, work_per_tile: float, buffer_distance: int | None
    ) -> None:
        """The rewritten graph, its tile graph, the buffer plan and the program over them."""
        gm = copy.deepcopy(self.captured.gm)
        self.passes = run_pipeline(gm, PASSES)
        self.gm = gm
        self.plans = plan_nodes(gm)  # read by the tile graph and by every program built over it
        require_kernels(self.plans)  # a layer that has a range map but no kernel: refused before building
        options = {"work_per_tile": work_per_tile, "scale": self.tile_scale, "plans": self.plans,
                   "winograd_min_channels": self.winograd_min_channels}  # fmt: skip
        self.graph = build_tile_graph(gm, tiles_per_layer, **options)
        # the depthwise layers that stay blocked split rows: built again with them (each tile then spans
        # their channels, which keeps them blocked); a count asked for is taken as it is
        wmc = self.winograd_min_channels
        rows = (
            row_split_depthwise(gm, self.graph, gemm_isa(), wmc) if tiles_per_layer is None else frozenset()
        )
        if rows:
            self.graph = build_tile_graph(gm, tiles_per_layer, **options, row_split=rows)
        # one arena sized by liveness (None: a buffer per layer); the graph gains the edges that order
        # each reuse after the reads of the old value
        self.buffers = None
        if buffer_distance is not None:
            keep, slots = output_layers(gm, self.graph), concat_slots(gm, self.graph)
            itemsizes = layer_itemsizes(gm, self.graph)
            inplace = inplace_residuals(gm, self.graph, gemm_isa(), wmc) if self.inplace else {}
            self.buffers = plan_buffers(self.graph, keep, buffer_distance, slots, itemsizes, inplace)
            self.graph = self.buffers.graph
        self.program = self.new_program()

    def new_program(self) -> TileProgram:
        """Another program over the same tile graph and weights, with its own input and activation
        buffers (co-execution runs several requests of one model at once, one program each)."""
        offsets = self.buffers.offsets if self.buffers else None
        return build_program(self.gm, self.graph, self.plans, offsets, self.winograd_min_channels)

    def check(self) -> None:
        """Raise unless the buffer plan is safe (every overwrite waits for the reads it would spoil) and
        the result on the example inputs matches the rewritten graph run by PyTorch; run at build unless
        ``check=False``."""
        if self.buffers is not None:
            self.buffers.verify()
        inputs = list(self.captured.example_inputs)
        got = self.run_flat(inputs)
        try:
            with torch.no_grad():
                want = [t for t in self.gm(*inputs) if isinstance(t, torch.Tensor)]
        except Exception as exc:  # noqa: BLE001 - a rewrite PyTorch cannot run: refused, never raw
            failure = locate_failure(self.gm, inputs, exc)
            nodes = [failure.node] if failure.node else None
            why = f"{self.captured.name}: the graph rewritten for tiles fails in PyTorch: {failure}"
            raise UnsupportedError(why, nodes=nodes) from exc
        problem = mismatch(list(got), want, CHECK_RTOL, CHECK_ATOL, scale_atol=True)
        if problem:
            raise ExecutionError(f"{self.captured.name}: the tile kernels disagree with PyTorch: {problem}")

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        with self.guard.call():
            self.program.load(flat)
            try:
                self.runtime.run()
            except ExecutionError as exc:
                raise self._failure(exc) from exc
            return self.program.read()

    def _failure(self, exc: ExecutionError) -> ExecutionError:
        """The runtime's error with the node whose tile failed (e.g. an embedding id out of range)."""
        tile = self.runtime.failed_tile
        if tile is None:
            return exc
        name = str(self.graph.layer_names[self.graph.tile_layer[tile]])
        node = next((n for n in self.gm.graph.nodes if n.name == name), None)
        where = node.format_node() if node is not None else name
        return ExecutionError(
            f"{self.captured.name}: node {where} failed in tile {tile} (an index out of range, or an "
            "input the kernel cannot take); eager PyTorch raises for the same input",
            node=name,
        )

    def quiesce(self) -> None:
        """Let the workers park now instead of spinning for the next inference (``TileRuntime.park``)."""
        with self.guard.call():
            self.runtime.park()

    def set_workers(self, n: int) -> None:
        """Engines for the next inferences (added or removed between them)."""
        with self.guard.call():
            self.runtime.set_workers(n)
            self.threads = n

    @property
    def coverage(self) -> Coverage:
        """The whole model in one tile program (the islands' strategy, ``tiles.mixed``, reports less)."""
        return Coverage(share=1.0, islands=1)

    def summary(self) -> str:
        g = self.graph
        return (f"{g.num_layers} layers, {g.num_tiles} tiles, {g.num_edges} edges, {self.threads} workers, "
                f"steals {self.runtime.steals}, {gemm_isa()} kernels")  # fmt: skip

    def _free(self) -> None:
        self.runtime.close()
