"""Shapes as they come: ``optimize(model, x, dynamic={"batch": (1, 32), "seq": (1, 512)})``.

Every strategy plans for fixed shapes (tile grids, lane schedules, CUDA graphs are shape-specific), so a
dynamic callable keeps one plan per shape met, built on first use (logged on the ``pathweave`` logger)
and kept in a bounded least-recently-used cache (``max_plans``). The strategy is chosen at the
example's shape ("auto" times its candidates there); shapes of the same size class (every declared dim
within a factor ``RECHOOSE`` of the example's) build that strategy with its options without timing
again. Where "auto" chose, the first shape of another class (dims bucketed by powers of ``RECHOOSE``
from the example's) runs auto again at that shape, and the class keeps that choice (logged): on
ResNet-50, auto picks tiles at batch 1 while lanes are 4.6x faster at batch 8. The cost is bounded: one
auto (its candidates built and timed, 2-4x one build) per size class met, at most
``log_RECHOOSE(hi / lo) + 1`` classes per dim, each choice kept after its plan is evicted. Calls at
shapes already planned run concurrently; a shape outside the declared
ranges, or a fixed dimension that changed, is an ``InputError`` naming the dimension.

Planning a new shape captures the model again (torch.export), which patches torch globally while it
traces: the model called eagerly by another thread at that moment may fail (a torch limitation);
pathweave's own calls, which run captured graphs, are not affected.

Which dimensions a name means: "batch" is dim 0 of every tensor input, "seq" dim 1 of every input with
two or more dims; any other name gives its places, ``{"tokens": (1, 64, {0: 1, 2: 1})}`` (input index
in the flattened inputs -> dim).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from pathweave.errors import ClosedError, InputError
from pathweave.strategy import CallGuard, Strategy

log = logging.getLogger("pathweave")

#: plans kept per dynamic callable (each holds its buffers and threads)
MAX_PLANS = 8
#: a shape whose declared dims are all within this factor of the example's keeps the example's strategy;
#: another size class (bucketed by powers of it) chooses again, where auto chose (see the docstring)
RECHOOSE = 2.0
#: the dims the default names mean: name -> (dim, least rank of an input that has it)
DEFAULT_PLACES = {"batch": (0, 1), "seq": (1, 2)}


@dataclass(frozen=True)
class DynamicDim:
    """A named size that may change between calls, within ``lo..hi``, at ``places`` ((input, dim) pairs)."""

    name: str
    lo: int
    hi: int
    places: tuple[tuple[int, int], ...]


def _places(name: str, spec: tuple, leaves: list[Any]) -> tuple[tuple[int, int], ...]:
    if len(spec) == 3:
        if not isinstance(spec[2], dict):
            raise InputError(f"dynamic[{name!r}]: the third item maps input index -> dim, got {spec[2]!r}")
        places = tuple(sorted((int(i), int(d)) for i, d in spec[2].items()))
    elif name in DEFAULT_PLACES:
        dim, rank = DEFAULT_PLACES[name]
        places = tuple(
            (i, dim) for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.dim() >= rank
        )
    else:
        raise InputError(
            f"dynamic[{name!r}]: say where it is, (lo, hi, {{input_index: dim}}); only "
            f"{', '.join(DEFAULT_PLACES)} have default places"
        )
    for i, d in places:
        if not (
            0 <= i < len(leaves)
            and isinstance(leaves[i], torch.Tensor)
            and -leaves[i].dim() <= d < leaves[i].dim()
        ):
            raise InputError(f"dynamic[{name!r}]: input {i} has no dim {d}")
    return tuple((i, d % leaves[i].dim()) for i, d in places)


def parse_dynamic(dynamic: dict[str, tuple], leaves: list[Any]) -> list[DynamicDim]:
    """The declared dims, checked against the example's flattened inputs ``leaves``."""
    dims, taken = [], {}
    for name, spec in dynamic.items():
        if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
            raise InputError(f"dynamic[{name!r}] = {spec!r}; give (lo, hi) or (lo, hi, {{input: dim}})")
        lo, hi = int(spec[0]), int(spec[1])
        if not 1 <= lo <= hi:
            raise InputError(f"dynamic[{name!r}]: the range {lo}..{hi} is empty or below 1")
        dim = DynamicDim(name, lo, hi, _places(name, tuple(spec), leaves))
        if not dim.places:
            raise InputError(f"dynamic[{name!r}]: no input has that dim")
        for place in dim.places:
            if place in taken:
                raise InputError(
                    f"dynamic: input {place[0]} dim {place[1]} is both {taken[place]!r} and {name!r}"
                )
            taken[place] = name
        dims.append(dim)
    return dims


