"""What the machine records say about the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathweave.machine import cpu_isa, describe
from pathweave.report.tables import isa_label


def test_isa_level_follows_the_cpu_flags() -> None:
    info = Path("/proc/cpuinfo")
    if not info.exists():
        pytest.skip("no /proc/cpuinfo")
    flags = next((set(ln.split(":", 1)[1].split()) for ln in info.read_text().splitlines()
                  if ln.startswith("flags")), set())  # fmt: skip
    want = "avx512" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= flags else "generic"
    assert cpu_isa() == want
    assert describe()["isa"] == want


def test_reports_name_the_isa_where_recorded() -> None:
    assert isa_label({"cpu": "x", "isa": "avx2"}) == " (avx2)"
    assert isa_label({"cpu": "x"}) == ""  # results written before the field existed
