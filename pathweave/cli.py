"""``pathweave zoo | analyze MODEL | bench MODEL | optimize MODEL -o FILE | serve FILE | plan | codegen |
timeline | tiles MODEL | simulate MODEL | table``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pathweave.errors import InputError, PathweaveError, require

if TYPE_CHECKING:
    from pathweave.tiles.strategy import TilesStrategy

DEFAULT_MODEL = "googlenet"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pathweave", description="Inter-operator parallelism for PyTorch models."
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("zoo", help="list the built-in models")
    model_help = "zoo name, torchvision:NAME, timm:NAME, hf:CONFIG or a .pt2 file"
    a = sub.add_parser("analyze", help="work, critical path and parallelism of a model")
    a.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    a.add_argument("--batch", type=int, default=1)
    a.add_argument("--measure", action="store_true", help="also profile node times (one run, cached)")
    a.add_argument("--json", type=Path, help="write the statistics as JSON here")
    a.add_argument("--plot", type=Path, help="draw the DAG with its critical path (.png or .svg)")
    b = sub.add_parser("bench", help="time pathweave and its peers side by side")
    b.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    b.add_argument("--batch", type=int, default=1)
    b.add_argument("--rounds", type=int, default=20)
    b.add_argument("--threads", type=int, default=None, help="thread budget (default: all cores)")
    b.add_argument("--device", default="cpu")
    b.add_argument(
        "--candidates",
        help="comma-separated candidate names or groups (default: all but the Ramiel variants and "
        "pathweave:lanes+stacks; 'ramiel': the peers, pathweave and Ramiel's LC, LC+pruning, LC+cloning, "
        "LC+intra-op lanes)",
    )
    b.add_argument("--json", type=Path, help="write the full results as JSON here")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.add_argument(
        "--isa", choices=("avx512", "avx2", "generic"),
        help="run pathweave's kernels at this level (default: $PATHWEAVE_ISA, else the CPU's) and limit "
        "every peer that can be limited to it (PyTorch, OpenVINO; ONNX Runtime cannot be)",
    )  # fmt: skip
    g = sub.add_parser("codegen", help="write a standalone parallel Python module (Ramiel lanes)")
    g.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    g.add_argument("-o", "--output", type=Path, default=Path("parallel_model.py"))
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--lanes", type=int, default=2)
    pl = sub.add_parser("plan", help="Ramiel's clusters and lanes for a model: LC, + pruning, + cloning")
    pl.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    pl.add_argument("--batch", type=int, default=1)
    pl.add_argument("--lanes", type=int, default=2)
    pl.add_argument("--json", type=Path, help="write the variants as JSON here")
    pl.add_argument("--streams", action="store_true", help="Opara's CUDA stream plans and baselines instead")
    pl.add_argument("--max-streams", type=int, default=None, help="cap on streams (with --streams)")
    tl = sub.add_parser("timeline", help="kernels by stream in one CUDA Graph replay, one stream vs Opara")
    tl.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    tl.add_argument("--batch", type=int, default=1)
    tl.add_argument("--policy", default="opara", help="stream policy to compare with the single stream")
    tl.add_argument("-o", "--output", type=Path, default=Path("timeline.png"))
    tl.add_argument("--json", type=Path, help="write the kernel spans as JSON here")
    ti = sub.add_parser("tiles", help="ASPEN's tiles per layer and throughput on 1..P workers (Karp-Flatt)")
    ti.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    ti.add_argument("--batch", type=int, default=1)
    ti.add_argument("--threads", help="comma-separated worker counts, 1 always added (default: 1..all cores)")
    ti.add_argument("--rounds", type=int, default=10)
    ti.add_argument("--requests", type=int, default=1, help="also time R requests co-executed in one run")
    ti.add_argument("--json", type=Path, help="write the report as JSON here")
    ti.add_argument("--timeline", type=Path, help="draw one traced inference per worker count (.png, .svg)")
    ti.add_argument("--quiet", action="store_true", help="no progress bar")
    _simulate_parser(sub, model_help)
    o = sub.add_parser("optimize", help="optimize a model and save the plan (pathweave.load reads it)")
    o.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    o.add_argument("--batch", type=int, default=1)
    o.add_argument("--strategy", default="auto", help="auto (default) or one strategy")
    o.add_argument("-o", "--output", type=Path, required=True, help="the plan file to write (.pw)")
    _serve_parser(sub, model_help)
    t = sub.add_parser("table", help="markdown results table from bench --json files")
    t.add_argument("files", nargs="+", type=Path)
    return p


def _simulate_parser(sub: argparse._SubParsersAction, model_help: str) -> None:
    s = sub.add_parser(
        "simulate", help="the tile runtime and a barrier schedule on 1..N cores, by simulation"
    )
    s.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=model_help)
    s.add_argument("--batch", type=int, default=1)
    s.add_argument("--cores", default="1,2,4,8,16,32,64", help="comma-separated core counts (1, 2 added)")
    s.add_argument("--rounds", type=int, default=20, help="interleaved rounds of the measured 1 and 2 cores")
    s.add_argument("--runs", type=int, default=20, help="traced inferences the costs are taken from")
    s.add_argument("--barrier-us", type=float, help="a barrier's cost (default: the measured wake-up)")
    s.add_argument("--plot", type=Path, help="draw the curves (.png or .svg)")
    s.add_argument("--json", type=Path, help="write the report as JSON here")
    s.add_argument("--quiet", action="store_true", help="no progress bar")


def _serve_parser(sub: argparse._SubParsersAction, model_help: str) -> None:
    s = sub.add_parser("serve", help="serve a model over HTTP (KServe v2 / Open Inference Protocol)")
    s.add_argument("model", help=f"a .pw plan (pathweave optimize -o), or a {model_help} optimized at start")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--name", help="the model's name in the URLs (default: the model's own name)")
    s.add_argument("--strategy", default="auto", help="for a model optimized at start: auto or one strategy")
    s.add_argument(
        "--max-batch",
        type=int,
        default=1,
        help="batch requests along dim 0 up to N rows (needs a model, not a .pw; see docs/serve.md)",
    )
    s.add_argument(
        "--co-execute", type=int, default=0, metavar="K",
        help="run up to K concurrent requests of a fixed-shape tiles plan together (CoExecutor)",
    )  # fmt: skip
    s.add_argument(
        "--batch-window-ms", type=float, default=2.0, help="how long a batch waits for more requests"
    )
    s.add_argument("--max-body-mb", type=float, default=64.0, help="larger request bodies get 413")
    s.add_argument("--log-level", default="info")


def _serve(args: argparse.Namespace) -> int:
    from pathweave.serve.http import serve
    from pathweave.serve.model import load_runner

    if args.max_batch < 1 or args.co_execute < 0 or args.batch_window_ms < 0 or args.max_body_mb <= 0:
        raise InputError(
            "--max-batch must be >= 1, --co-execute >= 0, --batch-window-ms >= 0 and --max-body-mb > 0"
        )
    runner = load_runner(args.model, name=args.name, max_batch=args.max_batch, strategy=args.strategy,
                         co_execute=args.co_execute)  # fmt: skip
    print(f"pathweave: serving {runner.name} ({runner.label}, max batch {runner.max_batch}) on "
          f"http://{args.host}:{args.port}/v2/models/{runner.name}", file=sys.stderr)  # fmt: skip
    try:
        serve(
            runner,
            args.host,
            args.port,
            args.batch_window_ms,
            int(args.max_body_mb * (1 << 20)),
            args.log_level,
        )
    finally:
        runner.close()
    return 0


def _zoo() -> int:
    from pathweave.zoo import MODELS

    for m in MODELS.values():
        print(f"{m.name:18} {m.summary:45} ({m.reference})")
    print("\nAlso: torchvision:NAME, timm:NAME, hf:CONFIG (when importable), or a path to a .pt2 file.")
    return 0


def _analyze(args: argparse.Namespace) -> int:
    from pathweave.analysis.analyze import analyze_captured
    from pathweave.frontend.capture import capture
    from pathweave.report.tables import format_analysis
    from pathweave.zoo.load import load_model

    loaded = load_model(args.model, batch=args.batch)
    captured = capture(loaded.model, *loaded.inputs, name=loaded.name)
    analysis = analyze_captured(captured, measure=args.measure)
    d = analysis.to_dict()
    print(format_analysis(d))
    if args.json:
        args.json.write_text(json.dumps(d, indent=2))
    if args.plot:
        from pathweave.report.plot import plot_dag

        plot_dag(captured, analysis, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _optimize(args: argparse.Namespace) -> int:
    from pathweave.api import optimize
    from pathweave.saved import save
    from pathweave.zoo.load import load_model

    loaded = load_model(args.model, batch=args.batch)
    fast = optimize(loaded.model, *loaded.inputs, strategy=args.strategy)
    try:
        path = save(fast, args.output)
    finally:
        fast.close()
    times = ", ".join(f"{k} {v:.2f} ms" for k, v in (getattr(fast, "auto_times_ms", None) or {}).items())
    print(f"{loaded.name}: {fast.label}" + (f" (auto timed {times})" if times else "") + f"; wrote {path}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from pathweave.bench.harness import run_bench
    from pathweave.report.tables import format_bench

    wanted = [c.strip() for c in args.candidates.split(",")] if args.candidates else None
    report = run_bench(args.model, wanted, args.rounds, args.threads, args.device, args.batch, not args.quiet,
                       isa=args.isa)  # fmt: skip
    d = report.to_dict()
    print(format_bench(d))
    if args.json:
        args.json.write_text(json.dumps(d, indent=2))
    return 0


def _captured(args: argparse.Namespace):
    """The CLI's model argument, checked and captured (for the commands that plan lanes)."""
    from pathweave.errors import InputError
    from pathweave.frontend.capture import capture
    from pathweave.zoo.load import load_model

    if args.lanes < 1:
        raise InputError(f"--lanes must be >= 1, got {args.lanes}")
    loaded = load_model(args.model, batch=args.batch)
    return capture(loaded.model, *loaded.inputs, name=loaded.name)


