"""``torch.compile(model, backend="pathweave")``: each graph dynamo hands over is optimized by pathweave.

Registered through the ``torch_dynamo_backends`` entry point (pyproject.toml), so importing pathweave
registers nothing. Dynamo passes a model's parameters and buffers as graph inputs; the backend freezes
them into the graph as constants (as inductor's ``freezing=True`` does), because the strategies pack
weights once at build time. A call whose weights were replaced or changed in place since (their
identity or version counter differs) rebuilds first, with a warning: nothing stale is ever run.

What the backend cannot take falls back, with a warning naming why: graphs with symbolic sizes (dynamic
shapes), calls that need gradients, graphs pathweave refuses. ``fallback`` picks "inductor" (default) or
"eager". Settings: ``torch.compile(m, backend="pathweave", options={"strategy": "tiles", ...})``;
``strategy`` and ``fallback`` are the backend's, the rest go to ``pathweave.optimize(options=...)``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from pathweave.api import NAMES, optimize
from pathweave.errors import ClosedError, InputError, PathweaveError

#: the backend's own settings; anything else in ``options`` is the strategy's
FALLBACKS = ("inductor", "eager")


class BackendFallbackWarning(UserWarning):
    """pathweave did not take a graph (or one call of it) and ran the fallback instead."""


def _is_weight(node: torch.fx.Node) -> bool:
    """Whether dynamo lifted this placeholder from a module's parameters or buffers."""
    arg = node.meta.get("grapharg")
    source = getattr(arg, "source", None)
    if source is None:
        return False
    from torch._dynamo.source import is_from_unspecialized_param_buffer_source

    name = source.name if isinstance(source.name, str) else source.name()
    return (
        is_from_unspecialized_param_buffer_source(source) or "._parameters[" in name or "._buffers[" in name
    )


def _freeze(gm: torch.fx.GraphModule, weights: dict[int, torch.Tensor]) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose placeholders at positions ``weights`` read constants (the tensors given)."""
    frozen = torch.fx.GraphModule(gm, torch.fx.Graph())
    frozen.graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder" and position in weights:
            attr = f"_pw_frozen_{position}"
            frozen.register_buffer(attr, weights[position].detach(), persistent=False)
            env[node] = frozen.graph.get_attr(attr)
        else:
            env[node] = frozen.graph.node_copy(node, lambda n: env[n])
        position += node.op == "placeholder"
    frozen.recompile()
    return frozen


def _version(t: torch.Tensor) -> int:
    """``t``'s in-place version counter; -1 for inference tensors, which keep none."""
    try:
        return t._version
    except RuntimeError:
        return -1


class CompiledGraph:
    """What the backend returns for one dynamo graph: pathweave's strategy on the frozen graph, rebuilt
    when the weights it froze change, the fallback for calls it cannot take."""

    def __init__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor], strategy: str, options: dict
    ) -> None:
        self.gm = gm
        self.strategy_name = strategy
        self.options = options
        places = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.weight_at = [i for i, n in enumerate(places) if _is_weight(n)]
        self._lock = threading.Lock()
        self.data_at = [i for i, n in enumerate(places) if not _is_weight(n)]
        self._build(list(example_inputs))

    def _build(self, args: list[torch.Tensor]) -> None:
        weights = {i: args[i] for i in self.weight_at}
        self.seen = [(id(args[i]), _version(args[i])) for i in self.weight_at]
        frozen = _freeze(self.gm, weights)
        data = [args[i] for i in self.data_at]
        with torch.no_grad():
            self.compiled = optimize(frozen, *data, strategy=self.strategy_name, options=self.options)

    def _weights_changed(self, args: Sequence[Any]) -> bool:
        return [(id(args[i]), _version(args[i])) for i in self.weight_at] != self.seen

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            warnings.warn(
                f"pathweave backend: {self.gm.__class__.__name__} called with gradients on; pathweave "
                "runs inference only, so this call runs eagerly",
                BackendFallbackWarning,
                stacklevel=2,
            )
            return self.gm(*args)
        data = [args[i] for i in self.data_at]
        while True:
            with self._lock:  # one thread rebuilds; the others then call the new build
                if self._weights_changed(args):
                    why = "the model's weights changed since the graph was optimized; optimizing again"
                    warnings.warn(f"pathweave backend: {why}", BackendFallbackWarning, stacklevel=2)
                    self.compiled.close()  # waits for the calls already started on it
                    self._build(list(args))
                compiled = self.compiled
            try:
                out = compiled(*data)
            except ClosedError:
                if compiled is self.compiled:
                    raise
                continue  # replaced by another thread's rebuild between lookup and call
            return out if isinstance(out, (tuple, list)) else (out,)


def _fallback(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], how: str, why: str) -> Callable:
    warnings.warn(f"pathweave backend: {why}; running this graph with {how}", BackendFallbackWarning,
                  stacklevel=3)  # fmt: skip
    if how == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, list(example_inputs))
    return gm.forward


def _settings(options: dict[str, Any] | None) -> tuple[str, str, dict[str, Any]]:
    rest = dict(options or {})
    strategy = rest.pop("strategy", "auto")
    fallback = rest.pop("fallback", "inductor")
    if strategy not in NAMES:
        raise InputError(f"backend option strategy={strategy!r}; one of {', '.join(NAMES)}")
    if fallback not in FALLBACKS:
        raise InputError(f"backend option fallback={fallback!r}; one of {', '.join(FALLBACKS)}")
    return strategy, fallback, rest


def pathweave_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict[str, Any] | None = None
) -> Callable:
    """dynamo's backend entry: ``gm`` and its example inputs -> a callable with the same inputs and
    outputs. ``options`` are ``torch.compile``'s (see the module docstring)."""
    strategy, fallback, rest = _settings(options)
    if not all(isinstance(a, torch.Tensor) for a in example_inputs):
        kinds = sorted({type(a).__name__ for a in example_inputs if not isinstance(a, torch.Tensor)})
        return _fallback(gm, example_inputs, fallback, f"inputs of type {', '.join(kinds)} (dynamic shapes "
                         "are not taken yet: torch.compile(..., dynamic=False))")  # fmt: skip
    try:
        return CompiledGraph(gm, example_inputs, strategy, rest)
    except PathweaveError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _fallback(gm, example_inputs, fallback, f"{type(exc).__name__}: {first}")
