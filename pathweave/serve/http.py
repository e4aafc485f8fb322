"""The HTTP server: a FastAPI app speaking the Open Inference Protocol (KServe v2) for one model.

Routes: ``GET /v2``, ``/v2/health/live``, ``/v2/health/ready``, ``/v2/models/{name}`` (metadata),
``/v2/models/{name}/ready``, ``POST /v2/models/{name}/infer`` (each also under ``/versions/{v}``), and
``GET /metrics`` (Prometheus). Every failure is answered, never raised to the server: a bad request gets
a 4xx and ``{"error": message}``, a model failure a 500 with pathweave's error text.
"""

# no ``from __future__ import annotations``: FastAPI reads the handlers' annotations, and ``Request`` is
# imported inside ``make_app`` (lazily), where only evaluated annotations can see it
import time
import zlib
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from pathweave.errors import PathweaveError, require
from pathweave.serve.batching import Batcher
from pathweave.serve.metrics import Metrics
from pathweave.serve.model import Runner
from pathweave.serve.protocol import HEADER_LENGTH, NAMES, RequestError, encode_infer, parse_infer

#: a request body above this is refused with 413 (bytes; JSON tensors take ~10x their binary size)
MAX_BODY = 64 << 20


def check_inputs(runner: Runner, given: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``given`` in the model's input order, checked against its metadata (RequestError if off)."""
    names = [m.name for m in runner.inputs]
    unknown, missing = sorted(set(given) - set(names)), [n for n in names if n not in given]
    if unknown or missing:
        raise RequestError(
            f"model {runner.name!r} takes inputs {names}; missing {missing}, unknown {unknown}"
        )
    out = []
    for meta in runner.inputs:
        array = given[meta.name]
        got = NAMES[array.dtype]
        if got != meta.datatype:
            raise RequestError(f"input {meta.name!r} is {got}; the model takes {meta.datatype}")
        fits = array.ndim == len(meta.shape) and all(
            w in (-1, g) for g, w in zip(array.shape, meta.shape, strict=False)
        )
        if not fits:
            raise RequestError(
                f"input {meta.name!r} has shape {list(array.shape)}; the model takes {list(meta.shape)}"
            )
        out.append(array)
    if runner.max_batch > 1:
        rows = {a.shape[0] for a in out}
        if len(rows) != 1:
            raise RequestError(f"the inputs have different batch sizes (dim 0): {sorted(rows)}")
        (n,) = rows
        if not 1 <= n <= runner.max_batch:
            raise RequestError(f"batch size {n} (dim 0) is outside 1..{runner.max_batch}")
    return out


async def _body(request: Any, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"the body's {declared} bytes are over the limit of {limit}", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"the body is over the limit of {limit} bytes", 413)
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding in ("gzip", "deflate"):
        return _inflate(body, encoding, limit)
    if encoding != "identity":
        raise RequestError(f"Content-Encoding {encoding!r} is not served; use gzip, deflate or none", 415)
    return body


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        raw = inflater.decompress(body, limit + 1)  # a small body may inflate to gigabytes: bounded
    except zlib.error as exc:
        raise RequestError(f"the body is not valid {encoding} ({exc})") from exc
    if len(raw) > limit:
        raise RequestError(f"the body inflates to over the limit of {limit} bytes", 413)
    return raw


def _route(path: str) -> str:
    """The metrics label of a path: a handful of kinds, never the raw path (unbounded labels)."""
    if path.endswith("/infer"):
        return "infer"
    if path.startswith("/v2/health"):
        return "health"
    if path.startswith("/v2"):
        return "metadata"
    return "metrics" if path == "/metrics" else "other"


class _Count:
    """ASGI middleware: every answer counted by route and status; infer latency timed."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status, start = 500, time.perf_counter()

        async def sent(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            self.metrics.answered(_route(scope["path"]), status, time.perf_counter() - start)


def _error(status: int, message: str) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)


def _check_name(runner: Runner, name: str) -> None:
    if name != runner.name:
        raise RequestError(f"no model {name!r}; this server has {runner.name!r}", 404)


def _model_routes(app: Any, runner: Runner) -> None:
    """Metadata and readiness of the one model."""

    async def metadata(name: str, version: str | None = None) -> Any:
        try:
            _check_name(runner, name)
        except RequestError as exc:
            return _error(exc.status, str(exc))
        return {
            "name": runner.name, "versions": ["1"], "platform": runner.label,
            "inputs": [m.as_json() for m in runner.inputs], "outputs": [m.as_json() for m in runner.outputs],
        }  # fmt: skip

    async def model_ready(name: str, version: str | None = None) -> Any:
        try:
            _check_name(runner, name)
        except RequestError as exc:
            return _error(exc.status, str(exc))
        return {"name": runner.name, "ready": True}

    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        app.add_api_route(prefix, metadata, methods=["GET"])
        app.add_api_route(f"{prefix}/ready", model_ready, methods=["GET"])


def _infer_route(app: Any, runner: Runner, batcher: Batcher, max_body: int) -> None:
    """``POST .../infer``: parse, check, batch, answer; every failure becomes an answer."""
    from fastapi import Request
    from fastapi.responses import Response

    async def infer(name: str, request: Request, version: str | None = None) -> Response:
        try:
            _check_name(runner, name)
            parsed = parse_infer(await _body(request, max_body), request.headers.get(HEADER_LENGTH))
            outs = await batcher.submit(check_inputs(runner, parsed.inputs))
            named = {m.name: o for m, o in zip(runner.outputs, outs, strict=True)}
            body, head = encode_infer(runner.name, parsed, named)
        except RequestError as exc:
            return _error(exc.status, str(exc))
        except PathweaveError as exc:  # the model's own failure: pathweave's message, as it is
            return _error(500, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the server answers every request and stays up
            return _error(500, f"internal error: {type(exc).__name__}: {exc}")
        if head is None:
            return Response(body, media_type="application/json")
        return Response(body, media_type="application/octet-stream", headers={HEADER_LENGTH: str(head)})

    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        app.add_api_route(f"{prefix}/infer", infer, methods=["POST"])


def _server_routes(app: Any, metrics: Metrics) -> None:
    """Server metadata, health, Prometheus metrics, and errors of the framework's own as JSON."""
    from fastapi import Request
    from fastapi.responses import Response
    from starlette.exceptions import HTTPException

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> Any:
        return _error(exc.status_code, str(exc.detail))

    @app.get("/v2")
    async def server_metadata() -> dict:
        return {"name": "pathweave", "version": _version(), "extensions": ["binary_tensor_data"]}

    @app.get("/v2/health/live")
    async def live() -> dict:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> dict:
        return {"ready": True}  # the model is loaded and warmed before the app exists

    @app.get("/metrics")
    async def prometheus() -> Response:
        body, kind = metrics.render()
        return Response(body, media_type=kind)


def make_app(runner: Runner, window_ms: float = 2.0, max_body: int = MAX_BODY) -> Any:
    """The FastAPI app serving ``runner``; requests within ``window_ms`` are batched where it can."""
    require("fastapi", "serve")
    require("prometheus_client", "serve")
    from fastapi import FastAPI

    metrics = Metrics(runner.name, runner.max_batch)
    batcher = Batcher(runner, window_ms / 1000.0, on_batch=metrics.batch)

    @asynccontextmanager
    async def lifespan(_: Any) -> Any:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title=f"pathweave: {runner.name}", lifespan=lifespan)
    app.add_middleware(_Count, metrics=metrics)
    app.state.runner, app.state.metrics, app.state.batcher = runner, metrics, batcher
    _server_routes(app, metrics)
    _model_routes(app, runner)
    _infer_route(app, runner, batcher, max_body)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pathweave")
    except PackageNotFoundError:
        return "unknown"


def serve(
    runner: Runner,
    host: str = "127.0.0.1",
    port: int = 8000,
    window_ms: float = 2.0,
    max_body: int = MAX_BODY,
    log_level: str = "info",
) -> None:
    """Serve ``runner`` until interrupted (uvicorn, one process; the model runs in one worker thread)."""
    uvicorn = require("uvicorn", "serve")
    uvicorn.run(make_app(runner, window_ms, max_body), host=host, port=port, log_level=log_level,
                access_log=False)  # fmt: skip
