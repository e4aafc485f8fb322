"""``pathweave.save(fast, "model.pw")`` and ``pathweave.load("model.pw")``: ship what was optimized.

A ``.pw`` file is a zip archive, every entry stored uncompressed, holding only data: ``manifest.json``
(format, versions, the machine's fingerprint, the strategy chosen and its options, what it measured
(``Strategy.saved_options``: the lanes' node times), auto's timings, the input and output structure, a
SHA-256 per entry), ``graph.json`` and ``constants/<i>.bin`` (the captured graph as data and its weights
as raw little-endian arrays, ``frontend.graph_file``) and ``inputs/<i>.bin`` (the example inputs). A
graph that cannot be written as data (submodules, higher-order ops) is saved as ``program.pt2`` (a
torch.export archive) instead. Nothing is unpickled: the manifest and graph are JSON read by checked
readers, the arrays raw bytes, a ``.pt2`` goes through ``frontend.pt2``'s checked loader.

Loading rebuilds the saved strategy with its saved options and measurements, without auto's candidate
timing, the lanes' profiling run, or the checks against PyTorch that passed when it was saved on this
machine (``load(check=True)`` runs them again). On another machine (CPU model, ISA, cores, L2) or other
pathweave / torch versions the plan may be stale: the file is re-planned (auto again where auto chose,
measured and checked again) with a ``StalePlanWarning``. The strategies' derived state (rewritten
graph, packed weights, tile graph) is rebuilt from the graph on load, deterministic for a given machine:
oneDNN's packed weights are opaque tensors with no stable byte format.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import os
import sys
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
from pathweave.frontend.graph import Captured, FixedInput
from pathweave.frontend.graph_file import IDENT, decode_graph, encode_graph
from pathweave.frontend.pt2 import bound_graph, load_pt2
from pathweave.frontend.pt2_program import MAX_VALUE_BYTES, check_spec
from pathweave.strategy import STRATEGIES, Strategy

FORMAT, FORMAT_VERSION = "pathweave-plan", 2
#: the versions this pathweave reads (1: the graph as program.pt2 only)
READS = (1, 2)
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
        return flat.view(dt).reshape(shape)  # owns its bytearray: no copy more
    except (AttributeError, TypeError, RuntimeError, ValueError) as exc:
        raise InputError(
            f"{where}: dtype {dtype!r} and shape {shape} do not fit its {len(raw)} bytes"
        ) from exc


def _array(t: torch.Tensor, name: str, entries: dict[str, bytes]) -> dict[str, Any]:
    """Store ``t``'s values (in row-major order) as entry ``name``; returns its dtype, shape and stride."""
    entries[name] = _tensor_bytes(t)
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "stride": list(t.stride())}


def _graph_entries(captured: Captured, entries: dict[str, bytes]) -> dict[str, Any] | None:
    """The captured graph as ``graph.json`` and ``constants/<i>.bin`` (None: it went to ``program.pt2``)."""
    try:
        graph, constants = encode_graph(captured.gm, captured.name)
    except UnsupportedError:
        graph = None
    if graph is not None:
        entries["graph.json"] = json.dumps(graph).encode()
        return {"constants": {name: _array(t, f"constants/{i}.bin", entries)
                              for i, (name, t) in enumerate(constants.items())}}  # fmt: skip
    try:
        program = torch.export.export(captured.gm, tuple(captured.example_inputs))
    except Exception as exc:  # noqa: BLE001 - any export failure means this graph cannot be saved
        raise UnsupportedError(f"save: {captured.name}'s graph cannot be exported again ({exc})") from exc
    buf = io.BytesIO()
    torch.export.save(program, buf)
    entries["program.pt2"] = buf.getvalue()
    return None


