"""The public API: ``analyze`` and ``optimize``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from pathweave.analysis.analyze import Analysis, analyze_captured
from pathweave.auto import build, build_auto
from pathweave.dynamic import DynamicStrategy, parse_dynamic
from pathweave.errors import InputError
from pathweave.frontend.capture import capture
from pathweave.frontend.graph import Captured
from pathweave.strategy import AUTO, STRATEGIES, Strategy, entry

#: what ``optimize`` accepts as ``strategy``: "auto" and the rows of ``strategy.STRATEGIES``; bench
#: candidates are named "pathweave:<strategy>"
NAMES = ("auto", *STRATEGIES)


def _captured(model: Any, inputs: tuple, kwargs: dict) -> tuple[Captured, Any]:
    """The captured graph, and the model it came from (a zoo name resolved to its module)."""
    if isinstance(model, Captured):
        return model, model
    model, inputs, name = _resolve(model, inputs)
    return capture(model, *inputs, name=name, **kwargs), model


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
    return analyze_captured(_captured(model, inputs, kwargs)[0], measure=measure)


def optimize(
    model: Any,
    *inputs: Any,
    strategy: str = "auto",
    device: str | None = None,
    stacks: bool = False,
    options: dict[str, Any] | None = None,
    dynamic: dict[str, tuple] | None = None,
    **kwargs: Any,
) -> Strategy:
    """A callable that returns ``model``'s outputs, run by ``strategy``: "auto" or a row of
    ``pathweave.strategy.STRATEGIES`` ("sequential", "lanes", "stacks", "streams", "tiles"; the README's
    Layout and docs/ say what each does). "auto" builds ``strategy.AUTO``'s candidates for the device
    (CPU: sequential, lanes, tiles; CUDA: the single-stream and the Opara CUDA Graphs), times them on the
    example inputs and keeps the fastest, so it is never slower than the baseline it was timed against.

    ``options``: keyword settings of the strategy's builder (e.g. ``{"winograd_min_channels": 10**9}``
    for "tiles"); under "auto", one dict per strategy name. ``stacks=True`` adds BrainSlug's stacks where
    the strategy takes them (sequential becomes "stacks"; lanes and auto on CPU); elsewhere InputError.
    The graph is captured for the shapes and dtypes of ``inputs``; calling the result with others
    raises ``InputError``, unless ``dynamic`` declares ranges (``{"batch": (1, 32), "seq": (1, 512)}``;
    see ``pathweave.dynamic``): then each new shape within them is planned on first use. ``device``
    defaults to the inputs' device. ``kwargs`` go to the model.
    """
    if dynamic is not None:
        return _dynamic(model, inputs, kwargs, dynamic, strategy=strategy, device=device, stacks=stacks,
                        options=options)  # fmt: skip
    row = None if strategy == "auto" else entry(strategy)
    if row is not None and stacks and row.stacks is False:
        raise InputError(f"stacks=True: stacks do not run inside strategy {strategy!r} yet")
    captured, model = _captured(model, inputs, kwargs)
    kind = _kind(device or (str(captured.example_inputs[0].device) if captured.example_inputs else "cpu"))
    kind = row.device_for(kind, asked=device is not None) if row is not None else kind
    context = {"device": device or kind, "recapture": _recapture(model, kwargs, captured.name)}
    if row is not None:
        return build(row.name, captured, context, dict(options or {}), stacks)
    if captured.method != "export":
        warnings.warn(f"{captured.name}: captured by fx tracing; the fast CPU path needs torch.export",
                      stacklevel=2)  # fmt: skip
    if stacks and not any(STRATEGIES[n].stacks for n, _ in AUTO[kind]):
        raise InputError(f"stacks=True with strategy 'auto' runs on CPU; on {kind.upper()} use 'stacks'")
    return build_auto(captured, kind, context, stacks, options or {})


def _dynamic(model: Any, inputs: tuple, kwargs: dict, dynamic: dict, **settings: Any) -> Strategy:
    """``optimize`` with ``dynamic=``: one plan per shape met (``pathweave.dynamic``)."""
    if isinstance(model, Captured):
        raise InputError("dynamic= needs the model itself (a Captured graph has fixed shapes)")
    if not isinstance(dynamic, dict) or not dynamic:
        raise InputError(f"dynamic= maps dim names to (lo, hi) ranges, got {dynamic!r}")
    model, inputs, _ = _resolve(model, inputs)
    first = dict(settings)

    def build(args: tuple, kw: dict, strategy: str | None, options: dict | None) -> Strategy:
        chosen = first if strategy is None else {**first, "strategy": strategy, "options": options}
        return optimize(model, *args, **chosen, **kw)

    leaves = pytree.tree_leaves((tuple(inputs), dict(kwargs)))
    return DynamicStrategy(build, tuple(inputs), kwargs, parse_dynamic(dynamic, leaves))


def _kind(device: str) -> str:
    """The device type pathweave runs on: 'cpu' or 'cuda' (InputError for anything else)."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"device={device!r} is not a device; use 'cpu' or 'cuda'") from exc
    if kind not in ("cpu", "cuda"):
        raise InputError(f"device={device!r}: pathweave runs on 'cpu' or 'cuda'")
    if kind == "cuda" and not torch.cuda.is_available():
        raise InputError("device='cuda' was asked for but CUDA is not available")
    return kind
