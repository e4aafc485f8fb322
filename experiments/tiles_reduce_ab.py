"""Experiment (issue 20, op set): native/tile_reduce.c's kernels inside models, against the ATen op they
replace, in one process.

Not part of the package. Per op, a model with it between convolutions or linear layers, built three ways
and timed in interleaved rounds (rotating order), medians quoted:
  tiles   the row ``tiles`` now: the op a tile kernel (one island, or the model whole)
  before  the row ``tiles`` with the op's row as it was (no range map, or no kernel): the op runs in ATen
          between tile islands
  seq     pathweave's sequential path (ATen throughout)
and the op alone (``op(x * 2) + 1``: tiles against ATen with the same threads).

Run: ``flock /tmp/pw-bench.lock python experiments/tiles_reduce_ab.py [--rounds 40] [--threads 1]
[--only alone]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

import pathweave
from pathweave.tiles.ops import TILE_OPS


class SqueezeExcite(torch.nn.Module):
    """conv 3x3 64 -> 64, x * sigmoid(fc(mean over positions)), conv 3x3, on 1x64x56x56."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.Conv2d(64, 64, 3, padding=1)
        self.fc1, self.fc2 = torch.nn.Conv2d(64, 16, 1), torch.nn.Conv2d(16, 64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.a(x))
        x = x * torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))
        return self.b(x)


class SpatialGate(torch.nn.Module):
    """CBAM's spatial gate: conv 3x3 32 -> 32, cat(amax, mean over channels), conv 7x7 2 -> 1, sigmoid,
    x * gate, conv 3x3, on 1x32x56x56."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.Conv2d(32, 32, 3, padding=1)
        self.gate = torch.nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.a(x))
        pooled = torch.cat([x.amax(1, keepdim=True), x.mean(1, keepdim=True)], 1)
        return self.b(x * torch.sigmoid(self.gate(pooled)))


class Standardise(torch.nn.Module):
    """linear 256 -> 256, (x - mean) / std over features (var and std kernels), linear, on 128 rows."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        x = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5) + x.var(-1, keepdim=True)
        return self.b(x)


class GroupNormBlock(torch.nn.Module):
    """A U-Net residual block: GroupNorm(32, 64), SiLU, conv 3x3, twice, plus the input, on 1x64x32x32."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = torch.nn.GroupNorm(32, 64), torch.nn.GroupNorm(32, 64)
        self.c1, self.c2 = torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c2(F.silu(self.n2(self.c1(F.silu(self.n1(x))))))


class RmsNormMlp(torch.nn.Module):
    """linear 512 -> 512, transformers' LlamaRMSNorm, linear, on 128 rows."""

    def __init__(self) -> None:
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        self.a, self.b, self.norm = torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), LlamaRMSNorm(512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.norm(self.a(x)))


