"""The span tree and metrics of one delegation, against the scripted provider double.

The double runs on the shared runtime (real settlement, cancellation and disposal), so
these cover every branch of the observation; the real products are in
``test_keyless_products.py``.
"""

from __future__ import annotations

import dataclasses
import gc

import anyio
import pytest
from dsh_otel import instrument
from dsh_subagent import (
    CancelController,
    ParentContext,
    ProductFailure,
    ProductStartError,
    SubagentError,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    add_run_observer,
    delegate,
    format_product_failure,
)
from dsh_subagent.testing import Script, ScriptedProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from otel_capture import Captured

pytestmark = pytest.mark.anyio


async def test_a_completed_run_is_one_client_span_with_start_and_teardown_children(
    captured: Captured,
) -> None:
    result = await delegate(ScriptedProvider("helper", [Script.answer("done")]), "t", cwd=".")
    assert result.stop_reason == "completed"
    (span,) = captured.delegations()
    assert span.name == "invoke_agent helper"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.OK
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "helper"
    assert attributes["dsh.provider"] == "helper"
    assert attributes["dsh.stop_reason"] == "completed"
    assert "gen_ai.provider.name" not in attributes  # not a product dsh knows the vendor of
    assert set(captured.children(span)) == {"dsh.start", "dsh.teardown"}
    (count,) = captured.sum_points("dsh.delegations")
    assert count.value == 1
    assert dict(count.attributes or {})["dsh.stop_reason"] == "completed"
    (live,) = captured.sum_points("dsh.delegations.live")
    assert live.value == 0
    assert captured.metric("gen_ai.client.operation.duration") is not None


async def test_the_span_is_a_child_of_the_callers_current_span(captured: Captured) -> None:
    tracer = captured.tracer_provider.get_tracer("host")
    with tracer.start_as_current_span("tool call") as host:
        await delegate(ScriptedProvider("helper"), "t", cwd=".")
    (span,) = captured.delegations()
    assert span.parent is not None
    assert span.parent.span_id == host.get_span_context().span_id


async def test_an_error_carries_the_fixed_line_facts_and_never_its_text(
    captured: Captured,
) -> None:
    line = format_product_failure(
        ProductFailure("Codex", "turn", "deadline-exceeded", exit_code=None, signal="SIGKILL")
    )
    script = Script(stop_reason="error", diagnostic=line + "\nproduct said: SECRET-PROSE")
    result = await delegate(ScriptedProvider("codex", [script]), "t", cwd=".")
    assert result.stop_reason == "error"
    (span,) = captured.delegations()
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "deadline-exceeded"
    assert attributes["error.type"] == "deadline-exceeded"
    assert attributes["dsh.diagnostic.stage"] == "turn"
    assert attributes["dsh.diagnostic.category"] == "deadline-exceeded"
    assert attributes["dsh.budget.outcome"] == "deadline-exceeded"
    assert attributes["dsh.exit.signal"] == "SIGKILL"
    assert not any("SECRET-PROSE" in s for s in captured.exported_strings())


async def test_free_text_that_is_not_the_fixed_line_yields_no_facts(captured: Captured) -> None:
    script = Script(stop_reason="error", diagnostic="Product subagent failure (stage: x)")
    await delegate(ScriptedProvider("p", [script]), "t", cwd=".")
    (span,) = captured.delegations()
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "error"
    assert not any(key.startswith("dsh.diagnostic") for key in attributes)


async def test_a_start_failure_ends_the_span_with_the_error_code(captured: Captured) -> None:
    failing = Script(start_error=ProductStartError("Product subagent failure (product: X)"))
    with pytest.raises(ProductStartError):
        await delegate(ScriptedProvider("p", [failing]), "t", cwd=".")
    (span,) = captured.delegations()
    assert dict(span.attributes or {})["error.type"] == "PRODUCT_START_FAILED"
    assert span.status.status_code is StatusCode.ERROR
    start = captured.children(span)["dsh.start"]
    assert start.status.status_code is StatusCode.ERROR
    (count,) = captured.sum_points("dsh.delegations")
    assert dict(count.attributes or {})["error.type"] == "PRODUCT_START_FAILED"


async def test_a_refused_start_is_recorded_too(captured: Captured) -> None:
    async with SubagentService() as service:
        request = SubagentStartRequest(
            prompt=(TextBlock(text="t"),), parent=ParentContext(session_id="s", cwd="/")
        )
        with pytest.raises(SubagentError):
            await service.start("nobody", request)
    (span,) = captured.delegations()
    assert dict(span.attributes or {})["error.type"] == "NO_PROVIDER"


async def test_a_cancelled_run_is_aborted_not_an_error(captured: Captured) -> None:
    cancel = CancelController()
    script = dataclasses.replace(Script.answer("x"), hold_result=anyio.Event())
    async with SubagentService() as service:
        service.register_provider(ScriptedProvider("p", [script]))
        request = SubagentStartRequest(
            prompt=(TextBlock(text="t"),),
            parent=ParentContext(session_id="s", cwd="/"),
            cancel=cancel.signal,
        )
        run = await service.start("p", request)
        cancel.cancel("stop")
        result = await run.result()
        await run.dispose()
    assert result.stop_reason == "aborted"
    (span,) = captured.delegations()
    assert dict(span.attributes or {})["dsh.stop_reason"] == "aborted"
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in dict(span.attributes or {})


async def test_a_teardown_failure_marks_the_teardown_span(captured: Captured) -> None:
    script = dataclasses.replace(Script.answer("x"), dispose_error=RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        await delegate(ScriptedProvider("p", [script]), "t", cwd=".")
    (span,) = captured.delegations()
    teardown = captured.children(span)["dsh.teardown"]
    assert teardown.status.status_code is StatusCode.ERROR
    assert "boom" not in str(teardown.attributes) + str(teardown.status.description)


async def test_a_failing_observer_never_changes_a_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def start_requested(self, *args: object) -> None:
            raise RuntimeError("observer bug")

    remove = add_run_observer(Broken())
    try:
        result = await delegate(ScriptedProvider("p"), "t", cwd=".")
    finally:
        remove()
    assert result.stop_reason == "completed"
    assert "a run observer raised" in caplog.text


async def test_closing_the_instrumentation_stops_new_spans() -> None:
    provider = TracerProvider()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with instrument(tracer_provider=provider):
        await delegate(ScriptedProvider("p"), "t", cwd=".")
    await delegate(ScriptedProvider("p"), "t", cwd=".")
    gc.collect()
    assert [s.name for s in exporter.get_finished_spans()].count("invoke_agent p") == 1
