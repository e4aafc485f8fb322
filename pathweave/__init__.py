"""pathweave: capture a model's dataflow graph, find its independent paths, run them at once.

Quick start::

    import pathweave
    stats = pathweave.analyze(model, x)          # work, critical path, parallelism
    fast = pathweave.optimize(model, x)          # a callable with the model's outputs
    y = fast(x)
    with pathweave.CoExecutor() as co:           # requests of tiles strategies run together
        y = co.submit(pathweave.optimize(model, x, strategy="tiles"), x).result()

Importing pathweave does nothing but define names; submodules load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "load_model": "pathweave.zoo.load",
    "STRATEGIES": "pathweave.api:NAMES",  # the names optimize accepts
    "CoExecutor": "pathweave.tiles.coexec",
    "PathweaveError": "pathweave.errors",
    "InputError": "pathweave.errors",
    "UnknownModelError": "pathweave.errors",
    "CaptureError": "pathweave.errors",
    "UnsupportedError": "pathweave.errors",
    "PlanError": "pathweave.errors",
    "ExecutionError": "pathweave.errors",
    "ClosedError": "pathweave.errors",
    "MissingDependencyError": "pathweave.errors",
    "save": "pathweave.saved",  # pathweave.save(fast, "model.pw"): strategy chosen, options, graph
    "load": "pathweave.saved",
}

__all__ = [
    "STRATEGIES",
    "CaptureError",
    "ClosedError",
    "CoExecutor",
    "ExecutionError",
    "InputError",
    "MissingDependencyError",
    "PathweaveError",
    "PlanError",
    "UnknownModelError",
    "UnsupportedError",
    "__version__",
    "analyze",
    "capture",
    "load_model",
    "load",
    "optimize",
    "save",
]

if TYPE_CHECKING:
    from pathweave.api import NAMES as STRATEGIES
    from pathweave.errors import (
        CaptureError,
        ClosedError,
        ExecutionError,
        InputError,
        MissingDependencyError,
        PathweaveError,
        PlanError,
        UnknownModelError,
        UnsupportedError,
    )
    from pathweave.saved import load, save
    from pathweave.tiles.coexec import CoExecutor
    from pathweave.zoo.load import load_model


def analyze(model: Any, *inputs: Any, measure: bool = False, **kwargs: Any) -> Any:
    """Work, critical path and parallelism of ``model``; see ``pathweave.api.analyze``."""
    from pathweave.api import analyze as _analyze

    return _analyze(model, *inputs, measure=measure, **kwargs)


def capture(model: Any, *inputs: Any, **kwargs: Any) -> Any:
    """The whole model as one torch.fx graph with shapes; see ``pathweave.frontend.capture``."""
    from pathweave.frontend.capture import capture as _capture

    return _capture(model, *inputs, **kwargs)


def optimize(
    model: Any,
    *inputs: Any,
    strategy: str = "auto",
    device: str | None = None,
    options: dict[str, Any] | None = None,
    dynamic: dict[str, tuple] | None = None,
    **kwargs: Any,
) -> Any:
    """A callable with ``model``'s outputs, run by ``strategy`` with its ``options``, for the shapes of
    ``inputs`` or any within the ``dynamic`` ranges; see ``pathweave.api.optimize``."""
    from pathweave.api import optimize as _optimize

    return _optimize(model, *inputs, strategy=strategy, device=device, options=options, dynamic=dynamic,
                     **kwargs)  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attr or name)
    raise AttributeError(f"module 'pathweave' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
