"""Experiment (issue 24, item 4): where pathweave's tiles lose time against OpenVINO and ONNX Runtime,
per layer class (depthwise / pointwise / other convolution, pools, element-wise, concat and copies,
fully connected, other).

Not part of the package. Per model (zoo names), batch 1, ``--threads`` threads (default 2):

- tiles: ``pathweave.optimize``'s row ``tiles`` (``build_tiles``, as the bench and ``pathweave tiles``
  build it) with ``threads`` engines; each inference traced tile by tile (``profile.traced_runs``), each
  tile's kernel time (end - start) charged to its layer's class and summed over the engines. Its
  "idle / overhead" row is engines x wall - kernel time: engines waiting for ready tiles, scheduling,
  and the call's own work around the tiles.
- OpenVINO: the bench's ``openvino`` peer settings plus ``PERF_COUNT``, compiled afresh every round
  (its counters are averages since compile: see ``OpenVino``); the ``real_time`` of every EXECUTED node
  charged to a class by its layer type and, for convolutions, its weight's shape in the runtime model.
  A node OpenVINO fused others into (a Convolution with its Clamp and residual Add) is charged to its
  own type: the fused element-wise work sits in the convolution's class, as it does in the tiles
  (``conv2d_act``, epilogue adds).
- ONNX Runtime: the ``ort:seq`` peer's options plus ``enable_profiling``; the JSON's node events
  (``*_kernel_time``, ``op_name``, input shapes) charged to classes the same way, grouped into
  inferences by their ``model_run`` events. FusedConv / NCHWc Conv carry their activation and Sum; SiLU
  stays outside (``QuickGelu``, element-wise).

Both peers export the model through the bench's own ``onnx_export`` (one export, shared).

The columns are not the same kind of sum: a tile runs on one engine, so the tiles' class time is thread
time summed over the engines; the peers run one node at a time on all threads (intra-op), so their node
times are wall times of a ``threads``-wide node. ``threads`` x the peer's time bounds its thread time from
above (it counts threads idling inside a node); with ``--threads 1`` the three are the same measure.
"excess" is tiles / threads - OpenVINO: the wall time the class would cost the tiles over OpenVINO if
their engines split it evenly. Every class figure is the median over the rounds of the round's mean
over ``runs`` inferences (runtimes interleaved round by round, rotating; class medians do not add up to
the total's median). ``--detail`` adds each class's costliest kinds of layer (op, window, stride).
Results and their reading: docs/layer_classes.md.

Run: ``flock /tmp/pw-bench.lock python experiments/layer_class_profile.py MODEL... [--threads 2]
[--rounds 5] [--runs 20] [--detail]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

# the worktree's pathweave, not an installed one (python puts experiments/ first on the path)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pathweave.bench.peers import onnx_export, openvino_config, openvino_model, ort_options  # noqa: E402
from pathweave.frontend.capture import capture  # noqa: E402
from pathweave.machine import describe, loadavg  # noqa: E402
from pathweave.tiles import abi  # noqa: E402
from pathweave.tiles.mixed import build_tiles  # noqa: E402
from pathweave.tiles.profile import traced_runs  # noqa: E402
from pathweave.tiles.strategy import TilesStrategy  # noqa: E402
from pathweave.zoo.load import load_model  # noqa: E402

DEPTHWISE, POINTWISE, CONV = "depthwise conv", "pointwise (1x1) conv", "other conv (dense kxk, stem)"
POOL, EWISE, COPY, FC, OTHER = "pools", "element-wise", "concat / copies", "fully connected", "other"
CLASSES = (DEPTHWISE, POINTWISE, CONV, POOL, EWISE, COPY, FC, OTHER)
GAP = "idle / overhead"
WALL = "wall"
OUTSIDE = "tiles: of which outside the tiles' span"  # call -> first tile, last tile -> return, x engines

TILE_OPS = {
    **dict.fromkeys((abi.K_MAXPOOL, abi.K_AVGPOOL, abi.K_ADAPTIVE), POOL),
    **dict.fromkeys((abi.K_LINEAR, abi.K_MATMUL), FC),
    **dict.fromkeys((abi.K_EWISE, abi.K_AFFINE, abi.K_MAP, abi.K_WHERE, abi.K_COMPARE), EWISE),
    # cat_batch_norm_act (NASNet) is a K_CAT row: the concatenation with its BN and ReLU fused in
    **dict.fromkeys((abi.K_CAT, abi.K_PAD, abi.K_COPY, abi.K_CONVERT, abi.K_SHUFFLE, abi.K_ROLL), COPY),
}
OV_TYPES = {  # the runtime model's layerType
    **dict.fromkeys(
        "MaxPool AvgPool Pooling Reduce ReduceMean AdaptiveAvgPool AdaptiveMaxPool".split(), POOL
    ),
    **dict.fromkeys("FullyConnected MatMul Gemm".split(), FC),
    **dict.fromkeys(
        "Eltwise Subgraph Add Multiply Subtract Divide Clamp Relu Sigmoid Swish HSwish HSigmoid Maximum "
        "Minimum Power Exp Tanh PRelu Math".split(),
        EWISE,
    ),
    **dict.fromkeys(
        "Concatenation Concat Reorder Reshape Transpose Pad Split StridedSlice Gather Broadcast Squeeze "
        "Unsqueeze Convert ShapeOf".split(),
        COPY,
    ),
}
ORT_OPS = {  # the profile's op_name
    **dict.fromkeys("MaxPool AveragePool GlobalAveragePool GlobalMaxPool ReduceMean".split(), POOL),
    **dict.fromkeys("Gemm MatMul FusedGemm FusedMatMul".split(), FC),
    # QuickGelu: ORT's fusion of x * sigmoid(x) (SiLU, alpha 1), which it leaves outside the convolution
    **dict.fromkeys(
        "Add Mul Sub Div Relu Clip Sigmoid HardSigmoid Sum BatchNormalization Tanh Max Min Erf HardSwish "
        "LeakyRelu QuickGelu".split(),
        EWISE,
    ),
    **dict.fromkeys(
        "Concat ReorderInput ReorderOutput Reshape Transpose Pad Slice Split Flatten Squeeze Unsqueeze "
        "Identity Cast Expand Gather".split(),
        COPY,
    ),
}
# the runtime model's names (layerType) for the graph's inputs, outputs and weights: never timed
SKIPPED_OV = {"Parameter", "Result", "Constant", "Input", "Output", "Const"}


def conv_class(in_channels: int, weight: tuple[int, ...], groups: int) -> str:
    """A convolution's class from its input channels, weight shape [out, in / groups, kh, kw] and groups."""
    if groups > 1 and groups == in_channels:
        return DEPTHWISE
    if groups == 1 and all(k == 1 for k in weight[2:]):
        return POINTWISE
    return CONV


