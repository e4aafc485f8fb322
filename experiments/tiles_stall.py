"""Experiment (issue 20): the tile runtime's wake-up stall on small models, measured per call.

Not part of the package. A call of strategy ``tiles`` right after an ATen call (the sequential path, as
a benchmark's other candidate or an island's neighbour would run it) found OpenMP's worker thread still
spinning on the core the woken tile worker runs on; some calls then took one scheduler tick (~4 ms)
more than the others. This script alternates calls of the two paths on a few small models and prints
the distribution of the tiles calls alone: median, p90, max and how many took over ``--slow`` ms more
than the median.

Protocols (``--protocol``, several allowed):
- ``after-seq``: each timed tiles call comes right after a sequential-path call, the tile workers parked
  before it (what ``pathweave bench`` does: ``quiesce`` after every timed call);
- ``after-seq-warm``: the same without parking (workers still lingering from the call before);
- ``gap``: each timed tiles call 50 ms after a sequential call (OpenMP's threads asleep by then);
- ``back``: tiles calls back to back.

Run from the repository root (PYTHONPATH: this checkout, not an installed copy):
``PYTHONPATH=. python experiments/tiles_stall.py [--models vit,llama,squeezenet1_0] [--calls 120]``.
Models: ``vit`` (transformers ViT, 64x64 image, patches of 8, 2 layers of width 128, random weights),
``llama`` (LlamaForCausalLM, width 256, 2 layers, 4 heads, 2 KV heads, vocabulary 1000, 64 tokens: tile
islands with ATen between them) and any name of ``pathweave.zoo``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

import pathweave
import pathweave.zoo as zoo
from pathweave.strategy import Strategy


class _Logits(torch.nn.Module):
    """A Hugging Face model returning its logits (or last hidden state) alone, as a tensor."""

    def __init__(self, model: torch.nn.Module, key: str) -> None:
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(x), self.key)


def _vit() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=256)  # fmt: skip
    torch.manual_seed(0)
    return _Logits(ViTModel(config).eval(), "last_hidden_state"), (torch.randn(1, 3, 64, 64),)


def _llama() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=512, vocab_size=1000, use_cache=False)  # fmt: skip
    torch.manual_seed(0)
    return _Logits(LlamaForCausalLM(config).eval(), "logits"), (torch.randint(0, 1000, (1, 64)),)


def _model(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    if name == "vit":
        return _vit()
    if name == "llama":
        return _llama()
    spec = zoo.get(name)
    return spec.build(), spec.example_inputs()


def _protocol(name: str, seq: Strategy, tiles: Strategy, inputs: tuple, calls: int) -> list[float]:
    """Milliseconds of each timed tiles call under protocol ``name`` (module docstring)."""
    times = []
    for _ in range(calls):
        if name != "back":
            seq(*inputs)
        if name == "after-seq":
            tiles.quiesce()
        if name == "gap":
            time.sleep(0.05)
        start = time.perf_counter()
        tiles(*inputs)
        times.append((time.perf_counter() - start) * 1e3)
    tiles.quiesce()
    return times


def _line(model: str, protocol: str, times: list[float], slow_ms: float) -> str:
    ordered = sorted(times)
    median = statistics.median(ordered)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    slow = sum(t > median + slow_ms for t in ordered)
    mean = statistics.fmean(ordered)
    return (f"{model:>14} {protocol:>15}  median {median:7.3f}  p90 {p90:7.3f}  max {ordered[-1]:7.3f}  "
            f"mean {mean:7.3f}  > median+{slow_ms:g} ms: {slow}/{len(ordered)}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vit,llama,squeezenet1_0")
    parser.add_argument("--protocol", default="after-seq,after-seq-warm,gap,back")
    parser.add_argument("--calls", type=int, default=120)
    parser.add_argument("--slow", type=float, default=2.0, help="a call this many ms over the median is slow")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in args.models.split(","):
        model, inputs = _model(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seq = pathweave.optimize(model, *inputs, strategy="sequential")
            tiles = pathweave.optimize(model, *inputs, strategy="tiles")
        print(f"{name}: {tiles.summary()}")
        for _ in range(20):
            seq(*inputs), tiles(*inputs)
        for protocol in args.protocol.split(","):
            times = _protocol(protocol, seq, tiles, inputs, args.calls)
            print(_line(name, protocol, times, args.slow), flush=True)
        seq.close(), tiles.close()


if __name__ == "__main__":
    main()
