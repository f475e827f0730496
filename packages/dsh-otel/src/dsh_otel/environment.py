"""Export over OTLP/HTTP when the standard OpenTelemetry environment variables say so.

This is what the ``dsh`` command uses (and what a script can use): with
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the per-signal ``…_TRACES_ENDPOINT`` /
``…_METRICS_ENDPOINT``) set and ``OTEL_SDK_DISABLED`` not ``true``, it builds an SDK tracer
and meter provider with OTLP/HTTP exporters, which read the rest of the standard variables
themselves (headers, timeouts, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), and
instruments every delegation. The providers are private to the returned handle (the
process's global providers are left alone); closing it flushes what is pending.

It needs the ``export`` extra (``pip install 'dsh-otel[export]'``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from dsh_otel.instrument import Instrumentation, instrument

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

__all__ = ["EnvironmentExport", "configure_from_environment", "export_requested"]

_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
_TRACES: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_METRICS: Final = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
DEFAULT_SERVICE_NAME: Final = "dsh"


@dataclass(frozen=True)
class _Signals:
    traces: bool
    metrics: bool


def _signals(environ: Mapping[str, str]) -> _Signals:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return _Signals(False, False)
    common = bool(environ.get(_ENDPOINT, "").strip())
    return _Signals(
        traces=common or bool(environ.get(_TRACES, "").strip()),
        metrics=common or bool(environ.get(_METRICS, "").strip()),
    )


def export_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for OTLP export of traces or metrics."""
    signals = _signals(os.environ if environ is None else environ)
    return signals.traces or signals.metrics


class EnvironmentExport:
    """Instrumentation exporting through SDK providers built from the environment."""

    def __init__(
        self,
        instrumentation: Instrumentation,
        tracer_provider: SdkTracerProvider | None,
        meter_provider: SdkMeterProvider | None,
    ) -> None:
        self.instrumentation = instrumentation
        self.tracer_provider = tracer_provider
        """The SDK tracer provider spans go to (``None`` when traces are not exported)."""
        self.meter_provider = meter_provider
        """The SDK meter provider metrics go to (``None`` when metrics are not exported)."""
        self._closed = False

    def close(self) -> None:
        """Stop instrumenting, flush and shut the exporters down (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.instrumentation.close()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def configure_from_environment() -> EnvironmentExport | None:
    """Instrument with OTLP/HTTP exporters when ``os.environ`` asks for it, else ``None``.

    Raises:
        ImportError: The ``export`` extra (the OpenTelemetry SDK and its OTLP/HTTP
            exporter) is not installed.
    """
    signals = _signals(os.environ)
    if not (signals.traces or signals.metrics):
        return None
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.trace import NoOpTracerProvider

    resource = Resource.create({"service.name": DEFAULT_SERVICE_NAME}).merge(
        OTELResourceDetector().detect()
    )
    tracer_provider = _tracer_provider(resource) if signals.traces else None
    meter_provider = _meter_provider(resource) if signals.metrics else None
    # A signal not asked for goes nowhere (not to whatever the global provider is).
    instrumentation = instrument(
        tracer_provider=tracer_provider or NoOpTracerProvider(),
        meter_provider=meter_provider or NoOpMeterProvider(),
    )
    return EnvironmentExport(instrumentation, tracer_provider, meter_provider)


def _tracer_provider(resource: Resource) -> SdkTracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _meter_provider(resource: Resource) -> SdkMeterProvider:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return MeterProvider(resource=resource, metric_readers=[reader])
