"""The tiles report (ASPEN Fig. 8): Karp-Flatt arithmetic with exact values, tiles per layer, and the
scaling measurement on a tiny model (no timing is asserted, only its shape and arithmetic)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

import pathweave
from pathweave.errors import InputError
from pathweave.tiles.program import kernel_names
from pathweave.tiles.report import (
    format_tiles,
    layer_tiles,
    measure_scaling,
    parallel_fraction,
    parse_workers,
    serial_fraction,
    tiles_report,
)
from pathweave.tiles.strategy import TilesStrategy


@pytest.mark.parametrize(
    ("speedup", "workers", "serial"),
    [
        (Fraction(2), 2, Fraction(0)),  # linear: nothing serial
        (Fraction(1), 2, Fraction(1)),  # no speed-up: all serial
        (Fraction(3, 2), 2, Fraction(1, 3)),  # (2/3 - 1/2) / (1/2)
        (Fraction(3), 4, Fraction(1, 9)),  # (1/3 - 1/4) / (3/4)
        (Fraction(4), 16, Fraction(1, 5)),  # (1/4 - 1/16) / (15/16)
        (Fraction(5, 2), 2, Fraction(-1, 5)),  # superlinear: negative
    ],
)
def test_karp_flatt_exact(speedup: Fraction, workers: int, serial: Fraction) -> None:
    assert serial_fraction(speedup, workers) == serial
    assert parallel_fraction(speedup, workers) == 1 - serial


def test_karp_flatt_floats_and_bad_arguments() -> None:
    assert parallel_fraction(1.8, 2) == pytest.approx(0.8 / 0.9)  # e = (1/1.8 - 1/2) / (1/2) = 1/9
    with pytest.raises(InputError, match="at least 2 workers"):
        serial_fraction(1.0, 1)
    with pytest.raises(InputError, match="positive"):
        serial_fraction(0.0, 2)


def test_parse_workers() -> None:
    assert parse_workers("2,4") == [1, 2, 4]
    assert parse_workers("1, 2,2") == [1, 2]
    assert parse_workers(None) == list(range(1, torch.get_num_threads() + 1))
    with pytest.raises(InputError):
        parse_workers("two")
    with pytest.raises(InputError):
        parse_workers("0,2")


@pytest.fixture(scope="module")
def strategy(tiny_cnn: type[torch.nn.Module]) -> TilesStrategy:
    torch.manual_seed(0)
    s = TilesStrategy(
        pathweave.capture(tiny_cnn().eval(), torch.randn(2, 3, 8, 8)), threads=2, work_per_tile=5e3
    )
    yield s
    s.close()


def test_layer_tiles(strategy: TilesStrategy) -> None:
    rows = layer_tiles(strategy.graph, kernel_names(strategy.program.layers))
    assert [r.op for r in rows] == ["conv2d_act", "max_pool2d", "linear"]
    assert rows[0].kernel in ("direct", "sgemm", "window folded") and rows[1].kernel == rows[2].kernel == ""
    assert [r.shape for r in rows] == [(2, 8, 8, 8), (2, 8, 4, 4), (2, 4)]
    assert sum(r.tiles for r in rows) == strategy.graph.num_tiles and rows[0].tiles > 1
    assert {r.layer: r.tiles for r in rows} == strategy.graph.tile_counts()


def rows_kernel(strategy: TilesStrategy) -> str:
    return kernel_names(strategy.program.layers)[0]


def test_scaling_rows_and_report(strategy: TilesStrategy) -> None:
    rows = measure_scaling(strategy, [2], rounds=2, requests=2)
    assert [r.workers for r in rows] == [1, 2] and strategy.threads == 2  # workers put back
    one, two = rows
    assert one.speedup == 1.0 and one.parallel_fraction is None
    assert two.speedup == pytest.approx(one.median_ms / two.median_ms)
    assert two.parallel_fraction == pytest.approx(parallel_fraction(two.speedup, 2))
    assert one.per_second == pytest.approx(2 * 1e3 / one.median_ms)  # batch 2
    assert two.coexec_per_second == pytest.approx(2 * 2 * 1e3 / two.coexec_ms)
    d = tiles_report(strategy, [2], rounds=1, show_progress=False)
    assert d["batch"] == 2 and d["graph"]["tiles"] == strategy.graph.num_tiles
    text = format_tiles(d)
    assert "p_e (Karp-Flatt)" in text and "co-exec" not in text and "2x8x8x8" in text
    assert d["layers"][0]["kernel"] == rows_kernel(strategy) and "kernel" in text