@dataclass
class Runs:
    """One runtime's measurements: per round the mean ms per inference of each class (and GAP; OpenVINO's
    counters give means, not single inferences), each profiled inference's wall ms, and the wall ms of
    inferences run without profiling."""

    counts: Counter[str]
    rounds: list[dict[str, float]] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    # (class, kind) -> [layers, summed ms per inference over the rounds]; kind: op and window, for --detail
    detail: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))

    def median(self, key: str) -> float:
        """The median over the rounds of ``key``'s mean per inference."""
        return statistics.median(r.get(key, 0.0) for r in self.rounds)

    def add_round(self, per_run: list[dict[str, float]], walls: list[float], threads: int) -> None:
        """One round from its inferences' class times and walls; GAP = threads x wall - the classes."""
        keys = set(CLASSES).union(*per_run)
        mean = {c: sum(r.get(c, 0.0) for r in per_run) / len(per_run) for c in keys}
        mean[WALL] = statistics.fmean(walls)
        mean[GAP] = threads * mean[WALL] - sum(mean[c] for c in CLASSES)
        self.rounds.append(mean)
        self.walls += walls


def _known(table: dict[Any, str], key: Any, other: set[str]) -> str:
    """``table[key]``, or OTHER with ``key`` noted in ``other``."""
    if key in table:
        return table[key]
    other.add(str(key))
    return OTHER


