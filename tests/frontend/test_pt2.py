"""``.pt2`` files: nothing in them can run code when pathweave loads them; bad files and inputs that do not
fit the program get pathweave errors naming what is wrong."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

import pathweave
from pathweave.errors import InputError, PathweaveError
from pathweave.frontend.pt2 import check_archive


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(_model(), (torch.randn(2, 8),)), path)
    return path


class _Payload:
    """Unpickling this writes a marker file: proof that the pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _rewrite(src: Path, dst: Path, edit) -> None:
    """Copy the archive, passing every entry through ``edit(name, data) -> data | None`` (None drops it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = edit(name, zin.read(name))
            if data is not None:
                zout.writestr(name, data)


def _pickled_weight(saved: Path, dst: Path, marker: Path, config_suffix: str, prefix: str) -> None:
    """The archive with its first weight (or constant) marked ``use_pickle`` and replaced by a payload."""
    with zipfile.ZipFile(saved) as z:
        config_name = next(n for n in z.namelist() if n.endswith(config_suffix))
        config = json.loads(z.read(config_name))
    fqn = next(iter(config["config"]))
    config["config"][fqn]["use_pickle"] = True
    target = config["config"][fqn]["path_name"]

    def edit(name: str, data: bytes) -> bytes:
        if name == config_name:
            return json.dumps(config).encode()
        if name.endswith(f"{prefix}{target}"):
            return pickle.dumps(_Payload(marker))
        return data

    _rewrite(saved, dst, edit)


@pytest.mark.parametrize("entry", ["optimize", "analyze"])
def test_pickled_weight_is_refused_without_running(saved: Path, tmp_path: Path, entry: str) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt2"
    _pickled_weight(saved, evil, marker, "weights_config.json", "weights/")
    try:  # the attack is real: torch itself runs the payload (then fails on what it returned)
        torch.export.load(evil)
    except Exception:  # noqa: BLE001
        pass
    assert marker.exists()
    marker.unlink()
    with pytest.raises(InputError, match="pickled"):
        getattr(pathweave, entry)(evil, torch.randn(2, 8))
    assert not marker.exists()


def test_pickled_sample_inputs_are_refused(saved: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt2"
    _rewrite(saved, evil, lambda n, d: pickle.dumps(_Payload(marker)) if "sample_inputs" in n else d)
    with pytest.raises(InputError, match="sample_inputs"):
        pathweave.optimize(evil, torch.randn(2, 8), strategy="sequential")
    assert not marker.exists()


def test_compiled_code_and_unknown_entries_are_refused(saved: Path, tmp_path: Path) -> None:
    root = zipfile.ZipFile(saved).namelist()[0].split("/")[0]
    for extra, match in [("data/aotinductor/model/x.so", "compiled code"), ("evil.py", "unexpected"),
                         ("../x", "outside")]:  # fmt: skip
        bad = tmp_path / "bad.pt2"
        with zipfile.ZipFile(saved) as zin, zipfile.ZipFile(bad, "w") as zout:
            for name in zin.namelist():
                zout.writestr(name, zin.read(name))
            zout.writestr(f"{root}/{extra}", b"\x7fELF")
        with pytest.raises(InputError, match=match):
            check_archive(bad)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04", os.urandom(4096)], ids=["empty", "header", "random"])
def test_not_an_archive(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.pt2"
    path.write_bytes(content)
    with pytest.raises(InputError, match="not a torch.export .pt2"):
        pathweave.optimize(path, torch.randn(2, 8))


def test_truncated_archive(saved: Path, tmp_path: Path) -> None:
    data = saved.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 100):
        path = tmp_path / "t.pt2"
        path.write_bytes(data[:cut])
        with pytest.raises(PathweaveError):
            pathweave.optimize(path, torch.randn(2, 8), strategy="sequential")


def test_corrupt_program_json(saved: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt2"
    _rewrite(saved, bad, lambda n, d: b"{not json" if n.endswith("models/model.json") else d)
    with pytest.raises(InputError, match="not JSON"):
        pathweave.optimize(bad, torch.randn(2, 8))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        pathweave.optimize(tmp_path / "nothing.pt2", torch.randn(2, 8))


@pytest.mark.parametrize(
    "inputs, match",
    [((torch.randn(3, 8),), r"\(3, 8\)"), ((torch.randn(2, 8), torch.randn(2, 8)), "do not fit"),
     ((torch.ones(2, 8, dtype=torch.long),), "int64")],
    ids=["batch", "count", "dtype"],
)  # fmt: skip
def test_inputs_that_do_not_fit_the_program(saved: Path, inputs: tuple, match: str) -> None:
    with pytest.raises(InputError, match=match):
        pathweave.optimize(saved, *inputs, strategy="sequential")


def test_dynamic_program_is_specialised_to_the_inputs(tmp_path: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(_model(), (torch.randn(2, 8),), dynamic_shapes=({0: batch},))
    path = tmp_path / "dyn.pt2"
    torch.export.save(ep, path)
    x = torch.randn(5, 8)
    fn = pathweave.optimize(path, x, strategy="tiles")
    torch.testing.assert_close(fn(x), _model()(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="captured for"):
        fn(torch.randn(3, 8))  # specialised: another batch is a clear error, not a crash
    with pytest.raises(InputError, match="do not fit"):
        pathweave.optimize(path, torch.randn(5, 9), strategy="sequential")


def test_pickle_refused_when_the_file_gives_its_own_inputs(saved: Path, tmp_path: Path) -> None:
    """``optimize(path)``, ``analyze(path)`` and the CLI read the archive's sample inputs: the same checks
    run first (a hostile review found that path loading the file unchecked)."""
    from pathweave import cli

    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt2"
    _pickled_weight(saved, evil, marker, "weights_config.json", "weights/")
    with pytest.raises(InputError, match="pickled"):
        pathweave.optimize(evil, strategy="sequential")
    with pytest.raises(InputError, match="pickled"):
        pathweave.analyze(evil)
    assert cli.main(["analyze", str(evil)]) != 0
    assert not marker.exists()


def test_legacy_pickled_entries_beside_clean_ones_are_refused(saved: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    root = zipfile.ZipFile(saved).namelist()[0].split("/")[0]
    for entry in ("data/weights/model.pt", "data/constants/model.pt", "data/constants/custom_obj_0"):
        evil = tmp_path / "legacy.pt2"
        with zipfile.ZipFile(saved) as zin, zipfile.ZipFile(evil, "w") as zout:
            for name in zin.namelist():
                zout.writestr(name, zin.read(name))
            zout.writestr(f"{root}/{entry}", pickle.dumps(_Payload(marker)))
        with pytest.raises(InputError, match="unexpected archive entry"):
            pathweave.optimize(evil, torch.randn(2, 8), strategy="sequential")
        assert not marker.exists()


def test_zip_bomb_is_refused(saved: Path, tmp_path: Path) -> None:
    root = zipfile.ZipFile(saved).namelist()[0].split("/")[0]
    bomb = tmp_path / "bomb.pt2"
    with zipfile.ZipFile(saved) as zin, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            zout.writestr(name, zin.read(name))
        zout.writestr(f"{root}/extra/bomb", bytes(80 << 20))  # 80 MiB of zeros, ~80 KiB compressed
    with pytest.raises(InputError, match="zip bomb"):
        pathweave.optimize(bomb, torch.randn(2, 8), strategy="sequential")


def _program_edit(saved: Path, dst: Path, edit) -> None:
    """The archive with its program JSON passed through ``edit(dict) -> dict``."""

    def apply(name: str, data: bytes) -> bytes:
        return json.dumps(edit(json.loads(data))).encode() if name.endswith("models/model.json") else data

    _rewrite(saved, dst, apply)


def _rename_input(program: dict, new: str) -> dict:
    text = json.dumps(program)
    old = program["graph_module"]["graph"]["inputs"][-1]["as_tensor"]["name"]
    return json.loads(text.replace(json.dumps(old), json.dumps(new)))


def _size_expr(program: dict, expr: str) -> dict:
    values = program["graph_module"]["graph"]["tensor_values"]
    name = next(iter(values))
    values[name]["sizes"][0] = {"as_expr": {"expr_str": expr, "hint": {"as_int": 2}}}
    return program


def _node_target(program: dict, target: str) -> dict:
    program["graph_module"]["graph"]["nodes"][0]["target"] = target
    return program


@pytest.mark.parametrize(
    "edit, match",
    [(lambda p, m: _rename_input(p, f"x=__import__('pathlib').Path('{m}').touch()"), "not a name"),
     (lambda p, m: _size_expr(p, f"__import__('pathlib').Path('{m}').touch()"), "not a size expression"),
     (lambda p, m: _node_target(p, "torch.load"), "not an operator")],
    ids=["input-name", "size-expression", "node-target"],
)  # fmt: skip
def test_program_json_that_torch_would_run_is_refused(saved: Path, tmp_path: Path, edit, match: str) -> None:
    """Names go into generated source, size expressions through sympify, targets are looked up on torch:
    a second hostile review ran code through each before the program JSON was checked."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt2"
    _program_edit(saved, evil, lambda p: edit(p, marker))
    with pytest.raises(InputError, match=match):
        pathweave.optimize(evil, torch.randn(2, 8), strategy="sequential")
    assert not marker.exists()