class DynamicStrategy(Strategy):
    """One plan per shape met within the declared ranges (see the module docstring)."""

    def __init__(
        self,
        build: Callable[[tuple, dict, str | None, dict | None], Strategy],
        args: tuple,
        kwargs: dict,
        dims: list[DynamicDim],
        max_plans: int = MAX_PLANS,
        rechoose: float | None = RECHOOSE,
    ) -> None:
        """``rechoose``: the size-class factor (None: the example's choice for every shape)."""
        self._build = build
        self.dims = dims
        self.max_plans = max_plans
        self.rechoose = rechoose
        leaves, self._spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        self._example = [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for t in leaves]
        self._plans: OrderedDict[tuple, Strategy] = OrderedDict()
        self._lock = threading.Lock()  # the cache
        self._building = threading.Lock()  # one plan built at a time
        first = build(args, kwargs, None, None)
        self.captured = first.captured
        self.strategy = first.strategy
        self.recipe = None  # pathweave.save takes fixed-shape callables only (yet)
        self.chosen = (first.recipe or {}).get("strategy"), (first.recipe or {}).get("options")
        self.auto_times_ms = getattr(first, "auto_times_ms", {})
        self.guard = CallGuard(f"{self.captured.name} (dynamic)", exclusive=False)
        self._example_key = self._key(leaves)
        self._auto = bool((first.recipe or {}).get("auto")) and rechoose is not None
        #: size class -> (strategy, options, auto's times): what auto chose for each class met
        self.choices: dict[tuple, tuple[str | None, dict | None, dict]] = {
            self._size_class(self._example_key): (*self.chosen, self.auto_times_ms)
        }
        self._plans[self._example_key] = first

    def _key(self, leaves: list[Any]) -> tuple:
        """The sizes of the declared dims for these inputs; InputError for anything else that differs."""
        if len(leaves) != len(self._example):
            raise InputError(
                f"{self.captured.name}: called with {len(leaves)} inputs, captured with {len(self._example)}"
            )
        sizes = {}
        for dim in self.dims:
            got = {
                leaves[i].shape[d]
                for i, d in dim.places
                if isinstance(leaves[i], torch.Tensor) and leaves[i].dim() > d
            }
            if len(got) != 1:
                raise InputError(
                    f"{self.captured.name}: dim {dim.name!r} has sizes {sorted(got)} across its inputs"
                )
            (size,) = got
            if not dim.lo <= size <= dim.hi:
                raise InputError(
                    f"{self.captured.name}: {dim.name}={size} is outside its range {dim.lo}..{dim.hi}"
                )
            sizes[dim.name] = size
        free = {place for dim in self.dims for place in dim.places}
        for i, (got, want) in enumerate(zip(leaves, self._example, strict=True)):
            self._check_fixed(i, got, want, free)
        return tuple(sizes[d.name] for d in self.dims)

    def _check_fixed(self, i: int, got: Any, want: Any, free: set[tuple[int, int]]) -> None:
        if not isinstance(got, torch.Tensor):
            return
        shape, dtype = want
        if got.dtype != dtype or got.dim() != len(shape):
            raise InputError(f"{self.captured.name}: input {i} is {got.dtype} of rank {got.dim()}, "
                             f"captured as {dtype} of rank {len(shape)}")  # fmt: skip
        for d, (g, w) in enumerate(zip(got.shape, shape, strict=True)):
            if g != w and (i, d) not in free:
                raise InputError(f"{self.captured.name}: input {i} dim {d} is {g}; it is fixed at {w} "
                                 "(declare it in dynamic= to let it change)")  # fmt: skip

    def _plan(self, key: tuple, args: tuple, kwargs: dict) -> Strategy:
        with self._lock:
            if key in self._plans:
                self._plans.move_to_end(key)
                return self._plans[key]
        with self._building:
            with self._lock:
                if key in self._plans:
                    return self._plans[key]
            plan = self._new_plan(key, args, kwargs)
            with self._lock:
                self._plans[key] = plan
                evicted = self._plans.popitem(last=False)[1] if len(self._plans) > self.max_plans else None
        if evicted is not None:
            evicted.close()  # waits for its started calls
        return plan

    def _size_class(self, key: tuple) -> tuple[int, ...]:
        """Per declared dim, how many powers of ``rechoose`` the size is from the example's (0: the same)."""
        if not self._auto:
            return ()
        pairs = zip(key, self._example_key, strict=True)
        return tuple(round(math.log(s / e, self.rechoose)) for s, e in pairs)

    def _new_plan(self, key: tuple, args: tuple, kwargs: dict) -> Strategy:
        """The plan for a new shape: the size class's strategy, chosen by auto at the first shape of a
        class other than the example's."""
        shape = ", ".join(f"{d.name}={s}" for d, s in zip(self.dims, key, strict=True))
        size_class = self._size_class(key)
        if size_class in self.choices:
            strategy, options, _ = self.choices[size_class]
            log.info("%s: new shape %s, planning %s", self.captured.name, shape, strategy)
            return self._build(args, kwargs, strategy, options)
        t0 = time.perf_counter()
        plan = self._build(args, kwargs, None, None)  # the example's settings: auto, timed at this shape
        recipe = plan.recipe or {}
        times = getattr(plan, "auto_times_ms", {})
        self.choices[size_class] = (recipe.get("strategy"), recipe.get("options"), times)
        log.info("%s: new shape %s, another size class than the example's: auto chose %s in %.1f s (%s)",
                 self.captured.name, shape, plan.label, time.perf_counter() - t0,
                 ", ".join(f"{k} {v:.2f} ms" for k, v in times.items()))  # fmt: skip
        return plan

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.guard.call():
            leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
            if spec != self._spec:
                raise InputError(
                    f"{self.captured.name}: inputs are structured as {spec}, captured with {self._spec}"
                )
            key = self._key(leaves)
            for _ in range(3):  # a plan evicted between lookup and call is planned again
                try:
                    return self._plan(key, args, kwargs)(*args, **kwargs)
                except ClosedError:
                    if self.guard.closed:
                        raise
            raise InputError(
                f"{self.captured.name}: more shapes in use at once than max_plans={self.max_plans}"
            )

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[Any, ...]:
        args, kwargs = pytree.tree_unflatten(flat, self._spec)
        return pytree.tree_leaves(self(*args, **kwargs))

    @property
    def plans(self) -> int:
        """Shapes planned and kept now."""
        return len(self._plans)

    @property
    def label(self) -> str:
        return f"{self._plans[next(iter(self._plans))].label if self._plans else self.strategy} (dynamic)"

    def _free(self) -> None:
        with self._lock:
            plans, self._plans = list(self._plans.values()), OrderedDict()
        for plan in plans:
            plan.close()
