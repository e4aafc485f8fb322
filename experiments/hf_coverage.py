"""Experiment (issue 20): strategy "tiles" on 12 transformers architectures, as a user's ``.pt2`` file.

Not part of the package. Each architecture is built from a small ``transformers`` config with random
weights (seed 0), wrapped in a module that returns one tensor (``last_hidden_state`` or ``logits``),
exported with ``torch.export`` and saved as ``OUT/<name>.pt2``. Then, per model:

1. ``pathweave.optimize(ep, x, strategy="tiles")``: does it build, does it match eager (max abs diff),
   what it built (``TilesStrategy`` whole or ``IslandsStrategy`` with n islands), its coverage (FLOP
   share inside tiles, the ops left outside);
2. ``pathweave.optimize(ep, x)`` (auto): what it keeps and the times it chose on (``auto_times_ms``);
3. ``pathweave bench OUT/<name>.pt2`` in a subprocess, tiles / sequential / ONNX Runtime / OpenVINO,
   ``uptime`` before and after.

Run: ``python experiments/hf_coverage.py [--only vit,swin] [--rounds 15] [--out /tmp/pw] [--no-bench]``.
Writes ``OUT/hf_coverage.md`` (the table), ``OUT/hf_coverage.json`` and ``OUT/bench_<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

CANDIDATES = "pathweave:sequential,pathweave:tiles,ort:seq,ort:par,openvino"
PEERS = ("ort:seq", "ort:par", "openvino")


class Wrap(torch.nn.Module):
    """A transformers model returning one tensor: ``logits`` where it has them, else ``last_hidden_state``."""

    def __init__(self, model: torch.nn.Module, key: str) -> None:
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(x), self.key)


def _image(size: int) -> torch.Tensor:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1234))


def _ids(vocab: int, seq: int) -> torch.Tensor:
    return torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(1234))


def _text(cfg_cls: str, seq: int = 32, **kw: object) -> tuple:
    return cfg_cls, dict(vocab_size=1000, **kw), _ids(1000, seq)


def specs() -> dict[str, tuple[str, str, str, dict, torch.Tensor]]:
    """name -> (config class, model class, output key, config kwargs, input)."""
    bert = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    dec = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=1000, use_cache=False)  # fmt: skip
    return {
        "mobilenetv2": ("MobileNetV2Config", "MobileNetV2Model", "last_hidden_state",
                        dict(image_size=96, depth_multiplier=0.5), _image(96)),
        "convnext": ("ConvNextConfig", "ConvNextModel", "last_hidden_state",
                     dict(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], image_size=64), _image(64)),
        "regnet": ("RegNetConfig", "RegNetModel", "last_hidden_state",
                   dict(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1],
                        groups_width=16), _image(64)),
        "resnet": ("ResNetConfig", "ResNetModel", "last_hidden_state",
                   dict(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                        layer_type="basic"), _image(64)),
        "vit": ("ViTConfig", "ViTModel", "last_hidden_state",
                dict(image_size=64, patch_size=8, **bert), _image(64)),
        "swin": ("SwinConfig", "SwinModel", "last_hidden_state",
                 dict(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                      window_size=4), _image(64)),
        "mobilevit": ("MobileViTConfig", "MobileViTModel", "last_hidden_state",
                      dict(image_size=64, hidden_sizes=[48, 64, 80],
                           neck_hidden_sizes=[16, 16, 24, 32, 48, 64, 160]), _image(64)),
        "distilbert": ("DistilBertConfig", "DistilBertModel", "last_hidden_state",
                       dict(vocab_size=1000, dim=128, n_layers=2, n_heads=4, hidden_dim=256), _ids(1000, 32)),
        "roberta": ("RobertaConfig", "RobertaModel", "last_hidden_state",
                    dict(vocab_size=1000, **bert), _ids(1000, 32)),
        "albert": ("AlbertConfig", "AlbertModel", "last_hidden_state",
                   dict(vocab_size=1000, embedding_size=64, **bert), _ids(1000, 32)),
        "llama": ("LlamaConfig", "LlamaForCausalLM", "logits", dec, _ids(1000, 64)),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "logits", dec, _ids(1000, 64)),
    }  # fmt: skip


#: variants with batch norms calibrated (one train-mode pass on random data): with transformers' init
#: (conv weights std 0.02) and fresh statistics their outputs shrink to 1e-23 (MobileNetV2) and 1e-42,
#: a denormal (MobileViT), so any comparison with eager passes vacuously
CALIBRATED = {"mobilenetv2-cal": "mobilenetv2", "mobilevit-cal": "mobilevit"}


def export(name: str, spec: tuple, out: Path) -> tuple[torch.export.ExportedProgram, torch.Tensor, str]:
    import transformers

    cfg_cls, model_cls, key, kw, x = spec
    cfg = getattr(transformers, cfg_cls)(**kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Wrap(getattr(transformers, model_cls)(cfg).eval(), key).eval()
        if name in CALIBRATED:
            from pathweave.zoo import _calibrate_norms

            _calibrate_norms(model, (torch.randn(4, *x.shape[1:]),))
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
    torch.export.save(ep, out / f"{name}.pt2")
    return ep, x, ", ".join(f"{k}={v}" for k, v in kw.items() if k not in ("use_cache",))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__module__}.{type(exc).__name__}: {text[0] if text else ''}"


def probe_tiles(ep: torch.export.ExportedProgram, x: torch.Tensor) -> dict:
    """Build tiles, compare with eager, read what was built and its coverage."""
    import pathweave
    from pathweave.errors import PathweaveError

    row: dict = {}
    with torch.no_grad():
        ref = ep.module()(x)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = pathweave.optimize(ep, x, strategy="tiles")
        row["warnings"] = [str(w.message).splitlines()[0] for w in caught]
    except Exception as exc:  # noqa: BLE001 - the point is to record any failure
        row.update(runs=False, error=_first_line(exc), raw=not isinstance(exc, PathweaveError),
                   traceback="".join(traceback.format_exception(exc)[-6:]))  # fmt: skip
        return row
    row["build_s"] = time.perf_counter() - t0
    try:
        with torch.no_grad():
            out = s(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
        row.update(runs=True, max_abs_diff=float((out - ref).abs().max()),
                   ref_scale=float(ref.abs().max()))  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        row.update(runs=False, error=_first_line(exc), raw=not isinstance(exc, PathweaveError),
                   traceback="".join(traceback.format_exception(exc)[-6:]))  # fmt: skip
    row["built"] = type(s).__name__
    cov = getattr(s, "coverage", None)
    if cov is not None:
        row.update(share=cov.share, islands=cov.islands, outside=dict(cov.outside))
    else:
        row.update(share=1.0, islands=1, outside={})
    row["summary"] = s.summary() if hasattr(s, "summary") else ""
    s.close() if hasattr(s, "close") else None
    return row


def probe_auto(ep: torch.export.ExportedProgram, x: torch.Tensor) -> dict:
    import pathweave

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = pathweave.optimize(ep, x)
    except Exception as exc:  # noqa: BLE001
        return {"auto_error": _first_line(exc)}
    res = {"auto_picks": getattr(s, "label", type(s).__name__),
           "auto_times_ms": dict(getattr(s, "auto_times_ms", {}))}  # fmt: skip
    s.close() if hasattr(s, "close") else None
    return res


def uptime() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def bench(name: str, out: Path, rounds: int) -> dict:
    path = out / f"bench_{name}.json"
    before = uptime()
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "pathweave", "bench", str(out / f"{name}.pt2"), "--candidates", CANDIDATES,
           "--rounds", str(rounds), "--quiet", "--json", str(path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    res = {"load_before": before, "load_after": uptime(), "bench_s": time.perf_counter() - t0}
    if proc.returncode != 0:  # the file refused: the same program, handed over in memory
        res["bench_error"] = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        cmd = [sys.executable, __file__, "--bench-module", name, "--rounds", str(rounds), "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        res["load_after"] = uptime()
        if proc.returncode != 0:
            res["bench_error"] += (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return res
        res["bench_in_memory"] = True
    d = json.loads(path.read_text())
    res["bench"] = {c["name"]: {"status": c["status"], "ms": c["median_ms"], "diff": c["max_abs_diff"],
                                "note": c["note"]} for c in d["candidates"]}  # fmt: skip
    res["bench_text"] = proc.stdout
    return res


def bench_module(name: str, out: Path, rounds: int) -> None:
    """``pathweave bench``'s harness on the exported program in memory (for files the loader refuses)."""
    from pathweave.bench import harness
    from pathweave.zoo.load import LoadedModel

    all_specs = specs()
    ep, x, _ = export(name, all_specs[CALIBRATED.get(name, name)], out)
    harness.load_model = lambda spec, batch=1: LoadedModel(name, ep, (x,))
    report = harness.run_bench(name, CANDIDATES.split(","), rounds, progress=False)
    (out / f"bench_{name}.json").write_text(json.dumps(report.to_dict(), indent=2))


