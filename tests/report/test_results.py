import json

from pathweave import cli
from pathweave.report.results import markdown_table


def _bench(model: str, ours: float, peers: dict[str, float | None]) -> dict:
    cands = [{"name": "pathweave:sequential", "kind": "pathweave", "status": "ok", "median_ms": ours}]
    for name, ms in peers.items():
        status = "ok" if ms is not None else "skipped"
        cands.append({"name": name, "kind": "peer", "status": status, "median_ms": ms})
    machine = {"cpu": "Test CPU", "cores": 2, "torch": "2.x"}
    return {"model": model, "machine": machine, "settings": {"batch": 1, "threads": 2, "rounds": 20},
            "candidates": cands}  # fmt: skip


def test_table_rows_and_ratio_to_best_peer(tmp_path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_bench("net_a", 12.0, {"eager": 40.0, "ort:seq": 8.0, "openvino": None})))
    b.write_text(json.dumps(_bench("net_b", 30.0, {"eager": 60.0, "ort:seq": 40.0})))
    lines = markdown_table([a, b]).splitlines()
    assert lines[0] == (
        "| model | batch | threads | pathweave:sequential | eager | ort:seq | openvino | best peer "
        "| pathweave / best peer |"
    )
    assert lines[2] == "| net_a | 1 | 2 | 12.0 | 40.0 | 8.0 | skipped | ort:seq | 1.50 |"
    assert lines[3] == "| net_b | 1 | 2 | 30.0 | 60.0 | 40.0 |  | ort:seq | 0.75 |"
    assert "Test CPU, 2 cores" in lines[-1]


def test_table_command(tmp_path, capsys) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps(_bench("net_a", 10.0, {"eager": 20.0})))
    assert cli.main(["table", str(path)]) == 0
    assert "| net_a | 1 | 2 | 10.0 | 20.0 | eager | 0.50 |" in capsys.readouterr().out


def test_best_peer_says_whether_a_limited_bench_limited_it(tmp_path) -> None:
    report = _bench("net_a", 30.0, {"ort:seq": 18.0, "openvino": 34.0})
    report["settings"] |= {"isa": "avx2", "peers_limited": True}
    report["candidates"][1]["isa"], report["candidates"][2]["isa"] = "avx512", "avx2"
    path = tmp_path / "a.json"
    path.write_text(json.dumps(report))
    assert "| ort:seq (avx512, NOT limited) | 1.67 |" in markdown_table([path])
