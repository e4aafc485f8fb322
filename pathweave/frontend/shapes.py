"""Reading shapes and dtypes off fx nodes, whichever way the graph was captured."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.errors import UnsupportedError


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def tensor_specs(node: torch.fx.Node) -> list[TensorSpec]:
    """Every tensor a node produces (one for most ops, several for tuple outputs). A size that depends
    on the data (``nonzero``, boolean indexing) raises ``UnsupportedError`` naming the node."""
    val = node.meta.get("val")
    if val is None and "tensor_meta" in node.meta:
        val = node.meta["tensor_meta"]
    try:
        return _specs(val)
    except _DataDependent as exc:
        raise UnsupportedError(
            f"node {node.format_node()} has a size that depends on the input's values ({exc}); this "
            "needs static shapes: use strategy 'sequential', or avoid nonzero / boolean indexing",
            ops=[str(node.target)],
        ) from exc


class _DataDependent(Exception):
    pass


def _dim(d: object) -> int:
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt) and d.node.has_hint():  # a backed symbol: its example value
        return int(d.node.hint)
    raise _DataDependent(str(d))


def tensor_spec(node: torch.fx.Node) -> TensorSpec | None:
    """The node's single tensor output, or None when it produces none or several."""
    specs = tensor_specs(node)
    return specs[0] if len(specs) == 1 else None


def _specs(val: object) -> list[TensorSpec]:
    if val is None:
        return []
    shape, dtype = getattr(val, "shape", None), getattr(val, "dtype", None)
    if shape is not None and isinstance(dtype, torch.dtype):  # a tensor, or fx's TensorMetadata tuple
        return [TensorSpec(tuple(_dim(d) for d in shape), dtype)]
    if isinstance(val, (list, tuple)):
        return [s for v in val for s in _specs(v)]
    return []
