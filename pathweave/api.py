"""The public API: ``analyze`` and ``optimize``."""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from pathweave.analysis.analyze import Analysis, analyze_captured
from pathweave.errors import InputError, PathweaveError
from pathweave.frontend.capture import capture
from pathweave.frontend.graph import Captured
from pathweave.lanes.strategy import build_lanes, sequential_path
from pathweave.sequential import SequentialExecutor

#: strategies ``optimize`` knows; bench candidates are named "pathweave:<strategy>"
STRATEGIES = ("auto", "sequential", "lanes", "stacks", "streams", "tiles")
#: timed rounds per candidate when "auto" chooses among strategies
AUTO_ROUNDS = 7
#: idle time before each of "auto"'s untimed-then-timed calls on CPU (see ``_fastest``)
AUTO_GAP_S = 0.02


def _captured(model: Any, inputs: tuple, kwargs: dict) -> Captured:
    if isinstance(model, Captured):
        return model
    model, inputs, name = _resolve(model, inputs)
    return capture(model, *inputs, name=name, **kwargs)


def _resolve(model: Any, inputs: tuple) -> tuple[Any, tuple, str | None]:
    """A zoo name (or file) without inputs becomes the model and its example inputs; a zoo name with
    inputs, the zoo model called on them. Files with inputs are left to ``capture``."""
    if not isinstance(model, str):
        return model, inputs, None
    if inputs and (Path(model).suffix in (".pt2", ".onnx") or Path(model).exists()):
        return model, inputs, None
    from pathweave.zoo.load import load_model

    loaded = load_model(model)
    return loaded.model, tuple(inputs) or tuple(loaded.inputs), loaded.name


def _recapture(model: Any, kwargs: dict, name: str) -> Any:
    """How hyperclustering captures the model again at a sub-batch size (None where it cannot)."""
    if isinstance(model, Captured) or kwargs:
        return None
    return lambda sub: capture(model, *sub, name=name)


def analyze(model: Any, *inputs: Any, measure: bool = False, **kwargs: Any) -> Analysis:
    """Work, critical path and parallelism of ``model`` called on ``inputs``.

    ``model`` is an nn.Module, ExportedProgram, ``.pt2`` path, a ``Captured`` graph, or a zoo name
    (then ``inputs`` may be omitted). ``measure=True`` adds statistics from measured node times.
    """
    return analyze_captured(_captured(model, inputs, kwargs), measure=measure)


def optimize(
    model: Any,
    *inputs: Any,
    strategy: str = "auto",
    device: str | None = None,
    stacks: bool = False,
    **kwargs: Any,
) -> Any:
    """A callable that returns ``model``'s outputs, run by the chosen strategy.

    - "sequential": the fast sequential path (all intra-op threads on one operator at a time).
    - "lanes": Ramiel's clusters on lanes of one intra-op thread each, run at once; for a batch > 1,
      hyperclusters (the batch split into groups, the groups' graphs interleaved on the lanes).
    - "stacks": the sequential path with chains of element-wise and pooling layers run depth first by
      generated kernels (BrainSlug): C on CPU, Triton on CUDA (checked here only in Triton's
      interpreter: no GPU has run them yet).
    - "tiles": ASPEN on CPU: each layer's output cut into tiles, a tile dataflow graph, one native
      scheduling engine per thread running ready tiles with no barrier between layers; native kernels
      (OpenBLAS for the matrix products). float32 CNNs, MLPs and transformers (int64 ids and bool masks
      as inputs); other ops raise ``UnsupportedError`` listing them (``execute.tiles``).
    - "streams": Opara on CUDA: kernels profiled once, nodes on several CUDA streams in a resource-aware
      launch order, the whole model captured into one CUDA Graph (``execute.streams``). Outputs are
      copies (the graph's own buffers are overwritten by the next call).
    - "auto": on CPU builds sequential, lanes and tiles (where the tile kernels cover the model; else a
      warning), on CUDA the single-stream and the Opara CUDA Graphs, and keeps the fastest, timed here
      on the example inputs, so it is never slower than the baseline it was timed against.

    ``stacks=True`` collapses the stacks inside "sequential" (then the same as "stacks"), and inside
    "lanes" and "auto" on CPU: each stack is one node to Ramiel's clustering and runs on its lane's
    thread. Not yet inside "tiles" or "streams" (``InputError``).

    The graph is captured for the shapes and dtypes of ``inputs``; calling the result with others
    raises ``InputError``. ``device`` defaults to the inputs' device.
    """
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if stacks and strategy in ("tiles", "streams"):
        raise InputError(f"stacks=True: stacks do not run inside strategy {strategy!r} yet")
    if isinstance(model, Captured):
        captured = model
    else:
        model, inputs, name = _resolve(model, inputs)
        captured = capture(model, *inputs, name=name, **kwargs)
    if device is None:
        device = str(captured.example_inputs[0].device) if captured.example_inputs else "cpu"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"device={device!r} is not a device; use 'cpu' or 'cuda'") from exc
    if kind not in ("cpu", "cuda"):
        raise InputError(f"device={device!r}: pathweave runs on 'cpu' or 'cuda'")
    if kind == "cuda" and not torch.cuda.is_available():
        raise InputError("device='cuda' was asked for but CUDA is not available")
    if strategy == "auto" and captured.method != "export":
        warnings.warn(
            f"{captured.name}: captured by fx tracing; the fast CPU path needs torch.export", stacklevel=2
        )
    if stacks and strategy in ("auto", "lanes") and kind != "cpu":
        raise InputError(f"stacks=True with strategy {strategy!r} runs on CPU; on CUDA use 'stacks'")
    if strategy == "streams" or (strategy == "auto" and kind == "cuda"):
        return _streams(captured, strategy)
    if strategy == "tiles":
        if kind != "cpu":
            raise InputError("strategy 'tiles' runs on CPU")
        return _tiles(captured)
    if strategy == "stacks" or (strategy == "sequential" and stacks):
        from pathweave.stacks.strategy import StacksStrategy

        return StacksStrategy(captured, device=device)
    if strategy == "lanes" or (strategy == "auto" and kind == "cpu"):
        if kind != "cpu":
            raise InputError("strategy 'lanes' runs on CPU; use 'sequential' on CUDA")
        recapture = _recapture(model, kwargs, captured.name)
        if strategy == "lanes":
            return build_lanes(captured, recapture, stacks=stacks)
        built = [sequential_path(captured, stacks=stacks)]
        try:
            for name, build in (("lanes", lambda: build_lanes(captured, recapture, stacks=stacks)),
                                ("tiles", lambda: _tiles(captured))):  # fmt: skip
                try:
                    built.append(build())
                except Exception as exc:  # noqa: BLE001 - any failure costs that candidate, loudly
                    why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                    warnings.warn(
                        f"auto: {name} not possible, choosing among the others ({why})", stacklevel=2
                    )
        except BaseException:
            _close_all(built)
            raise
        return _fastest(built, captured)
    return SequentialExecutor(captured, device=device)


