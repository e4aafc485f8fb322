"""Experiment (issue 22 item 5): a bounded load test of ``pathweave serve`` against ONNX Runtime behind the
same HTTP layer.

Not part of the package, not in CI. For each engine (pathweave, ONNX Runtime) and each ``--max-batch``,
a server is started in a subprocess on 127.0.0.1 (the same FastAPI app, ``pathweave.serve.http.make_app``:
only the ``Runner`` differs; ONNX Runtime's is ``OrtRunner`` below, over an export of the same model with
a dynamic batch axis), and ``--concurrency`` client threads send ``--requests`` requests with the real
``tritonclient`` HTTP client (binary tensors). Every answer is checked against eager PyTorch on the same
input: a wrong answer, an error or a missing answer is counted, never dropped. Reported: throughput,
p50/p99 latency seen by the client, mean rows per model run (from the server's /metrics), wrong, lost.

The client threads share the machine with the server: on a small machine the numbers are those of the
whole loop (client, HTTP, model), the same for both engines. Take the bench lock when timing:

    flock /tmp/pw-bench.lock python experiments/serve_load.py --model mobilenet_v2 --requests 10000 \\
        --concurrency 32 --max-batch 1,8 --out /tmp/pw-serve

Writes OUT/serve_load.json and OUT/serve_load.md (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: this checkout's pathweave

from pathweave.serve.model import Runner  # noqa: E402
from pathweave.serve.protocol import TensorMeta, datatype_of  # noqa: E402

POOL = 64  # distinct inputs, each with its eager reference
RTOL, ATOL = 1e-3, 1e-3  # scaled by the output's magnitude (compare.mismatch's scale_atol)


class OrtRunner(Runner):
    """An onnxruntime session (dynamic batch axis) behind pathweave's HTTP layer."""

    def __init__(self, path: Path, name: str, max_batch: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = len(os.sched_getaffinity(0))
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.name, self.max_batch = name, max_batch
        self.label = f"onnxruntime {ort.__version__}"
        types = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
        self.inputs = [self._meta(i, types) for i in self.session.get_inputs()]
        self.outputs = [self._meta(o, types) for o in self.session.get_outputs()]

    def _meta(self, arg: Any, types: dict[str, Any]) -> TensorMeta:
        shape = tuple(d if isinstance(d, int) else -1 for d in arg.shape)
        if self.max_batch == 1:
            shape = (1, *shape[1:])
        return TensorMeta(arg.name, datatype_of(np.dtype(types[arg.type])), shape)

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, {m.name: a for m, a in zip(self.inputs, inputs, strict=True)})


def export_onnx(model: Any, x: Any, path: Path) -> None:
    """``model`` as ONNX with dim 0 dynamic: the dynamo exporter, else the TorchScript one."""
    import torch

    with torch.no_grad():
        try:
            dims = ({0: torch.export.Dim("batch", min=1, max=1024)},)
            torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes=dims, verbose=False)
        except Exception as exc:  # noqa: BLE001 - the legacy exporter is the fallback
            print(f"dynamo ONNX export failed ({type(exc).__name__}); legacy exporter", file=sys.stderr)
            torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"],
                              dynamic_axes={"x": {0: "batch"}})  # fmt: skip


def serve_main(args: argparse.Namespace) -> None:
    """The server subprocess: one engine, one max batch, until terminated."""
    import uvicorn

    from pathweave.serve.http import make_app
    from pathweave.serve.model import load_runner

    if args.server == "ort":
        runner = OrtRunner(Path(args.onnx), "model", args.max_batch_one)
    else:
        runner = load_runner(args.model, name="model", max_batch=args.max_batch_one, strategy=args.strategy)
    print(f"serving {runner.label}, max batch {runner.max_batch}", file=sys.stderr, flush=True)
    uvicorn.run(make_app(runner, args.window_ms), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False)  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, server: subprocess.Popen, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the server was not ready within {limit_s:.0f} s")


