"""``pathweave.serve.ray``: N replicas of a model behind Ray Serve's HTTP proxy, each one ``pathweave serve``.

Each replica is a Ray actor that loads the model itself (a ``.pw`` path every node can read, or a model
``optimize`` takes, optimized on the replica) and answers with the same FastAPI app as ``pathweave
serve``: the same KServe v2 routes, batching and error answers; Ray's proxy spreads the requests over the
replicas. Every answer carries a ``pathweave-replica`` header naming the replica that gave it, and
``/metrics`` is per replica (the proxy sends it to one of them). docs/serve.md says how to run it on a
cluster. Ray is the optional extra ``ray``, imported only here.
"""

from __future__ import annotations

from typing import Any

from pathweave.errors import require

REPLICA_HEADER = "pathweave-replica"


class _Tagged:
    """ASGI wrapper: every answer names the replica that gave it."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app, self.replica = app, replica.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        async def tagged(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (REPLICA_HEADER.encode(), self.replica)],
                }
            await send(message)

        await self.app(scope, receive, tagged if scope["type"] == "http" else send)


def _replica_class() -> type:
    """The deployment's class, defined on first use so that importing this module needs no Ray."""
    serve = require("ray.serve", "ray")

    @serve.ingress()
    class PathweaveReplica:
        def __init__(self, source: str, settings: dict[str, Any]) -> None:
            from pathweave.serve.model import load_runner

            self.settings = dict(settings)
            self.runner = load_runner(
                source, name=self.settings.pop("name"), max_batch=self.settings.pop("max_batch"),
                strategy=self.settings.pop("strategy"),
            )  # fmt: skip

        def __serve_build_asgi_app__(self) -> Any:  # noqa: N802 - Ray Serve's hook name
            from pathweave.serve.http import make_app

            replica = serve.get_replica_context().replica_id.unique_id
            return _Tagged(make_app(self.runner, **self.settings), replica)

    return PathweaveReplica


def deployment(
    source: str,
    *,
    replicas: int = 2,
    name: str | None = None,
    max_batch: int = 1,
    batch_window_ms: float = 2.0,
    max_body: int | None = None,
    strategy: str = "auto",
    actor_options: dict[str, Any] | None = None,
) -> Any:
    """The Ray Serve application: ``replicas`` copies of ``source`` (a ``.pw`` path readable on every
    node, or a zoo name / ``.pt2`` / ``hf:`` model optimized on each replica). ``actor_options`` are Ray's
    (e.g. ``{"num_cpus": 16}`` to give each replica a machine's cores); pass it to ``ray.serve.run``."""
    serve = require("ray.serve", "ray")
    from pathweave.serve.http import MAX_BODY

    settings = {"name": name, "max_batch": max_batch, "strategy": strategy, "window_ms": batch_window_ms,
                "max_body": MAX_BODY if max_body is None else max_body}  # fmt: skip
    options = {"num_cpus": 1} if actor_options is None else actor_options
    replica = serve.deployment(
        _replica_class(), name="pathweave", num_replicas=replicas, ray_actor_options=options
    )
    return replica.bind(str(source), settings)


def run(
    source: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    app_name: str = "pathweave",
    proxy_location: str | None = None,
    **options: Any,
) -> Any:
    """Start Ray Serve's proxy on ``host:port`` (Ray must be running: ``ray.init()`` or ``ray start``) and
    deploy ``deployment(source, **options)`` at ``/``; returns its handle once every replica is up.
    ``proxy_location="EveryNode"`` puts a proxy on every node of a cluster (Ray's ``serve.start``)."""
    serve = require("ray.serve", "ray")
    serve.start(proxy_location=proxy_location, http_options={"host": host, "port": port})
    return serve.run(deployment(source, **options), name=app_name, route_prefix="/")
