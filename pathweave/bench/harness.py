"""``pathweave bench``: build every candidate, check it against eager, time all of them interleaved.

Protocol (../shared/BENCHMARKS.md): build all, check outputs (max abs / rel diff; beyond tolerance
the candidate is WRONG and not timed), warm up, then R rounds each running every candidate once, in
a new (seeded) shuffled order each round, each timed call preceded by an idle gap and one untimed
call; the median per candidate is
reported with its speed-up over eager and its ratio to the best peer.
"""

from __future__ import annotations

import functools
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

import torch

from pathweave.auto import build, build_auto
from pathweave.bench import isa as bench_isa
from pathweave.bench.candidate import Candidate, Skip, flatten_outputs
from pathweave.bench.peers import PEERS, peer_names, use_onnx_file
from pathweave.errors import InputError
from pathweave.frontend.capture import capture
from pathweave.lanes.strategy import LanesStrategy
from pathweave.machine import describe
from pathweave.passes import prune
from pathweave.report.progress import Progress
from pathweave.strategy import STRATEGIES
from pathweave.zoo.load import load_model

#: a candidate is WRONG when any output differs from eager by more than TOL * |eager| + TOL * scale,
#: scale being the largest magnitude of that eager output (fused kernels reorder float sums)
TOL = 1e-3
#: on CUDA while cuDNN may use TF32 for convolutions (PyTorch's default, kept so that every candidate
#: runs as a deployment would), the CPU eager reference is compared with TF32's tolerance: its 10-bit
#: mantissa rounds each product at ~5e-4, and dozens of layers add up
TF32_TOL = 1e-2
WARMUP = 3
#: idle time, then one untimed call, before each timed call. Runtimes whose pool threads spin after a
#: call (ONNX Runtime, OpenVINO, OpenMP) take the cores from whatever runs next: our GoogLeNet right
#: after an ONNX Runtime call ran 24.5 ms, 14.3 ms after 50 ms idle. But idle threads also wake slowly:
#: a 64x64 SqueezeNet ran 1.1 ms back to back and 13.5 ms after 50 ms idle (eager alike). The untimed
#: call absorbs both, so every candidate is timed hot, as under steady load.
GAP_S = 0.05


@dataclass
class Result:
    name: str
    kind: str
    status: str  # "ok" | "WRONG" | "skipped" | "failed"
    median_ms: float | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    note: str = ""
    threads: int | None = None
    times_ms: list[float] = field(default_factory=list, repr=False)
    isa: str | None = None  # the vector level it ran at (read back from its library)
    isa_note: str = ""  # that level as the table shows it: "avx512, cannot be limited" in a limited bench


@dataclass
class BenchReport:
    model: str
    machine: dict
    settings: dict
    candidates: list[Result]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "machine": self.machine,
            "settings": self.settings,
            "candidates": [asdict(c) for c in self.candidates],
        }


def pathweave_builders(device: str) -> dict[str, Callable[..., Candidate]]:
    """The rows of ``strategy.STRATEGIES`` as bench candidates "pathweave:<name>" (CUDA-only rows are
    not listed on a CPU bench; CPU-only rows are skipped on CUDA), plus Ramiel's variants, lanes with
    stacks, Opara's baselines and, on CUDA, "auto"."""
    cuda = str(device).startswith("cuda")
    builders: dict[str, Callable[..., Candidate]] = {
        f"pathweave:{name}": functools.partial(_row_candidate, name, device)
        for name, row in STRATEGIES.items()
        if cuda or "cpu" in row.devices
    }
    builders["pathweave:lanes+stacks"] = functools.partial(_row_candidate, "lanes", device, stacks=True)
    for name, (pipeline, clone, lane_threads) in RAMIEL_VARIANTS.items():
        builders[name] = functools.partial(_ramiel_variant, name, pipeline, clone, lane_threads, device)
    if cuda:
        for name, policy in STREAM_VARIANTS.items():
            builders[name] = functools.partial(_streams_variant, name, policy)
        builders["pathweave:auto"] = _streams_auto
    return builders


