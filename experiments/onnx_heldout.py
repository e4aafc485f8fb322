"""Experiment (issue 23 acceptance): ONNX files as users bring them, from architectures the zoo lacks.

Not part of the package. Each model (a transformers config, small, random weights, seed 0, offline) is
exported by BOTH torch exporters (``torch.onnx.export(..., dynamo=True)`` with ``dynamic_shapes`` and
``dynamo=False`` with ``dynamic_axes``) with a symbolic batch dimension, at opsets 13, 17 and the newest
each exporter writes. Each file is then loaded by pathweave from its path and run at batch 1 and 3:

* opset 17: strategies ``sequential``, ``lanes``, ``tiles`` and ``auto``;
* the other opsets: ``sequential``.

Every output is compared with ONNX Runtime on the same file (pathweave's own cross-check is off, so the
converter alone must be right), within ``RTOL`` of the reference's scale (max |y|). A result is
``pass``, ``refuse`` (a pathweave error: the reason is kept), ``wrong`` or ``raw`` (any other
exception). Where ONNX Runtime rejects the file itself (the dynamo exporter's opset-17 down-conversion
of GPT-2 writes Split with opset 18's ``num_outputs``), pathweave is judged against the module in
eager. An all-zero reference counts as ``wrong`` (norm scales are randomised so that none is). An export
the exporter itself cannot write is ``export-fail``, not counted against pathweave. One subprocess
per (model, exporter): a crash in native code costs only that pair.

The external-data path is checked too: the opset-17 TorchScript export of each model is re-saved with
``onnx.save_model(..., save_as_external_data=True)`` and run by ``sequential``.

Run: ``python experiments/onnx_heldout.py [--only bert,gpt2] [--out /tmp/pw-onnx-heldout]``.
Writes ``OUT/onnx_heldout.md`` and ``OUT/onnx_heldout.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's pathweave
from hf_coverage import Wrap, _first_line  # noqa: E402

RTOL = 1e-3
BATCHES = (1, 3)
#: the opset at which every strategy runs; the others run sequential only
MAIN_OPSET = 17
STRATEGIES = ("sequential", "lanes", "tiles", "auto")
EXPORTERS = ("dynamo", "torchscript")

Spec = tuple[Callable[..., nn.Module], Callable[[int], torch.Tensor]]


def _hf(cfg_cls: str, model_cls: str, key: str, kw: dict, x: Callable[[int], torch.Tensor]) -> Spec:
    def make(eager: bool = False) -> nn.Module:
        """The model; ``eager`` attention for opsets the SDPA export lacks (TorchScript needs 14)."""
        import transformers

        torch.manual_seed(0)
        cfg = getattr(transformers, cfg_cls)(**kw)
        if eager:
            cfg._attn_implementation = "eager"
        return Wrap(_calibrate(_random_norms(getattr(transformers, model_cls)(cfg)), x(4)).eval(), key)

    return make, x


def _random_norms(model: nn.Module) -> nn.Module:
    """Norm layers with random scales and shifts: transformers initialises some scales to 0
    (MobileViT's and EfficientNet's last batch norms), which zeroes the output and makes any comparison
    pass vacuously."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if not isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)):
                continue
            for name, lo, hi in (("weight", 0.5, 1.5), ("bias", -0.2, 0.2), ("running_var", 0.5, 1.5),
                                 ("running_mean", -0.2, 0.2)):  # fmt: skip
                t = getattr(m, name, None)
                if isinstance(t, torch.Tensor):
                    t.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)
    return model