def _ms(b: dict, name: str) -> str:
    c = b.get(name)
    if not c:
        return "-"
    if c["ms"] is None:
        return c["status"]
    return f"{c['ms']:.2f}" + ("" if c["status"] == "ok" else f" ({c['status']})")


def _peer(b: dict) -> str:
    ok = [(c["ms"], n) for n, c in b.items() if n in PEERS and c["ms"] is not None and c["status"] == "ok"]
    return f"{min(ok)[1]} {min(ok)[0]:.2f}" if ok else "-"


def _auto(r: dict) -> str:
    if "auto_error" in r:
        return f"error: {r['auto_error']}"
    times = ", ".join(f"{k} {v:.2f}" for k, v in r.get("auto_times_ms", {}).items())
    return f"{r.get('auto_picks', '?')} ({times})"


def table(rows: dict[str, dict]) -> str:
    head = (
        "| model | config | tiles runs? | matches? | built as | FLOP share in tiles "
        "| ops outside (counts) | tiles ms | sequential ms | best peer (name ms) "
        "| auto picks (auto_times_ms) | load before/after |"
    )
    lines = [head, "|" + "---|" * 12]
    for name, r in rows.items():
        runs = "yes" if r.get("runs") else f"NO: {r.get('error', '?')}"
        diff = r.get("max_abs_diff")
        ok = diff is not None and diff <= 1e-3 * max(1.0, r["ref_scale"])
        match = "-" if diff is None else f"{'yes' if ok else 'NO'} ({diff:.1e})"
        built = r.get("built", "-")
        if built == "IslandsStrategy":
            built = f"islands {r.get('islands')}"
        elif built == "TilesStrategy":
            built = "whole"
        share = f"{100 * r['share']:.1f}%" if "share" in r else "-"
        outside = ", ".join(f"{op} x{n}" for op, n in r.get("outside", {}).items()) or "none"
        b = r.get("bench", {})
        tiles = _ms(b, "pathweave:tiles") if b else "; ".join(r.get("bench_error", ["-"]))
        if r.get("bench_in_memory"):
            tiles += " (in memory: .pt2 refused)"
        lines.append(f"| {name} | {r.get('config', '')} | {runs} | {match} | {built} | {share} | {outside} | "
                     f"{tiles} | {_ms(b, 'pathweave:sequential')} | {_peer(b)} | {_auto(r)} | "
                     f"{r.get('load_before', '-')} / {r.get('load_after', '-')} |")  # fmt: skip
    return "\n".join(lines)


