"""job_output / job_list / job_kill texts, values and argument errors (§4.6, §6.5)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest
from dsh_subagent import CancelController, ParentContext
from dsh_tool_jobs import JobOutcome, JobRegistry, JobStart
from dsh_tool_jobs.config import JobsToolsConfig
from dsh_tool_jobs.controls import job_kill, job_list, job_output
from dsh_tool_jobs.testing import ScriptedProducer

pytestmark = pytest.mark.anyio

CONFIG = JobsToolsConfig()


def parent(session: str = "s1") -> ParentContext:
    return ParentContext(session_id=session, cwd="/tmp")


async def until(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not predicate():
            await anyio.lowlevel.checkpoint()


def start(
    registry: JobRegistry,
    producer: ScriptedProducer,
    owner: ParentContext | None,
    limit: int | None = None,
) -> str:
    return registry.start(JobStart("bash", "pnpm test", owner, producer.run, limit))


async def test_job_output_renders_stream_deltas_and_the_status_line() -> None:
    owner = parent()
    producer = ScriptedProducer(stream=True)
    async with JobRegistry() as registry:
        job = start(registry, producer, owner)
        producer.emit("line one")
        reply = await job_output(registry, CONFIG, {"job_id": job}, owner)
        assert reply.text == "line one\n[status: running]"
        assert not reply.is_error
        reply = await job_output(registry, CONFIG, {"job_id": job}, owner)
        assert reply.text == "(no new output)\n[status: running]"
        assert isinstance(reply.value, dict)
        assert reply.value["text"] == ""
        job_value = reply.value["job"]
        assert isinstance(job_value, dict)
        assert set(job_value) == {"id", "kind", "label", "status", "started_at"}


async def test_job_output_final_output_job_and_idempotent_terminal_reads() -> None:
    owner = parent()
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = start(registry, producer, owner)
        assert (await job_output(registry, CONFIG, {"job_id": job}, owner)).text == (
            "(no new output)\n[status: running]"
        )
        producer.finish(JobOutcome(status="completed", output="the answer"))
        for _ in range(2):
            reply = await job_output(registry, CONFIG, {"job_id": job, "wait": True}, owner)
            assert reply.text == "the answer\n[status: completed]"
        assert isinstance(reply.value, dict)
        job_value = reply.value["job"]
        assert isinstance(job_value, dict)
        assert "finished_at" in job_value
        assert "reported" not in job_value
        assert "owner_session" not in job_value


async def test_job_output_wait_is_clamped_to_the_cap_and_a_timeout_is_not_an_error() -> None:
    owner = parent()
    config = JobsToolsConfig(wait_timeout_ms=1, max_wait_timeout_ms=5)
    async with JobRegistry() as registry:
        job = start(registry, ScriptedProducer(), owner)
        with anyio.fail_after(5):
            reply = await job_output(
                registry, config, {"job_id": job, "wait": True, "timeout_ms": 10**9}, owner
            )
            assert (reply.text, reply.is_error) == ("(no new output)\n[status: running]", False)
            reply = await job_output(registry, config, {"job_id": job, "wait": True}, owner)
            assert reply.text.endswith("[status: running]")


@pytest.mark.parametrize("bad", [0, -5, float("nan")])
async def test_job_output_non_positive_timeout_fails_in_the_registry(bad: float) -> None:
    async with JobRegistry() as registry:
        job = start(registry, ScriptedProducer(), None)
        reply = await job_output(
            registry, CONFIG, {"job_id": job, "wait": True, "timeout_ms": bad}, None
        )
        assert reply.is_error
        assert reply.text.startswith("invalid wait timeout: expected a positive number")
        # Without wait the timeout is ignored.
        reply = await job_output(registry, CONFIG, {"job_id": job, "timeout_ms": bad}, None)
        assert not reply.is_error


async def test_job_output_wait_uses_the_tool_call_signal() -> None:
    owner = parent()
    controller = CancelController()
    async with JobRegistry() as registry:
        job = start(registry, ScriptedProducer(), owner)
        controller.cancel()
        reply = await job_output(
            registry, CONFIG, {"job_id": job, "wait": True}, owner, controller.signal
        )
        assert (reply.text, reply.is_error) == ("wait aborted", True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "invalid job_id: expected a non-empty string, got null"),
        ({"job_id": ""}, 'invalid job_id: expected a non-empty string, got ""'),
        ({"job_id": 7}, "invalid job_id: expected a non-empty string, got 7"),
        ({"job_id": "bash-1", "wait": "yes"}, 'invalid wait: expected a boolean, got "yes"'),
        (
            {"job_id": "bash-1", "wait": True, "timeout_ms": "5"},
            'invalid timeout_ms: expected a number, got "5"',
        ),
        ({"job_id": "bash-1", "extra": 1}, "unexpected argument extra"),
        ({"job_id": "bash-99"}, "unknown job bash-99"),
    ],
)
async def test_job_output_argument_errors(args: dict[str, object], message: str) -> None:
    async with JobRegistry() as registry:
        start(registry, ScriptedProducer(), None)
        reply = await job_output(registry, CONFIG, args, None)
        assert (reply.text, reply.is_error) == (message, True)


async def test_job_output_foreign_job_is_an_error() -> None:
    async with JobRegistry() as registry:
        job = start(registry, ScriptedProducer(), parent("a"))
        reply = await job_output(registry, CONFIG, {"job_id": job}, parent("b"))
        assert (reply.text, reply.is_error) == (f"job {job} belongs to another session", True)


async def test_job_output_is_bounded_by_the_job_limit() -> None:
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = start(registry, producer, None, limit=42)
        producer.finish(JobOutcome(status="completed", output="x" * 100 + "END"))
        reply = await job_output(registry, CONFIG, {"job_id": job, "wait": True}, None)
        assert reply.text == "[output truncated]\nEND\n[status: completed]"
        assert len(reply.text.encode()) == 42


async def test_job_list_lines_empty_case_and_visibility() -> None:
    owner = parent("mine")
    async with JobRegistry() as registry:
        assert job_list(registry, {}, owner).text == "(no background jobs)"
        start(registry, ScriptedProducer(), owner)
        registry.start(JobStart("subagent", "review the diff", None, ScriptedProducer().run))
        reply = job_list(registry, {}, owner)
        assert reply.text == (
            "bash-1 [bash] running — pnpm test\nsubagent-1 [subagent] running — review the diff"
        )
        assert isinstance(reply.value, list)
        assert len(reply.value) == 2
        assert job_list(registry, {}, parent("other")).text == (
            "subagent-1 [subagent] running — review the diff"
        )
        assert job_list(registry, {"x": 1}, owner).is_error


async def test_job_kill_requests_then_reports_already_finished() -> None:
    owner = parent()
    producer = ScriptedProducer(cancel_settles=None, stream=True)
    async with JobRegistry() as registry:
        job = start(registry, producer, owner)
        producer.emit("unread")
        reply = job_kill(registry, {"job_id": job, "reason": "superseded"}, owner)
        assert reply.text == f"requested cancellation of job {job}"
        assert reply.value == {
            "outcome": "cancellation-requested",
            "job": {
                "id": job,
                "kind": "bash",
                "label": "pnpm test",
                "status": "stopping",
                "started_at": registry.get(job, owner).started_at,
            },
        }
        assert producer.cancels == ["superseded"]
        producer.finish(JobOutcome(status="completed", detail="exit code: 0"))
        await until(lambda: registry.get(job, owner).terminal)
        reply = job_kill(registry, {"job_id": job}, owner)
        assert reply.text == f"job {job} had already finished [status: completed, exit code: 0]"
        # job_kill describes with get(): unread output is still there.
        assert registry.read(job, owner) == "unread"


async def test_job_kill_argument_errors_and_a_raising_cancel() -> None:
    owner = parent()
    producer = ScriptedProducer(cancel_raises=RuntimeError("stuck"))
    async with JobRegistry() as registry:
        job = start(registry, producer, owner)
        assert job_kill(registry, {"job_id": ""}, owner).text == (
            'invalid job_id: expected a non-empty string, got ""'
        )
        assert job_kill(registry, {"job_id": job, "reason": 3}, owner).text == (
            "invalid reason: expected a string, got 3"
        )
        reply = job_kill(registry, {"job_id": job}, owner)
        assert (reply.text, reply.is_error) == (
            f"could not cancel job {job}: RuntimeError: stuck",
            True,
        )
        assert registry.get(job, owner).status == "running"
        producer.cancel_raises = None
        producer.finish(JobOutcome(status="completed"))


async def test_job_kill_without_reason_forwards_none() -> None:
    owner = parent()
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = start(registry, producer, owner)
        job_kill(registry, {"job_id": job, "reason": ""}, owner)
        assert producer.cancels == [None]
