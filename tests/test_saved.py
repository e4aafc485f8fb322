"""pathweave.save / pathweave.load: round trips, re-planning elsewhere, corrupt files refused, no pickle."""

from __future__ import annotations

import json
import pickle
import zipfile
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


def _manifest(plan: Path) -> dict:
    with zipfile.ZipFile(plan) as z:
        return json.loads(z.read("manifest.json"))


@pytest.mark.parametrize(
    "case, match",
    [
        ("truncated", "truncated"),
        ("not_zip", "truncated"),
        ("tampered_input", "checksum"),
        ("no_program", "no program.pt2"),
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
    elif case == "no_program":
        _rewrite(plan, bad, {"program.pt2": None})
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