def _rows_per_run(url: str) -> float | None:
    with urllib.request.urlopen(f"http://{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = {}
    for line in text.splitlines():
        for key in ("pathweave_batch_rows_sum", "pathweave_batch_rows_count"):
            if line.startswith(key):
                values[key] = float(line.rsplit(" ", 1)[1])
    count = values.get("pathweave_batch_rows_count")
    return values["pathweave_batch_rows_sum"] / count if count else None


def drive(url: str, pool: list[np.ndarray], refs: list[np.ndarray], requests: int, concurrency: int) -> dict:
    """``requests`` infer calls from ``concurrency`` threads; every answer checked against its reference."""
    import tritonclient.http as httpclient

    from pathweave.compare import mismatch

    meta = httpclient.InferenceServerClient(url).get_model_metadata("model")
    in_name, out_name = meta["inputs"][0]["name"], meta["outputs"][0]["name"]
    lock, counter = threading.Lock(), iter(range(requests))
    latencies: list[float] = []
    wrong, failed = [0], [0]

    def worker() -> None:
        import torch

        client = httpclient.InferenceServerClient(url, network_timeout=120, connection_timeout=120)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            x = pool[i % len(pool)]
            inp = httpclient.InferInput(in_name, list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=True)
            start = time.perf_counter()
            try:
                got = client.infer("model", [inp], outputs=[httpclient.InferRequestedOutput(out_name)])
                out = got.as_numpy(out_name).copy()
            except Exception:  # noqa: BLE001 - counted as lost
                with lock:
                    failed[0] += 1
                continue
            took = time.perf_counter() - start
            bad = out is None or mismatch([torch.from_numpy(out)], [torch.from_numpy(refs[i % len(refs)])],
                                          RTOL, ATOL, scale_atol=True) is not None  # fmt: skip
            with lock:
                latencies.append(took)
                wrong[0] += bad
        client.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    lat = np.array(latencies) * 1000
    answered = len(latencies)
    return {
        "requests": requests, "answered": answered, "wrong": wrong[0], "lost": requests - answered,
        "errors": failed[0], "wall_s": wall, "throughput_rps": answered / wall,
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
    }  # fmt: skip


def one_run(
    args: argparse.Namespace, engine: str, max_batch: int, onnx: Path, pool: list, refs: list
) -> dict:
    port = _free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--server", engine, "--port", str(port),
           "--model", args.model, "--onnx", str(onnx), "--max-batch-one", str(max_batch),
           "--window-ms", str(args.window_ms), "--strategy", args.strategy]  # fmt: skip
    log = open(Path(args.out) / f"server_{engine}_{max_batch}.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"127.0.0.1:{port}"
    try:
        started = time.perf_counter()
        _wait_ready(url, server, 900)
        ready_s = time.perf_counter() - started
        drive(url, pool, refs, min(200, args.requests), args.concurrency)  # warm-up, not counted
        result = drive(url, pool, refs, args.requests, args.concurrency)
        result.update(engine=engine, max_batch=max_batch, ready_s=ready_s, rows_per_run=_rows_per_run(url))
        return result
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def table(results: list[dict]) -> str:
    head = (
        "| engine | max batch | requests | concurrency | req/s | p50 ms | p99 ms | rows/run | wrong | lost "
        "|\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [
        f"| {r['engine']} | {r['max_batch']} | {r['requests']} | {r['concurrency']} "
        f"| {r['throughput_rps']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['rows_per_run'] or 0:.2f} "
        f"| {r['wrong']} | {r['lost']} |"
        for r in results
    ]
    return "\n".join([head, *rows])


def bench_main(args: argparse.Namespace) -> None:
    import torch

    from pathweave import machine
    from pathweave.zoo.load import load_model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loaded = load_model(args.model)
    model, (x,) = loaded.model.eval(), loaded.inputs
    gen = torch.Generator().manual_seed(0)
    pool = [torch.randn(x.shape, generator=gen, dtype=x.dtype).numpy() for _ in range(POOL)]
    with torch.no_grad():
        refs = [model(torch.from_numpy(p)).numpy() for p in pool]
    onnx = out / f"{args.model}.onnx"
    if "ort" in args.engines:
        export_onnx(model, x, onnx)
    cpu = f"{machine.cpu_model()} ({machine.cpu_isa()}), {len(os.sched_getaffinity(0))} cores"
    info = {"cpu": cpu, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "uptime_before": _uptime(), "command": " ".join(sys.argv)}  # fmt: skip
    results = []
    for max_batch in args.max_batch:
        for engine in args.engines:
            print(f"{engine}, max batch {max_batch} ...", file=sys.stderr, flush=True)
            result = one_run(args, engine, max_batch, onnx, pool, refs)
            result["concurrency"] = args.concurrency
            results.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    info["uptime_after"] = _uptime()
    (out / "serve_load.json").write_text(json.dumps({"info": info, "results": results}, indent=1))
    text = table(results)
    (out / "serve_load.md").write_text(text + "\n")
    print(json.dumps(info, indent=1))
    print(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mobilenet_v2", help="a zoo model with one image input")
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-batch", default="1,8", help="comma-separated; each is one run per engine")
    p.add_argument("--engines", default="pathweave,ort")
    p.add_argument("--strategy", default="auto", help="pathweave's strategy")
    p.add_argument("--window-ms", type=float, default=2.0)
    p.add_argument("--out", default="/tmp/pw-serve")
    p.add_argument("--server", help=argparse.SUPPRESS)  # internal: run one server
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--onnx", help=argparse.SUPPRESS)
    p.add_argument("--max-batch-one", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.server:
        serve_main(args)
        return
    args.max_batch = [int(b) for b in args.max_batch.split(",")]
    args.engines = args.engines.split(",")
    bench_main(args)


if __name__ == "__main__":
    main()
