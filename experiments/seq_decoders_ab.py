"""Experiment (issue 21, item 5): the sequential path against eager PyTorch on decoders, per ISA level.

Not part of the package. Issue 21 saw ``pathweave:sequential`` slower than eager on an AVX2-only Zen 3
(a Llama-style decoder, 47.8 vs 40.8 ms). Here each level runs in a subprocess of its own with the
libraries forced to it (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``, ``PATHWEAVE_ISA``), and each
decoder (random weights, 128 tokens, 8 layers of hidden 512 / intermediate 1408, 8 heads, 4 KV heads;
configs written to OUT) runs four ways, interleaved:

- eager: the transformers module;
- sequential: ``SequentialExecutor`` with the FAST_CPU pipeline;
- sequential - fuse_linear: the pipeline without the oneDNN linear rewrite (linears on MKL, as eager);
- plain: the captured graph, no rewrites (what export changes by itself: materialised causal mask,
  ``repeat_kv`` copies for grouped-query attention).

Timed on one thread in the calling thread's CPU time (the 2 cores here are shared with other work;
with 2 OpenMP threads every op's barrier waits on a descheduled thread and wall times of the same run
spread 2-20x), median of the rounds.

Run: ``flock /tmp/pw-bench.lock python experiments/seq_decoders_ab.py [--rounds 8] [--out /tmp/pw-seq-ab]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's pathweave

LEVELS = {
    "avx512": {"PATHWEAVE_ISA": "avx512"},
    "avx2": {"PATHWEAVE_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
MODELS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "mistral": "MistralConfig"}
SIZE = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
            num_key_value_heads=4, vocab_size=32000, use_cache=False,
            max_position_embeddings=512)  # fmt: skip


def write_configs(out: Path) -> None:
    import transformers

    for name, cls in MODELS.items():
        getattr(transformers, cls)(**SIZE).save_pretrained(out / name)


def measure(path: Path, rounds: int) -> dict:
    """Median ms per variant of one decoder at this process's level."""
    import torch

    from pathweave.frontend.capture import capture
    from pathweave.passes.pipeline import FAST_CPU
    from pathweave.sequential import SequentialExecutor
    from pathweave.zoo.load import load_model

    torch.set_num_threads(1)
    lm = load_model(f"hf:{path}")
    captured = capture(lm.model, *lm.inputs)
    no_linear = tuple(p for p in FAST_CPU if not p.__name__.endswith("fuse_linear"))
    runs = {
        "eager": lm.model,
        "sequential": SequentialExecutor(captured, threads=1),
        "sequential - fuse_linear": SequentialExecutor(captured, threads=1, pipeline=no_linear),
        "plain": SequentialExecutor(captured, threads=1, fast=False),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        for f in runs.values():
            f(*lm.inputs)
        for _ in range(rounds):
            for k, f in runs.items():
                t0 = time.thread_time()
                f(*lm.inputs)
                times[k].append((time.thread_time() - t0) * 1e3)
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"aten": torch.backends.cpu.get_cpu_capability(), "ms": medians}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/pw-seq-ab"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the per-model, per-level subprocess
    args = ap.parse_args()
    if args.one:
        warnings.filterwarnings("ignore")
        print(json.dumps(measure(args.one, args.rounds)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    write_configs(args.out)
    load0, rows = os.getloadavg(), []
    from pathweave.machine import ISA_LEVELS, cpu_isa

    runnable = ISA_LEVELS[ISA_LEVELS.index(cpu_isa()) :]  # the CPU's level and those below it
    for name in MODELS:
        for isa, env in LEVELS.items():
            if isa not in runnable:
                continue
            cmd = [sys.executable, __file__, "--one", str(args.out / name), "--rounds", str(args.rounds)]
            run = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True)
            got = json.loads(run.stdout.strip().splitlines()[-1])
            rows.append({"model": name, "isa": isa, **got})
            ms = got["ms"]
            print(f"{name:8s} {isa:6s} ({got['aten']}): "
                  + "  ".join(f"{k} {v:.1f}" for k, v in ms.items())
                  + f"  sequential/eager {ms['sequential'] / ms['eager']:.3f}", flush=True)  # fmt: skip
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": [load0, os.getloadavg()]}
    (args.out / "seq_decoders_ab.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(meta)


if __name__ == "__main__":
    main()
