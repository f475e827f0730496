"""An in-memory OpenTelemetry SDK around one instrumentation, and what it exported."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import dsh_otel
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Captured:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def delegations(self) -> list[ReadableSpan]:
        # By scope: a framework's own agent span is also named "invoke_agent ...".
        return [
            s
            for s in self.finished()
            if s.name.startswith("invoke_agent")
            and s.instrumentation_scope is not None
            and s.instrumentation_scope.name == dsh_otel.SCOPE
        ]

    def children(self, parent: ReadableSpan) -> dict[str, ReadableSpan]:
        assert parent.context is not None
        return {
            s.name: s
            for s in self.finished()
            if s.parent is not None and s.parent.span_id == parent.context.span_id
        }

    def metric(self, name: str) -> Metric | None:
        data = self.metrics.get_metrics_data()
        if data is None:
            return None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        return metric
        return None

    def sum_points(self, name: str) -> list[NumberDataPoint]:
        metric = self.metric(name)
        assert metric is not None, f"no metric {name}"
        return [p for p in metric.data.data_points if isinstance(p, NumberDataPoint)]

    def exported_strings(self) -> list[str]:
        """Every string any exported span, event or metric point carries."""
        out: list[str] = []

        def values(attributes: object) -> None:
            if not attributes:
                return
            assert isinstance(attributes, dict) or hasattr(attributes, "items")
            for key, value in attributes.items():
                out.append(str(key))
                out.append(str(value))

        for span in self.finished():
            out.append(span.name)
            if span.status.description:
                out.append(span.status.description)
            values(span.attributes)
            for event in span.events:
                out.append(event.name)
                values(event.attributes)
            values(span.resource.attributes)
        data = self.metrics.get_metrics_data()
        if data is not None:
            for resource in data.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        out.append(metric.name)
                        for point in metric.data.data_points:
                            values(point.attributes)
        return out


@contextmanager
def capture() -> Iterator[Captured]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    with dsh_otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider):
        yield Captured(spans, reader, tracer_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()
