"""Draw a model's operator DAG by depth, with its critical path highlighted (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path

from pathweave.analysis.analyze import Analysis
from pathweave.analysis.dag import build_dag
from pathweave.analysis.ops import op_kind, op_name
from pathweave.errors import InputError, require
from pathweave.frontend.graph import Captured

_COLORS = {"conv": "#1f77b4", "matmul": "#9467bd", "pool": "#2ca02c", "reduction": "#ff7f0e",
           "elementwise": "#7f7f7f", "view": "#c7c7c7"}  # fmt: skip


def _layout(dag) -> dict[str, tuple[float, float]]:
    """x = depth (longest chain from an input), y = rank within that depth, centred."""
    depth: dict[str, int] = {}
    for n in dag.nodes:
        depth[n] = 1 + max((depth[p] for p in dag.preds[n]), default=-1)
    by_depth: dict[int, list[str]] = {}
    for n in dag.nodes:
        by_depth.setdefault(depth[n], []).append(n)
    pos = {}
    for d, names in by_depth.items():
        for i, n in enumerate(names):
            pos[n] = (float(d), i - (len(names) - 1) / 2)
    return pos


def plot_dag(captured: Captured, analysis: Analysis, path: Path) -> Path:
    """Write the DAG as PNG or SVG (by suffix); critical-path nodes and edges are drawn in red."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"--plot writes .png or .svg, not {path.suffix or 'no suffix'}")
    require("matplotlib", "plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dag = build_dag(captured.gm)
    pos = _layout(dag)
    nodes = {n.name: n for n in captured.gm.graph.nodes}
    critical = set(analysis.static.critical_nodes)
    depth = max((x for x, _ in pos.values()), default=0)
    width = max((abs(y) for _, y in pos.values()), default=1)
    fig, ax = plt.subplots(figsize=(min(4 + depth * 0.12, 60), min(3 + width * 0.6, 30)))
    for n in dag.nodes:
        for p in dag.preds[n]:
            on_path = n in critical and p in critical
            (x0, y0), (x1, y1) = pos[p], pos[n]
            ax.plot([x0, x1], [y0, y1], color="red" if on_path else "#bbbbbb", lw=1.6 if on_path else 0.5,
                    zorder=2 if on_path else 1)  # fmt: skip
    for n in dag.nodes:
        kind = op_kind(op_name(nodes[n], captured.gm))
        x, y = pos[n]
        ax.scatter([x], [y], s=18, color=_COLORS.get(kind, "#7f7f7f"), zorder=3,
                   edgecolors="red" if n in critical else "none", linewidths=1.2)  # fmt: skip
    s = analysis.static
    ax.set_title(f"{analysis.model}: {s.nodes} ops, parallelism {s.parallelism:.2f}, max width {s.max_width} "
                 "(red: critical path; colour: op kind)")  # fmt: skip
    ax.set_xlabel("depth")
    ax.set_yticks([])
    for kind, color in _COLORS.items():
        ax.scatter([], [], color=color, label=kind, s=18)
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_scaling(rows: list[dict], path: Path, title: str) -> Path:
    """Time per inference over core counts (cores on a log2 axis), as ``tiles.simulate.simulate_rows``
    gives them: the runtime's policy (with the measured slow-down, and without) and the barrier schedule
    simulated, the two bounds, and the measured points."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"--plot writes .png or .svg, not {path.suffix or 'no suffix'}")
    require("matplotlib", "plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cores = [r["cores"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(cores, [r["runtime_ms"] for r in rows], "o-", color="C0", label="tile runtime (simulated)")
    ax.plot(
        cores, [r["no_contention_ms"] for r in rows], "o:", color="C0", label="tile runtime, no contention"
    )
    ax.plot(cores, [r["barrier_ms"] for r in rows], "s-", color="C1", label="layer by layer, barriers")
    bound = [max(r["critical_path_ms"], r["work_bound_ms"]) for r in rows]
    ax.plot(cores, bound, "k--", lw=1, label="max(critical path, work / P)")
    seen = [r for r in rows if "measured_ms" in r]
    ax.plot([r["cores"] for r in seen], [r["measured_ms"] for r in seen], "r*", ms=11, label="measured")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xticks(cores, [str(c) for c in cores])
    ax.set_xlabel("cores")
    ax.set_ylabel("ms per inference")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
