"""dsh-otel: OpenTelemetry traces and metrics for every dsh delegation.

``dsh_otel.instrument()`` turns it on for every run any :class:`~dsh_subagent.SubagentService`
in the process starts; :func:`configure_from_environment` does the same with OTLP/HTTP
exporters when the standard OpenTelemetry environment variables ask for export. What is
recorded, and what never is: docs/observability.md.
"""

import logging

from dsh_otel.environment import EnvironmentExport, configure_from_environment, export_requested
from dsh_otel.instrument import SCOPE, Instrumentation, instrument

# Records reach the host's own handlers only, never Python's last-resort stderr output.
logging.getLogger("dsh_otel").addHandler(logging.NullHandler())

__all__ = [
    "SCOPE",
    "EnvironmentExport",
    "Instrumentation",
    "configure_from_environment",
    "export_requested",
    "instrument",
]