def _plan(args: argparse.Namespace) -> int:
    from pathweave.lanes.report import format_variants, plan_variants

    captured = _captured(args)
    if args.streams:
        from pathweave.streams.report import format_stream_plans, stream_plans

        rows = stream_plans(captured, args.max_streams)
        print(format_stream_plans(captured.name, rows))
        if args.json:
            args.json.write_text(json.dumps({"model": captured.name, "stream_plans": rows}, indent=2))
        return 0
    variants = plan_variants(captured, args.lanes)
    print(format_variants(captured.name, args.lanes, variants))
    if args.json:
        args.json.write_text(json.dumps({"model": captured.name, "lanes": args.lanes,
                                         "variants": [v.to_dict() for v in variants]}, indent=2))  # fmt: skip
    return 0


def _timeline(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pathweave.frontend.capture import capture
    from pathweave.report.timeline import plot_timelines, replay_spans, summary
    from pathweave.streams.strategy import StreamsStrategy
    from pathweave.zoo.load import load_model

    loaded = load_model(args.model, batch=args.batch)
    captured = capture(loaded.model, *loaded.inputs, name=loaded.name)
    panels = {}
    flat = [t.to("cuda") for t in captured.example_inputs]
    for policy in dict.fromkeys(("single", args.policy)):
        strat = StreamsStrategy(captured, policy=policy, copy_outputs=False)
        panels[policy] = replay_spans(lambda s=strat: s.run_flat(flat))
        st = summary(panels[policy])
        print(f"{policy:10} {st['makespan_us']:9.1f} us makespan  {st['kernel_us']:9.1f} us of kernels  "
              f"overlap {st['overlap']:.2f}x  {int(st['streams'])} streams")  # fmt: skip
    plot_timelines(panels, args.output, f"{captured.name}, batch {args.batch}: one CUDA Graph replay")
    print(f"wrote {args.output}")
    if args.json:
        args.json.write_text(json.dumps({k: [asdict(s) for s in v] for k, v in panels.items()}))
    return 0


def _tiles(args: argparse.Namespace) -> int:
    from pathweave.frontend.capture import capture
    from pathweave.tiles.mixed import build_tiles
    from pathweave.tiles.report import format_tiles, parse_workers, tiles_report
    from pathweave.tiles.strategy import TilesStrategy
    from pathweave.zoo.load import load_model

    workers = parse_workers(args.threads)
    if args.timeline:  # checked before the long work
        if args.timeline.suffix.lower() not in (".png", ".svg"):
            suffix = args.timeline.suffix or "no suffix"
            raise InputError(f"--timeline is written as .png or .svg, not {suffix}")
        require("matplotlib", "plot")
    loaded = load_model(args.model, batch=args.batch)
    strategy = build_tiles(capture(loaded.model, *loaded.inputs, name=loaded.name), threads=max(workers))
    if not isinstance(strategy, TilesStrategy):  # islands: the per-tile report needs one whole program
        print(
            f"{loaded.name}: tile islands, {strategy.summary()}\nthe per-tile report (scaling, "
            "timeline) covers models the tiles run whole; this one has ATen segments between islands"
        )
        strategy.close()
        return 0
    try:
        d = tiles_report(strategy, workers, args.rounds, args.requests, not args.quiet)
        print(format_tiles(d))
        if args.json:
            args.json.write_text(json.dumps(d, indent=2))
        if args.timeline:
            _tiles_timeline(strategy, workers, args.timeline)
    finally:
        strategy.close()
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from pathweave.frontend.capture import capture
    from pathweave.report.plot import plot_scaling
    from pathweave.tiles.mixed import build_tiles
    from pathweave.tiles.simulate import format_simulation, parse_cores, simulation_report
    from pathweave.tiles.strategy import TilesStrategy
    from pathweave.zoo.load import load_model

    cores = parse_cores(args.cores)
    if args.rounds < 1 or args.runs < 1 or not (args.barrier_us is None or args.barrier_us >= 0):
        raise InputError(
            f"--rounds and --runs must be >= 1 and --barrier-us >= 0, got {args.rounds}, {args.runs} and "
            f"{args.barrier_us}"
        )
    if args.plot:  # checked before the long work
        if args.plot.suffix.lower() not in (".png", ".svg"):
            raise InputError(f"--plot writes .png or .svg, not {args.plot.suffix or 'no suffix'}")
        require("matplotlib", "plot")
    loaded = load_model(args.model, batch=args.batch)
    strategy = build_tiles(capture(loaded.model, *loaded.inputs, name=loaded.name), threads=2)
    try:
        if not isinstance(strategy, TilesStrategy):
            raise InputError(
                f"{loaded.name}: tile islands ({strategy.summary()}); the simulation replays one whole "
                "tile program, and this model has ATen segments between islands"
            )
        barrier_ns = None if args.barrier_us is None else args.barrier_us * 1e3
        d = simulation_report(strategy, cores, args.rounds, args.runs, barrier_ns, not args.quiet)
    finally:
        strategy.close()
    print(format_simulation(d))
    if args.json:
        args.json.write_text(json.dumps(d, indent=2))
    if args.plot:
        title = f"{d['model']}, batch {d['batch']}: {d['tiles']} tiles, simulated from measured costs"
        plot_scaling(d["rows"], args.plot, title)
        print(f"wrote {args.plot}")
    return 0


def _tiles_timeline(strategy: TilesStrategy, workers: list[int], path: Path) -> None:
    from pathweave.report.timeline import plot_timelines, summary
    from pathweave.tiles.profile import trace_tiles

    inputs = list(strategy.captured.example_inputs)
    panels = {}
    for n in workers:
        strategy.set_workers(n)
        panels[f"{n} worker{'s' * (n > 1)}"] = spans = trace_tiles(strategy.runtime, strategy.graph,
                                                     lambda: strategy.run_flat(inputs))  # fmt: skip
        st = summary(spans)
        idle = 1 - st["kernel_us"] / (n * st["makespan_us"]) if st["makespan_us"] else 0.0
        print(f"{n} worker{'s' * (n > 1)}: {st['makespan_us'] / 1e3:.2f} ms from the first tile to the last, "
              f"{st['kernel_us'] / 1e3:.2f} ms of tiles, idle {100 * idle:.1f}%")  # fmt: skip
    title = f"{strategy.captured.name}: one inference, tiles by worker"
    plot_timelines(panels, path, title, row="worker", unit="tile")
    print(f"wrote {path}")


def _codegen(args: argparse.Namespace) -> int:
    from pathweave.lanes.report import lc_plan
    from pathweave.lanes.standalone import write_module

    captured = _captured(args)
    plan = lc_plan(captured, args.lanes)
    module, weights = write_module(captured, plan, args.output)
    print(f"wrote {module} and {weights}: {plan.summary()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "zoo":
            return _zoo()
        if args.command == "analyze":
            return _analyze(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "codegen":
            return _codegen(args)
        if args.command == "timeline":
            return _timeline(args)
        if args.command == "tiles":
            return _tiles(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "optimize":
            return _optimize(args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "table":
            from pathweave.report.results import markdown_table

            print(markdown_table(args.files))
            return 0
        return _bench(args)
    except PathweaveError as exc:
        print(f"pathweave: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
