"""A bench below the CPU's vector level limits the peers that can be limited and says which could not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pathweave import cli
from pathweave.bench import isa
from pathweave.errors import InputError, UnsupportedError
from pathweave.machine import ISA_LEVELS, cpu_isa
from pathweave.report.tables import format_bench

#: the levels below this CPU's, where a bench limits its peers
BELOW = ISA_LEVELS[ISA_LEVELS.index(cpu_isa()) + 1 :]


def test_level_comes_from_the_option_then_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("PATHWEAVE_ISA", raising=False)
    assert isa.bench_isa() == cpu_isa()
    assert isa.bench_isa("generic") == "generic"
    monkeypatch.setenv("PATHWEAVE_ISA", "generic")
    assert isa.bench_isa() == "generic"
    assert isa.bench_isa(cpu_isa()) == cpu_isa()  # the option wins over the variable


def test_unknown_and_too_wide_levels_are_refused(monkeypatch) -> None:
    with pytest.raises(InputError, match="avx9"):
        isa.bench_isa("avx9")
    monkeypatch.setattr(isa, "cpu_isa", lambda: "avx2")
    with pytest.raises(UnsupportedError, match="cannot run the avx512"):
        isa.bench_isa("avx512")


def test_limit_env_names_every_library(monkeypatch) -> None:
    monkeypatch.setattr(isa, "cpu_isa", lambda: "avx512")
    assert isa.limit_env("avx512") == {}
    assert not isa.limited("avx512")
    assert isa.limit_env("avx2") == {
        "PATHWEAVE_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"
    }  # fmt: skip
    assert isa.limit_env("generic")["ONEDNN_MAX_CPU_ISA"] == "SSE41"
    assert isa.limit_env("generic")["ATEN_CPU_CAPABILITY"] == "default"


@pytest.mark.parametrize(
    ("line", "level"),
    [("Intel AVX-512 with Intel DL Boost and bfloat16 support", "avx512"), ("Intel AVX2", "avx2"),
     ("Intel SSE4.1", "generic"), ("brg_conv_fwd:avx512_core", "avx512"), ("jit:avx2", "avx2")],
)  # fmt: skip
def test_onednn_names_map_to_levels(line: str, level: str) -> None:
    assert isa._onednn_level(line) == level


def _ov_node(layer: str, primitive: str) -> SimpleNamespace:
    info = {"layerType": SimpleNamespace(astype=lambda _t: layer),
            "primitiveType": SimpleNamespace(astype=lambda _t: primitive)}  # fmt: skip
    return SimpleNamespace(get_rt_info=lambda: info)


def test_openvino_level_is_its_convolutions_and_names_wider_nodes() -> None:
    nodes = [_ov_node("Convolution", "brgconv_avx2_1x1_f32"), _ov_node("Convolution", "jit_avx2_f32"),
             _ov_node("Reduce", "jit_avx512_f32"), _ov_node("Eltwise", "jit_uni_f32"),
             _ov_node("Concatenation", "ref_f32")]  # fmt: skip
    compiled = SimpleNamespace(get_runtime_model=lambda: SimpleNamespace(get_ops=lambda: nodes))
    assert isa.openvino_isa(compiled) == ("avx2", "Reduce at avx512")
    nodes[2] = _ov_node("Reduce", "jit_avx2_f32")
    assert isa.openvino_isa(compiled) == ("avx2", "")
    assert isa.openvino_isa(SimpleNamespace(get_runtime_model=lambda: SimpleNamespace(get_ops=list))) == (
        None, "")  # fmt: skip


@pytest.mark.skipif(not BELOW, reason="no level below this CPU's")
def test_limits_set_in_process_take_effect_in_torch_and_openvino() -> None:
    """The libraries read the variables once: set before their first use, as the bench does, they hold
    (read back from ATen, from oneDNN's verbose line and from OpenVINO's executed primitives)."""
    pytest.importorskip("openvino")
    level = BELOW[0]
    code = f"""
import numpy as np, openvino as ov, openvino.opset13 as op, torch
from pathweave.bench import isa
isa.apply_limits({level!r})
x = op.parameter([1, 32, 16, 16], np.float32)
conv = op.convolution(x, op.constant(np.ones((32, 32, 3, 3), np.float32)), [1, 1], [1, 1], [1, 1], [1, 1])
compiled = ov.Core().compile_model(ov.Model([conv], [x]), "CPU", {{"INFERENCE_PRECISION_HINT": "f32"}})
from pathweave.tiles.runtime import gemm_isa
print(isa.torch_isa(), isa.openvino_isa(compiled)[0], gemm_isa())
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PATHWEAVE_ISA", *isa.PEER_ENV[level])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [level, level, level]


def test_unlimited_process_reports_the_cpu_level() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PATHWEAVE_ISA", "ATEN_CPU_CAPABILITY",
                                                            "ONEDNN_MAX_CPU_ISA")}  # fmt: skip
    code = "from pathweave.bench import isa; isa.apply_limits(isa.bench_isa()); print(isa.torch_isa())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == cpu_isa()


