"""OpenTelemetry export for ``dsh run``, ``dsh batch`` and ``dsh mcp``, when asked for.

The standard variables decide: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or a per-signal
``…_TRACES_ENDPOINT`` / ``…_METRICS_ENDPOINT``) set and ``OTEL_SDK_DISABLED`` not
``true``, every delegation of the command is traced and measured through dsh-otel and
exported over OTLP/HTTP; what is pending is flushed when the command ends. Otherwise no
OpenTelemetry package is imported at all. Without the ``otel`` extra installed, one
warning line says so and the command runs unexported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final, TextIO

__all__ = ["OTEL_MISSING", "export_requested", "exporting"]

_ENDPOINTS: Final = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)

OTEL_MISSING: Final = (
    "dsh: warning: the OTEL_EXPORTER_OTLP_* variables ask for telemetry export, but "
    "dsh-otel is not installed (pip install 'dsh-cli[otel]'); nothing is exported"
)


def export_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard OpenTelemetry variables ask for OTLP export."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in _ENDPOINTS)


@contextmanager
def exporting(err: TextIO) -> Iterator[None]:
    """Instrument and export for the ``with`` body when the environment asks for it."""
    if not export_requested():
        yield
        return
    try:
        from dsh_otel import configure_from_environment
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in {"dsh_otel", "opentelemetry"}:
            raise
        print(OTEL_MISSING, file=err)
        yield
        return
    export = configure_from_environment()
    try:
        yield
    finally:
        if export is not None:
            export.close()
