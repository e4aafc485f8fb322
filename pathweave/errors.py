"""The exceptions pathweave raises.

Every error a user can cause is a ``PathweaveError``; catching that one class is enough::

    PathweaveError
    ├── InputError            bad arguments: not a module, wrong input shape or dtype, unknown strategy
    │   └── UnknownModelError a zoo name, prefix or file that names no model
    ├── CaptureError          the model could not be captured as one whole graph
    ├── UnsupportedError      a graph holds ops a strategy or converter cannot run (lists them)
    ├── PlanError             a plan failed its own verify()
    ├── ExecutionError        running a plan failed; names the node that raised
    │   └── ClosedError       the optimized callable was closed; optimize again to run it
    └── MissingDependencyError an optional extra is not installed; says what to pip install

Messages name the node (``node.format_node()``) or the module that failed and what to do about it.
"""

from __future__ import annotations


class PathweaveError(Exception):
    """Base of every error pathweave raises on purpose."""


class InputError(PathweaveError, ValueError):
    """The caller passed something pathweave cannot use."""


class UnknownModelError(InputError, KeyError):
    """A model name or path that resolves to nothing."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CaptureError(PathweaveError):
    """The model could not be captured whole; nothing partial is ever returned."""


class UnsupportedError(PathweaveError):
    """The graph holds ops that the chosen strategy or converter does not support."""

    def __init__(self, message: str, ops: list[str] | None = None, nodes: list[str] | None = None) -> None:
        super().__init__(message)
        self.ops = list(ops or [])
        self.nodes = list(nodes or [])  # the refused nodes by name, where the refusal knows them


class PlanError(PathweaveError):
    """A plan failed verification: some data edge is not ordered or synchronised."""


class ExecutionError(PathweaveError):
    """Running a plan failed; ``node`` names the graph node that raised."""

    def __init__(self, message: str, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class ClosedError(ExecutionError):
    """A call to an optimized callable after its ``close()``."""


class MissingDependencyError(PathweaveError, ImportError):
    """An optional extra is needed; the message says which ``pip install`` fixes it."""


def require(module: str, extra: str):
    """Import an optional dependency lazily, or raise ``MissingDependencyError`` with an install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except Exception as exc:  # a broken install fails with more than ImportError (e.g. torchvision here)
        raise MissingDependencyError(
            f"{module} is needed for this; install it with: pip install 'pathweave[{extra}]' ({exc})"
        ) from exc
