"""Every zoo family as an ONNX file, through both torch exporters, run by every CPU strategy (issue 23).

Each zoo model (small inputs) is exported with ``torch.onnx.export(dynamo=True)`` and with the
TorchScript exporter (``dynamo=False``); each file that exports is run by ``pathweave.optimize(path,
*inputs, strategy=S)`` for S in sequential, lanes, tiles, auto, and compared with the PyTorch model
(the exporters fold batch norms: float sums in another order, so rtol 1e-3, atol 1e-4 of the output's
scale). Prints one row per (model, exporter) and a summary; ``--json F`` writes them.

    python experiments/onnx_zoo_families.py [--models a,b] [--json out.json]

Not a test: ~15 minutes on 2 cores (NASNet's exports alone take ~50 s); tests/frontend/test_onnx_zoo.py
runs a rotating subset in CI.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import torch

import pathweave
from pathweave import zoo
from pathweave.bench.peers import _export_to
from pathweave.errors import PathweaveError

STRATEGIES = ("sequential", "lanes", "tiles", "auto")


def _close(got: object, want: object) -> str:
    got_t = got if isinstance(got, (tuple, list)) else (got,)
    want_t = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got_t, want_t, strict=True):
        scale = float(w.abs().max()) or 1.0
        if not torch.allclose(g, w, rtol=1e-3, atol=1e-4 * scale, equal_nan=True):
            return f"wrong ({float((g - w).abs().max()):.2e})"
    return "ok"


def run(name: str, tmp: Path) -> list[dict]:
    entry = zoo.get(name)
    model, inputs = entry.build().eval(), entry.example_inputs(1, small=True)
    with torch.no_grad():
        want = model(*inputs)
    rows = []
    for exporter, dynamo in (("dynamo", True), ("torchscript", False)):
        path = tmp / f"{name}_{exporter}.onnx"
        row: dict = {"model": name, "exporter": exporter}
        start = time.perf_counter()
        try:
            _export_to(model, inputs, str(path), dynamo)
        except Exception as exc:  # the exporter's own failure: pathweave never sees a file
            row["export"] = f"export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
            rows.append(row)
            continue
        row["export_s"] = round(time.perf_counter() - start, 1)
        for strategy in STRATEGIES:
            try:
                fn = pathweave.optimize(str(path), *inputs, strategy=strategy)
                row[strategy] = _close(fn(*inputs), want)
                if strategy == "auto":
                    row["auto_chose"] = getattr(fn, "chosen", None) or type(fn).__name__
                fn.close()
            except PathweaveError as exc:
                row[strategy] = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
            except Exception as exc:  # a raw exception is a bug: shown as such
                row[strategy] = f"RAW {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.names()))
    parser.add_argument("--json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    with tempfile.TemporaryDirectory(prefix="pw-onnx-zoo-") as tmp:
        for name in args.models.split(","):
            rows += run(name, Path(tmp))
    ran = [r for r in rows if "export" not in r]
    ok = sum(r[s] == "ok" for r in ran for s in STRATEGIES)
    print(f"{len(ran)} files exported of {len(rows)}; {ok} of {len(ran) * len(STRATEGIES)} runs match")
    for r in rows:
        cells = [r.get("export") or " ".join(f"{s}:{r[s]}" for s in STRATEGIES)]
        print(f"{r['model']:16} {r['exporter']:11} {cells[0]}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