def save(fast: Strategy, path: str | os.PathLike) -> Path:
    """Write ``fast`` (what ``optimize`` returned) to ``path``; returns the path written."""
    recipe = getattr(fast, "recipe", None)
    if recipe is None:
        raise InputError(f"save: {type(fast).__name__} was not made by pathweave.optimize")
    if sys.byteorder != "little":
        raise UnsupportedError("save: plans hold little-endian arrays; this machine is big-endian")
    captured = fast.captured
    entries: dict[str, bytes] = {}
    graph = _graph_entries(captured, entries)
    inputs = [_array(t, f"inputs/{i}.bin", entries) for i, t in enumerate(captured.example_inputs)]
    fixed = [{"index": f.index, "name": f.name, "use": f.use, **_array(f.value, f"fixed/{i}.bin", entries)}
             for i, f in enumerate(captured.fixed)]  # fmt: skip
    measured = fast.saved_options()
    try:
        json.dumps([recipe["options"], measured])
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
        "measured": measured,
        "method": captured.method,
        "graph": graph,
        "inputs": inputs,
        "fixed": fixed,
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
    if manifest.get("format_version") not in READS:
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


def load(path: str | os.PathLike, check: bool = False, trusted: bool = False) -> Strategy:
    """The strategy saved in ``path``, built for this process; a pathweave ``InputError`` for a file that
    is not a plan, is corrupt or truncated. On the machine and versions it was saved with, the strategy
    is built with what it measured then and without its checks against PyTorch (they passed when it was
    built; ``check=True`` runs them again).

    ``trusted=True``, for a file you wrote yourself, skips one defence against crafted files: running
    the graph on meta tensors to bound its values' sizes (``pt2.bound_graph``), whose first use imports
    torch's dynamo (1-2.5 s). Nothing else changes: the file is still data only, its ops still checked."""
    path = Path(path)
    manifest, entries = _open(path)
    recipe, auto_options = _recipe(manifest, path)
    captured = _captured(manifest, entries, path, trusted)
    context = {"device": recipe.get("device", "cpu"), "recapture": None}
    stale = _stale(manifest["machine"])
    if stale and recipe.get("auto"):
        warnings.warn(f"{path.name}: saved with {'; '.join(stale)}; re-planning (auto)", StalePlanWarning,
                      stacklevel=2)  # fmt: skip
        return build_auto(captured, "cpu" if context["device"] == "cpu" else "cuda", context,
                          bool(recipe.get("stacks")), auto_options)  # fmt: skip
    options = dict(recipe["options"])
    if stale:
        warnings.warn(f"{path.name}: saved with {'; '.join(stale)}; re-planning {recipe['strategy']}",
                      StalePlanWarning, stacklevel=2)  # fmt: skip
    else:
        options |= _measured(manifest, path)
        if not check and "check" in _parameters(recipe["strategy"]):
            options["check"] = False
    fast = build(recipe["strategy"], captured, context, options, False)
    fast.recipe = {**fast.recipe, "options": dict(recipe["options"])}  # saved again: what was asked
    fast.auto_times_ms = dict(manifest.get("auto_times_ms") or {})
    return fast


