"""Prometheus metrics of one server, in a registry of its own (two apps in one process do not mix)."""

from __future__ import annotations

#: latency buckets (seconds): 1 ms to 10 s
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """Requests by route and status, infer latency, rows and requests per run, and errors by kind."""

    def __init__(self, model: str, max_batch: int) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.model = model
        self.requests = Counter(
            "pathweave_requests", "HTTP requests answered", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "pathweave_infer_latency_seconds", "Infer request latency, body read to answer", ["model"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        sizes = sorted({1, 2, 4, 8, 16, 32, 64, max_batch})
        self.batch_rows = Histogram(
            "pathweave_batch_rows",
            "Rows (dim 0) per model run",
            ["model"],
            buckets=sizes,
            registry=self.registry,
        )
        self.batch_requests = Histogram(
            "pathweave_batch_requests",
            "Requests per model run",
            ["model"],
            buckets=sizes,
            registry=self.registry,
        )
        self.errors = Counter(
            "pathweave_errors", "Failed infer requests: 'client' (4xx) or 'model' (5xx)", ["model", "kind"],
            registry=self.registry,
        )  # fmt: skip

    def batch(self, rows: int, requests: int) -> None:
        self.batch_rows.labels(self.model).observe(rows)
        self.batch_requests.labels(self.model).observe(requests)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def answered(self, route: str, status: int, seconds: float | None = None) -> None:
        self.requests.labels(route, str(status)).inc()
        if route == "infer":
            if seconds is not None and status < 400:
                self.latency.labels(self.model).observe(seconds)
            if status >= 400:
                self.errors.labels(self.model, "client" if status < 500 else "model").inc()