def _timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


class Tiles:
    other: set[str] = set()  # what went to class OTHER, printed under the table

    def __init__(
        self, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], name: str, threads: int
    ) -> None:
        strategy = build_tiles(capture(model, *inputs, name=name), threads=threads)
        if not isinstance(strategy, TilesStrategy):
            strategy.close()
            raise SystemExit(f"{name}: tile islands; this profile covers models the tiles run whole")
        self.s, self.threads = strategy, threads
        self.inputs = list(strategy.captured.example_inputs)
        g = strategy.graph
        self.layer_class = [
            self._row_class(r, str(o)) for r, o in zip(strategy.program.layers, g.layer_ops, strict=True)
        ]
        self.tile_class = np.repeat(
            np.array([CLASSES.index(c) for c in self.layer_class]), np.diff(g.layer_tile_start)
        )
        self.runs = Runs(Counter(self.layer_class))
        rows = strategy.program.layers
        kinds = [
            (c, self._kind(r, str(o))) for c, r, o in zip(self.layer_class, rows, g.layer_ops, strict=True)
        ]
        self.kinds = sorted(set(kinds))
        self.tile_kind = np.repeat(
            np.array([self.kinds.index(k) for k in kinds]), np.diff(g.layer_tile_start)
        )
        for k in kinds:
            self.runs.detail[k][0] += 1

    @staticmethod
    def _kind(row: np.ndarray, op: str) -> str:
        if int(row[abi.S_OP]) in (abi.K_CONV, abi.K_DEPTHWISE, abi.K_MAXPOOL, abi.K_AVGPOOL):
            return f"{op} {row[abi.S_KH]}x{row[abi.S_KW]}/{row[abi.S_SH]}"
        return op

    @staticmethod
    def _row_class(row: np.ndarray, name: str) -> str:
        op = int(row[abi.S_OP])
        if op in (abi.K_CONV, abi.K_DEPTHWISE):
            weight = (0, 0, int(row[abi.S_KH]), int(row[abi.S_KW]))
            return conv_class(int(row[abi.S_XSHAPE + 1]), weight, int(row[abi.S_GROUPS]))
        if op in TILE_OPS:
            return TILE_OPS[op]
        Tiles.other.add(name)
        return OTHER

    def round(self, n: int) -> None:
        run = lambda: self.s.run_flat(self.inputs)  # noqa: E731
        per_run, walls = [], []
        for tr in traced_runs(self.s.runtime, run, n):
            by_kind = np.bincount(
                self.tile_kind, weights=tr.times[:, 1] - tr.times[:, 0], minlength=len(self.kinds)
            )
            for k, v in zip(self.kinds, by_kind, strict=True):
                self.runs.detail[k][1] += float(v) / 1e6 / n
            ns = np.bincount(self.tile_class, weights=tr.times[:, 1] - tr.times[:, 0], minlength=len(CLASSES))
            row = {c: float(v) / 1e6 for c, v in zip(CLASSES, ns, strict=True)}
            span = int(tr.times[:, 1].max()) - int(tr.times[:, 0].min())
            walls.append((tr.returned_ns - tr.called_ns) / 1e6)
            row[OUTSIDE] = self.threads * (walls[-1] - span / 1e6)
            per_run.append(row)
        self.runs.add_round(per_run, walls, self.threads)
        run()
        self.runs.plain += _timed(run, n)
        self.s.quiesce()  # park the engines: spinning ones would steal the peers' cores

    def close(self) -> None:
        self.s.close()


