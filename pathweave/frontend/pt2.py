"""``.pt2`` archives (``torch.export.save``) checked before ``torch.export.load`` reads them.

``torch.export.load`` unpickles with ``weights_only=False`` wherever the archive asks it to: weights and
constants whose config says ``use_pickle``, custom and opaque objects, the legacy format, and the sample
inputs when a restricted load of them fails. A crafted file can run code that way, so pathweave reads
the archive's listing and configs itself first (JSON and raw bytes only) and refuses every entry that
would be unpickled without restriction, or loaded as native code (AOTInductor), naming the entry. The
sample inputs are loaded here with ``weights_only=True``: where that fails, torch would retry without the
restriction, so the file is refused.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from pathweave.errors import InputError
from pathweave.frontend.pt2_program import NAME, clean_program
from pathweave.frontend.trace import first_line

#: top-level folders of an archive holding native code or formats pathweave does not read
_CODE_DIRS = ("data/aotinductor/", "data/executorch/", "data/mtia/")
#: what each folder may hold: name prefixes or suffixes (a legacy ``model.pt`` there would be unpickled)
_ENTRIES = {"models": (".json",), "data/weights": ("weight_", "_config.json"),
            "data/constants": ("tensor_", "_config.json"), "data/sample_inputs": (".pt",)}  # fmt: skip
#: an archive may expand to at most this multiple of its size on disk, plus the slack below (torch
#: stores entries uncompressed; a larger ratio is a zip bomb)
MAX_EXPANSION, EXPANSION_SLACK = 4, 64 << 20
#: the most elements one value of a program may have (1 G: 4 GiB of float32)
MAX_ELEMENTS = 1 << 30
#: plain data files of the archive (read as bytes or JSON, never unpickled)
_DATA_FILES = ("archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id")


def load_pt2(path: Path) -> ExportedProgram:
    """The program in ``path``, after ``check_archive``; every failure is an ``InputError`` naming the
    file and what is wrong."""
    if not path.exists():
        raise InputError(f"no such file: {path}")
    data = clean_archive(path)
    try:
        return torch.export.load(io.BytesIO(data))
    except Exception as exc:
        raise InputError(f"{path} is not a readable torch.export .pt2 file: {first_line(exc)}") from exc


class _TooBig(Exception):
    pass


#: batch norms whose per-channel arguments torch's kernels index without checking their length
_BATCH_NORMS = ("batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional")  # fmt: skip


class _Sizes(torch.fx.Interpreter):
    """Runs the program on fake tensors; raises ``_TooBig`` for a value past ``MAX_ELEMENTS`` (or one
    whose size is data-dependent without such a bound) and for a batch norm whose statistics do not
    have one value per channel."""

    def __init__(self, gm: torch.fx.GraphModule, shape_env: Any) -> None:
        super().__init__(gm)
        self.shape_env = shape_env

    def run_node(self, n: torch.fx.Node) -> Any:
        packet = getattr(n.target, "_overloadpacket", None) if n.op == "call_function" else None
        if getattr(packet, "__name__", "") in _BATCH_NORMS:
            self._check_batch_norm(n)
        out = super().run_node(n)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and self._elements(t.numel()) > MAX_ELEMENTS:
                raise _TooBig(f"node {n.format_node()} makes up to {self._elements(t.numel())} elements")
        return out

    def _elements(self, numel: Any) -> float:
        if isinstance(numel, int):
            return numel
        upper = self.shape_env.bound_sympy(numel.node.expr).upper  # a data-dependent size: its bound
        return float(upper) if upper.is_finite else float("inf")

    def _check_batch_norm(self, n: torch.fx.Node) -> None:
        args = [self.env[a] if isinstance(a, torch.fx.Node) else a for a in n.args]
        channels = args[0].shape[1] if args[0].dim() > 1 else 1
        for stat in args[1:5]:
            if isinstance(stat, torch.Tensor) and stat.numel() != channels:
                raise _TooBig(f"node {n.format_node()} has {channels} channels but a statistic of "
                              f"{stat.numel()} values")  # fmt: skip


def bound_sizes(ep: ExportedProgram, inputs: tuple, kwargs: dict, name: str) -> None:
    """Run ``ep`` on fake tensors of the inputs' shapes first and refuse it if a value (a view too)
    passes ``MAX_ELEMENTS``: a program is code, and one read from a file may declare small shapes in
    its JSON while its constant arguments ask for an 8 GiB ``full`` or a 3e12-element ``expand`` summed
    (both found by a hostile review). Work per element is not bounded."""
    bound_graph(ep.module(), pytree.tree_leaves((inputs, kwargs)), name)


def bound_graph(gm: torch.fx.GraphModule, flat: list[Any], name: str) -> None:
    """``bound_sizes`` for a graph module called on the flat inputs ``flat`` (a graph read from a saved
    plan, ``graph_file``). Run on meta tensors first (20x cheaper than fake tensors, whose first use costs
    1-2 s); a graph meta tensors cannot run (an op without a meta kernel, a data-dependent size) goes
    through fake tensors."""
    try:
        _MetaSizes(gm).run(*[_meta(t) if isinstance(t, torch.Tensor) else t for t in flat])
        return
    except _TooBig as exc:
        raise InputError(
            f"{name}: {first_line(exc)} (pathweave runs at most {MAX_ELEMENTS} per value); refused"
        ) from exc
    except Exception:  # noqa: BLE001, S110 - meta tensors could not run it: fake tensors below will
        pass
    _bound_fake(gm, flat, name)


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


class _MetaSizes(_Sizes):
    """``_Sizes`` on meta tensors: constants read as meta tensors of their shapes, sizes all static."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, None)

    def fetch_attr(self, target: str) -> Any:
        value = super().fetch_attr(target)
        return _meta(value) if isinstance(value, torch.Tensor) else value

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        """Batch norms' meta kernels are Python decompositions whose first call imports dynamo (2-3 s):
        their result has the input's shape (and statistics of at most its channels), taken directly."""
        packet = getattr(target, "_overloadpacket", None)
        if getattr(packet, "__name__", "") not in _BATCH_NORMS:
            return super().call_function(target, args, kwargs)
        out = torch.empty_like(args[0])
        if packet.__name__ == "batch_norm":
            return out
        channels = args[0].shape[1] if args[0].dim() > 1 else 1
        return out, *(torch.empty(channels, dtype=args[0].dtype, device="meta") for _ in range(2))


