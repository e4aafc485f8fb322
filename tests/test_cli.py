"""`pathweave zoo | analyze | bench`, run in-process through cli.main, plus the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch

from pathweave import cli, zoo
from pathweave.analysis.analyze import analyze_captured

STATIC_KEYS = {
    "model", "flops", "unit", "nodes", "edges", "total_work", "critical_path", "parallelism", "max_width",
    "width_per_depth", "speedup_bound", "critical_nodes",
}  # fmt: skip
CANDIDATE_KEYS = {"name", "kind", "status", "median_ms", "max_abs_diff", "note"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def keep_threads():
    """bench sets torch's thread count for the whole process; put it back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_zoo(capsys) -> None:
    assert cli.main(["zoo"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines()[: len(zoo.MODELS)]]
    assert listed == list(zoo.MODELS)
    assert "torchvision:NAME" in out


def test_analyze_json(tmp_path, capsys, cache, zoo_cache) -> None:
    path = tmp_path / "squeeze.json"
    assert cli.main(["analyze", "squeezenet1_0", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("squeezenet1_0: ") and "parallelism" in out and "measured" not in out
    d = json.loads(path.read_text())
    assert set(d) == STATIC_KEYS
    assert d["model"] == "squeezenet1_0"
    assert isinstance(d["nodes"], int) and isinstance(d["max_width"], int)
    # static statistics depend on structure, and on the global pool's window (input / output:
    # 13x13 at 224x224, 3x3 for the small capture); that pool ends the critical path
    small = analyze_captured(zoo_cache.captured("squeezenet1_0")).static
    assert (d["nodes"], d["max_width"]) == (small.nodes, small.max_width)
    assert d["total_work"] == small.total_work - 9 + 169
    assert d["critical_path"] == small.critical_path - 9 + 169
    assert d["parallelism"] == pytest.approx(d["total_work"] / d["critical_path"])
    assert not cache.exists()  # nothing profiled, nothing written


def test_analyze_measure(tmp_path, capsys, cache) -> None:
    path = tmp_path / "squeeze.json"
    assert cli.main(["analyze", "squeezenet1_0", "--measure", "--json", str(path)]) == 0
    assert "measured (us)" in capsys.readouterr().out
    d = json.loads(path.read_text())
    assert set(d) == STATIC_KEYS | {"measured"}
    measured = d["measured"]
    assert set(measured) == STATIC_KEYS - {"model", "flops"}
    assert measured["unit"] == "us" and measured["nodes"] == d["nodes"]
    assert 0 < measured["critical_path"] <= measured["total_work"]
    assert len(list((cache / "profiles").glob("*.json"))) == 1


def test_bench_json(tmp_path, capsys, keep_threads) -> None:
    path = tmp_path / "bench.json"
    argv = ["bench", "squeezenet1_0", "--rounds", "2", "--candidates", "pathweave:sequential,eager",
            "--json", str(path), "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("squeezenet1_0  batch 1  cpu")
    d = json.loads(path.read_text())
    assert {"model", "machine", "settings", "candidates"} <= set(d)
    assert d["model"] == "squeezenet1_0"
    assert {"cpu", "cores", "torch"} <= set(d["machine"])
    assert d["settings"]["rounds"] == 2 and d["settings"]["batch"] == 1
    cands = {c["name"]: c for c in d["candidates"]}
    assert sorted(cands) == ["eager", "pathweave:sequential"]
    for c in cands.values():
        assert CANDIDATE_KEYS <= set(c)
        assert c["status"] == "ok", c
        assert c["median_ms"] > 0
        assert 0 <= c["max_abs_diff"] < 1e-2
        assert isinstance(c["note"], str)
    assert cands["eager"]["kind"] == "peer"
    assert cands["pathweave:sequential"]["kind"] == "pathweave"
    assert "fuse_conv" in cands["pathweave:sequential"]["note"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["analyze", "no_such_model"], "pathweave: error: unknown zoo model 'no_such_model'"),
        (["bench", "no_such_model", "--quiet"], "pathweave: error: unknown zoo model 'no_such_model'"),
        (
            ["bench", "squeezenet1_0", "--candidates", "eager,warp_drive", "--quiet"],
            "pathweave: error: unknown bench candidates ['warp_drive']",
        ),
    ],
)
def test_errors_are_one_line(capsys, keep_threads, argv: list[str], message: str) -> None:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), captured.err
    assert "Traceback" not in captured.err + captured.out


def test_console_script() -> None:
    exe = shutil.which("pathweave")
    if exe is None:
        pytest.skip("the pathweave console script is not installed")
    run = subprocess.run([exe, "zoo"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert [line.split()[0] for line in run.stdout.splitlines()[: len(zoo.MODELS)]] == list(zoo.MODELS)
    bad = subprocess.run([exe, "analyze", "no_such_model"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("pathweave: error: unknown zoo model")
    assert "Traceback" not in bad.stderr


def test_plan_streams_json(tmp_path, capsys) -> None:
    out = tmp_path / "streams.json"
    assert cli.main(["plan", "googlenet", "--streams", "--max-streams", "4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "opara" in text and "Opara allocation + launch order alone" in text
    rows = json.loads(out.read_text())["stream_plans"]
    assert [r["policy"] for r in rows] == ["opara", "critical", "nimble", "wavefront", "single"]
    assert all(1 <= r["streams"] <= 4 for r in rows if r["policy"] != "nimble")  # Nimble has no cap
    assert rows[-1]["streams"] == 1 and rows[-1]["waits"] == 0


def test_tiles_report_on_a_tiny_model(tmp_path, capsys, tiny_cnn) -> None:
    model = tmp_path / "tiny.pt2"
    torch.export.save(torch.export.export(tiny_cnn().eval(), (torch.randn(1, 3, 8, 8),)), model)
    out = tmp_path / "tiles.json"
    argv = ["tiles", str(model), "--threads", "2", "--rounds", "2", "--requests", "2", "--json", str(out),
            "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert (
        "tiny  batch 1: 3 layers" in text and "p_e (Karp-Flatt)" in text and "co-exec ms (2 requests)" in text
    )
    d = json.loads(out.read_text())
    assert [r["op"] for r in d["layers"]] == ["conv2d_act", "max_pool2d", "linear"]
    assert [r["workers"] for r in d["scaling"]] == [1, 2]
    one, two = d["scaling"]
    assert one["speedup"] == 1.0 and one["parallel_fraction"] is None
    assert two["parallel_fraction"] == pytest.approx(1 - (2 / two["speedup"] - 1))
    assert cli.main(["tiles", str(model), "--threads", "0", "--quiet"]) == 2
    assert "worker counts must be >= 1" in capsys.readouterr().err


def test_tiles_timeline_draws_each_worker_count(tmp_path, capsys, tiny_cnn) -> None:
    pytest.importorskip("matplotlib")
    model = tmp_path / "tiny.pt2"
    torch.export.save(torch.export.export(tiny_cnn().eval(), (torch.randn(1, 3, 8, 8),)), model)
    png = tmp_path / "tiles.png"
    argv = ["tiles", str(model), "--threads", "2", "--rounds", "1", "--quiet", "--timeline", str(png)]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "1 worker: " in text and "2 workers: " in text and "idle" in text
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert cli.main([*argv[:-1], str(tmp_path / "tiles.txt")]) == 2  # refused before any work
    assert "--timeline is written as .png or .svg" in capsys.readouterr().err


def test_tiles_report_on_a_model_in_islands(tmp_path, capsys) -> None:
    class Attention(torch.nn.Module):  # attention over fewer than 16 keys stays in ATen: islands around it
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).unflatten(-1, (3, 4, 16)).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return self.out(y.transpose(1, 2).flatten(2))

    model = tmp_path / "attention.pt2"
    torch.export.save(torch.export.export(Attention().eval(), (torch.randn(1, 8, 64),)), model)
    with pytest.warns(UserWarning, match="tiles run .* of the FLOPs"):
        assert cli.main(["tiles", str(model), "--threads", "2", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "attention: tile islands" in text and "scaled_dot_product_attention x1" in text