class OpenVino:
    """OpenVINO's CPU plugin keeps, per node, the sum of its execution times since the model was compiled,
    each truncated to whole microseconds, and ``get_profiling_info`` reports that sum / count, truncated
    again. So every round compiles the model afresh, reads the averages after ``WARMUP`` inferences and
    after the round's ``n``, and takes the difference: the mean over the round's inferences, low by up to
    2 us per node and inference (1 us on average, which ``TRUNCATION_US`` adds back)."""

    other: set[str] = set()
    WARMUP = 3
    TRUNCATION_US = 1.0

    def __init__(self, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int) -> None:
        import openvino as ov

        self.ov, self.threads = ov, threads
        self.model, self.note, _ = openvino_model(ov, model, inputs)
        self.arrays = [t.detach().contiguous().numpy() for t in inputs]
        self.plain_request = self._request({})
        for _ in range(self.WARMUP):
            self.plain_request.infer()
        self.runs = Runs(Counter())

    def _request(self, extra: dict[str, Any]) -> Any:
        compiled = self.ov.Core().compile_model(self.model, "CPU", {**openvino_config(self.threads), **extra})
        request = compiled.create_infer_request()
        for i, a in enumerate(self.arrays):
            request.set_input_tensor(i, self.ov.Tensor(a))
        return request

    @staticmethod
    def _node_class(op: Any) -> str:
        kind = op.get_rt_info()["layerType"].astype(str)
        if kind in ("Convolution", "GroupConvolution"):
            x, w = (list(op.input(i).get_partial_shape().to_shape()) for i in (0, 1))
            if len(w) == len(x) + 1:  # grouped, whatever its type says: [g, o/g, i/g, k..]
                return conv_class(x[1], (w[0] * w[1], w[2], *w[3:]), w[0])
            return conv_class(x[1], tuple(w), 1)
        return "" if kind in SKIPPED_OV else _known(OV_TYPES, kind, OpenVino.other)

    @staticmethod
    def _kind(op: Any) -> str:
        rt = op.get_rt_info()
        kind, prim = rt["layerType"].astype(str), rt["primitiveType"].astype(str)
        if kind in ("Convolution", "GroupConvolution"):
            x, w, y = (
                list(p.get_partial_shape().to_shape()) for p in (op.input(0), op.input(1), op.output(0))
            )
            return f"{kind} {w[-2]}x{w[-1]}/{round(x[2] / y[2])} ({prim})"  # the stride, from the heights
        return f"{kind} ({prim})"

    @staticmethod
    def _averages(request: Any) -> dict[str, float]:
        return {p.node_name: p.real_time.total_seconds() * 1e3 for p in request.get_profiling_info()
                if p.status.name == "EXECUTED"}  # fmt: skip

    def round(self, n: int) -> None:
        request = self._request({"PERF_COUNT": True})
        ops = request.get_compiled_model().get_runtime_model().get_ordered_ops()
        node_class = {op.get_friendly_name(): self._node_class(op) for op in ops}
        node_kind = {op.get_friendly_name(): self._kind(op) for op in ops}
        for _ in range(self.WARMUP):
            request.infer()
        before = self._averages(request)
        walls = _timed(request.infer, n)
        after = self._averages(request)
        mean: dict[str, float] = defaultdict(float)
        for name, avg in after.items():
            node_ms = (avg * (self.WARMUP + n) - before.get(name, 0.0) * self.WARMUP) / n
            mean[node_class[name]] += node_ms + self.TRUNCATION_US / 1e3
            self.runs.detail[node_class[name], node_kind[name]][1] += node_ms + self.TRUNCATION_US / 1e3
        self.runs.counts = Counter(node_class[name] for name in after)
        if len(self.runs.rounds) == 0:
            for name in after:
                self.runs.detail[node_class[name], node_kind[name]][0] += 1
        self.runs.add_round([mean], walls, 1)
        del request
        self.plain_request.infer()
        self.runs.plain += _timed(self.plain_request.infer, n)

    def close(self) -> None:
        pass


