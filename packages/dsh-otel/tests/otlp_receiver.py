"""A small OTLP/HTTP collector on loopback: it keeps every export request it receives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    endpoint: str
    requests: list[Received] = field(default_factory=list)

    def spans(self) -> list[Any]:
        found = []
        for request in self.requests:
            if request.path == "/v1/traces":
                message = ExportTraceServiceRequest.FromString(request.body)
                for resource in message.resource_spans:
                    for scope in resource.scope_spans:
                        found.extend(scope.spans)
        return found

    def metric_names(self) -> set[str]:
        names: set[str] = set()
        for request in self.requests:
            if request.path == "/v1/metrics":
                message = ExportMetricsServiceRequest.FromString(request.body)
                for resource in message.resource_metrics:
                    for scope in resource.scope_metrics:
                        names.update(metric.name for metric in scope.metrics)
        return names

    def sum_points(self, name: str) -> list[tuple[dict[str, Any], int | float]]:
        """Attributes and value of each point of the sum ``name``, as last exported.

        The SDK exports sums cumulatively, so the latest export carrying ``name`` holds
        the totals.
        """
        latest: list[tuple[dict[str, Any], int | float]] = []
        for request in self.requests:
            if request.path != "/v1/metrics":
                continue
            message = ExportMetricsServiceRequest.FromString(request.body)
            for resource in message.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if metric.name == name:
                            latest = [
                                (
                                    plain_values(point.attributes),
                                    getattr(point, point.WhichOneof("value")),
                                )
                                for point in metric.sum.data_points
                            ]
        return latest


def plain_values(attributes: Any) -> dict[str, Any]:
    """OTLP key-values as plain Python values."""
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in attributes}


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    received: list[Received] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            with lock:
                received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}", received)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
