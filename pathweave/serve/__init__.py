"""``pathweave serve``: a pathweave model behind an HTTP server speaking the Open Inference Protocol.

``app(source)`` is the FastAPI app (serve it with any ASGI server); ``pathweave serve model.pw`` runs it
on uvicorn; ``pathweave.serve.ray`` deploys replicas on Ray Serve. docs/serve.md has the details. The
server libraries are the optional extra ``serve`` and are imported only when serving.
"""

from __future__ import annotations

from typing import Any


def app(source: Any, *inputs: Any, name: str | None = None, max_batch: int = 1, batch_window_ms: float = 2.0,
        max_body: int | None = None, strategy: str = "auto", co_execute: int = 0) -> Any:  # fmt: skip
    """The FastAPI app serving ``source``: a ``.pw`` plan, a pathweave callable, or a model ``optimize``
    takes (optimized dynamic in batch when ``max_batch > 1``; ``co_execute=k``: up to k requests of a
    fixed-shape tiles plan run together); see ``pathweave.serve.model``."""
    from pathweave.serve.http import MAX_BODY, make_app
    from pathweave.serve.model import load_runner

    runner = load_runner(
        source, *inputs, name=name, max_batch=max_batch, strategy=strategy, co_execute=co_execute
    )
    return make_app(runner, batch_window_ms, MAX_BODY if max_body is None else max_body)