class Ort:
    """ONNX Runtime's profiler writes each node's duration in whole microseconds (truncated):
    ``TRUNCATION_US`` (the mean loss) is added back per node."""

    other: set[str] = set()
    WARMUP = 3
    TRUNCATION_US = 0.5

    def __init__(self, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int) -> None:
        import onnxruntime as ort

        exp = onnx_export(model, inputs)
        self.tmp = tempfile.TemporaryDirectory(prefix="pw-ortprof-")
        options = ort_options(ort, threads, parallel=False)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(self.tmp.name, "ort")
        providers = ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(exp.data, options, providers=providers)
        self.plain_session = ort.InferenceSession(
            exp.data, ort_options(ort, threads, False), providers=providers
        )
        names = [i.name for i in self.session.get_inputs()]
        self.feed = dict(zip(names, (t.detach().contiguous().numpy() for t in inputs), strict=True))
        for _ in range(self.WARMUP):
            self.session.run(None, self.feed)
            self.plain_session.run(None, self.feed)
        self.walls: list[list[float]] = []
        self.runs = Runs(Counter())

    def round(self, n: int) -> None:
        self.walls.append(_timed(lambda: self.session.run(None, self.feed), n))
        self.plain_session.run(None, self.feed)
        self.runs.plain += _timed(lambda: self.plain_session.run(None, self.feed), n)

    def close(self) -> None:
        """Ends the profile and reads it: each node event charged to the inference whose ``model_run``
        event holds it; the warm-up inferences dropped."""
        with open(self.session.end_profiling()) as f:
            events = json.load(f)
        runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
        nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
        starts = np.array([a for a, _ in runs])
        per_run: list[dict[str, float]] = [defaultdict(float) for _ in runs]
        counts: list[Counter[str]] = [Counter() for _ in runs]
        for e in nodes:
            i = int(np.searchsorted(starts, e["ts"], side="right")) - 1
            cls = self._node_class(e["args"])
            per_run[i][cls] += (e["dur"] + self.TRUNCATION_US) / 1e3
            counts[i][cls] += 1
        kept = per_run[self.WARMUP :]
        if len(kept) != sum(map(len, self.walls)):
            raise RuntimeError(f"ORT profile: {len(kept)} inferences for {sum(map(len, self.walls))} timed")
        for walls in self.walls:
            self.runs.add_round(kept[: len(walls)], walls, 1)
            kept = kept[len(walls) :]
        self.runs.counts = counts[-1]
        self.tmp.cleanup()

    @staticmethod
    def _node_class(args: dict[str, Any]) -> str:
        op = args["op_name"]
        if op in ("Conv", "FusedConv"):
            x, w = (next(iter(s.values())) for s in args["input_type_shape"][:2])
            groups = x[1] // w[1] if w[1] else 1
            return conv_class(x[1], tuple(w), groups)
        return _known(ORT_OPS, op, Ort.other)


