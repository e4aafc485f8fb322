"""``pathweave.save(fast, "model.pw")`` and ``pathweave.load("model.pw")``: ship what was optimized.

A ``.pw`` file is a zip archive, every entry stored uncompressed, holding only data: ``manifest.json``
(format, versions, the machine's fingerprint, the strategy chosen and its options, auto's timings, the
input and output structure, a SHA-256 per entry), ``program.pt2`` (the captured graph as a torch.export
archive, with the weights) and ``inputs/<i>.bin`` (the example inputs as raw bytes). Nothing is
unpickled: the manifest is JSON, the inputs raw bytes, the program goes through ``frontend.pt2``'s
checked loader.

Loading rebuilds the saved strategy with its saved options, without auto's candidate timing (the
choice is what was saved). On another machine (CPU model, ISA, cores, L2) or other pathweave / torch
versions the plan may be stale: the file is re-planned (auto again where auto chose) with a warning.
What is not saved yet: the strategies' own plans (tile graph, packed weights) - they are rebuilt from
the graph on load, deterministic for a given machine.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from pathweave import machine
from pathweave.auto import build, build_auto
from pathweave.errors import InputError, UnsupportedError
from pathweave.frontend.capture import capture
from pathweave.frontend.pt2 import load_pt2
from pathweave.strategy import STRATEGIES, Strategy

FORMAT, FORMAT_VERSION = "pathweave-plan", 1
#: the manifest is small; anything larger is not ours
MAX_MANIFEST = 1 << 20
#: the most threads a loaded plan may ask for (a crafted manifest must not start thousands)
MAX_THREADS = 256


class StalePlanWarning(UserWarning):
    """A saved plan came from another machine or version and was re-planned."""


def fingerprint() -> dict[str, Any]:
    """What a plan depends on: the CPU, its vector ISA, its cores and L2, and the versions."""
    return {
        "cpu": machine.cpu_model(),
        "isa": machine.cpu_isa(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "l2_bytes": machine.l2_bytes(),
        "pathweave": _version(),
        "torch": torch.__version__,
    }


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pathweave")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _tensor_bytes(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _tensor(raw: bytes, dtype: str, shape: list[int], where: str) -> torch.Tensor:
    try:
        dt = getattr(torch, dtype)
        if not isinstance(dt, torch.dtype):
            raise TypeError(dtype)
        flat = (
            torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        )
        return flat.view(dt).reshape(shape).clone()
    except (AttributeError, TypeError, RuntimeError, ValueError) as exc:
        raise InputError(
            f"{where}: dtype {dtype!r} and shape {shape} do not fit its {len(raw)} bytes"
        ) from exc


def save(fast: Strategy, path: str | os.PathLike) -> Path:
    """Write ``fast`` (what ``optimize`` returned) to ``path``; returns the path written."""
    recipe = getattr(fast, "recipe", None)
    if recipe is None:
        raise InputError(f"save: {type(fast).__name__} was not made by pathweave.optimize")
    captured = fast.captured
    try:
        program = torch.export.export(captured.gm, tuple(captured.example_inputs))
    except Exception as exc:  # noqa: BLE001 - any export failure means this graph cannot be saved
        raise UnsupportedError(f"save: {captured.name}'s graph cannot be exported again ({exc})") from exc
    entries: dict[str, bytes] = {}
    buf = io.BytesIO()
    torch.export.save(program, buf)
    entries["program.pt2"] = buf.getvalue()
    inputs = []
    for i, t in enumerate(captured.example_inputs):
        entries[f"inputs/{i}.bin"] = _tensor_bytes(t)
        inputs.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)})
    try:
        json.dumps(recipe["options"])
    except TypeError as exc:
        raise InputError(f"save: the strategy's options are not plain data: {recipe['options']}") from exc
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": captured.name,
        "machine": fingerprint(),
        "recipe": recipe,
        "label": fast.label,
        "auto_times_ms": getattr(fast, "auto_times_ms", {}),
        "inputs": inputs,
        "in_spec": pytree.treespec_dumps(captured.in_spec),
        "out_spec": pytree.treespec_dumps(captured.out_spec),
        "sha256": {name: hashlib.sha256(raw).hexdigest() for name, raw in entries.items()},
    }
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, raw in entries.items():
            z.writestr(name, raw)
    tmp.replace(path)  # never a half-written file under the real name
    return path


def _read(z: zipfile.ZipFile, name: str, path: Path, limit: int | None = None) -> bytes:
    try:
        info = z.getinfo(name)
    except KeyError:
        raise InputError(f"{path.name}: no {name} inside; not a pathweave plan or truncated") from None
    if info.compress_type != zipfile.ZIP_STORED or (limit is not None and info.file_size > limit):
        raise InputError(f"{path.name}: entry {name} is compressed or too large; pathweave writes neither")
    try:
        return z.read(name)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InputError(f"{path.name}: entry {name} cannot be read ({exc}); the file is corrupt") from exc


def _manifest(z: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(_read(z, "manifest.json", path, MAX_MANIFEST))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path.name}: manifest.json is not JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{path.name}: not a pathweave plan (no format {FORMAT!r} in its manifest)")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise InputError(
            f"{path.name}: plan format version {manifest.get('format_version')!r}; this pathweave reads "
            f"{FORMAT_VERSION} (save it again with this version)"
        )
    for key in ("recipe", "inputs", "sha256", "machine", "in_spec", "out_spec"):
        if key not in manifest:
            raise InputError(f"{path.name}: manifest.json has no {key!r}")
    return manifest


def _entries(z: zipfile.ZipFile, path: Path, manifest: dict[str, Any]) -> dict[str, bytes]:
    out = {}
    for name, digest in manifest["sha256"].items():
        raw = _read(z, name, path)
        if hashlib.sha256(raw).hexdigest() != digest:
            raise InputError(f"{path.name}: entry {name} does not match its checksum; the file is corrupt")
        out[name] = raw
    return out


def _open(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        with zipfile.ZipFile(path) as z:
            manifest = _manifest(z, path)
            return manifest, _entries(z, path, manifest)
    except zipfile.BadZipFile as exc:
        raise InputError(f"{path.name}: not a pathweave plan or truncated ({exc})") from exc


def _stale(saved: dict[str, Any]) -> list[str]:
    now = fingerprint()
    return [f"{k} {saved.get(k)!r} (here {v!r})" for k, v in now.items() if saved.get(k) != v]


def load(path: str | os.PathLike) -> Strategy:
    """The strategy saved in ``path``, built for this process; a pathweave ``InputError`` for a file that
    is not a plan, is corrupt or truncated."""
    path = Path(path)
    manifest, entries = _open(path)
    recipe = manifest["recipe"]
    if recipe.get("strategy") not in STRATEGIES or not isinstance(recipe.get("options"), dict):
        raise InputError(f"{path.name}: the manifest names no known strategy ({recipe.get('strategy')!r})")
    auto_options = recipe.get("auto_options") or {}
    if not isinstance(auto_options, dict) or not all(isinstance(v, dict) for v in auto_options.values()):
        raise InputError(f"{path.name}: the manifest's auto options are not one dict per strategy")
    for options in (recipe["options"], *auto_options.values()):
        threads = options.get("threads")
        if threads is not None and not (isinstance(threads, int) and 1 <= threads <= MAX_THREADS):
            raise InputError(f"{path.name}: threads={threads!r}; plans take 1 to {MAX_THREADS} threads")
    inputs = tuple(
        _tensor(entries.get(f"inputs/{i}.bin", b""), spec["dtype"], spec["shape"], f"{path.name}: input {i}")
        for i, spec in enumerate(manifest["inputs"])
    )
    with tempfile.TemporaryDirectory() as tmp:
        pt2 = Path(tmp) / "program.pt2"
        pt2.write_bytes(entries["program.pt2"])
        program = load_pt2(pt2)
    captured = capture(program, *inputs, name=manifest.get("name") or path.stem)
    try:
        captured.in_spec = pytree.treespec_loads(manifest["in_spec"])
        captured.out_spec = pytree.treespec_loads(manifest["out_spec"])
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"{path.name}: the manifest's input/output structure cannot be read ({exc})"
        ) from exc
    context = {"device": recipe.get("device", "cpu"), "recapture": None}
    stale = _stale(manifest["machine"])
    if stale and recipe.get("auto"):
        warnings.warn(f"{path.name}: saved with {'; '.join(stale)}; re-planning (auto)", StalePlanWarning,
                      stacklevel=2)  # fmt: skip
        return build_auto(captured, "cpu" if context["device"] == "cpu" else "cuda", context,
                          bool(recipe.get("stacks")), auto_options)  # fmt: skip
    if stale:
        warnings.warn(f"{path.name}: saved with {'; '.join(stale)}; re-planning {recipe['strategy']}",
                      StalePlanWarning, stacklevel=2)  # fmt: skip
    fast = build(recipe["strategy"], captured, context, dict(recipe["options"]), False)
    fast.auto_times_ms = dict(manifest.get("auto_times_ms") or {})
    return fast