def machine() -> str:
    flags = Path("/proc/cpuinfo").read_text()
    cpu = next((ln.split(":", 1)[1].strip() for ln in flags.splitlines() if ln.startswith("model name")), "?")
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "generic"
    import transformers

    return (f"Machine: {cpu}, ISA {isa}, {os.cpu_count()} cores, torch {torch.__version__}, transformers "
            f"{transformers.__version__}, Python {platform.python_version()}; load {uptime()} at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", help="comma-separated model names")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--out", type=Path, default=Path("/tmp/pw"))
    p.add_argument("--no-bench", action="store_true")
    p.add_argument("--bench-module", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.bench_module:
        bench_module(args.bench_module, args.out, args.rounds)
        return
    all_specs = specs()
    all_specs.update({k: all_specs[v] for k, v in CALIBRATED.items()})
    names = args.only.split(",") if args.only else list(all_specs)
    results_path = args.out / "hf_coverage.json"
    rows: dict[str, dict] = json.loads(results_path.read_text()) if results_path.exists() else {}
    for name in names:
        print(f"== {name} (load {uptime()})", flush=True)
        row: dict = {}
        try:
            ep, x, row["config"] = export(name, all_specs[name], args.out)
            row["config"] += ", BN calibrated" if name in CALIBRATED else ""
        except Exception as exc:  # noqa: BLE001
            row.update(runs=False, error=f"export: {_first_line(exc)}")
            rows[name] = row
            continue
        row.update(probe_tiles(ep, x))
        row.update(probe_auto(ep, x))
        if not args.no_bench:
            row.update(bench(name, args.out, args.rounds))
        rows[name] = row
        shown = {k: v for k, v in row.items() if k != "bench_text"}
        print(json.dumps(shown, indent=1, default=str), flush=True)
        results_path.write_text(json.dumps(rows, indent=1, default=str))
    ordered = {n: rows[n] for n in all_specs if n in rows}
    text = f"{machine()}\n\n{table(ordered)}\n"
    (args.out / "hf_coverage.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
