"""Plain-text tables for the terminal: analysis statistics and bench results."""

from __future__ import annotations

from typing import Any


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, sep, *body])


def format_analysis(d: dict[str, Any]) -> str:
    """The dict of ``Analysis.to_dict()`` as a table: static weights and, if present, measured times."""
    cols = [("static", d)] + ([("measured (us)", d["measured"])] if "measured" in d else [])
    keys = [("nodes", "{:d}"), ("edges", "{:d}"), ("total_work", "{:.1f}"), ("critical_path", "{:.1f}"),
            ("parallelism", "{:.2f}"), ("max_width", "{:d}")]  # fmt: skip
    rows = [[k] + [fmt.format(c[k]) for _, c in cols] for k, fmt in keys]
    for p in ("2", "4", "16"):
        rows.append([f"speedup bound P={p}"] + [f"{c['speedup_bound'][p]:.2f}x" for _, c in cols])
    head = f"{d['model']}: {d['flops'] / 1e9:.2f} GFLOPs"
    return head + "\n" + table(["", *(name for name, _ in cols)], rows)


def format_bench(d: dict[str, Any]) -> str:
    cands = d["candidates"]
    ok = [c for c in cands if c["status"] == "ok" and c["median_ms"] is not None]
    cuda = str(d["settings"]["device"]).startswith("cuda")
    median = {c["name"]: c["median_ms"] for c in ok}
    eager = median.get("cuda:eager" if cuda else "eager")
    graph = median.get("cuda:graph")  # on CUDA the baseline to beat: the model as one CUDA Graph
    peers = [c["median_ms"] for c in ok if c["kind"] == "peer"]
    best_peer = min(peers) if peers else None
    rows = []
    for c in cands:
        ms = c["median_ms"]
        rows.append([
            c["name"], c["status"], (f"{ms:.3f}" if cuda else f"{ms:.2f}") if ms else "-",
            f"{eager / ms:.2f}x" if ms and eager else "-",
            *([f"{graph / ms:.2f}x" if ms and graph else "-"] if cuda else []),
            f"{ms / best_peer:.2f}" if ms and best_peer else "-",
            f"{c['max_abs_diff']:.1e}" if c["max_abs_diff"] is not None else "-",
            f"{c['max_rel_diff']:.1e}" if c.get("max_rel_diff") is not None else "-",
            c["note"][:80],
        ])  # fmt: skip
    m, s = d["machine"], d["settings"]
    head = (
        f"{d['model']}  batch {s['batch']}  {s['device']}  {s['threads']} threads  {s['rounds']} rounds  "
        f"{s['date']}\n{m.get('gpu') or m['cpu']}{isa_label(m)}, {m['cores']} cores, torch {m['torch']}, "
        f"onnxruntime {m.get('onnxruntime', '-')}, openvino {m.get('openvino', '-')}, "
        f"load {s['loadavg_before']} -> {s['loadavg_after']}"
    )
    body = table(
        [
            "candidate",
            "status",
            "median ms",
            "vs eager",
            *(["vs cuda:graph"] if cuda else []),
            "vs best peer",
            "max abs diff",
            "max rel diff",
            "note",
        ],
        rows,
    )
    return head + "\n" + body


def isa_label(machine: dict) -> str:
    """`` (avx512)`` for a machine dict that records its CPU's vector level (older results do not)."""
    return f" ({machine['isa']})" if machine.get("isa") else ""
