"""pathweave.save / pathweave.load: round trips, re-planning elsewhere, corrupt files refused, no pickle."""

from __future__ import annotations

import hashlib
import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import pathweave
from pathweave import saved
from pathweave.cli import main
from pathweave.errors import InputError


class TwoHeads(torch.nn.Module):
    """int64 ids in, a dict of two tensors out: the plan keeps the input and output structure."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.conv = torch.nn.Conv1d(16, 16, 3, padding=1)
        self.a = torch.nn.Linear(16, 4)
        self.b = torch.nn.Linear(16, 3)

    def forward(self, ids: torch.Tensor, scale: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.conv(self.emb(ids).transpose(1, 2)).relu().mean(-1) * scale
        return {"a": self.a(h), "b": torch.tanh(self.b(h))}


def _model() -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return TwoHeads().eval(), (torch.randint(0, 50, (2, 11)), torch.tensor(1.5))


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    model, x = _model()
    fast = pathweave.optimize(model, *x, strategy="sequential")
    try:
        return pathweave.save(fast, tmp_path / "m.pw")
    finally:
        fast.close()


def _assert_same(out: dict, ref: dict) -> None:
    assert set(out) == set(ref)
    for k in ref:
        torch.testing.assert_close(out[k], ref[k], rtol=1e-5, atol=1e-6)


def test_round_trip_keeps_structure_and_values(plan: Path) -> None:
    model, x = _model()
    fast = pathweave.load(plan)
    try:
        assert fast.recipe["strategy"] == "sequential"
        with torch.no_grad():
            _assert_same(fast(*x), model(*x))
            y = (torch.randint(0, 50, (2, 11)), torch.tensor(-0.5))
            _assert_same(fast(*y), model(*y))  # other values, same shapes
    finally:
        fast.close()


def test_auto_choice_is_kept_without_timing_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = _model()
    fast = pathweave.optimize(model, *x)
    path = pathweave.save(fast, tmp_path / "auto.pw")
    fast.close()
    monkeypatch.setattr(saved, "build_auto", lambda *a, **k: pytest.fail("re-timed on the same machine"))
    again = pathweave.load(path)
    try:
        assert again.label == fast.label
        assert again.auto_times_ms == pytest.approx(fast.auto_times_ms)
        with torch.no_grad():
            _assert_same(again(*x), model(*x))
    finally:
        again.close()


def test_other_machine_replans_with_a_warning(plan: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = saved.fingerprint()
    monkeypatch.setattr(saved, "fingerprint", lambda: {**real, "isa": "generic", "cores": 64})
    with pytest.warns(saved.StalePlanWarning, match="isa 'avx512'|isa 'avx2'|isa 'generic'"):
        fast = pathweave.load(plan)
    model, x = _model()
    with torch.no_grad():
        _assert_same(fast(*x), model(*x))
    fast.close()


def _rewrite(src: Path, dst: Path, change: dict[str, bytes | None], compress: bool = False) -> Path:
    with zipfile.ZipFile(src) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    entries.update(change)
    how = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(dst, "w", compression=how) as z:
        for n, raw in entries.items():
            if raw is not None:
                z.writestr(n, raw)
    return dst


def _entry(plan: Path, name: str) -> bytes:
    with zipfile.ZipFile(plan) as z:
        return z.read(name)


def _manifest(plan: Path) -> dict:
    with zipfile.ZipFile(plan) as z:
        return json.loads(z.read("manifest.json"))


@pytest.mark.parametrize(
    "case, match",
    [
        ("truncated", "truncated"),
        ("not_zip", "truncated"),
        ("tampered_input", "checksum"),
        ("no_graph", "no graph.json"),
        ("tampered_constant", "constants/0.bin does not match its checksum"),
        ("compressed", "compressed"),
        ("format", "format version"),
        ("foreign", "not a pathweave plan"),
        ("strategy", "no known strategy"),
        ("manifest_garbage", "not JSON"),
        ("input_shape", "do not fit"),
        ("threads", "threads=100000"),
        ("auto_threads", "threads=-1"),
    ],
)
def test_bad_files_get_a_pathweave_error(plan: Path, tmp_path: Path, case: str, match: str) -> None:
    bad = tmp_path / "bad.pw"
    m = _manifest(plan)
    raw = plan.read_bytes()
    if case == "truncated":
        bad.write_bytes(raw[: len(raw) // 3])
    elif case == "not_zip":
        bad.write_bytes(b"\x80\x04K\x01.")  # a pickle
    elif case == "tampered_input":
        _rewrite(plan, bad, {"inputs/0.bin": bytes(88)})
    elif case == "no_graph":
        _rewrite(plan, bad, {"graph.json": None})
    elif case == "tampered_constant":
        _rewrite(plan, bad, {"constants/0.bin": bytes(len(_entry(plan, "constants/0.bin")))})
    elif case == "compressed":
        _rewrite(plan, bad, {}, compress=True)
    elif case == "manifest_garbage":
        _rewrite(plan, bad, {"manifest.json": b"{not json"})
    else:
        wrong_shape = [{"dtype": "int64", "shape": [5, 5]}, *m["inputs"][1:]]
        bad_auto = {"tiles": {"threads": -1}}
        edits = {"format": {"format_version": 99}, "foreign": {"format": "other"},
                 "strategy": {"recipe": {"strategy": "os.system", "options": {}}},
                 "input_shape": {"inputs": wrong_shape},
                 "threads": {"recipe": {**m["recipe"], "options": {"threads": 100000}}},
                 "auto_threads": {"recipe": {**m["recipe"], "auto_options": bad_auto}}}  # fmt: skip
        _rewrite(plan, bad, {"manifest.json": json.dumps({**m, **edits[case]}).encode()})
    with pytest.raises(InputError, match=match):
        pathweave.load(bad)


def test_loading_unpickles_nothing(plan: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("pickle used while loading a plan")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    pathweave.load(plan).close()


def test_save_refuses_what_optimize_did_not_make() -> None:
    class NotOptimized:
        pass

    with pytest.raises(InputError, match="not made by pathweave.optimize"):
        pathweave.save(NotOptimized(), "x.pw")  # type: ignore[arg-type]


def test_cli_optimize_writes_a_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sq.pw"
    assert main(["optimize", "squeezenet1_0", "--strategy", "sequential", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    fast = pathweave.load(out)
    assert fast.recipe["strategy"] == "sequential"
    fast.close()


def _edit_graph(plan: Path, bad: Path, edit: Callable[[list[dict]], None]) -> Path:
    """A copy of ``plan`` whose graph.json ``edit`` changed, with a matching checksum (as an attacker
    would write it): what is refused then is the graph itself."""
    graph = json.loads(_entry(plan, "graph.json"))
    edit(graph["nodes"])
    raw = json.dumps(graph).encode()
    m = _manifest(plan)
    m["sha256"]["graph.json"] = hashlib.sha256(raw).hexdigest()
    return _rewrite(plan, bad, {"graph.json": raw, "manifest.json": json.dumps(m).encode()})


def _first_call(nodes: list[dict]) -> dict:
    return next(n for n in nodes if n["op"] == "call_function")


def _huge(nodes: list[dict]) -> None:
    """A node whose constant arguments ask for 2**40 elements, its declared value small."""
    _first_call(nodes).update(target="torch.ops.aten.ones.default", args={"tuple": [{"list": [1 << 40]}]},
                              kwargs={"dict": {}})  # fmt: skip


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda ns: _first_call(ns).update(target="builtins.eval"), "not an operator"),
        (
            lambda ns: _first_call(ns).update(target="torch.ops.aten.from_file.default"),
            "reads or writes files",
        ),
        (lambda ns: _first_call(ns).update(target="torch.ops.aten._reshape_alias.default"), "does not run"),
        (lambda ns: _first_call(ns).update(name="x=__import__('os')"), "not a node name"),
        (lambda ns: _first_call(ns).update(op="call_module", target="os"), "not one pathweave reads"),
        (lambda ns: _first_call(ns).update(args={"tuple": [{"node": "later"}]}), "not defined before"),
        (lambda ns: _first_call(ns).update(args={"tuple": [{"dtype": "load"}]}), "not a torch dtype"),
        (
            lambda ns: _first_call(ns).update(args={"tuple": [{"pickle": "x"}]}),
            "not a value pathweave writes",
        ),
        (_huge, "at most"),
    ],
)
def test_graph_entries_are_data_only(plan: Path, tmp_path: Path, edit: Callable, match: str) -> None:
    bad = _edit_graph(plan, tmp_path / "bad.pw", edit)
    with pytest.raises(InputError, match=match):
        pathweave.load(bad)


def test_load_reads_no_pt2_and_measures_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lanes plan loaded where it was saved: no torch.export reader, no profiling run, no check against
    the captured graph; the same answers bit for bit."""
    from pathweave import sequential
    from pathweave.lanes import strategy as lanes

    model, x = _model()
    fast = pathweave.optimize(model, *x, strategy="lanes")
    with torch.no_grad():
        want = fast(*x)
    path = pathweave.save(fast, tmp_path / "lanes.pw")
    times = fast.node_times
    fast.close()
    monkeypatch.setattr(torch.export, "load", lambda *a, **k: pytest.fail("read through torch.export"))
    monkeypatch.setattr(lanes, "measure_node_times", lambda *a, **k: pytest.fail("profiled again"))
    monkeypatch.setattr(sequential, "_compare", lambda *a, **k: pytest.fail("checked again"))
    again = pathweave.load(path)
    try:
        assert again.node_times == times
        with torch.no_grad():
            got = again(*x)
        assert all(torch.equal(got[k], want[k]) for k in want)
    finally:
        again.close()
    monkeypatch.undo()
    with pytest.MonkeyPatch.context() as mp:  # check=True compares again
        calls = []
        mp.setattr(sequential, "_compare", lambda *a, **k: calls.append(1))
        pathweave.load(path, check=True).close()
        assert calls


def test_graph_saved_as_pt2_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph that cannot be written as data (here: made to fail) goes to program.pt2, and loads."""
    from pathweave.errors import UnsupportedError

    def refuse(*a: object, **k: object) -> None:
        raise UnsupportedError("not data")

    monkeypatch.setattr(saved, "encode_graph", refuse)
    model, x = _model()
    fast = pathweave.optimize(model, *x, strategy="sequential")
    path = pathweave.save(fast, tmp_path / "pt2.pw")
    fast.close()
    assert "program.pt2" in _manifest(path)["sha256"] and "graph.json" not in _manifest(path)["sha256"]
    again = pathweave.load(path)
    try:
        with torch.no_grad():
            _assert_same(again(*x), model(*x))
    finally:
        again.close()
