"""Resolve a model argument (zoo name, ``torchvision:NAME``, ``timm:NAME``, ``hf:CONFIG``, ``.pt2`` path)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pathweave.errors import InputError, UnknownModelError, require
from pathweave.zoo import get


@dataclass
class LoadedModel:
    name: str
    model: Any  # nn.Module or torch.export.ExportedProgram
    inputs: tuple[torch.Tensor, ...]
    onnx: bytes | None = None  # the original ONNX file, when the model came from one


def load_model(spec: str, batch: int = 1, small: bool = False, seed: int = 0) -> LoadedModel:
    """The model a CLI argument names, with example inputs of the given batch size."""
    if batch < 1:
        raise InputError(f"batch must be >= 1, got {batch}")
    prefix, _, rest = spec.partition(":")
    if rest and prefix == "torchvision":
        return _torchvision(rest, batch, small)
    if rest and prefix == "timm":
        return _timm(rest, batch, small)
    if rest and prefix == "hf":
        return _hf(rest, batch, small)
    if spec.endswith(".pt2") or Path(spec).suffix in (".pt2", ".onnx"):
        return _file(Path(spec), batch)
    if prefix == "poolstack":
        return _poolstack(rest, batch, small, seed)
    entry = get(spec)
    return LoadedModel(spec, entry.build(seed), entry.example_inputs(batch, small))


def _image(batch: int, size: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1234)
    return (torch.randn(batch, 3, size, size, generator=g),)


def _torchvision(name: str, batch: int, small: bool) -> LoadedModel:
    models = require("torchvision.models", "torchvision")
    try:
        model = models.get_model(name, weights=None)
    except ValueError as exc:
        raise UnknownModelError(f"torchvision has no model {name!r}") from exc
    size = 299 if "inception" in name else 224
    return LoadedModel(f"torchvision:{name}", model.eval(), _image(batch, 96 if small else size))


def _timm(name: str, batch: int, small: bool) -> LoadedModel:
    timm = require("timm", "timm")
    try:
        model = timm.create_model(name, pretrained=False)
    except RuntimeError as exc:
        raise UnknownModelError(f"timm has no model {name!r}") from exc
    size = model.default_cfg.get("input_size", (3, 224, 224))[-1]
    return LoadedModel(f"timm:{name}", model.eval(), _image(batch, 96 if small else size))


def _hf(config: str, batch: int, small: bool) -> LoadedModel:
    """A transformers model with random weights, offline: a model type ("bert", "gpt2") gives its
    default config; anything else must be a local config directory or file."""
    transformers = require("transformers", "hf")
    try:
        if config in transformers.CONFIG_MAPPING:
            cfg = transformers.AutoConfig.for_model(config)
        else:
            cfg = transformers.AutoConfig.from_pretrained(config, local_files_only=True)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnknownModelError(
            f"hf:{config} is neither a transformers model type (e.g. hf:bert, hf:gpt2) nor a local "
            f"config path; nothing is downloaded ({reason})"
        ) from exc
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(cfg).eval()
    seq = 16 if small else 128
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    return LoadedModel(f"hf:{config}", model, (ids,))


def _file(path: Path, batch: int) -> LoadedModel:
    if not path.exists():
        raise UnknownModelError(f"no such model file: {path}")
    if path.suffix == ".onnx":
        from pathweave.frontend.onnx import onnx_module

        gm, inputs = onnx_module(path, batch=batch)
        return LoadedModel(path.stem, gm, inputs, path.read_bytes())
    from pathweave.frontend.pt2 import load_pt2

    ep = load_pt2(path)  # checked first: nothing in the file is unpickled without restriction
    example = ep.example_inputs
    if not (isinstance(example, tuple) and len(example) == 2):
        raise InputError(f"{path} holds no (args, kwargs) example inputs; pass inputs, or save the program "
                         "with torch.export.save after export")  # fmt: skip
    args, kwargs = example
    if kwargs:
        raise InputError(f"{path}: keyword example inputs are not supported by the CLI")
    return LoadedModel(path.stem, ep, tuple(args))


def _poolstack(blocks: str, batch: int, small: bool, seed: int) -> LoadedModel:
    """BrainSlug's synthetic network, ``poolstack`` (10 blocks) or ``poolstack:N``, batch norms calibrated."""
    from pathweave.zoo import _calibrate_norms, poolstack

    if blocks and not blocks.isdigit():
        raise InputError(f"poolstack:N takes a number of blocks, got {blocks!r}")
    n = int(blocks or 10)
    if n < 1:
        raise InputError("poolstack:N needs at least 1 block")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = poolstack.build(n)
        _calibrate_norms(model, poolstack.example_inputs(2, False))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        inputs = poolstack.example_inputs(batch, small)
    return LoadedModel("poolstack" + (f":{n}" if blocks else ""), model.eval(), inputs)
