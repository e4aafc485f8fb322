"""Experiment (issue 22, "Done when"): the deploy clauses checked over the whole zoo, too slow for CI.

Not part of the package, not in CI (tests/ hold the fast versions of each check on small models).

    python experiments/deploy_check.py backend   [--models a,b] [--out DIR]  # torch.compile, the zoo
    python experiments/deploy_check.py roundtrip [--models a,b] [--out DIR]  # save/load every zoo model
    python experiments/deploy_check.py dynamic   [--out DIR]                 # BERT and a CNN, shapes
    python experiments/deploy_check.py first PLAN.pw [PLAN.pw ...]           # load -> first answer

``backend``: each zoo model compiled with ``torch.compile(backend="pathweave", dynamic=False)``, called on
its example inputs and compared with eager; fallbacks (``BackendFallbackWarning``) are counted, not hidden.
``roundtrip``: each zoo model optimized with auto, saved, then loaded in a fresh process in which auto's
timing (``auto.fastest``) raises: the loaded callable's
outputs are compared with the optimized one's (written as raw bytes by the first process).
``dynamic``: zoo bert_base (example batch 1 x 128 tokens) and ResNet-50 with ``dynamic=``, called at
every batch 1..8 (BERT at 16 tokens, then at every sequence length 8..128 at batch 1, and batch 8 x 128),
each answer compared with eager. ``first``: for each plan, a fresh
Python process (torch imported) times ``import pathweave.saved``, ``pathweave.load`` (checked, then
``trusted=True`` in another process) and the first call (take the bench lock).

Each writes a JSON list of rows to OUT/<part>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: this checkout's pathweave

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4


def _models(arg: str | None) -> list[str]:
    from pathweave import zoo

    return arg.split(",") if arg else list(zoo.names())


def _mismatch(got: Any, want: Any) -> str | None:
    from pathweave.compare import mismatch

    return mismatch(pytree.tree_leaves(got), pytree.tree_leaves(want), RTOL, ATOL, scale_atol=True)


def backend(models: list[str]) -> list[dict[str, Any]]:
    from pathweave.backend import BackendFallbackWarning
    from pathweave.zoo.load import load_model

    rows = []
    for name in models:
        loaded = load_model(name)
        model = loaded.model.eval()
        with torch.no_grad():
            want = model(*loaded.inputs)
        torch._dynamo.reset()
        t0 = time.perf_counter()
        row: dict[str, Any] = {"model": name}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fast = torch.compile(model, backend="pathweave", dynamic=False)
                with torch.no_grad():
                    got = fast(*loaded.inputs)
                    got = fast(*loaded.inputs)  # the second call runs what the first built
                row["wrong"] = _mismatch(got, want)
            except Exception as exc:  # noqa: BLE001 - every failure is a row, never a crash
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        row["compile_s"] = round(time.perf_counter() - t0, 1)
        row["fallbacks"] = [
            str(w.message)[:200] for w in caught if issubclass(w.category, BackendFallbackWarning)
        ]
        rows.append(row)
        print(row, flush=True)
    return rows


def _write_tensors(tensors: list[torch.Tensor], path: Path) -> None:
    from pathweave.saved import _tensor_bytes

    meta = [{"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)} for t in tensors]
    path.with_suffix(".json").write_text(json.dumps(meta))
    path.write_bytes(b"".join(_tensor_bytes(t) for t in tensors))


def _read_tensors(path: Path) -> list[torch.Tensor]:
    from pathweave.saved import _tensor

    raw, out, pos = path.read_bytes(), [], 0
    for m in json.loads(path.with_suffix(".json").read_text()):
        n = torch.empty(m["shape"], dtype=getattr(torch, m["dtype"])).nbytes
        out.append(_tensor(raw[pos : pos + n], m["dtype"], m["shape"], str(path)))
        pos += n
    return out


def roundtrip(models: list[str], out: Path) -> list[dict[str, Any]]:
    import pathweave

    rows = []
    for name in models:
        row: dict[str, Any] = {"model": name}
        plan, ref = out / f"{name}.pw", out / f"{name}.out"
        try:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fast = pathweave.optimize(name)
            row["optimize_s"] = round(time.perf_counter() - t0, 1)
            row["strategy"] = fast.label
            got = pytree.tree_leaves(fast(*fast.captured.example_inputs))
            _write_tensors([t for t in got if isinstance(t, torch.Tensor)], ref)
            pathweave.save(fast, plan)
            fast.close()
            child = subprocess.run([sys.executable, __file__, "_load", str(plan), str(ref)],
                                   capture_output=True, text=True, timeout=600)  # fmt: skip
            lines = child.stdout.strip().splitlines()
            row.update(json.loads(lines[-1]) if child.returncode == 0 and lines else
                       {"error": child.stderr.strip().splitlines()[-1:]})  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - every failure is a row, never a crash
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        rows.append(row)
        print(row, flush=True)
    return rows


def _load_child(plan: str, ref: str) -> None:
    """In a fresh process: load ``plan`` with auto's timing made to raise; compare with ``ref``."""
    import pathweave
    from pathweave import auto

    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("pathweave.load timed auto's candidates again")

    auto.fastest = refuse
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast = pathweave.load(plan)
    load_s = time.perf_counter() - t0
    got = [t for t in pytree.tree_leaves(fast(*fast.captured.example_inputs)) if isinstance(t, torch.Tensor)]
    want = _read_tensors(Path(ref))
    identical = len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    diff = max((float((a.double() - b.double()).abs().max()) for a, b in zip(got, want, strict=True)
                if a.is_floating_point() and a.numel()), default=0.0)  # fmt: skip
    stale = [str(w.message)[:160] for w in caught if "StalePlan" in w.category.__name__]
    print(json.dumps({"loaded": fast.label, "load_s": round(load_s, 2), "identical": identical,
                      "max_abs_diff": diff, "stale": stale}))  # fmt: skip


