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
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "load_model": "pathweave.zoo.load",
    "STRATEGIES": "pathweave.api",
    "CoExecutor": "pathweave.execute.coexec",
    "PathweaveError": "pathweave.errors",
    "InputError": "pathweave.errors",
    "UnknownModelError": "pathweave.errors",
    "CaptureError": "pathweave.errors",
    "UnsupportedError": "pathweave.errors",
    "PlanError": "pathweave.errors",
    "ExecutionError": "pathweave.errors",
    "ClosedError": "pathweave.errors",
    "MissingDependencyError": "pathweave.errors",
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
    "optimize",
]

if TYPE_CHECKING:
    from .api import STRATEGIES
    from .errors import (
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
    from .execute.coexec import CoExecutor
    from .zoo.load import load_model


def analyze(model: Any, *inputs: Any, measure: bool = False, **kwargs: Any) -> Any:
    """Work, critical path and parallelism of ``model``; see ``pathweave.api.analyze``."""
    from .api import analyze as _analyze

    return _analyze(model, *inputs, measure=measure, **kwargs)


def capture(model: Any, *inputs: Any, **kwargs: Any) -> Any:
    """The whole model as one torch.fx graph with shapes; see ``pathweave.capture.capture``."""
    from .capture import capture as _capture

    return _capture(model, *inputs, **kwargs)


def optimize(
    model: Any, *inputs: Any, strategy: str = "auto", device: str | None = None, **kwargs: Any
) -> Any:
    """A callable with ``model``'s outputs, run by ``strategy``; see ``pathweave.api.optimize``."""
    from .api import optimize as _optimize

    return _optimize(model, *inputs, strategy=strategy, device=device, **kwargs)


#: public functions that share their name with a subpackage
_SHADOWED = ("analyze", "capture")


class _Package(types.ModuleType):
    """Keeps the functions ``analyze`` and ``capture`` when the subpackages of the same names are
    imported (the import system would otherwise overwrite the attribute with the module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pathweave' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
