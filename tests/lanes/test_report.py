import json

from pathweave import cli


def test_plan_command_variants(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "plan.json"
    assert cli.main(["plan", "squeezenet1_0", "--lanes", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("squeezenet1_0\n") and "LC + pruning + cloning" in text
    d = json.loads(out.read_text())
    lc, pruned, cloned = d["variants"]
    assert [v["variant"] for v in d["variants"]] == ["LC", "LC + pruning", "LC + pruning + cloning"]
    assert pruned["nodes"] == lc["nodes"] - 1  # the eval-mode dropout before the classifier
    assert cloned["nodes"] > pruned["nodes"]  # squeezenet's fire modules read their squeeze twice
    for v in d["variants"]:
        assert v["clusters_merged"] <= v["clusters_lc"] and len(v["lane_ops"]) == 2
        assert sum(v["lane_ops"]) == v["nodes"] and v["simulated_us"] > 0
        assert v["simulated_speedup"] == v["one_thread_us"] / v["simulated_us"]


def test_plan_rejects_zero_lanes(capsys) -> None:
    assert cli.main(["plan", "squeezenet1_0", "--lanes", "0"]) == 2
    assert "--lanes must be >= 1" in capsys.readouterr().err