def _calibrate(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """Batch-norm statistics from one train-mode pass (cumulative averages): with transformers' small
    initial weights, activations shrink layer by layer and the eval-mode output of a deep CNN becomes a
    constant whatever the input, against which any comparison passes vacuously."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(x)
    return model.eval()


def _ids(batch: int, seq: int = 24) -> torch.Tensor:
    return torch.randint(0, 1000, (batch, seq), generator=torch.Generator().manual_seed(batch))


def _img(size: int) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randn(b, 3, size, size, generator=torch.Generator().manual_seed(b))


def _wav(b: int) -> torch.Tensor:
    return torch.randn(b, 4000, generator=torch.Generator().manual_seed(b))


def _mel(b: int) -> torch.Tensor:
    return torch.randn(b, 80, 200, generator=torch.Generator().manual_seed(b))


def specs() -> dict[str, Spec]:
    bert = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    text = dict(vocab_size=1000, max_position_embeddings=64, **bert)
    img = _img(64)
    wav = dict(bert, conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    return {
        "bert": _hf("BertConfig", "BertModel", "last_hidden_state", text, _ids),
        "distilbert": _hf(
            "DistilBertConfig",
            "DistilBertModel",
            "last_hidden_state",
            dict(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64),
            _ids,
        ),  # fmt: skip
        "roberta": _hf(
            "RobertaConfig", "RobertaModel", "last_hidden_state", dict(text, pad_token_id=1), _ids
        ),
        "gpt2": _hf(
            "GPT2Config",
            "GPT2LMHeadModel",
            "logits",
            dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False),
            _ids,
        ),  # fmt: skip
        "t5-encoder": _hf(
            "T5Config",
            "T5EncoderModel",
            "last_hidden_state",
            dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
            _ids,
        ),  # fmt: skip
        "vit": _hf(
            "ViTConfig", "ViTModel", "last_hidden_state", dict(image_size=64, patch_size=8, **bert), img
        ),
        "deit": _hf(
            "DeiTConfig", "DeiTModel", "last_hidden_state", dict(image_size=64, patch_size=8, **bert), img
        ),
        "swin": _hf(
            "SwinConfig",
            "SwinModel",
            "last_hidden_state",
            dict(
                image_size=64,
                patch_size=4,
                embed_dim=32,
                depths=[1, 1, 2],
                num_heads=[2, 4, 8],
                window_size=4,
            ),
            img,
        ),  # fmt: skip
        "convnext": _hf(
            "ConvNextConfig",
            "ConvNextModel",
            "last_hidden_state",
            dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1]),
            img,
        ),  # fmt: skip
        "resnet-hf": _hf(
            "ResNetConfig",
            "ResNetModel",
            "last_hidden_state",
            dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
            img,
        ),  # fmt: skip
        "mobilevit": _hf(
            "MobileViTConfig",
            "MobileViTModel",
            "last_hidden_state",
            dict(image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 160]),
            img,
        ),  # fmt: skip
        "efficientnet": _hf(
            "EfficientNetConfig",
            "EfficientNetModel",
            "last_hidden_state",
            dict(image_size=64, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320),
            img,
        ),  # fmt: skip
        "segformer": _hf(
            "SegformerConfig",
            "SegformerForSemanticSegmentation",
            "logits",
            dict(
                depths=[1, 1, 1, 1],
                hidden_sizes=[16, 32, 64, 128],
                decoder_hidden_size=64,
                num_attention_heads=[1, 2, 4, 8],
                num_labels=8,
            ),
            img,
        ),  # fmt: skip
        "whisper-encoder": _hf(
            "WhisperConfig",
            "WhisperForAudioClassification",
            "logits",
            dict(
                d_model=64,
                encoder_layers=2,
                decoder_layers=1,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=128,
                decoder_ffn_dim=128,
                num_mel_bins=80,
                max_source_positions=100,
                num_labels=4,
            ),
            _mel,
        ),  # fmt: skip
        "wav2vec2": _hf("Wav2Vec2Config", "Wav2Vec2Model", "last_hidden_state", wav, _wav),
    }


# ---------------------------------------------------------------- export


def newest_opsets() -> dict[str, int]:
    """The newest opset each exporter writes: TorchScript's table, and the dynamo exporter's onnxscript
    opset (it converts down, not up)."""
    from torch.onnx._constants import ONNX_MAX_OPSET

    return {"torchscript": ONNX_MAX_OPSET, "dynamo": 23}


def export(
    model: nn.Module, x: torch.Tensor, exporter: str, opset: int, path: Path, dynamic: bool = True
) -> None:
    """Write ``path`` with a symbolic batch dimension named ``batch`` on the input and the output (or
    the example's batch, fixed, where ``dynamic`` is False)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(
                model, (x,), str(path), dynamo=False, opset_version=opset, input_names=["x"],
                output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}} if dynamic else None,
            )  # fmt: skip
        else:
            batch = torch.export.Dim("batch", min=1, max=64)
            prog = torch.onnx.export(
                model, (x,), dynamo=True, opset_version=opset, input_names=["x"], output_names=["y"],
                dynamic_shapes={"x": {0: batch}} if dynamic else None, optimize=True, verbose=False,
            )  # fmt: skip
            prog.save(str(path))