def dynamic() -> list[dict[str, Any]]:
    import pathweave
    from pathweave.zoo.load import load_model

    rows = []
    cases = [("resnet50", {"batch": (1, 8)}, [(b, None) for b in range(1, 9)]),
             ("bert_base", {"batch": (1, 8), "seq": (8, 128)},
              [(b, 16) for b in range(1, 9)] + [(1, s) for s in range(8, 129)] + [(8, 128)])]  # fmt: skip
    for name, dims, shapes in cases:
        loaded = load_model(name)
        model = loaded.model.eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast = pathweave.optimize(model, *loaded.inputs, dynamic=dims)
        row: dict[str, Any] = {"model": name, "strategy": fast.label, "shapes": 0, "wrong": [], "s": 0.0}
        t0 = time.perf_counter()
        for batch, seq in shapes:
            x = tuple(_resize(t, batch, seq) for t in loaded.inputs)
            with torch.no_grad():
                want = model(*x)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                problem = _mismatch(fast(*x), want)
            row["shapes"] += 1
            if problem:
                row["wrong"].append(f"batch {batch} seq {seq}: {problem}")
        row["s"] = round(time.perf_counter() - t0, 1)
        fast.close()
        rows.append(row)
        print(row, flush=True)
    return rows


def _resize(t: torch.Tensor, batch: int, seq: int | None) -> torch.Tensor:
    """``t`` with ``batch`` rows (and ``seq`` columns for token inputs), deterministic values."""
    gen = torch.Generator().manual_seed(batch * 1000 + (seq or 0))
    shape = [batch, *t.shape[1:]]
    if seq is not None and t.dim() >= 2:
        shape[1] = seq
    if t.is_floating_point():
        return torch.randn(shape, generator=gen, dtype=t.dtype)
    high = int(t.max()) + 1 if t.numel() else 2
    return torch.randint(0, max(high, 2), shape, generator=gen, dtype=t.dtype)


def first(plans: list[str]) -> list[dict[str, Any]]:
    rows = []
    for plan in plans:
        for how in ("checked", "trusted"):
            child = subprocess.run([sys.executable, __file__, "_first", plan, how], capture_output=True,
                                   text=True, timeout=600)  # fmt: skip
            lines = child.stdout.strip().splitlines()
            ok = child.returncode == 0 and lines
            row = json.loads(lines[-1]) if ok else {"plan": plan, "error": child.stderr[-300:]}
            rows.append(row)
            print(row, flush=True)
    return rows


def _first_child(plan: str, trusted: bool) -> None:
    t0 = time.perf_counter()
    import pathweave.saved

    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = pathweave.saved.load(plan, trusted=trusted)
    t2 = time.perf_counter()
    fast(*fast.captured.example_inputs)
    t3 = time.perf_counter()
    print(json.dumps({"plan": Path(plan).name, "strategy": fast.label, "trusted": trusted,
                      "import_s": round(t1 - t0, 2), "load_s": round(t2 - t1, 2),
                      "first_call_s": round(t3 - t2, 3), "load_to_answer_s": round(t3 - t1, 2)}))  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["_load"]:
        return _load_child(*sys.argv[2:4])
    if sys.argv[1:2] == ["_first"]:
        return _first_child(sys.argv[2], sys.argv[3] == "trusted")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("backend", "roundtrip", "dynamic", "first"))
    p.add_argument("plans", nargs="*", help="for 'first': the .pw files")
    p.add_argument("--models", help="comma-separated zoo names (default: the whole zoo)")
    p.add_argument("--out", type=Path, default=Path("/tmp/pw-deploy"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part == "backend":
        rows = backend(_models(args.models))
    elif args.part == "roundtrip":
        rows = roundtrip(_models(args.models), args.out)
    elif args.part == "dynamic":
        rows = dynamic()
    else:
        rows = first(args.plans)
    (args.out / f"{args.part}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
