import pytest

from pathweave import cli
from pathweave.errors import InputError

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_analyze_plot_writes_the_dag(tmp_path, capsys, suffix: str) -> None:
    out = tmp_path / f"dag{suffix}"
    assert cli.main(["analyze", "squeezenet1_0", "--plot", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data[:2000]


def test_plot_refuses_other_formats(tmp_path) -> None:
    import torch
    from torch import nn

    from pathweave.analysis.analyze import analyze_captured
    from pathweave.frontend.capture import capture
    from pathweave.report.plot import plot_dag

    captured = capture(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2))
    with pytest.raises(InputError, match="writes .png or .svg"):
        plot_dag(captured, analyze_captured(captured), tmp_path / "dag.pdf")