def _bound_fake(gm: torch.fx.GraphModule, flat: list[Any], name: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv()
    try:
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=shape_env) as mode:

            def static(t: torch.Tensor) -> torch.Tensor:
                return mode.from_tensor(t, static_shapes=True)

            fake = pytree.tree_map_only(torch.Tensor, static, list(flat))
            _Sizes(gm, shape_env).run(*fake)
    except _TooBig as exc:
        raise InputError(
            f"{name}: {first_line(exc)} (pathweave runs at most {MAX_ELEMENTS} per value); refused"
        ) from exc
    # any other failure (the program's own guards on the inputs) goes to the caller: nothing has run


def check_archive(path: Path) -> None:
    """Raise ``InputError`` unless ``path`` is a current-format ``.pt2`` archive in which nothing would
    be unpickled without restriction, loaded as code or evaluated (``clean_archive``)."""
    clean_archive(path)


def clean_archive(path: Path) -> bytes:
    """The archive at ``path`` checked entry by entry and written again in memory, one entry per name
    (zip readers disagree on which of two same-named entries counts), with its program JSON cleaned
    (``pt2_program``); what torch then loads is only what was checked."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if len(set(names)) != len(names):
                dup = next(n for n in names if names.count(n) > 1)
                raise InputError(f"{path}: archive entry {dup!r} appears twice; refused")
            root = _root(path, names)
            _check_size(path, archive)
            for name in names:
                _check_entry(path, name[len(root) :])
            sizes = {info.filename[len(root) :]: info.file_size for info in archive.infolist()}
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as clean:
                for name in names:
                    clean.writestr(name, _checked(path, name[len(root) :], archive.read(name), sizes))
            return out.getvalue()
    except InputError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:  # truncated, empty or not a zip
        what = first_line(exc)
        raise InputError(f"{path} is not a torch.export .pt2 archive (a zip file): {what}") from exc


def _root(path: Path, names: list[str]) -> str:
    """The archive's one top-level folder; the legacy format (no archive_format file) is refused, since
    torch reads its state with unrestricted pickle."""
    roots = {n.split("/", 1)[0] + "/" for n in names if "/" in n}
    root = next(iter(roots)) if len(roots) == 1 else ""
    if not root or root + "archive_format" not in names:
        raise InputError(
            f"{path} is not a current torch.export .pt2 archive (no archive_format entry); files of the "
            "legacy format unpickle their contents, so pathweave does not read them: save the program "
            "again with torch.export.save from torch >= 2.8"
        )
    return root


def _check_size(path: Path, archive: zipfile.ZipFile) -> None:
    total = sum(info.file_size for info in archive.infolist())
    limit = MAX_EXPANSION * path.stat().st_size + EXPANSION_SLACK
    if total > limit:
        raise InputError(
            f"{path}: its entries expand to {total >> 20} MiB from {path.stat().st_size >> 20} MiB on "
            "disk; torch.export.save stores them uncompressed, so this is refused as a zip bomb"
        )


def _check_entry(path: Path, rel: str) -> None:
    parts = PurePosixPath(rel).parts
    if rel.startswith("/") or ".." in parts:
        raise InputError(f"{path}: archive entry {rel!r} points outside the archive; refused")
    if rel.startswith(_CODE_DIRS):
        raise InputError(
            f"{path}: archive entry {rel!r} holds compiled code (AOTInductor or another backend), which "
            "pathweave does not load; save the ExportedProgram alone with torch.export.save"
        )
    if rel in _DATA_FILES or rel.endswith("/") or rel.startswith("extra/"):
        return
    folder, _, name = rel.rpartition("/")
    allowed = _ENTRIES.get(folder)
    if allowed is None or not name.startswith(allowed) and not name.endswith(allowed):
        raise InputError(
            f"{path}: unexpected archive entry {rel!r} (legacy pickled weights, or not a torch.export "
            ".pt2 file); save the program again with torch.export.save from torch >= 2.8"
        )


def _checked(path: Path, rel: str, raw: bytes, sizes: dict[str, int]) -> bytes:
    """An entry's bytes as torch may read them: configs and sample inputs checked, programs cleaned."""
    if rel.endswith("_config.json") and rel.startswith(("data/weights/", "data/constants/")):
        _check_config(path, rel, raw, sizes)
    elif rel.startswith("data/sample_inputs/"):
        _check_sample_inputs(path, rel, raw)
    elif rel.startswith("models/"):
        try:
            program = json.loads(raw)
        except ValueError as exc:
            raise InputError(f"{path}: {rel} is not JSON: {first_line(exc)}") from exc
        return json.dumps(clean_program(program, f"{path}: {rel}")).encode()
    return raw


