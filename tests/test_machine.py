"""What the machine records say about the CPU."""

from __future__ import annotations

import os
import subprocess
import sys

from pathweave.machine import cpu_isa, describe
from pathweave.report.tables import isa_label


def test_isa_level_agrees_with_the_native_kernels_own_choice() -> None:
    """/proc/cpuinfo's flags (Python) and the compiler's CPU probe (the tile runtime, unforced) agree."""
    env = {k: v for k, v in os.environ.items() if k != "PATHWEAVE_ISA"}
    code = "from pathweave.tiles import runtime; print(runtime.gemm_isa())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert cpu_isa() == done.stdout.strip()
    assert describe()["isa"] == cpu_isa()


def test_reports_name_the_isa_where_recorded() -> None:
    assert isa_label({"cpu": "x", "isa": "avx2"}) == " (avx2)"
    assert isa_label({"cpu": "x"}) == ""  # results written before the field existed