def test_duplicate_entries_are_refused(saved: Path, tmp_path: Path) -> None:
    """zipfile reads the last of two same-named entries, torch's reader the first."""
    marker = tmp_path / "ran"
    evil = tmp_path / "dup.pt2"
    with zipfile.ZipFile(saved) as zin:
        config_name = next(n for n in zin.namelist() if n.endswith("weights_config.json"))
    _pickled_weight(saved, tmp_path / "bad.pt2", marker, "weights_config.json", "weights/")
    with zipfile.ZipFile(tmp_path / "bad.pt2") as bad, zipfile.ZipFile(saved) as good, \
            zipfile.ZipFile(evil, "w") as zout, pytest.warns(UserWarning):  # fmt: skip
        for name in good.namelist():
            if name == config_name:
                zout.writestr(name, bad.read(name))
            zout.writestr(name, bad.read(name) if name.endswith("weight_0") else good.read(name))
    with pytest.raises(InputError, match="appears twice"):
        pathweave.optimize(evil, torch.randn(2, 8), strategy="sequential")
    assert not marker.exists()


def test_dynamic_programs_with_size_expressions_still_load(tmp_path: Path) -> None:
    class Halves(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(x.shape[0] // 2, -1)[:, : x.shape[1] - 1] * 2

    dims = {0: torch.export.Dim("b", min=2, max=64) * 2, 1: torch.export.Dim("c", min=3, max=9)}
    path = tmp_path / "halves.pt2"
    torch.export.save(torch.export.export(Halves(), (torch.randn(4, 6),), dynamic_shapes=(dims,)), path)
    x = torch.randn(6, 5)
    torch.testing.assert_close(pathweave.optimize(path, x, strategy="sequential")(x), Halves()(x))


def test_bitwise_operators_of_decoder_masks_load(tmp_path: Path) -> None:
    class Masks(torch.nn.Module):  # Llama / Qwen2 build their masks with & and |
        def forward(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.where((a & b) | (a ^ b), x, -x)

    inputs = (torch.randn(3, 4), torch.rand(3, 4) > 0.5, torch.rand(3, 4) > 0.5)
    path = tmp_path / "masks.pt2"
    torch.export.save(torch.export.export(Masks(), inputs), path)
    fast = pathweave.optimize(path, *inputs, strategy="sequential")
    torch.testing.assert_close(fast(*inputs), Masks()(*inputs))


def test_non_finite_constants_load(tmp_path: Path) -> None:
    class Masked(torch.nn.Module):  # attention masks fill with -inf; torch writes "-Infinity" in the JSON
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.masked_fill(x > 1, float("-inf")).clamp(max=float("inf"))
            return y.softmax(-1) + x.masked_fill(x < -1, float("nan"))

    x = torch.randn(3, 7)
    path = tmp_path / "masked.pt2"
    torch.export.save(torch.export.export(Masked(), (x,)), path)
    fast = pathweave.optimize(path, x, strategy="sequential")
    torch.testing.assert_close(fast(x), Masked()(x), equal_nan=True)


def test_weight_norm_loads(tmp_path: Path) -> None:
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3), dim=2)  # wav2vec2's stem
    x = torch.randn(1, 4, 20)
    path = tmp_path / "wn.pt2"
    torch.export.save(torch.export.export(conv.eval(), (x,)), path)
    with torch.no_grad():
        torch.testing.assert_close(pathweave.optimize(path, x, strategy="sequential")(x), conv(x))


@pytest.mark.parametrize("value", ["Infinity()", "__import__('os')", "-inf"])
def test_only_the_three_float_words_pass(saved: Path, tmp_path: Path, value: str) -> None:
    from pathweave.frontend.pt2_program import clean_program

    with pytest.raises(InputError, match="not a name"):
        clean_program({"inputs": [{"arg": {"as_float": value}}]}, "x.pt2")


LAYOUTS = [("storage_offset", {"as_int": 1000}, "reaches element"),
           ("strides", [{"as_int": -1}, {"as_int": 1}], "plain tensor"),
           ("sizes", [{"as_int": 1 << 40}, {"as_int": 8}], "reaches")]  # fmt: skip


@pytest.mark.parametrize("field, value, match", LAYOUTS)
def test_tensor_layout_outside_its_record(saved: Path, tmp_path: Path, field, value, match) -> None:
    """An empty or short record with huge sizes would make torch allocate them, or read out of bounds."""
    bad = tmp_path / "bad.pt2"

    def edit(name: str, data: bytes) -> bytes:
        if not name.endswith("weights_config.json"):
            return data
        config = json.loads(data)
        next(iter(config["config"].values()))["tensor_meta"][field] = value
        return json.dumps(config).encode()

    _rewrite(saved, bad, edit)
    with pytest.raises(InputError, match=match):
        pathweave.optimize(bad, torch.randn(2, 8), strategy="sequential")


def _spec_context(program: dict, context: object) -> dict:
    sig = program["graph_module"]["module_call_graph"][0]["signature"]
    protocol, root = json.loads(sig["in_spec"])
    root["context"] = json.dumps(context)
    sig["in_spec"] = json.dumps([protocol, root])
    return program


def _spec_type(program: dict, type_name: str) -> dict:
    sig = program["graph_module"]["module_call_graph"][0]["signature"]
    protocol, root = json.loads(sig["out_spec"])
    root["type"] = type_name
    sig["out_spec"] = json.dumps([protocol, root])
    return program


def _first_node(program: dict, target: str) -> dict:
    program["graph_module"]["graph"]["nodes"][0]["target"] = target
    return program


def _huge_value(program: dict) -> dict:
    values = program["graph_module"]["graph"]["tensor_values"]
    values[next(iter(values))]["sizes"] = [{"as_int": 1 << 31}, {"as_int": 4}]
    return program


@pytest.mark.parametrize(
    "edit, match",
    [(lambda p: _spec_context(p, [{"__enum__": True, "fqn": "ctypes:cdll", "name": "x.so"}]), "plain input"),
     (lambda p: _spec_type(p, "collections.defaultdict"), "plain input"),
     (lambda p: _first_node(p, "torch.ops.aten.from_file.default"), "reads or writes files"),
     (lambda p: _first_node(p, "torch.ops.evil.op.default"), "not an operator"),
     (lambda p: _size_expr(p, "9**9**9"), "not a size expression"),
     (_huge_value, "more than pathweave allows")],
    ids=["enum-import", "defaultdict-import", "from-file", "foreign-namespace", "power", "huge-value"],
)  # fmt: skip
def test_program_json_torch_would_act_on(saved: Path, tmp_path: Path, edit, match: str) -> None:
    """A third hostile review: a spec context that makes torch import a module (ctypes: dlopen), an
    op that maps a file as shared memory and writes through it, a size expression sympy computes for
    minutes, a value of tens of GiB from a 5 KB file."""
    evil = tmp_path / "evil.pt2"
    _program_edit(saved, evil, edit)
    with pytest.raises(InputError, match=match):
        pathweave.optimize(evil, torch.randn(2, 8), strategy="sequential")


def _insert_node(program: dict, target: str, args: list) -> dict:
    """A node before the output that calls ``target`` on ``args`` (serialized argument dicts)."""
    graph = program["graph_module"]["graph"]
    inputs = [{"name": f"a{i}", "arg": a, "kind": 1} for i, a in enumerate(args)]
    node = {
        "target": target,
        "inputs": inputs,
        "outputs": [{"as_tensor": {"name": "evil_out"}}],
        "metadata": {},
        "is_hop_single_tensor_return": None,
    }
    graph["tensor_values"]["evil_out"] = next(iter(graph["tensor_values"].values()))
    graph["nodes"].append(node)
    return program


@pytest.mark.parametrize(
    "target, args, match",
    [("torch.ops.aten._reshape_alias.default", [], "does not run from a file"),
     ("torch.ops.higher_order.wrap", [{"as_operator": "torch.ops.inductor._alloc_from_pool.default"}],
      "not an operator|does not run"),
     ("torch.ops.aten.set_.source_Tensor", [], "does not run from a file")],
    ids=["unchecked-view", "wrap-any-op", "set-storage"],
)  # fmt: skip
def test_ops_that_reach_raw_memory_are_refused(saved: Path, tmp_path: Path, target, args, match) -> None:
    """A fourth hostile review read and wrote memory outside a tensor with ``_reshape_alias`` + ``fill_``,
    and ran any op of any namespace through ``higher_order.wrap``."""
    evil = tmp_path / "evil.pt2"
    _program_edit(saved, evil, lambda p: _insert_node(p, target, args))
    with pytest.raises(InputError, match=match):
        pathweave.optimize(evil, torch.randn(2, 8), strategy="sequential")


class _Huge(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.expand(1 << 20, 1 << 20, 2, 8).sum((0, 1))


def test_a_program_whose_values_pass_the_bound_is_refused_before_it_runs(tmp_path: Path) -> None:
    """A program is code: a 3e12-element view summed would run for hours (its JSON may declare small
    shapes); sizes are checked on fake tensors first."""
    x = torch.randn(2, 8)
    path = tmp_path / "huge.pt2"
    torch.export.save(torch.export.export(_Huge(), (x,)), path)
    with pytest.raises(InputError, match="elements"):
        pathweave.optimize(path, x, strategy="sequential")


class _BatchNormStats(torch.nn.Module):
    """Statistics of one value for a 4096-channel input: the kernel reads past them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = torch.zeros(1) + x.sum() * 0
        wide = torch.zeros(1, 4096) + x.sum() * 0
        bn = torch.ops.aten._native_batch_norm_legit_no_training
        return bn(wide, None, None, stats, stats + 1, 0.1, 0.0)[0]


class _UnboundedExpand(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = (x.sum() * 0 + 4_000_000_000).long().item()  # a data-dependent size with no upper bound
        return x.expand(n, 2, 8).sum(0)


class _MaskedSelect(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0] * 2


@pytest.mark.parametrize("model, match", [(_BatchNormStats(), "channels but a statistic"),
                                          (_UnboundedExpand(), "up to inf elements")])  # fmt: skip
def test_programs_that_torch_kernels_would_overrun_are_refused(tmp_path: Path, model, match: str) -> None:
    """A fifth hostile review: batch-norm statistics shorter than the channels read past the heap; a
    data-dependent size from a constant escaped the element bound."""
    x = torch.randn(2, 8)
    path = tmp_path / "m.pt2"
    try:
        torch.export.save(torch.export.export(model, (x,)), path)
    except Exception as exc:  # noqa: BLE001 - this torch cannot export it: nothing to load
        pytest.skip(f"torch.export refused the probe: {type(exc).__name__}")
    with pytest.raises(InputError, match=match):
        pathweave.optimize(path, x, strategy="sequential")


def test_data_dependent_sizes_with_a_bound_still_load(tmp_path: Path) -> None:
    x = torch.randn(4, 8)
    path = tmp_path / "mask.pt2"
    torch.export.save(torch.export.export(_MaskedSelect(), (x,)), path)
    fn = pathweave.optimize(path, x, strategy="sequential")
    torch.testing.assert_close(fn(x), x[x > 0] * 2)
