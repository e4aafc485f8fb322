"""Tile calls after an idle gap: back to back, after 2/10/50 ms of sleep, with and without parking the
workers, with the caller unpinned or pinned to each CPU (issue 24: MobileNetV2's tiles take 3.2 ms back
to back and 5-8 ms under the bench's protocol).

    flock /tmp/pw-bench.lock python experiments/tiles_idle_gap.py [MODEL]

Prints, per pattern, the median of 20 repetitions of the 1st, 2nd and 3rd call after the gap and the
share of repetitions in which the caller sat on CPU 0.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

import pathweave
from pathweave import zoo


def _cpu() -> int:
    """The CPU this thread last ran on (field 39 of /proc/thread-self/stat)."""
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def main() -> None:
    warnings.simplefilter("ignore")
    entry = zoo.get(sys.argv[1] if len(sys.argv) > 1 else "mobilenet_v2")
    model, x = entry.build().eval(), entry.example_inputs(1)
    fn = pathweave.optimize(model, *x, strategy="tiles")

    def timed() -> float:
        t0 = time.perf_counter()
        fn(*x)
        return (time.perf_counter() - t0) * 1e3

    for _ in range(5):
        fn(*x)
    cpus_all = sorted(os.sched_getaffinity(0))
    for pin in [None, *({c} for c in cpus_all)]:
        os.sched_setaffinity(0, pin or set(cpus_all))
        for gap in (0.0, 0.002, 0.01, 0.05):
            for park in (False, True):
                rows, where = [], []
                for _ in range(20):
                    time.sleep(gap)
                    where.append(_cpu())
                    rows.append([timed() for _ in range(3)])
                    if park:
                        fn.quiesce()
                med = [statistics.median(r[i] for r in rows) for i in range(3)]
                share = sum(c == 0 for c in where) / len(where)
                calls = " ".join(f"{v:5.2f}" for v in med)
                print(f"caller pinned {pin}  gap {gap * 1e3:3.0f} ms  park {park!s:5}: calls 1-3 {calls} ms"
                      f"  on CPU 0: {share:.0%}", flush=True)  # fmt: skip
    fn.close()


if __name__ == "__main__":
    main()
