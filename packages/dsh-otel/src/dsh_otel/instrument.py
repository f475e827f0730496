"""One span and a handful of metrics per delegation, from the run observer hook.

The span ``invoke_agent <provider>`` (kind ``CLIENT``) starts in the caller's context when
:meth:`SubagentService.start` is called, so it nests under whatever span the caller is
in (a framework's tool-call span, an Agents SDK run). It has a child span for the start
(``dsh.start``, up to publication, with a ``dsh.stage`` event as the start enters each
stage the provider reports: ``launch``, ``spawn``, ``initialize``...) and one for the
teardown (``dsh.teardown``, the first ``dispose()`` down to whole-tree exit), and it
ends when the run has both settled and been torn down, or when the start failed. Tool
activity from the progress stream becomes span events carrying the tool's kind and name
only.

Attributes and metric dimensions come from :mod:`dsh_otel.facts` only; task text, answer
text, diagnostic prose, tool input, commands, paths and environment values are never
read into telemetry.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from dsh_subagent import (
    COMPLETED,
    ERROR,
    ObservedRun,
    ProgressEvent,
    RunObservation,
    SubagentProvider,
    SubagentResult,
    SubagentStartRequest,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    add_run_observer,
)
from dsh_subagent.progress import FileChanged, PlanUpdated, UsageUpdated
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from dsh_otel.facts import error_type, failure_facts, gen_ai_provider, safe_token

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = ["Instrumentation", "instrument"]

_log = logging.getLogger("dsh_otel")

SCOPE: Final = "dsh"
"""Instrumentation scope name of the tracer and the meter."""

# Top-level import package of each built-in provider → the product kind it drives.
_PRODUCT_KINDS: Final = {
    "dsh_subagent_codex": "codex",
    "dsh_subagent_claude_code": "claude-code",
    "dsh_subagent_acp": "acp",
}

_COMMIT: Final = re.compile(r"[0-9a-f]{7,64}")

_DURATION_BUCKETS: Final = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


def _product_kind(provider: SubagentProvider | None) -> str | None:
    if provider is None:
        return None
    return _PRODUCT_KINDS.get(type(provider).__module__.split(".", 1)[0])


class _Instruments:
    """The tracer and the metric instruments one :class:`Instrumentation` records with."""

    def __init__(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.delegations = meter.create_counter(
            "dsh.delegations", unit="{delegation}", description="Delegations, by outcome."
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Time from start() to the run's settlement.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens the product reported per delegation.",
        )
        self.cost = meter.create_counter(
            "dsh.delegation.cost", unit="USD", description="Cost the product reported."
        )
        self.live = meter.create_up_down_counter(
            "dsh.delegations.live", unit="{delegation}", description="Runs published, not settled."
        )


class _Observation:
    """Follows one start request: the span tree and the metric points of one run."""

    def __init__(
        self,
        instruments: _Instruments,
        name: str,
        provider: SubagentProvider | None,
        request: SubagentStartRequest,
    ) -> None:
        self._instruments = instruments
        self._began = time.monotonic()
        agent = safe_token(name)
        kind = _product_kind(provider)
        self._dimensions: dict[str, AttributeValue] = {"gen_ai.operation.name": "invoke_agent"}
        system = gen_ai_provider(kind)
        if system is not None:
            self._dimensions["gen_ai.provider.name"] = system
        if agent is not None:
            self._dimensions["dsh.provider"] = agent
        if kind is not None:
            self._dimensions["dsh.product"] = kind
        attributes: dict[str, AttributeValue] = dict(self._dimensions)
        if agent is not None:
            attributes["gen_ai.agent.name"] = agent
        # A follow-up delegation: that it is one, never the handle (it names a session).
        attributes["dsh.continuation.resumed"] = request.resume is not None
        self._span = instruments.tracer.start_span(
            f"invoke_agent {agent}" if agent else "invoke_agent",
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        parent = trace.set_span_in_context(self._span)
        self._parent = parent
        self._start_span: Span | None = instruments.tracer.start_span("dsh.start", context=parent)
        self._teardown_span: Span | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._usage: Usage | None = None
        self._files_changed = 0
        self._tools = 0
        self._published = False
        self._settled = False
        self._torn_down = False

    # -- RunObservation ----------------------------------------------------------------

    def start_failed(self, error: BaseException) -> None:
        kind = error_type(error)
        self._end_start_span(kind)
        self._span.set_attribute("error.type", kind)
        self._span.set_status(Status(StatusCode.ERROR, kind))
        self._count({**self._dimensions, "error.type": kind})
        self._span.end()

    def stage_entered(self, stage: str) -> None:
        # A provider names its own stages: only a short identifier is recorded.
        span, token = self._start_span, safe_token(stage)
        if span is not None and token is not None:
            span.add_event("dsh.stage", {"dsh.stage": token})

    def started(self, run: ObservedRun) -> None:
        self._published = True
        self._end_start_span(None)
        self._span.set_attribute("dsh.run.id", run.run_id)
        self._instruments.live.add(1, self._dimensions)
        self._remove_listener = run.progress.add_listener(self._on_progress)

    def settled(self, result: SubagentResult | None, error: BaseException | None) -> None:
        if self._settled:
            return
        self._settled = True
        if self._remove_listener is not None:
            self._remove_listener()
        self._instruments.live.add(-1, self._dimensions)
        dimensions = dict(self._dimensions)
        span = self._span
        if result is not None:
            stop = safe_token(result.stop_reason) or "other"
            dimensions["dsh.stop_reason"] = stop
            span.set_attribute("dsh.stop_reason", stop)
            span.set_attribute("gen_ai.response.finish_reasons", (stop,))
            self._record_failure(result, dimensions)
            self._record_usage(result.usage or self._usage, dimensions)
            self._record_outcome(result)
        else:
            kind = error_type(error) if error is not None else "cancelled"
            dimensions["error.type"] = kind
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, kind))
        span.set_attribute("dsh.tools", self._tools)
        span.set_attribute("dsh.files_changed", self._files_changed)
        self._instruments.duration.record(time.monotonic() - self._began, dimensions)
        self._count(dimensions)
        self._end_if_done()

    def teardown_started(self) -> None:
        self._teardown_span = self._instruments.tracer.start_span(
            "dsh.teardown", context=self._parent
        )

    def teardown_ended(self, error: BaseException | None) -> None:
        span = self._teardown_span
        if span is not None:
            if error is not None:
                kind = error_type(error)
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, kind))
            span.end()
        self._torn_down = True
        self._end_if_done()

    # -- internals ---------------------------------------------------------------------

    def _end_start_span(self, error_kind: str | None) -> None:
        span, self._start_span = self._start_span, None
        if span is None:
            return
        if error_kind is not None:
            span.set_attribute("error.type", error_kind)
            span.set_status(Status(StatusCode.ERROR, error_kind))
        span.end()

    def _end_if_done(self) -> None:
        if self._published and self._settled and self._torn_down:
            self._span.end()

    def _count(self, dimensions: dict[str, AttributeValue]) -> None:
        self._instruments.delegations.add(1, dimensions)

    def _record_failure(
        self, result: SubagentResult, dimensions: dict[str, AttributeValue]
    ) -> None:
        facts = failure_facts(result.diagnostic)
        span = self._span
        if facts is not None:
            span.set_attribute("dsh.diagnostic.stage", facts.stage)
            if facts.category is not None:
                span.set_attribute("dsh.diagnostic.category", facts.category)
            if facts.http_status is not None:
                span.set_attribute("http.response.status_code", facts.http_status)
            if facts.exit_code is not None:
                span.set_attribute("dsh.exit.code", facts.exit_code)
            if facts.signal is not None:
                span.set_attribute("dsh.exit.signal", facts.signal)
            if facts.budget_outcome is not None:
                span.set_attribute("dsh.budget.outcome", facts.budget_outcome)
        if result.stop_reason == ERROR:
            kind = (facts.category if facts is not None else None) or ERROR
            dimensions["error.type"] = kind
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, kind))
        elif result.stop_reason == COMPLETED:
            span.set_status(Status(StatusCode.OK))

    def _record_outcome(self, result: SubagentResult) -> None:
        span = self._span
        span.set_attribute("dsh.continuation.offered", result.continuation is not None)
        changes = result.changes
        if changes is None:
            return
        # Counts and the commit id only: branch names and worktree paths stay out.
        span.set_attribute("dsh.isolation.committed", changes.commit is not None)
        if changes.commit is not None and _COMMIT.fullmatch(changes.commit):
            span.set_attribute("dsh.isolation.commit", changes.commit)
        span.set_attribute("dsh.isolation.files_changed", changes.files_changed)
        span.set_attribute("dsh.isolation.insertions", changes.insertions)
        span.set_attribute("dsh.isolation.deletions", changes.deletions)

    def _record_usage(self, usage: Usage | None, dimensions: dict[str, AttributeValue]) -> None:
        if usage is None:
            return
        span = self._span
        pairs = (
            ("gen_ai.usage.input_tokens", usage.input_tokens),
            ("gen_ai.usage.output_tokens", usage.output_tokens),
            ("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens),
            ("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens),
        )
        for key, value in pairs:
            if value is not None:
                span.set_attribute(key, value)
        if usage.cost_usd is not None:
            span.set_attribute("dsh.cost_usd", usage.cost_usd)
            self._instruments.cost.add(usage.cost_usd, dimensions)
        for token_type, value in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            if value is not None:
                self._instruments.tokens.record(
                    value, {**self._dimensions, "gen_ai.token.type": token_type}
                )

    def _on_progress(self, event: ProgressEvent) -> None:
        span = self._span
        if isinstance(event, ToolStarted | ToolFinished):
            attributes: dict[str, AttributeValue] = {
                "dsh.tool.kind": safe_token(event.tool_kind) or "other"
            }
            tool = safe_token(event.name)
            if tool is not None:
                attributes["dsh.tool.name"] = tool
            if isinstance(event, ToolStarted):
                self._tools += 1
                span.add_event("dsh.tool.started", attributes)
            else:
                if event.ok is not None:
                    attributes["dsh.tool.ok"] = event.ok
                span.add_event("dsh.tool.finished", attributes)
        elif isinstance(event, TurnStarted):
            span.add_event("dsh.turn.started")
        elif isinstance(event, FileChanged):
            self._files_changed += 1
        elif isinstance(event, PlanUpdated):
            span.add_event("dsh.plan.updated", {"dsh.plan.steps": len(event.steps)})
        elif isinstance(event, UsageUpdated):
            self._usage = event.usage


class _Observer:
    def __init__(self, instruments: _Instruments) -> None:
        self._instruments = instruments

    def start_requested(
        self, name: str, provider: SubagentProvider | None, request: SubagentStartRequest
    ) -> RunObservation | None:
        return _Observation(self._instruments, name, provider, request)


class Instrumentation:
    """An active instrumentation; :meth:`close` (or leaving ``with``) turns it off.

    Runs already started keep reporting until they end.
    """

    def __init__(self, remove: Callable[[], None]) -> None:
        self._remove = remove

    def close(self) -> None:
        """Stop observing new runs (idempotent)."""
        self._remove()

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> Instrumentation:
    """Trace and measure every delegation started in this process from now on.

    Args:
        tracer_provider: Where spans go (default: the global tracer provider, which is
            a no-op until the host configures the OpenTelemetry SDK).
        meter_provider: Where metrics go (default: the global meter provider).

    Returns:
        The active instrumentation; close it to stop.
    """
    observer = _Observer(_Instruments(tracer_provider, meter_provider))
    return Instrumentation(add_run_observer(observer))