def _export(
    make: Callable[..., nn.Module],
    model: nn.Module,
    x: torch.Tensor,
    exporter: str,
    opset: int,
    path: Path,
    row: dict,
    dynamic: bool = True,
) -> None:
    """``export``; SDPA has no TorchScript export below opset 14, so there users pick eager attention."""
    try:
        export(model, x, exporter, opset, path, dynamic)
    except Exception as exc:
        if "scaled_dot_product_attention" not in str(exc):
            raise
        export(make(eager=True), x, exporter, opset, path, dynamic)
        row["attention"] = "eager"


def symbolic_batch(path: Path) -> bool:
    import onnx

    dim = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim[0]
    return dim.HasField("dim_param")


# ---------------------------------------------------------------- runs


def ort_run(path: Path, x: torch.Tensor) -> torch.Tensor:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0])


def pw_run(path: Path, x: torch.Tensor, strategy: str, ref: torch.Tensor | None) -> dict:
    """pathweave's result against ``ref`` (None where ONNX Runtime itself fails: ``ran`` if it runs)."""
    import pathweave
    from pathweave.errors import PathweaveError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = pathweave.optimize(path, x, strategy=strategy)
            got = fn(x)
    except PathweaveError as exc:
        return {"kind": "refuse", "why": f"{type(exc).__name__}: {_first_line(exc)}"[:300]}
    except Exception as exc:
        return {"kind": "raw", "why": f"{type(exc).__name__}: {_first_line(exc)}"[:300],
                "tb": traceback.format_exc()[-2000:]}  # fmt: skip
    got = got[0] if isinstance(got, (tuple, list)) else got
    if ref is None:
        return {"kind": "ran"}
    if not isinstance(got, torch.Tensor) or got.shape != ref.shape:
        return {"kind": "wrong", "why": f"shape {getattr(got, 'shape', type(got))} vs {tuple(ref.shape)}"}
    scale = ref.abs().max().item()
    if scale == 0.0:  # an all-zero output: any converter "matches"
        return {"kind": "wrong", "why": "the reference output is all zeros: the comparison would be vacuous"}
    err = (got.float() - ref.float()).abs().max().item() / scale
    picked = getattr(fn, "strategy_name", None) or getattr(fn, "picked", None)
    row = {"kind": "pass" if err <= RTOL else "wrong", "err": err, "scale": scale}
    if strategy == "auto" and picked:
        row["picked"] = str(picked)
    return row


