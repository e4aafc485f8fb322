"""The README results table: ``pathweave table results/*.json`` turns bench JSON files into markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pathweave.report.tables import isa_label


def _best_peer(cands: list[dict[str, Any]]) -> dict[str, Any] | None:
    peers = [c for c in cands if c["kind"] == "peer" and c["status"] == "ok" and c["median_ms"]]
    return min(peers, key=lambda c: c["median_ms"]) if peers else None


def _best_name(best: dict[str, Any] | None, settings: dict[str, Any]) -> str:
    """The best peer's name, and under a bench limited below the CPU's level, whether it was limited."""
    if best is None:
        return "-"
    if not settings.get("peers_limited"):
        return best["name"]
    state = "limited" if best.get("isa") == settings["isa"] else "NOT limited"
    return f"{best['name']} ({best.get('isa') or '?'}, {state})"


def markdown_table(paths: list[Path]) -> str:
    """One row per bench file: every candidate's median ms, then pathweave's ratio to the best peer."""
    reports = [json.loads(p.read_text()) for p in paths]
    names: list[str] = []
    for r in reports:
        names += [c["name"] for c in r["candidates"] if c["name"] not in names]
    header = ["model", "batch", "threads", *names, "best peer", "pathweave / best peer"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in reports:
        by_name = {c["name"]: c for c in r["candidates"]}
        cells = []
        for n in names:
            c = by_name.get(n)
            cells.append(f"{c['median_ms']:.1f}" if c and c["median_ms"] else (c["status"] if c else ""))
        best = _best_peer(r["candidates"])
        ours = [c for c in r["candidates"] if c["kind"] == "pathweave" and c["median_ms"]]
        ratio = f"{min(c['median_ms'] for c in ours) / best['median_ms']:.2f}" if best and ours else "-"
        s = r["settings"]
        row = [r["model"], str(s["batch"]), str(s["threads"]), *cells, _best_name(best, s), ratio]
        lines.append("| " + " | ".join(row) + " |")
    first = reports[0] if reports else None
    if first:
        m = first["machine"]
        lines.append(f"\nMachine: {m.get('gpu') or m['cpu']}{isa_label(m)}, {m['cores']} cores, "
                     f"torch {m['torch']}, "
                     f"onnxruntime {m.get('onnxruntime', '-')}, openvino {m.get('openvino', '-')}; "
                     f"medians of {first['settings']['rounds']} interleaved rounds, ms.")  # fmt: skip
    return "\n".join(lines)
