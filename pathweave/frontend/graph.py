"""``Captured``: the one graph form every later stage reads."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.fx
import torch.utils._pytree as pytree

from pathweave.errors import InputError

Method = Literal["export", "fx", "onnx"]


@dataclass(frozen=True)
class FixedInput:
    """An input whose value was baked into the graph at capture (an ONNX graph input that sets a shape,
    axes or pads): the graph is only right for that value, so every call must pass it again."""

    index: int
    name: str
    value: torch.Tensor
    use: str  # what it sets, for the error: "Reshape's shape"

    def matches(self, got: torch.Tensor) -> bool:
        if self.value.is_floating_point():
            return torch.allclose(got, self.value, rtol=0.0, atol=0.0, equal_nan=True)
        return torch.equal(got, self.value)


@dataclass
class Captured:
    """A whole model as a torch.fx GraphModule in inference form.

    ``gm`` takes the flat tensor inputs and returns a flat tuple of outputs; parameters and buffers are
    attributes read by ``get_attr`` nodes. Every node that produces a tensor has a shape and dtype
    (``shapes.tensor_spec``). ``in_spec``/``out_spec`` restore the caller's nesting of inputs and outputs.
    """

    gm: torch.fx.GraphModule
    in_spec: pytree.TreeSpec
    out_spec: pytree.TreeSpec
    example_inputs: tuple[torch.Tensor, ...]
    method: Method
    name: str = "model"
    fixed: tuple[FixedInput, ...] = ()  # inputs whose values the graph was specialised on

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.out_spec_unflatten(self.gm(*self.flatten_inputs(args, kwargs)))

    def flatten_inputs(self, args: tuple, kwargs: dict | None = None) -> list[torch.Tensor]:
        """Flatten and check the inputs against the captured shapes and dtypes; raise InputError if off."""
        if not kwargs and self._positional() and all(isinstance(a, torch.Tensor) for a in args):
            # tensors passed one by one as they were captured: no walk of the tree (it runs cold, ~0.2 ms)
            flat, spec = list(args), self.in_spec if len(args) == len(self.example_inputs) else None
        else:
            flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
        if len(flat) != len(self.example_inputs):
            raise InputError(
                f"{self.name}: called with {len(flat)} input(s), the graph takes {len(self.example_inputs)}: "
                f"{describe(self.example_inputs)}"
            )
        if spec != self.in_spec:
            raise InputError(f"{self.name}: inputs are structured as {spec}, captured with {self.in_spec}")
        for i, (got, want) in enumerate(zip(flat, self.example_inputs, strict=True)):
            if not isinstance(got, torch.Tensor):
                raise InputError(f"{self.name}: input {i} is a {type(got).__name__}, expected a tensor")
            if got.shape != want.shape or got.dtype != want.dtype:
                raise InputError(
                    f"{self.name}: input {i} has shape {tuple(got.shape)} and dtype {got.dtype}; the graph "
                    f"was captured for {tuple(want.shape)} {want.dtype} (capture again for other shapes)"
                )
            if got.layout != torch.strided:
                raise InputError(
                    f"{self.name}: input {i} has layout {got.layout}; pass a dense tensor (.to_dense())"
                )
            if got.device.type != want.device.type:
                raise InputError(
                    f"{self.name}: input {i} is on {got.device}; the graph was captured on {want.device} "
                    f"(move it with .to('{want.device.type}'))"
                )
        for f in self.fixed:
            if not f.matches(flat[f.index].to(f.value.device)):
                raise InputError(
                    f"{self.name}: input {f.index} ({f.name!r}) sets {f.use}, so the graph was specialised "
                    f"on its value {f.value.tolist()}; this call passes {flat[f.index].tolist()} (optimize "
                    "again for other values)"
                )
        return flat

    def out_spec_unflatten(self, flat: Any) -> Any:
        if self.out_spec.is_leaf():  # one tensor returned
            (value,) = flat
            return value
        return pytree.tree_unflatten(list(flat), self.out_spec)

    def _positional(self) -> bool:
        """Whether ``in_spec`` is that of positional tensors only (``flatten_inputs``' fast path); kept for
        the ``in_spec`` it was found for (a loaded plan sets its own after construction)."""
        spec, positional = self.__dict__.get("_positional_of", (None, False))
        if spec is not self.in_spec:
            positional = pytree.tree_flatten((tuple(self.example_inputs), {}))[1] == self.in_spec
            self.__dict__["_positional_of"] = (self.in_spec, positional)
        return positional

    def graph_hash(self) -> str:
        """Stable hash of the graph's code and input signature, for caches."""
        sig = ";".join(f"{tuple(t.shape)}:{t.dtype}" for t in self.example_inputs)
        return hashlib.sha256((self.gm.code + sig).encode()).hexdigest()[:16]


def describe(values: Any) -> str:
    """``(2, 3) torch.float32, ...`` for a sequence of tensors (other values as their short repr)."""
    return ", ".join(f"{tuple(v.shape)} {v.dtype}" if isinstance(v, torch.Tensor) else repr(v)[:40]
                     for v in values)  # fmt: skip


def attr_value(gm: torch.fx.GraphModule, target: str) -> Any:
    """What a ``get_attr`` node with this target reads (``a.b.c`` walks submodules)."""
    obj: Any = gm
    for part in str(target).split("."):
        obj = getattr(obj, part)
    return obj