def one(name: str, exporter: str, out: Path) -> dict:
    """Export ``name`` with ``exporter`` at each opset and run it: {opset: {...}}."""
    os.environ["PATHWEAVE_ONNX_CROSSCHECK"] = "0"
    make, xfn = specs()[name]
    model = make()
    newest = newest_opsets()[exporter]
    rows: dict = {}
    for opset in sorted({13, MAIN_OPSET, newest}):
        path = out / f"{name}-{exporter}-{opset}.onnx"
        row: dict = {"opset": opset}
        rows[str(opset)] = row
        t0 = time.perf_counter()
        paths = {b: path for b in BATCHES}
        try:
            _export(make, model, xfn(2), exporter, opset, path, row)
        except Exception as exc:
            row["export"] = f"{type(exc).__name__}: {_first_line(exc)}"[:300]
            if exporter != "dynamo":
                continue
            try:  # the dynamo exporter fails on some symbolic batches: a user then exports each batch
                paths = {b: out / f"{name}-{exporter}-{opset}-b{b}.onnx" for b in BATCHES}
                for b, p in paths.items():
                    _export(make, model, xfn(b), exporter, opset, p, row, dynamic=False)
                row["static_batch"] = True
            except Exception:
                continue
        row["export_s"] = round(time.perf_counter() - t0, 1)
        row["symbolic_batch"] = symbolic_batch(paths[BATCHES[0]])
        strategies = STRATEGIES if opset == MAIN_OPSET else ("sequential",)
        for batch in BATCHES:
            x, path = xfn(batch), paths[batch]
            try:
                ref = ort_run(path, x)
            except Exception as exc:  # a file ONNX Runtime rejects: pathweave must refuse it or be right
                row[f"ort@{batch}"] = f"{type(exc).__name__}: {_first_line(exc)}"[:300]
                with torch.no_grad():  # then pathweave is judged against the module itself
                    eager = model(x)
                for strategy in strategies:
                    r = pw_run(path, x, strategy, eager)
                    row[f"{strategy}@{batch}"] = {**r, "kind": "ort-fail", "pw": r["kind"]}
                continue
            for strategy in strategies:
                row[f"{strategy}@{batch}"] = pw_run(path, x, strategy, ref)
        if opset == MAIN_OPSET and exporter == "torchscript":
            rows["external"] = external_data(path, xfn(1))
    return rows