def _row_candidate(
    name: str, device: str, captured: Any, threads: int, recapture: Any = None, stacks: bool = False
) -> Candidate:
    """The strategy of row ``name`` built as ``optimize`` builds it, run on the example inputs."""
    try:
        kind = STRATEGIES[name].device_for(torch.device(device).type, asked=True)
    except InputError as exc:
        raise Skip(str(exc)) from exc
    context = {"device": device, "threads": threads, "recapture": recapture}
    strat = build(name, captured, context, {}, stacks)
    flat = [t.to(device) for t in captured.example_inputs]
    return Candidate(f"pathweave:{name}{'+stacks' * stacks}", "pathweave", lambda: strat.run_flat(flat),
                     threads, note=strat.summary(), sync=torch.cuda.synchronize if kind == "cuda" else None,
                     cuda_events=kind == "cuda", quiesce=strat.quiesce)  # fmt: skip


#: Opara and its baselines as bench candidates on CUDA: candidate name -> stream allocation policy
STREAM_VARIANTS = {
    "pathweave:streams": "opara",
    "pathweave:streams-critical": "critical",
    "pathweave:nimble": "nimble",
    "pathweave:wavefront": "wavefront",
    "pathweave:single": "single",
}


def _streams_variant(name: str, policy: str, captured: Any, threads: int, recapture: Any = None) -> Candidate:
    from pathweave.streams.strategy import StreamsStrategy

    strat = StreamsStrategy(captured, policy=policy, copy_outputs=False)
    flat = [t.to("cuda") for t in captured.example_inputs]
    rep = strat.report()
    note = (f"{rep['streams']} streams, {rep['waits']} waits, graph {rep['graph_bytes'] / 2**20:.1f} MiB, "
            f"profile {rep['profile_s']:.2f} s, plan {rep['plan_s'] * 1e3:.1f} ms")  # fmt: skip
    return Candidate(name, "pathweave", lambda: strat.run_flat(flat), threads, sync=torch.cuda.synchronize,
                     note=note, extra=rep, cuda_events=True)  # fmt: skip


def _streams_auto(captured: Any, threads: int, recapture: Any = None) -> Candidate:
    """``optimize(strategy="auto")`` on CUDA: the faster of the single-stream and the Opara graphs."""
    strat = build_auto(captured, "cuda", {"device": "cuda", "threads": threads}, stacks=False)
    flat = [t.to("cuda") for t in captured.example_inputs]
    times = getattr(strat, "auto_times_ms", {})
    timed = ", ".join(f"{k} {v:.3f} ms" for k, v in times.items())
    note = f"chose {strat.label}; {timed}"
    return Candidate("pathweave:auto", "pathweave", lambda: strat.run_flat(flat), threads,
                     sync=torch.cuda.synchronize, note=note, cuda_events=True)  # fmt: skip


#: Ramiel's Tables IV-VII as bench candidates (run with ``--candidates ramiel``): lanes on the captured
#: graph as it is (LC), after pruning, with cloning too, and with intra-op threads in each lane; none of
#: them uses the fast CPU rewrites or hyperclusters. Values: (rewrites, cloning, threads per lane).
RAMIEL_VARIANTS: dict[str, tuple[tuple[ModuleType, ...], bool, int]] = {
    "pathweave:lc": ((), False, 1),
    "pathweave:lc+prune": ((prune,), False, 1),
    "pathweave:lc+clone": ((prune,), True, 1),
    "pathweave:lc+intra": ((prune,), True, 2),
}
#: candidate groups ``--candidates`` accepts; the Ramiel variants run only when asked for
GROUPS = {
    "ramiel": ["eager:1t", "eager", "ort:seq", "openvino", "pathweave:sequential", "pathweave:lanes",
               *RAMIEL_VARIANTS],
}  # fmt: skip


