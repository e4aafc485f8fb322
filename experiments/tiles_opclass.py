"""Experiment (issue 20): each tile kernel's time inside a model against the ATen op it replaces, per class.

Not part of the package. For each model, strategy "tiles" is built with one worker; every tile program
(the whole model, or each island) is profiled with the kernels timing themselves (``profile_layers``:
kernel time per layer, summed over its tiles). The same rewritten graph of each program is then run
node by node by PyTorch on one thread, timing each node. Both are grouped by op class (the node's ATen
op name; fused tile ops under their fused name, against the ATen nodes they replaced, which share the
fused node's name prefix only where fusion kept it, so fused rows compare whole chains) and printed as
medians over ``--rounds`` rounds, interleaved.

Run: ``python experiments/tiles_opclass.py [--models llama,unet,...] [--rounds 9]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from collections import defaultdict
from collections.abc import Callable

import torch

import pathweave
from pathweave.machine import cpu_isa, cpu_model
from pathweave.tiles.profile import profile_layers


def _hf(
    cfg_cls: str, model_cls: str, key: str, x: torch.Tensor, **kw: object
) -> tuple[torch.nn.Module, torch.Tensor]:
    import transformers

    cfg = getattr(transformers, cfg_cls)(**kw)
    torch.manual_seed(0)
    inner = getattr(transformers, model_cls)(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return getattr(self.m(t), key)

    return Wrap().eval(), x


def models() -> dict[str, Callable[[], tuple[torch.nn.Module, torch.Tensor]]]:
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(1))
    img = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    dec = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=1000, use_cache=False)  # fmt: skip
    bert = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    return {
        "llama": lambda: _hf("LlamaConfig", "LlamaForCausalLM", "logits", ids, **dec),
        "vit": lambda: _hf(
            "ViTConfig", "ViTModel", "last_hidden_state", img, image_size=64, patch_size=8, **bert
        ),
        "swin": lambda: _hf(
            "SwinConfig",
            "SwinModel",
            "last_hidden_state",
            img,
            image_size=64,
            patch_size=4,
            embed_dim=32,
            depths=[2, 2],
            num_heads=[2, 4],
            window_size=4,
        ),  # fmt: skip
        "segformer": lambda: _hf("SegformerConfig", "SegformerForSemanticSegmentation", "logits", img),
        "unet": lambda: (pathweave.load_model("unet").model.eval(), torch.randn(1, 3, 128, 128)),
        "efficientnet_b0": lambda: (
            pathweave.load_model("efficientnet_b0").model.eval(),
            torch.randn(1, 3, 224, 224),
        ),  # fmt: skip
        "mobilevit_xs": lambda: (
            pathweave.load_model("mobilevit_xs").model.eval(),
            torch.randn(1, 3, 256, 256),
        ),  # fmt: skip
    }


def _programs(fast: object) -> list[object]:
    """The TilesStrategy objects of a tiles build: itself (whole) or each island's."""
    islands = getattr(fast, "islands", None)
    return [i.tiles for i in islands] if islands is not None else [fast]


def _aten_times(gm: torch.fx.GraphModule, inputs: list[torch.Tensor], reps: int = 7) -> dict[str, float]:
    """ms per node of ``gm``: each ATen call timed alone on the values that reach it (median of ``reps``
    calls; no interpreter overhead counted)."""
    env: dict[torch.fx.Node, object] = {}
    times: dict[str, float] = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            env[n] = out = super().run_node(n)
            return out

    with torch.no_grad():
        Keep(gm).run(*inputs)
        for n in gm.graph.nodes:
            if n.op != "call_function":
                continue
            args = torch.fx.node.map_arg(n.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
            calls = []
            for _ in range(reps):
                t0 = time.perf_counter()
                n.target(*args, **kwargs)
                calls.append((time.perf_counter() - t0) * 1e3)
            times[n.name] = statistics.median(calls)
    return times


def _island_inputs(strategy: object) -> list[torch.Tensor]:
    return list(strategy.captured.example_inputs)


def measure(name: str, build: Callable[[], tuple[torch.nn.Module, torch.Tensor]], rounds: int) -> dict:
    model, x = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = pathweave.optimize(
            torch.export.export(model, (x,)), x, strategy="tiles", options={"threads": 1}
        )
    tile_ms: dict[str, list[float]] = defaultdict(list)
    aten_ms: dict[str, list[float]] = defaultdict(list)
    torch.set_num_threads(1)
    for r in range(rounds + 1):  # round 0 warms up
        t_round: dict[str, float] = defaultdict(float)
        a_round: dict[str, float] = defaultdict(float)
        for s in _programs(fast):
            inputs = _island_inputs(s)
            names = [str(n) for n in s.graph.layer_names]
            ops = dict(zip(names, (str(o) for o in s.graph.layer_ops), strict=True))
            for lt in profile_layers(s.program, names, lambda s=s, i=inputs: s.run_flat(i), runs=1):
                t_round[ops[lt.layer]] += lt.ms
            op_of = {
                n.name: str(getattr(n.target, "__name__", n.target)).split(".")[0] for n in s.gm.graph.nodes
            }
            for node, ms in _aten_times(s.gm, inputs).items():
                if node in ops:  # the layer's own node, run by ATen
                    a_round[ops[node]] += ms
                else:
                    a_round[f"({op_of[node]})"] += ms
        if r == 0:
            continue
        for k, v in t_round.items():
            tile_ms[k].append(v)
        for k, v in a_round.items():
            aten_ms[k].append(v)
    fast.close()
    return {k: (statistics.median(tile_ms[k]) if k in tile_ms else None,
                statistics.median(aten_ms[k]) if k in aten_ms else None)
            for k in sorted(set(tile_ms) | set(aten_ms))}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=",".join(models()))
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"# {cpu_model()} ({cpu_isa()}), {os.cpu_count()} cores, torch {torch.__version__}, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}, {when}")  # fmt: skip
    print("| model | op class | tile kernels ms | ATen ms | tiles / ATen |\n|---|---|---|---|---|")
    table = models()
    for name in args.models.split(","):
        for op, (t, a) in measure(name, table[name], args.rounds).items():
            if op.startswith("("):
                continue  # nodes without a tile layer (views folded into their readers)
            ratio = f"{t / a:.2f}" if t is not None and a else "-"
            cells = ["-" if v is None else f"{v:.3f}" for v in (t, a)]
            print(f"| {name} | {op} | {cells[0]} | {cells[1]} | {ratio} |")
    print(f"# load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