def external_data(path: Path, x: torch.Tensor) -> dict:
    """The same model saved with its weights in a side file, loaded from its path."""
    import onnx

    folder = path.parent / f"{path.stem}-ext"
    folder.mkdir(exist_ok=True)
    target = folder / "model.onnx"
    onnx.save_model(onnx.load(str(path)), str(target), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.data", size_threshold=0)  # fmt: skip
    return pw_run(target, x, "sequential", ort_run(target, x))


def over_2gb(out: Path) -> dict:
    """A model over protobuf's 2 GB (three 805 MB MatMul weights) saved with external data: runs and matches
    ONNX Runtime, or is refused clearly. Peak memory is a few copies of the weights (~8 GB)."""
    import gc

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    a, b = 16384, 12288
    rng = np.random.default_rng(0)
    shapes = {"w1": (a, b), "w2": (b, a), "w3": (a, b)}
    inits = [numpy_helper.from_array(rng.standard_normal(s, np.float32) / 128, k) for k, s in shapes.items()]
    chain = [("x", "w1", "h1"), ("h1", "w2", "h2"), ("h2", "w3", "y")]
    nodes = [helper.make_node("MatMul", [i, w], [o]) for i, w, o in chain]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", a])
    graph = helper.make_graph(
        nodes, "big", [x_info], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder = out / "big"
    folder.mkdir(exist_ok=True)
    path = folder / "big.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="big.data")
    del model, graph, inits
    gc.collect()
    size = (folder / "big.data").stat().st_size
    x = torch.randn(2, a, generator=torch.Generator().manual_seed(0))
    ref = ort_run(path, x)
    gc.collect()
    return {"bytes": size, **pw_run(path, x, "sequential", ref)}


# ---------------------------------------------------------------- report


def _cell(r: object) -> str:
    if not isinstance(r, dict):
        return "-"
    return {"pass": "pass", "refuse": "REFUSE", "wrong": "WRONG", "raw": "RAW"}[r["kind"]]


def table(rows: dict[str, dict]) -> str:
    head = ["model", "exporter"]
    head += [f"o{MAIN_OPSET} {s}" for s in STRATEGIES] + ["o13 seq", "newest seq", "ext data"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: list[str] = []
    for key, r in rows.items():
        name, exporter = key.split("/")
        if "error" in r:
            lines.append(f"| {name} | {exporter} | " + " | ".join(["crash"] * (len(head) - 2)) + " |")
            notes.append(f"- {key}: {r['error']}")
            continue
        cells = []
        opsets = sorted(int(k) for k in r if k.isdigit())
        main = r.get(str(MAIN_OPSET), {})
        for s in STRATEGIES:
            cells.append(_agg(main, s, notes, key))
        cells.append(_agg(r.get("13", {}), "sequential", notes, f"{key} o13"))
        newest = r.get(str(max(opsets)), {})
        cells.append(_agg(newest, "sequential", notes, f"{key} o{newest.get('opset')}"))
        cells.append(_cell(r.get("external")) if "external" in r else "-")
        if isinstance(r.get("external"), dict) and r["external"]["kind"] != "pass":
            notes.append(f"- {key} external data: {r['external'].get('why', r['external'])}")
        lines.append(f"| {name} | {exporter} | " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + list(dict.fromkeys(notes)))


def _agg(opset_row: dict, strategy: str, notes: list[str], where: str) -> str:
    """One cell over the batches: pass only where every batch passed."""
    if "export" in opset_row:
        notes.append(f"- {where.split(' o')[0]}: export failed: {opset_row['export'][:220]}")
        if not opset_row.get("static_batch"):
            return "export-fail"
    kinds = []
    for b in BATCHES:
        r = opset_row.get(f"{strategy}@{b}")
        if r is None:
            return "-"
        kinds.append(r["kind"])
        if r["kind"] == "ort-fail":
            notes.append(f"- {where}: ONNX Runtime: {opset_row[f'ort@{b}'][:200]}; pathweave: {r['pw']}")
        elif r["kind"] != "pass":
            notes.append(f"- {where} {strategy}@{b}: {r['kind']}: {r.get('why', r.get('err'))}")
    worst = next((k for k in ("raw", "wrong", "refuse", "ort-fail") if k in kinds), "pass")
    if opset_row.get("static_batch") and worst == "pass":
        return "pass (static)"
    if worst == "ort-fail":
        return f"ORT rejects; pw {opset_row[f'{strategy}@1']['pw']} vs eager"
    return {"pass": "pass", "refuse": "REFUSE", "wrong": "WRONG", "raw": "RAW"}[worst]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--exporters", default=",".join(EXPORTERS))
    ap.add_argument("--out", default="/tmp/pw-onnx-heldout")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    ap.add_argument("--big", action="store_true", help="only the model over 2 GB with external data")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.big:
        os.environ["PATHWEAVE_ONNX_CROSSCHECK"] = "0"
        print(json.dumps(over_2gb(out)))
        return
    if args.one:
        name, exporter = args.one.split("/")
        print("RESULT " + json.dumps(one(name, exporter, out)))
        return
    names = [n for n in specs() if not args.only or n in args.only.split(",")]
    store = out / "onnx_heldout.json"
    rows: dict[str, dict] = json.loads(store.read_text()) if store.exists() else {}
    for name in names:
        for exporter in args.exporters.split(","):
            key = f"{name}/{exporter}"
            cmd = [sys.executable, __file__, "--one", key, "--out", str(out)]
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                found = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                error = {"error": f"rc {proc.returncode}: {proc.stderr.strip()[-400:]}"}
                rows[key] = json.loads(found[-1][7:]) if found else error
            except subprocess.TimeoutExpired:
                rows[key] = {"error": f"timed out after {args.timeout} s"}
            print(f"{key}: {time.perf_counter() - t0:.0f} s", flush=True)
            store.write_text(json.dumps(rows, indent=1))
    text = table(rows)
    (out / "onnx_heldout.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