def _recipe(manifest: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The saved recipe and auto's options, checked: a known strategy, plain options, bounded threads."""
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
    return recipe, auto_options


def _parameters(strategy: str) -> list[str]:
    return list(inspect.signature(STRATEGIES[strategy].load()).parameters)


def _measured(manifest: dict[str, Any], path: Path) -> dict[str, Any]:
    """What the strategy measured when it was built (``Strategy.saved_options``): a dict of node times."""
    measured = manifest.get("measured") or {}
    times = measured.get("node_times") if isinstance(measured, dict) else None
    if set(measured) - {"node_times"} or (times is not None and not (isinstance(times, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in times.values()))):  # fmt: skip
        raise InputError(f"{path.name}: the manifest's measurements are not node times")
    return measured


def _captured(manifest: dict[str, Any], entries: dict[str, bytes], path: Path, trusted: bool) -> Captured:
    """The captured graph: from ``graph.json`` (bounded on fake tensors, as a program from a file is),
    or, for a graph saved as ``program.pt2``, captured again from it (checked against its own run)."""
    inputs = tuple(
        _array_entry(entries, f"inputs/{i}.bin", spec, f"{path.name}: input {i}")
        for i, spec in enumerate(manifest["inputs"])
    )
    for key in ("in_spec", "out_spec"):
        check_spec(manifest[key], f"{path.name}: manifest {key}")
    try:
        in_spec = pytree.treespec_loads(manifest["in_spec"])
        out_spec = pytree.treespec_loads(manifest["out_spec"])
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"{path.name}: the manifest's input/output structure cannot be read ({exc})"
        ) from exc
    name = manifest.get("name") or path.stem
    if not isinstance(name, str) or not IDENT.fullmatch(name.replace("-", "_").replace(".", "_")):
        raise InputError(f"{path.name}: the model's name {str(name)[:80]!r} is not a name")
    graph = manifest.get("graph")
    if graph is None:
        with tempfile.TemporaryDirectory() as tmp:
            pt2 = Path(tmp) / "program.pt2"
            pt2.write_bytes(_entry(entries, "program.pt2", path))
            captured = capture(load_pt2(pt2), *inputs, name=name)
    else:
        captured = Captured(_graph(graph, entries, path, inputs, trusted), in_spec, out_spec, inputs,
                            manifest.get("method", "export"), name)  # fmt: skip
    captured.in_spec, captured.out_spec = in_spec, out_spec
    captured.fixed = tuple(_fixed(manifest.get("fixed") or [], entries, path))
    return captured


def _graph(
    graph: Any, entries: dict[str, bytes], path: Path, inputs: tuple, trusted: bool
) -> torch.fx.GraphModule:
    if not isinstance(graph, dict) or not isinstance(graph.get("constants"), dict):
        raise InputError(f"{path.name}: the manifest's graph lists no constants")
    constants = {}
    for i, (name, spec) in enumerate(graph["constants"].items()):
        constants[name] = _array_entry(entries, f"constants/{i}.bin", spec, f"{path.name}: constant {name}")
    try:
        nodes = json.loads(_entry(entries, "graph.json", path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path.name}: graph.json is not JSON ({exc})") from exc
    gm = decode_graph(nodes, constants, "saved_graph", f"{path.name}: graph.json")
    if not trusted:
        bound_graph(gm, list(inputs), path.name)
    return gm


def _fixed(specs: Any, entries: dict[str, bytes], path: Path) -> list[FixedInput]:
    if not isinstance(specs, list):
        raise InputError(f"{path.name}: the manifest's fixed inputs are not a list")
    out = []
    for i, spec in enumerate(specs):
        value = _array_entry(entries, f"fixed/{i}.bin", spec, f"{path.name}: fixed input {i}")
        out.append(FixedInput(int(spec["index"]), str(spec["name"]), value, str(spec["use"])))
    return out


def _entry(entries: dict[str, bytes], name: str, path: Path) -> bytes:
    if name not in entries:
        raise InputError(f"{path.name}: no {name} inside (listed with a checksum in the manifest)")
    return entries[name]


def _array_entry(entries: dict[str, bytes], name: str, spec: Any, where: str) -> torch.Tensor:
    """Entry ``name`` as a tensor of ``spec``'s dtype, shape and (where given) stride."""
    if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list):
        raise InputError(f"{where}: no dtype and shape in the manifest")
    t = _tensor(entries.get(name, b""), spec.get("dtype"), spec["shape"], f"{where} ({name})")
    stride = spec.get("stride")
    if stride is None or list(t.stride()) == stride or t.numel() <= 1:
        return t
    if not (isinstance(stride, list) and len(stride) == t.dim() and all(isinstance(s, int) and s >= 0
                                                                        for s in stride)):  # fmt: skip
        raise InputError(f"{where} ({name}): stride {str(stride)[:80]} does not fit shape {list(t.shape)}")
    extent = 1 + sum((d - 1) * s for d, s in zip(t.shape, stride, strict=True))
    if extent * t.element_size() > MAX_VALUE_BYTES:
        raise InputError(f"{where} ({name}): stride {stride} spans more than pathweave allows")
    return torch.empty_strided(t.shape, stride, dtype=t.dtype).copy_(t)
