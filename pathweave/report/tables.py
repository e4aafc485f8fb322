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
    peers = [c for c in ok if c["kind"] == "peer"]
    best = min(peers, key=lambda c: c["median_ms"]) if peers else None
    best_peer = best["median_ms"] if best else None
    show_isa = any(c.get("isa_note") for c in cands)
    settings = d["settings"]
    fair = [c for c in peers if c.get("isa") == settings.get("isa")]
    best_fair = min(c["median_ms"] for c in fair) if fair and settings.get("peers_limited") else None
    both = best_fair is not None and best_fair != best_peer  # the best peer itself was not limited
    rows = []
    for c in cands:
        ms = c["median_ms"]
        rows.append([
            c["name"], c["status"], (f"{ms:.3f}" if cuda else f"{ms:.2f}") if ms else "-",
            f"{eager / ms:.2f}x" if ms and eager else "-",
            *([f"{graph / ms:.2f}x" if ms and graph else "-"] if cuda else []),
            f"{ms / best_peer:.2f}" if ms and best_peer else "-",
            *([f"{ms / best_fair:.2f}" if ms else "-"] if both else []),
            f"{c['max_abs_diff']:.1e}" if c["max_abs_diff"] is not None else "-",
            f"{c['max_rel_diff']:.1e}" if c.get("max_rel_diff") is not None else "-",
            *([c.get("isa_note") or "-"] if show_isa else []),
            c["note"][:80],
        ])  # fmt: skip
    m, s = d["machine"], d["settings"]
    head = (
        f"{d['model']}  batch {s['batch']}  {s['device']}  {s['threads']} threads  {s['rounds']} rounds  "
        f"{s['date']}\n{m.get('gpu') or m['cpu']}{isa_label(m)}, {m['cores']} cores, torch {m['torch']}, "
        f"onnxruntime {m.get('onnxruntime', '-')}, openvino {m.get('openvino', '-')}, "
        f"load {s['loadavg_before']} -> {s['loadavg_after']}"
    )
    if s.get("peers_limited"):
        head += f"\nlimited to {s['isa']}: " + " ".join(f"{k}={v}" for k, v in s["limit_env"].items())
    body = table(
        [
            "candidate",
            "status",
            "median ms",
            "vs eager",
            *(["vs cuda:graph"] if cuda else []),
            _best_header(settings, best),
            *(["vs best limited peer"] if both else []),
            "max abs diff",
            "max rel diff",
            *(["isa"] if show_isa else []),
            "note",
        ],
        rows,
    )
    return head + "\n" + body + _best_peer_line(s, best)


def _best_header(settings: dict[str, Any], best: dict[str, Any] | None) -> str:
    if not settings.get("peers_limited") or best is None:
        return "vs best peer"
    return f"vs best peer ({'limited' if best.get('isa') == settings['isa'] else 'NOT limited'})"


def _best_peer_line(settings: dict[str, Any], best: dict[str, Any] | None) -> str:
    """Under a bench limited below the CPU's level: which peer "vs best peer" divides by, and whether
    it ran limited (ONNX Runtime cannot be: then the column compares AVX2 code with AVX-512 code)."""
    if not settings.get("peers_limited") or best is None:
        return ""
    ran = best.get("isa_note") or best.get("isa") or "?"
    state = "limited" if best.get("isa") == settings["isa"] else "NOT limited"
    return (f"\nbench at {settings['isa']}, peers limited where they can be; vs best peer: {best['name']} "
            f"ran {ran} ({state})")  # fmt: skip


def isa_label(machine: dict) -> str:
    """`` (avx512)`` for a machine dict that records its CPU's vector level (older results do not)."""
    return f" ({machine['isa']})" if machine.get("isa") else ""