def profile(name: str, threads: int, rounds: int, runs: int) -> dict[str, Any]:
    for side in (Tiles, OpenVino, Ort):
        side.other.clear()
    loaded = load_model(name, batch=1)
    inputs = tuple(loaded.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sides = {
            "tiles": Tiles(loaded.model, inputs, loaded.name, threads),
            "openvino": OpenVino(loaded.model, inputs, threads),
            "ort": Ort(loaded.model, inputs, threads),
        }
    load_before = loadavg()
    order = list(sides.values())
    try:
        for r in range(rounds):
            for side in order[r % 3 :] + order[: r % 3]:
                side.round(runs)
                time.sleep(0.05)
    finally:
        for side in order:
            side.close()
    return {"model": name, "threads": threads, "load": [load_before, loadavg()],
            "runs": {k: s.runs for k, s in sides.items()}}  # fmt: skip


def table(d: dict[str, Any]) -> str:
    t, ov, ort = (d["runs"][k] for k in ("tiles", "openvino", "ort"))
    n = d["threads"]
    lines = [
        f"| class | tiles ms (sum over {n} engines) | OpenVINO ms | ORT ms | excess: tiles/{n} - OpenVINO ms "
        f"| tiles / ({n} x OpenVINO) | layers: tiles / OpenVINO / ORT |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in CLASSES:
        a, b, e = t.median(c), ov.median(c), ort.median(c)
        if not (a or b or e):
            continue
        ratio = f"{a / (n * b):.2f}" if b else "-"
        lines.append(f"| {c} | {a:.3f} | {b:.3f} | {e:.3f} | {a / n - b:+.3f} | {ratio} "
                     f"| {t.counts[c]} / {ov.counts[c]} / {ort.counts[c]} |")  # fmt: skip
    sums = [statistics.median(sum(r[c] for c in CLASSES) for r in x.rounds) for x in (t, ov, ort)]
    counts = " / ".join(str(sum(x.counts.values())) for x in (t, ov, ort))
    lines.append(f"| sum of classes | {sums[0]:.3f} | {sums[1]:.3f} | {sums[2]:.3f} | | | {counts} |")
    lines.append(f"| {GAP} (tiles: {n} x wall - kernels; peers: wall - nodes) | {t.median(GAP):.3f} "
                 f"| {ov.median(GAP):.3f} | {ort.median(GAP):.3f} | | | |")  # fmt: skip
    lines.append(f"| {OUTSIDE} (call to first tile, last tile to return, x {n}) | {t.median(OUTSIDE):.3f} "
                 "| | | | | |")  # fmt: skip
    means = [x.median(WALL) for x in (t, ov, ort)]
    lines.append(f"| **wall ms, profiled** (as the classes: median of the rounds' means) | {means[0]:.3f} "
                 f"| {means[1]:.3f} | {means[2]:.3f} | {means[0] - means[1]:+.3f} | | |")  # fmt: skip
    walls = [statistics.median(x.walls) for x in (t, ov, ort)]
    plain = [statistics.median(x.plain) for x in (t, ov, ort)]
    for label, w in (("profiled", walls), ("profiling off", plain)):
        lines.append(f"| **wall ms, {label}** (median inference) | {w[0]:.3f} | {w[1]:.3f} | {w[2]:.3f} "
                     f"| {w[0] - w[1]:+.3f} | | |")  # fmt: skip
    return "\n".join(lines)


def detail(d: dict[str, Any], top: int = 4) -> str:
    """Per class, the tiles' and OpenVINO's costliest kinds of layer (op and window): layers, ms."""
    rounds = len(d["runs"]["tiles"].rounds)
    lines = []
    for c in CLASSES:
        cells = []
        for key in ("tiles", "openvino"):
            items = sorted(((k, v) for (cl, k), v in d["runs"][key].detail.items() if cl == c),
                           key=lambda kv: -kv[1][1])  # fmt: skip
            cells.append("; ".join(f"{k} x{int(n)} {ms / rounds:.3f}" for k, (n, ms) in items[:top]) or "-")
        if cells != ["-", "-"]:
            lines.append(f"| {c} | {cells[0]} | {cells[1]} |")
    head = "| class | tiles: kind x layers ms | OpenVINO: kind (primitive) x nodes ms |\n|---|---|---|\n"
    return head + "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=20, help="inferences per runtime per round")
    p.add_argument("--detail", action="store_true", help="also the costliest kinds of layer per class")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    m = describe()
    print(f"# {m['cpu']} ({m['isa']}), {m['cores']} cores, torch {m['torch']}, Python {m['python']}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    for name in args.models:
        d = profile(name, args.threads, args.rounds, args.runs)
        print(f"\n## {name}, batch 1, {args.threads} thread(s), {args.rounds} rounds x {args.runs} "
              f"inferences; load (1/5/15 min) {d['load'][0]} -> {d['load'][1]}\n")  # fmt: skip
        print(table(d))
        if args.detail:
            print(f"\n{detail(d)}")
        others = {k: sorted(c.other) for k, c in (("tiles", Tiles), ("OpenVINO", OpenVino), ("ORT", Ort))}
        print(f"\nclass 'other' holds: {others}", flush=True)


if __name__ == "__main__":
    main()