def _report(best_isa: str, limited: bool = True) -> dict:
    level = "avx2" if limited else "avx512"
    cands = [
        {"name": "pathweave:tiles", "kind": "pathweave", "status": "ok", "median_ms": 30.0,
         "max_abs_diff": 0.0, "max_rel_diff": 0.0, "note": "", "isa": level, "isa_note": level},
        {"name": "ort:seq", "kind": "peer", "status": "ok", "median_ms": 18.0, "max_abs_diff": 0.0,
         "max_rel_diff": 0.0, "note": "", "isa": best_isa,
         "isa_note": isa.label(best_isa, level, can_limit=False) if limited else best_isa},
        {"name": "openvino", "kind": "peer", "status": "ok", "median_ms": 34.0, "max_abs_diff": 0.0,
         "max_rel_diff": 0.0, "note": "", "isa": level, "isa_note": level},
    ]  # fmt: skip
    settings = {"batch": 1, "device": "cpu", "threads": 2, "rounds": 3, "date": "d", "loadavg_before": None,
                "loadavg_after": None, "isa": level, "peers_limited": limited,
                "limit_env": {"ONEDNN_MAX_CPU_ISA": "AVX2"} if limited else {}}  # fmt: skip
    machine = {"cpu": "Test CPU", "isa": "avx512", "cores": 2, "torch": "2.x"}
    return {"model": "m", "machine": machine, "settings": settings, "candidates": cands}


def test_table_says_whether_the_best_peer_was_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isa, "cpu_isa", lambda: "avx512")  # the report's machine, whatever CPU runs the test
    text = format_bench(_report("avx512"))
    assert "vs best peer (NOT limited)" in text and "vs best limited peer" in text
    assert "avx512, cannot be limited" in text
    assert "vs best peer: ort:seq ran avx512, cannot be limited (NOT limited)" in text
    tiles = next(line for line in text.splitlines() if line.startswith("pathweave:tiles"))
    assert "1.67" in tiles and "0.88" in tiles  # 30 / 18 over every peer, 30 / 34 over the limited ones
    text = format_bench(_report("avx2"))  # the fastest peer followed the limit
    assert "vs best peer (limited)" in text and "vs best limited peer" not in text
    assert "NOT limited" not in format_bench(_report("avx512", limited=False))


def test_cli_isa_option_reaches_the_bench(monkeypatch, capsys, tmp_path) -> None:
    seen = {}

    def fake(*args, isa=None, **kwargs):
        seen["isa"] = isa
        return SimpleNamespace(to_dict=lambda: _report("avx512"))

    monkeypatch.setattr("pathweave.bench.harness.run_bench", fake)
    out = tmp_path / "r.json"
    assert cli.main(["bench", "m", "--isa", "avx2", "--quiet", "--json", str(out)]) == 0
    assert seen["isa"] == "avx2"
    assert json.loads(out.read_text())["settings"]["peers_limited"]
    with pytest.raises(SystemExit):
        cli.main(["bench", "m", "--isa", "sse9"])


#: ORT 1.32's bytes at MLAS's AVX-512F branch: as built (je), and as experiments/ort_mlas_avx2.py leaves them
_AS_BUILT = bytes.fromhex("41f7c200000100740e4c89c048f7d0a8e00f8454010000")
_SKIPPED = bytes.fromhex("41f7c200000100eb0e4c89c048f7d0a8e00f8454010000")


@pytest.mark.parametrize(("code", "want"), [(_AS_BUILT, ("avx512", False)), (_SKIPPED, ("avx2", True)),
                                             (b"no branch here", ("avx512", False))])  # fmt: skip
def test_ort_level_is_read_back_from_its_binding(tmp_path, monkeypatch, code: bytes, want) -> None:
    """ORT runs at AVX-512 unless its binding's MLAS skips the AVX-512F branch (the experiment's copy)."""
    lib = tmp_path / "binding.so"
    lib.write_bytes(b"\x90" * 1000 + code + b"\x90" * 1000)
    monkeypatch.setattr(isa, "cpu_isa", lambda: "avx512")
    monkeypatch.setitem(
        sys.modules, "onnxruntime.capi.onnxruntime_pybind11_state", SimpleNamespace(__file__=str(lib))
    )
    isa.ort_isa.cache_clear()
    try:
        assert isa.ort_isa() == want
    finally:
        isa.ort_isa.cache_clear()


def test_ort_level_on_an_avx2_cpu_is_avx2_without_a_patch(monkeypatch) -> None:
    monkeypatch.setattr(isa, "cpu_isa", lambda: "avx2")
    isa.ort_isa.cache_clear()
    try:
        assert isa.ort_isa() == ("avx2", False)
    finally:
        isa.ort_isa.cache_clear()