def _tiles(captured: Captured) -> Any:
    from pathweave.tiles.strategy import TilesStrategy

    return TilesStrategy(captured)


def _streams(captured: Captured, strategy: str) -> Any:
    """Opara streams; under "auto", the faster of them and the single-stream CUDA Graph (or eager)."""
    from pathweave.streams.strategy import StreamsStrategy

    if strategy == "streams":
        return StreamsStrategy(captured)
    try:
        single = StreamsStrategy(captured, policy="single")
    except Exception as exc:  # noqa: BLE001 - any capture failure: run eagerly, loudly
        warnings.warn(f"auto: no CUDA graph could be captured, running eagerly ({exc})", stacklevel=3)
        return SequentialExecutor(captured, device="cuda")
    try:
        streams = StreamsStrategy(captured)
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"auto: streams not possible, running the sequential CUDA Graph ({exc})", stacklevel=3)
        return single
    return _fastest([single, streams], captured, sync=torch.cuda.synchronize)


def _fastest(built: list[Any], captured: Captured, sync: Any = None) -> Any:
    """The fastest of the built strategies, timed on the example inputs in rounds of a rotating order;
    the others are closed. Each timed call follows an idle gap (CPU) and one untimed call, as the bench
    does: thread pools that spin after a call (the tile engines linger 3 ms) then slow only their own
    untimed call, not the next strategy's timed one. A strategy other than the first (the baseline)
    that fails while timed is dropped with a warning. ``sync`` waits for asynchronous work (CUDA)."""
    if len(built) == 1:  # nothing to choose from
        built[0].auto_times_ms = {}
        return built[0]
    flat = [t.to("cuda") if sync is not None else t for t in captured.example_inputs]
    times: dict[int, list[float]] = {i: [] for i in range(len(built))}

    def call(i: int) -> None:
        built[i].run_flat(flat)
        if sync is not None:
            sync()

    try:
        _time_rounds(built, times, call, gap=sync is None)
    except BaseException:
        _close_all(built)
        raise
    medians = {i: statistics.median(t) for i, t in times.items()}
    keep = built[min(medians, key=medians.__getitem__)]
    _close_all([fn for fn in built if fn is not keep])
    keep.auto_times_ms = {_label(built[i]): m * 1e3 for i, m in medians.items()}  # what it was chosen on
    return keep


def _time_rounds(built: list[Any], times: dict[int, list[float]], call: Any, gap: bool) -> None:
    """``AUTO_ROUNDS`` rounds of a rotating order; a failing strategy (not the first) leaves ``times``."""
    for r in range(-1, AUTO_ROUNDS):  # round -1: one warm-up call each
        for i in [(r + j) % len(built) for j in range(len(built))]:
            if i not in times:
                continue
            try:
                if gap:
                    time.sleep(AUTO_GAP_S)
                call(i)
                t0 = time.perf_counter()
                call(i)
                if r >= 0:
                    times[i].append(time.perf_counter() - t0)
                if hasattr(built[i], "quiesce"):  # tile workers spinning would slow the next one timed
                    built[i].quiesce()
            except PathweaveError as exc:
                if i == 0:
                    raise
                warnings.warn(f"auto: {_label(built[i])} failed while timed, dropped ({exc})", stacklevel=4)
                del times[i]


def _close_all(strategies: list[Any]) -> None:
    for fn in strategies:
        if hasattr(fn, "close"):
            fn.close()


def _label(strategy: Any) -> str:
    return getattr(strategy, "label", strategy.strategy)