class ShiftedWindows(torch.nn.Module):
    """Swin's shifted-window block without attention on 1x56x56x96, window 7: roll, partition, layer norm,
    linear, merge, roll back."""

    def __init__(self, channels: int = 96, window: int = 7) -> None:
        super().__init__()
        self.window, self.norm = window, torch.nn.LayerNorm(channels)
        self.mix = torch.nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        k, s = self.window, self.window // 2
        shifted = torch.roll(x, shifts=(-s, -s), dims=(1, 2))
        win = shifted.view(b, h // k, k, w // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, k * k, c)
        win = self.mix(self.norm(win))
        out = win.view(b, h // k, w // k, k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return x + torch.roll(out, shifts=(s, s), dims=(1, 2))


class MaskedConv(torch.nn.Module):
    """conv 3x3 32 -> 32, where((x > 0) & (x < 3), x, 0.1 x), conv 3x3, on 1x32x56x56."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        return self.b(torch.where((x > 0) & (x < 3), x, 0.1 * x))


class Alone(torch.nn.Module):
    def __init__(self, op: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x * 2.0) + 1.0


#: name -> (model, input, the rows as they were: None removes one, "bind" leaves its map without a kernel)
CASES: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...], dict[str, str | None]]] = {
    "mean (SE)": (SqueezeExcite, (1, 64, 56, 56), {"mean": "bind"}),
    "amax+mean (CBAM)": (SpatialGate, (1, 32, 56, 56), {"mean": "bind", "amax": "bind"}),
    "mean+var+std": (Standardise, (128, 256), {"mean": "bind", "var": None, "std": None}),
    "group_norm (U-Net)": (GroupNormBlock, (1, 64, 32, 32), {"group_norm": None}),
    "rms_norm (Llama)": (RmsNormMlp, (128, 512), {"mean": "bind"}),
    "roll (Swin)": (ShiftedWindows, (1, 56, 56, 96), {"roll": None}),
    "gt+lt+and (where)": (MaskedConv, (1, 32, 56, 56), {"gt": "bind", "lt": "bind", "__and__": "bind"}),
    "alone: mean(2,3)": (lambda: Alone(lambda x: x.mean((2, 3))), (1, 256, 56, 56), {}),
    "alone: amax(1)": (lambda: Alone(lambda x: x.amax(1)), (1, 256, 56, 56), {}),
    "alone: mean(-1)": (lambda: Alone(lambda x: x.mean(-1, keepdim=True)), (2048, 512), {}),
    "alone: var(-1)": (lambda: Alone(lambda x: x.var(-1)), (2048, 512), {}),
    "alone: group_norm": (lambda: Alone(torch.nn.GroupNorm(32, 256)), (1, 256, 56, 56), {}),
    "alone: roll": (lambda: Alone(lambda x: torch.roll(x, (-3, -3), (1, 2))), (1, 56, 56, 96), {}),
    "alone: where(x>0)": (lambda: Alone(lambda x: torch.where(x > 0, x, -x)), (1, 256, 56, 56), {}),
}


@contextlib.contextmanager
def rows_as_before(before: dict[str, str | None]) -> Iterator[None]:
    saved = {op: TILE_OPS[op] for op in before}
    try:
        for op, how in before.items():
            if how is None:
                del TILE_OPS[op]
            else:
                TILE_OPS[op] = dataclasses.replace(TILE_OPS[op], bind=None)
        yield
    finally:
        TILE_OPS.update(saved)


def _medians(fns: dict[str, Callable[[], object]], rest: dict[str, Callable[[], None]], rounds: int) -> dict:
    times: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    for fn in fns.values():
        fn()
    for r in range(rounds):
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
            rest[k]()  # the tile workers park instead of spinning beside ATen's threads
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--threads", type=int, default=None, help="the tiles' workers and ATen's threads")
    parser.add_argument("--only", default="", help="cases whose name holds this")
    args = parser.parse_args()
    options = {"threads": args.threads} if args.threads else {}
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    head = f"{'case':20s} {'tiles ms':>9s} {'before ms':>10s} {'seq ms':>8s} {'tiles/before':>13s}"
    print(f"{head} {'islands':>8s}")
    for name, (make, shape, before) in CASES.items():
        if args.only not in name:
            continue
        model, x = make().eval(), torch.randn(shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fns = {
                s: pathweave.optimize(model, x, strategy=s, options=options) for s in ("tiles", "sequential")
            }
            if before:
                with rows_as_before(before):
                    fns["before"] = pathweave.optimize(model, x, strategy="tiles", options=options)
        islands = {k: len(getattr(f, "islands", [None])) for k, f in fns.items() if k != "sequential"}
        with torch.no_grad():
            want = model(x)
            for k, f in fns.items():
                torch.testing.assert_close(f(x), want, rtol=1e-3, atol=1e-3, msg=f"{name} {k}")
            calls = {k: (lambda f=f, x=x: f(x)) for k, f in fns.items()}
            m = _medians(calls, {k: f.quiesce for k, f in fns.items()}, args.rounds)
        b = m.get("before", float("nan"))
        isl = f"{islands['tiles']}/{islands.get('before', '-')}"
        print(
            f"{name:20s} {m['tiles']:9.3f} {b:10.3f} {m['sequential']:8.3f} {m['tiles'] / b:13.2f} {isl:>8s}"
        )
        for f in fns.values():
            f.close()


if __name__ == "__main__":
    main()