def _ramiel_variant(
    name: str,
    pipeline: tuple[ModuleType, ...],
    clone: bool,
    lane_threads: int,
    device: str,
    captured: Any,
    threads: int,
    recapture: Any = None,
) -> Candidate:
    if device != "cpu":
        raise Skip("lanes run on CPU")
    if threads // lane_threads < 2:
        raise Skip(f"{lane_threads} intra-op threads per lane need at least {2 * lane_threads} threads")
    strat = LanesStrategy(captured, lanes=threads // lane_threads, threads=threads, clone=clone,
                          pipeline=pipeline)  # fmt: skip
    return _strategy_candidate(name, strat, threads)


def _strategy_candidate(name: str, strat: Any, threads: int) -> Candidate:
    """A built CPU strategy run on the example inputs it was captured with; its summary is the note."""
    flat = list(strat.captured.example_inputs)
    return Candidate(name, "pathweave", lambda: strat.run_flat(flat), threads, note=strat.summary(),
                     quiesce=strat.quiesce)  # fmt: skip


def run_bench(
    spec: str,
    candidates: list[str] | None = None,
    rounds: int = 20,
    threads: int | None = None,
    device: str = "cpu",
    batch: int = 1,
    progress: bool = True,
    isa: str | None = None,
) -> BenchReport:
    """Bench ``spec``. ``isa`` (else ``$PATHWEAVE_ISA``) below the CPU's level runs pathweave's kernels
    at that level and limits every peer that can be limited to it, for this whole process (the
    libraries read their limits once, on first use: call this before they have run)."""
    level = bench_isa.bench_isa(isa)
    bench_isa.apply_limits(level)
    threads = threads or os.cpu_count() or 1
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run(spec, candidates, rounds, threads, device, batch, progress, level)
    finally:
        torch.set_num_threads(saved)


def _run(
    spec: str,
    candidates: list[str] | None,
    rounds: int,
    threads: int,
    device: str,
    batch: int,
    progress: bool,
    level: str,
) -> BenchReport:
    load_before = _loadavg()
    loaded = load_model(spec, batch=batch)
    model = loaded.model.module() if isinstance(loaded.model, torch.export.ExportedProgram) else loaded.model
    if loaded.onnx is not None:  # ONNX Runtime and OpenVINO run the user's own file, not a re-export
        use_onnx_file(model, loaded.inputs, loaded.onnx)
    ours = pathweave_builders(device)
    names = _select([*ours, *peer_names(device)], candidates)
    bar = Progress(f"build {loaded.name}", len(names) + 1, enabled=progress)
    with torch.no_grad():
        reference = flatten_outputs(model(*loaded.inputs))
    captured = (
        capture(loaded.model, *loaded.inputs, name=loaded.name) if any(n in ours for n in names) else None
    )
    bar.step("captured")
    built: list[Candidate] = []
    results: dict[str, Result] = {}
    for name in names:
        kind = "pathweave" if name in ours else "peer"
        results[name] = Result(name, kind, "ok", threads=threads)
        try:
            cand = (
                ours[name](captured, threads, lambda sub: capture(loaded.model, *sub, name=loaded.name))
                if name in ours
                else PEERS[name](model, loaded.inputs, threads, device)
            )
            _check(cand, reference, results[name], _tolerance(device))
            _record_isa(cand, results[name], level, device)
            if results[name].status == "ok":
                built.append(cand)
        except Skip as exc:
            results[name].status, results[name].note = "skipped", str(exc)
        except Exception as exc:  # a peer that breaks is reported, not fatal
            results[name].status, results[name].note = "failed", f"{type(exc).__name__}: {str(exc)[:200]}"
        bar.step(name)
    _time_interleaved(built, results, rounds, progress)
    settings = {
        "rounds": rounds, "threads": threads, "device": device, "batch": batch,
        "loadavg_before": load_before, "loadavg_after": _loadavg(), "date": time.strftime("%Y-%m-%d"),
        "isa": level, "peers_limited": bench_isa.limited(level),
        "limit_env": bench_isa.limit_env(level),
    }  # fmt: skip
    return BenchReport(loaded.name, describe(device) | _versions(), settings, list(results.values()))


