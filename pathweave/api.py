"""The public API: ``analyze`` and ``optimize``."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .analyze import Analysis, analyze_captured
from .capture import Captured, capture
from .errors import InputError
from .execute import SequentialExecutor

#: strategies ``optimize`` knows; bench candidates are named "pathweave:<strategy>"
STRATEGIES = ("auto", "sequential")


def _captured(model: Any, inputs: tuple, kwargs: dict) -> Captured:
    if isinstance(model, Captured):
        return model
    if isinstance(model, str) and not inputs:
        from .zoo.load import load_model

        loaded = load_model(model)
        return capture(loaded.model, *loaded.inputs, name=loaded.name)
    return capture(model, *inputs, **kwargs)


def analyze(model: Any, *inputs: Any, measure: bool = False, **kwargs: Any) -> Analysis:
    """Work, critical path and parallelism of ``model`` called on ``inputs``.

    ``model`` is an nn.Module, ExportedProgram, ``.pt2`` path, a ``Captured`` graph, or a zoo name
    (then ``inputs`` may be omitted). ``measure=True`` adds statistics from measured node times.
    """
    return analyze_captured(_captured(model, inputs, kwargs), measure=measure)


def optimize(
    model: Any, *inputs: Any, strategy: str = "auto", device: str | None = None, **kwargs: Any
) -> SequentialExecutor:
    """A callable that returns ``model``'s outputs, run by the chosen strategy.

    The graph is captured for the shapes and dtypes of ``inputs``; calling it with others raises
    ``InputError``. ``device`` defaults to the inputs' device. Today "auto" is "sequential": the fast
    sequential path; parallel strategies plug in here as they land.
    """
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    captured = _captured(model, inputs, kwargs)
    if device is None:
        device = str(captured.example_inputs[0].device) if captured.example_inputs else "cpu"
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise InputError("device='cuda' was asked for but CUDA is not available")
    if strategy == "auto" and captured.method != "export":
        warnings.warn(
            f"{captured.name}: captured by fx tracing; the fast CPU path needs torch.export", stacklevel=2
        )
    return SequentialExecutor(captured, device=device)