def _check_config(path: Path, rel: str, raw: bytes, sizes: dict[str, int]) -> None:
    """Weights and constants must be raw tensor bytes: no ``use_pickle`` entry, no custom or opaque
    objects (both unpickled on load), and each tensor's sizes, strides and offset within its record
    (an empty record with huge sizes would make torch allocate them)."""
    try:
        config = json.loads(raw)["config"]
        entries = list(config.items())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: {rel} is not a valid payload config: {first_line(exc)}") from exc
    for fqn, meta in entries:
        if not fqn or not NAME.fullmatch(fqn):
            raise InputError(f"{path}: {rel}: {fqn[:80]!r} is not a parameter name; refused")
        if not isinstance(meta, dict):
            raise InputError(f"{path}: {rel}: entry {fqn!r} is not an object")
        name = str(meta.get("path_name", ""))
        if meta.get("use_pickle"):
            raise InputError(
                f"{path}: {rel} marks {fqn!r} ({name}) as pickled; loading it would run arbitrary code, "
                "so pathweave refuses the file. Save tensors as plain weights (torch.export.save does for "
                "ordinary parameters and buffers)"
            )
        if not name.startswith(("weight_", "tensor_")):
            raise InputError(
                f"{path}: {rel}: {fqn!r} is stored as {name!r}, an object torch would unpickle; pathweave "
                "loads tensors only"
            )
        record = rel.rsplit("/", 1)[0] + "/" + name
        _check_extent(path, rel, fqn, meta.get("tensor_meta"), sizes.get(record, 0))


def _check_extent(path: Path, rel: str, fqn: str, meta: object, nbytes: int) -> None:
    """The elements a tensor's sizes, strides and offset reach fit in its record (one byte each at
    least), all of them plain non-negative integers."""
    try:
        dims = [(d["as_int"], s["as_int"]) for d, s in zip(meta["sizes"], meta["strides"], strict=True)]
        offset = meta["storage_offset"]["as_int"]
        values = [offset, *(v for pair in dims for v in pair)]
        if not all(isinstance(v, int) and v >= 0 for v in values):
            raise ValueError("a negative or non-integer size, stride or offset")
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: {rel}: {fqn!r} has no plain tensor layout ({exc})") from exc
    if any(size == 0 for size, _ in dims):
        return
    reach = offset + sum((size - 1) * stride for size, stride in dims) + 1
    if reach > nbytes:
        raise InputError(
            f"{path}: {rel}: {fqn!r} reaches element {reach - 1} of a record of {nbytes} bytes; the file "
            "is corrupt"
        )


def _check_sample_inputs(path: Path, rel: str, raw: bytes) -> None:
    if not raw:
        return
    try:
        torch.load(io.BytesIO(raw), weights_only=True)
    except Exception as exc:
        raise InputError(
            f"{path}: {rel} cannot be read as plain tensors ({first_line(exc)}); torch would unpickle it "
            "without restriction, so pathweave refuses the file"
        ) from exc
