"""Property: whatever text a run carries, none of it reaches anything exported.

For generated secrets planted in the task, the answer (and the partial output and the
structured value), a tool's command and call id, the assistant's text, a plan step, a
changed file's path, the workspace path, the label and persona, an environment value,
the diagnostic prose, a cancel reason and raised exceptions' messages, no exported span,
event or metric point carries them: not in any string the SDK holds, not in its JSON
form, not in the OTLP protobuf bytes an exporter would send. Every outcome is drawn, so
each branch of the observation (completed, error, a raising attempt, a failed start,
a cancellation, a failing teardown) is covered.

The scripted provider runs on the shared runtime in process, so the property runs many
examples cheaply; the real products with fixed planted strings are in
``test_keyless_products.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest
from dsh_subagent import (
    AgentOptions,
    AssistantText,
    CancelController,
    FileChanged,
    ParentContext,
    PlanStep,
    PlanUpdated,
    ProductFailure,
    ProductStartError,
    ProgressEvent,
    SubagentCapabilities,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
    format_product_failure,
)
from dsh_subagent.testing import Script, ScriptedProvider
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from otel_capture import Captured, capture

MARK = "QZXJKVW"
"""Every secret starts with it: no attribute value dsh exports contains it (run ids and
commit ids are lowercase hex), and seven fixed bytes make a chance match inside the
random trace ids or timestamps of the protobuf bytes negligible."""

_TOKEN_SHAPED = st.from_regex(r"[A-Za-z0-9_.\-]{0,40}", fullmatch=True)
"""Secrets a token check alone would let through: only never reading them keeps them out."""

_ANY_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
"""Any valid UTF-8 text (the service refuses requests with lone surrogates)."""

SECRETS = st.builds(lambda body: MARK + body, st.one_of(_TOKEN_SHAPED, _ANY_TEXT))

OUTCOMES = ("completed", "error", "attempt-error", "start-error", "aborted", "teardown-error")

_STOP_REASONS = {
    "completed": "completed",
    "error": "error",
    "attempt-error": "error",
    "aborted": "aborted",
    "teardown-error": "completed",
}

_FIXED_LINE = format_product_failure(ProductFailure("Codex", "turn", "deadline-exceeded"))


@contextmanager
def _planted_env(secret: str) -> Iterator[None]:
    os.environ["DSH_OTEL_PLANTED"] = secret
    try:
        yield
    finally:
        del os.environ["DSH_OTEL_PLANTED"]


def _script(secret: str, outcome: str, gate: anyio.Event) -> Script:
    base = Script(
        output=(TextBlock(text=f"the answer {secret}"),),
        structured={"answer": secret},
        partial=(TextBlock(text=f"so far {secret}"),),
        diagnostic=None,
        error_diagnostic=f"{_FIXED_LINE}\nproduct said: {secret}",
        hold_result=gate,
    )
    if outcome == "error":
        return dataclasses.replace(
            base, stop_reason="error", diagnostic=f"{_FIXED_LINE}\nproduct said: {secret}"
        )
    if outcome == "attempt-error":
        return dataclasses.replace(base, attempt_error=RuntimeError(f"attempt {secret}"))
    if outcome == "start-error":
        line = format_product_failure(ProductFailure("Codex", "start"))
        return dataclasses.replace(base, start_error=ProductStartError(f"{line}\n{secret}"))
    if outcome == "teardown-error":
        return dataclasses.replace(base, dispose_error=RuntimeError(f"teardown {secret}"))
    return base


def _progress(secret: str, workspace: str) -> list[ProgressEvent]:
    return [
        TurnStarted(),
        AssistantText(text=f"thinking {secret}", delta=True),
        ToolStarted(tool_kind="command", name="Bash", call_id=secret, command=f"echo {secret}"),
        ToolFinished(tool_kind="command", name="Bash", call_id=secret, ok=True),
        FileChanged(path=f"{workspace}/{secret}.txt"),
        PlanUpdated(steps=(PlanStep(text=f"step {secret}", status=secret),)),
        UsageUpdated(usage=Usage(input_tokens=7, output_tokens=3)),
    ]


async def _one_run(secret: str, outcome: str) -> None:
    gate = anyio.Event()
    cancel = CancelController()
    workspace = f"/work/{secret}/workspace"
    provider = ScriptedProvider(
        "helper",
        [_script(secret, outcome, gate)],
        capabilities=SubagentCapabilities(agent_options=True, persona=True),
    )
    request = SubagentStartRequest(
        prompt=(TextBlock(text=f"the task {secret}"),),
        parent=ParentContext(session_id=f"session {secret}", cwd=workspace),
        cancel=cancel.signal,
        label=f"label {secret}",
        persona=f"persona {secret}",
        agent_options=AgentOptions(model=secret),
        progress_commands=True,  # the host opted in: the command is in the progress event
    )
    async with SubagentService() as service:
        service.register_provider(provider)
        if outcome == "start-error":
            with pytest.raises(ProductStartError):
                await service.start("helper", request)
            return
        run = await service.start("helper", request)
        await provider.wait_attempts()
        handle = provider.records[0].handle
        assert handle is not None
        for event in _progress(secret, workspace):
            handle.progress.emit(event)
        if outcome == "aborted":
            cancel.cancel(f"reason {secret}")
        else:
            gate.set()
        result = await run.result()
        assert result.stop_reason == _STOP_REASONS[outcome]
        if outcome == "teardown-error":
            with pytest.raises(RuntimeError):
                await run.dispose()
        else:
            await run.dispose()


def _leaks(captured: Captured, secret: str) -> list[str]:
    """Where ``secret`` shows in what was exported, serialised three ways."""
    found = [s for s in captured.exported_strings() if secret in s]
    spans = captured.finished()
    escaped = json.dumps(secret)[1:-1]  # JSON escapes per character: a part stays a part
    found += [span.to_json() for span in spans if escaped in span.to_json()]
    metrics = captured.metrics.get_metrics_data()
    assert metrics is not None
    if escaped in metrics.to_json():
        found.append(metrics.to_json())
    planted = secret.encode()
    if planted in encode_spans(spans).SerializeToString():
        found.append("the OTLP trace request")
    if planted in encode_metrics(metrics).SerializeToString():
        found.append("the OTLP metrics request")
    return found


@given(secret=SECRETS, outcome=st.sampled_from(OUTCOMES))
def test_no_planted_text_reaches_any_exported_item(secret: str, outcome: str) -> None:
    with _planted_env(secret), capture() as captured:
        anyio.run(_one_run, secret, outcome)
        (span,) = captured.delegations()
        events = {event.name for event in span.events}
        if outcome != "start-error":  # the run saw its progress: the property is not vacuous
            assert {"dsh.turn.started", "dsh.tool.started", "dsh.plan.updated"} <= events
        assert captured.metric("dsh.delegations") is not None
        assert _leaks(captured, secret) == []