def _record_isa(cand: Candidate, result: Result, level: str, device: str) -> None:
    """The level ``cand`` ran at: a peer's as its builder read it back; pathweave's the wider of the
    tile kernels' and PyTorch's (its strategies run ATen between or instead of tiles)."""
    if str(device).startswith("cuda"):
        return
    ran = cand.isa
    if cand.kind == "pathweave":
        from pathweave.tiles.runtime import gemm_isa

        ran = min(gemm_isa(), bench_isa.torch_isa(), key=bench_isa.ISA_LEVELS.index)
    result.isa, result.isa_note = ran, bench_isa.label(ran, level, cand.can_limit)


#: candidates run only when named (like the Ramiel variants): lanes with stacks compile C at build
OPT_IN = ("pathweave:lanes+stacks",)


def _select(available: list[str], wanted: list[str] | None) -> list[str]:
    if not wanted:
        return [a for a in available if a not in RAMIEL_VARIANTS and a not in OPT_IN]
    wanted = [w for group in wanted for w in GROUPS.get(group, [group])]
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise InputError(f"unknown bench candidates {unknown}; available here: {', '.join(available)}")
    return [a for a in available if a in wanted]


def _tolerance(device: str) -> float:
    tf32 = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
    return TF32_TOL if str(device).startswith("cuda") and tf32 else TOL


def _check(cand: Candidate, reference: list[torch.Tensor], result: Result, tol: float = TOL) -> None:
    torch.set_num_threads(cand.threads)
    got = flatten_outputs(cand.run())
    if cand.sync:
        cand.sync()
    result.note = cand.note
    if len(got) != len(reference):
        result.status, result.note = "WRONG", f"{len(got)} outputs, eager has {len(reference)}"
        return
    abs_d = rel_d = 0.0
    wrong = False
    for g, r in zip(got, reference, strict=True):
        g, r = g.float(), r.float()
        if g.shape != r.shape:
            result.status, result.note = "WRONG", f"output shape {tuple(g.shape)}, eager {tuple(r.shape)}"
            return
        nan_mismatch = g.isnan() != r.isnan()  # NaN compares False with everything: check it apart
        g, r = torch.where(nan_mismatch, torch.inf, g.nan_to_num(0.0)), r.nan_to_num(0.0)
        diff = (g - r).abs()
        abs_d = max(abs_d, diff.max().item())
        rel_d = max(rel_d, (diff / r.abs().clamp_min(1e-6)).max().item())
        scale = r.abs().max().item()
        wrong |= bool(nan_mismatch.any()) or bool((diff > tol * r.abs() + tol * max(scale, 1e-6)).any())
    result.max_abs_diff, result.max_rel_diff = abs_d, rel_d
    if wrong:
        result.status = "WRONG"


def _time_interleaved(
    built: list[Candidate], results: dict[str, Result], rounds: int, progress: bool
) -> None:
    for cand in built:  # warm-up
        torch.set_num_threads(cand.threads)
        for _ in range(WARMUP):
            cand.run()
        if cand.sync:
            cand.sync()
        if cand.quiesce:
            cand.quiesce()
    bar = Progress("timing", rounds, enabled=progress)
    rng = random.Random(0)
    for r in range(rounds):
        # a fresh order every round: a rotation would keep each candidate behind the same neighbour
        for cand in rng.sample(built, len(built)):
            torch.set_num_threads(cand.threads)
            time.sleep(GAP_S)
            cand.run()  # untimed: wakes this candidate's threads; a neighbour's spinning lands here
            if cand.sync:
                cand.sync()
            results[cand.name].times_ms.append(_timed_ms(cand))
            if cand.quiesce:
                cand.quiesce()
        bar.step(f"round {r + 1}")
    for cand in built:
        results[cand.name].median_ms = statistics.median(results[cand.name].times_ms)


def _timed_ms(cand: Candidate) -> float:
    """One call's time: CUDA events around it on the current stream, else the host clock."""
    if cand.cuda_events:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        cand.run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    cand.run()
    if cand.sync:
        cand.sync()
    return (time.perf_counter() - t0) * 1e3


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("onnxruntime", "openvino", "onnx"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
