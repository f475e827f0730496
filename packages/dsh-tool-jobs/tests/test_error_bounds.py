"""``output_limit_bytes`` bounds a job's failure texts too, as the model sees them."""

from __future__ import annotations

import pytest
from dsh_subagent import CancelController, ParentContext
from dsh_subagent.tool import ToolCallContext, ToolResult, run_tool_call
from dsh_tool_jobs import JobOutcome, JobRegistry, JobStart, job_tools
from dsh_tool_jobs.render import RESULT_TRUNCATED, TOOL_ERROR_PREFIX, bound_error
from dsh_tool_jobs.testing import ScriptedProducer
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.anyio

LIMIT = 64
OWNER = ParentContext(session_id="s1", cwd="/tmp")
LONG = "x" * 1300
MARKER = "\n" + RESULT_TRUNCATED.rstrip("\n")


class _FailingReads(ScriptedProducer):
    """A stream job whose ``read_output`` raises with a long message."""

    def __init__(self) -> None:
        super().__init__(stream=True)

    def _read(self) -> str:
        raise RuntimeError(LONG)


async def _call(registry: JobRegistry, tool: str, args: dict[str, object]) -> ToolResult:
    tools = {t.name: t for t in job_tools(registry)}
    context = ToolCallContext(parent=OWNER, cancel=CancelController().signal)
    return await run_tool_call(tools[tool], args, context)


def _assert_bounded_error(result: ToolResult, head: str) -> None:
    assert result.is_error
    assert len(result.text.encode()) <= LIMIT
    assert result.text.startswith(TOOL_ERROR_PREFIX + head)
    assert result.text.endswith(MARKER)


async def test_a_raising_read_output_gives_a_job_output_error_within_the_limit() -> None:
    producer = _FailingReads()
    async with JobRegistry() as registry:
        job = registry.start(JobStart("bash", "tail -f", OWNER, producer.run, LIMIT))
        result = await _call(registry, "job_output", {"job_id": job})
        _assert_bounded_error(result, "RuntimeError: xxx")
        producer.finish(JobOutcome(status="completed"))


async def test_a_raising_cancel_gives_a_job_kill_error_within_the_limit() -> None:
    producer = ScriptedProducer(cancel_raises=RuntimeError(LONG))
    async with JobRegistry() as registry:
        job = registry.start(JobStart("bash", "sleep", OWNER, producer.run, LIMIT))
        result = await _call(registry, "job_kill", {"job_id": job})
        _assert_bounded_error(result, f"could not cancel job {job}: Runtime")
        assert registry.get(job, OWNER).status == "running"  # the failed cancel changed nothing
        producer.cancel_raises = None
        producer.finish(JobOutcome(status="completed"))


@pytest.mark.parametrize(
    ("tool", "args", "head"),
    [
        ("job_output", {"wait": True, "timeout_ms": "z" * 500}, "invalid timeout_ms: "),
        ("job_output", {"wait": True, "timeout_ms": -1e300}, "invalid wait timeout: "),
        ("job_output", {"w" * 300: 1}, "unexpected argument www"),
        ("job_kill", {"reason": ["r"] * 300}, "invalid reason: "),
    ],
)
async def test_argument_errors_about_a_known_job_are_within_its_limit(
    tool: str, args: dict[str, object], head: str
) -> None:
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = registry.start(JobStart("bash", "sleep", OWNER, producer.run, LIMIT))
        result = await _call(registry, tool, {"job_id": job, **args})
        _assert_bounded_error(result, head)
        producer.finish(JobOutcome(status="completed"))


async def test_without_a_limit_the_failure_text_is_complete() -> None:
    producer = ScriptedProducer(cancel_raises=RuntimeError(LONG))
    async with JobRegistry() as registry:
        job = registry.start(JobStart("bash", "sleep", OWNER, producer.run))
        result = await _call(registry, "job_kill", {"job_id": job})
        assert result.text == f"Error: could not cancel job {job}: RuntimeError: {LONG}"
        producer.cancel_raises = None
        producer.finish(JobOutcome(status="completed"))


async def test_an_unknown_job_has_no_limit_to_apply() -> None:
    # Deliberate: the limit belongs to a job; a call naming no visible job has none.
    async with JobRegistry() as registry:
        result = await _call(registry, "job_output", {"job_id": "bash-" + "9" * 200})
    assert result.is_error
    assert "9" * 200 in result.text


@given(st.text(), st.integers(min_value=len(TOOL_ERROR_PREFIX), max_value=400))
def test_bound_error_fits_the_model_text_and_keeps_the_head(message: str, limit: int) -> None:
    bounded = bound_error(message, limit)
    assert len((TOOL_ERROR_PREFIX + bounded).encode()) <= limit
    if len((TOOL_ERROR_PREFIX + message).encode()) <= limit:
        assert bounded == message
    else:
        head = bounded.removesuffix(MARKER)
        assert message.startswith(head)  # a whole-code-point prefix, never a split one


@given(st.text(min_size=1), st.integers(min_value=1, max_value=len(TOOL_ERROR_PREFIX)))
def test_below_the_prefix_the_message_is_empty(message: str, limit: int) -> None:
    # Deliberate: the tool protocol's "Error: " prefix is the floor the bound can reach.
    assert bound_error(message, limit) == ""
