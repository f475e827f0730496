"""JobRegistry rules (reference-core §4.1–4.5, checklist §6.4)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pydantic
import pytest
from dsh_subagent import ParentContext
from dsh_tool_jobs import (
    JobError,
    JobErrorCode,
    JobOutcome,
    JobRegistry,
    JobSnapshot,
    JobStart,
    validate_job_limit,
)
from dsh_tool_jobs.testing import ScriptedProducer

pytestmark = pytest.mark.anyio

Notices = list[tuple[ParentContext, str]]


def parent(session: str = "s1") -> ParentContext:
    return ParentContext(session_id=session, cwd="/tmp")


def spec(
    producer: ScriptedProducer,
    owner: ParentContext | None,
    *,
    kind: str = "bash",
    label: str = "pnpm test",
    limit: int | None = None,
) -> JobStart:
    return JobStart(kind=kind, label=label, owner=owner, run=producer.run, output_limit_bytes=limit)


async def until(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not predicate():
            await anyio.lowlevel.checkpoint()


async def settled(registry: JobRegistry, job_id: str, caller: ParentContext | None) -> JobSnapshot:
    await until(lambda: registry.get(job_id, caller).terminal)
    return registry.get(job_id, caller)


def registry_with_notices(**kwargs: int) -> tuple[JobRegistry, Notices]:
    notices: Notices = []
    return JobRegistry(notice_sink=lambda o, t: notices.append((o, t)), **kwargs), notices


async def test_ids_use_a_per_kind_counter_shared_by_the_registry() -> None:
    a, b = parent("a"), parent("b")
    async with JobRegistry() as registry:
        ids = [
            registry.start(spec(ScriptedProducer(), a)),
            registry.start(spec(ScriptedProducer(), b)),
            registry.start(spec(ScriptedProducer(), a, kind="subagent")),
            registry.start(spec(ScriptedProducer(), None, kind="workflow")),
        ]
        assert ids == ["bash-1", "bash-2", "subagent-1", "workflow-1"]


@pytest.mark.parametrize(
    ("kind", "label", "limit", "message"),
    [
        ("", "x", None, "invalid job kind: expected a non-empty string"),
        ("bash", "", None, "invalid job label: expected a non-empty string"),
        ("bash", "x", 0, "invalid output_limit_bytes: expected a positive safe integer, got 0"),
        ("bash", "x", -3, "invalid output_limit_bytes: expected a positive safe integer, got -3"),
        (
            "bash",
            "x",
            2**53,
            f"invalid output_limit_bytes: expected a positive safe integer, got {2**53}",
        ),
    ],
)
async def test_invalid_spec_is_rejected_without_running_or_using_an_id(
    kind: str, label: str, limit: int | None, message: str
) -> None:
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        with pytest.raises(JobError, match=message) as info:
            registry.start(JobStart(kind, label, None, producer.run, limit))
        assert info.value.code is JobErrorCode.INVALID_SPEC
        assert producer.runs == 0
        assert registry.start(JobStart("bash", "ok", None, ScriptedProducer().run)) == "bash-1"


@pytest.mark.parametrize("value", [0, -1, 1.5, True, float("nan"), float("inf"), 2**53, "3"])
def test_invalid_job_limit_is_rejected_naming_the_field(value: object) -> None:
    with pytest.raises(JobError, match="max_concurrent_jobs_per_owner") as info:
        validate_job_limit(value)
    assert info.value.code is JobErrorCode.INVALID_CONFIG
    with pytest.raises(JobError):
        JobRegistry(max_concurrent_jobs_per_owner=value)  # type: ignore[arg-type]


def test_max_safe_integer_job_limit_is_accepted() -> None:
    assert JobRegistry(max_concurrent_jobs_per_owner=2**53 - 1).max_concurrent_jobs_per_owner == (
        2**53 - 1
    )


async def test_default_admission_is_ten_and_the_eleventh_is_refused_before_run() -> None:
    owner = parent()
    producers = [ScriptedProducer() for _ in range(10)]
    async with JobRegistry() as registry:
        for producer in producers:
            registry.start(spec(producer, owner))
        blocked = ScriptedProducer()
        with pytest.raises(JobError) as info:
            registry.start(spec(blocked, owner))
        assert str(info.value) == (
            "background job limit reached for this owner (limit: 10); use job_kill to stop an "
            "unneeded job, wait for it to finish, then retry"
        )
        assert info.value.code is JobErrorCode.LIMIT_REACHED
        assert blocked.runs == 0
        producers[0].finish(JobOutcome(status="completed"))
        await settled(registry, "bash-1", owner)
        # The rejection used no number.
        assert registry.start(spec(blocked, owner)) == "bash-11"


async def test_stopping_keeps_its_slot_until_done_settles() -> None:
    owner = parent()
    slow = ScriptedProducer(cancel_settles=None)
    async with JobRegistry(max_concurrent_jobs_per_owner=1) as registry:
        job = registry.start(spec(slow, owner))
        assert registry.kill(job, owner) == "requested"
        assert registry.get(job, owner).status == "stopping"
        with pytest.raises(JobError, match="limit reached"):
            registry.start(spec(ScriptedProducer(), owner))
        slow.finish(JobOutcome(status="killed"))
        await settled(registry, job, owner)
        assert registry.start(spec(ScriptedProducer(), owner)) == "bash-2"


@pytest.mark.parametrize("status", ["completed", "killed", "failed"])
async def test_any_terminal_status_frees_the_slot(status: str) -> None:
    owner = parent()
    first = ScriptedProducer()
    async with JobRegistry(max_concurrent_jobs_per_owner=1) as registry:
        job = registry.start(spec(first, owner))
        first.finish(JobOutcome.model_validate({"status": status}))
        await settled(registry, job, owner)
        registry.start(spec(ScriptedProducer(), owner))


async def test_buckets_are_per_owner_object_and_unowned_jobs_share_one() -> None:
    owner, replacement = parent("s"), parent("s")
    assert owner == replacement  # equal values, different objects
    async with JobRegistry(max_concurrent_jobs_per_owner=1) as registry:
        registry.start(spec(ScriptedProducer(), owner))
        registry.start(spec(ScriptedProducer(), replacement))
        registry.start(spec(ScriptedProducer(), None))
        with pytest.raises(JobError, match="limit reached"):
            registry.start(spec(ScriptedProducer(), None))
        with pytest.raises(JobError, match="limit reached"):
            registry.start(spec(ScriptedProducer(), owner))


async def test_a_throwing_starter_registers_nothing_and_uses_no_id() -> None:
    def boom() -> object:
        raise RuntimeError("starter failed")

    async with JobRegistry() as registry:
        with pytest.raises(RuntimeError, match="starter failed"):
            registry.start(JobStart("bash", "x", None, boom))  # type: ignore[arg-type]
        assert registry.list(None) == []
        assert registry.start(spec(ScriptedProducer(), None)) == "bash-1"


async def test_final_output_read_is_empty_while_live_then_the_result_idempotently() -> None:
    owner = parent()
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, owner))
        assert registry.read(job, owner) == ""
        assert registry.get(job, owner).reported is False
        producer.finish(JobOutcome(status="completed", output="the answer"))
        await settled(registry, job, owner)
        assert registry.get(job, owner).reported is False
        assert registry.read(job, owner) == "the answer"
        assert registry.read(job, owner) == "the answer"
        assert registry.get(job, owner).reported is True


async def test_a_settled_job_without_output_reads_empty() -> None:
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, None))
        producer.finish(JobOutcome(status="failed", detail="exit code: 3"))
        await settled(registry, job, None)
        assert registry.read(job, None) == ""


async def test_stream_read_consumes_deltas_and_terminal_read_appends_the_result() -> None:
    producer = ScriptedProducer(stream=True)
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, None))
        producer.emit("line one\n")
        assert registry.read(job, None) == "line one\n"
        assert registry.read(job, None) == ""
        producer.emit("tail")
        producer.finish(JobOutcome(status="completed", detail="exit code: 0", output="summary"))
        snapshot = await settled(registry, job, None)
        assert snapshot.finished_at is not None
        assert snapshot.detail == "exit code: 0"
        assert registry.read(job, None) == "tail\nsummary"
        assert registry.get(job, None).reported is True


async def test_access_fence_unknown_and_foreign_jobs() -> None:
    owner, stranger = parent("mine"), parent("theirs")
    same_session = parent("mine")
    async with JobRegistry() as registry:
        job = registry.start(spec(ScriptedProducer(), owner))
        shared = registry.start(spec(ScriptedProducer(), None))
        with pytest.raises(JobError, match=r"^unknown job bash-99$") as unknown:
            registry.get("bash-99", owner)
        assert unknown.value.code is JobErrorCode.UNKNOWN_JOB
        for caller in (stranger, None):
            with pytest.raises(JobError, match=f"^job {job} belongs to another session$") as info:
                registry.read(job, caller)
            assert info.value.code is JobErrorCode.FOREIGN_JOB
            with pytest.raises(JobError, match="belongs to another session"):
                registry.kill(job, caller)
            with pytest.raises(JobError, match="belongs to another session"):
                await registry.wait(job, 10, caller)
        # Visibility is by session id, so a same-session replacement sees the job.
        assert registry.get(job, same_session).id == job
        assert [s.id for s in registry.list(owner)] == [job, shared]
        assert [s.id for s in registry.list(stranger)] == [shared]
        assert [s.id for s in registry.list(None)] == [shared]


async def test_snapshots_are_frozen_fresh_copies() -> None:
    async with JobRegistry() as registry:
        job = registry.start(spec(ScriptedProducer(), None))
        first, second = registry.get(job, None), registry.get(job, None)
        assert first is not second
        with pytest.raises(pydantic.ValidationError):
            first.status = "completed"
        assert first.finished_at is None
        assert first.owner_session is None


async def test_done_listeners_are_called_once_contained_and_after_change() -> None:
    events: list[str] = []
    producer = ScriptedProducer()
    async with JobRegistry() as registry:

        def bad_done(snapshot: JobSnapshot, owner: ParentContext | None) -> None:
            events.append("bad-done")
            raise RuntimeError("listener broke")

        def bad_change(owner: ParentContext | None) -> None:
            raise RuntimeError("change listener broke")

        registry.on_change(bad_change)
        registry.on_change(lambda owner: events.append("changed"))
        registry.on_done(bad_done)
        remove = registry.on_done(lambda s, o: events.append(f"done {s.id} {s.status}"))
        job = registry.start(spec(producer, None))
        assert events == ["changed"]
        producer.finish(JobOutcome(status="completed"))
        await settled(registry, job, None)
        assert events == ["changed", "changed", "bad-done", f"done {job} completed"]
        remove()
        remove()  # idempotent


async def test_a_rejecting_done_settles_failed_with_a_logged_contract_violation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = ScriptedProducer(done_raises=ValueError("producer broke"))
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, None))
        producer.finish(JobOutcome(status="completed"))
        snapshot = await settled(registry, job, None)
    assert snapshot.status == "failed"
    assert snapshot.detail == "ValueError: producer broke"
    assert "producer contract violation" in caplog.text
    assert caplog.records[0].levelno == logging.ERROR


async def test_kill_forwards_the_reason_and_marks_stopping_and_reported() -> None:
    owner = parent()
    producer = ScriptedProducer(cancel_settles=None)
    done: list[JobSnapshot] = []
    registry, notices = registry_with_notices()
    async with registry:
        registry.on_done(lambda s, o: done.append(s))
        job = registry.start(spec(producer, owner))
        assert registry.kill(job, owner, "superseded") == "requested"
        assert producer.cancels == ["superseded"]
        snapshot = registry.get(job, owner)
        assert (snapshot.status, snapshot.reported) == ("stopping", True)
        producer.finish(JobOutcome(status="killed"))
        await settled(registry, job, owner)
        assert registry.kill(job, owner) == "already-finished"
    assert [(s.status, s.reported) for s in done] == [("killed", True)]
    assert notices == []


async def test_kill_of_a_finished_job_marks_it_reported() -> None:
    owner = parent()
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, owner))
        producer.finish(JobOutcome(status="completed"))
        await settled(registry, job, owner)
        assert registry.kill(job, owner) == "already-finished"
        assert registry.get(job, owner).reported is True
        assert producer.cancels == []


async def test_a_throwing_cancel_propagates_and_changes_nothing() -> None:
    owner = parent()
    producer = ScriptedProducer(cancel_raises=RuntimeError("cannot cancel"))
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, owner))
        with pytest.raises(RuntimeError, match="cannot cancel"):
            registry.kill(job, owner)
        snapshot = registry.get(job, owner)
        assert (snapshot.status, snapshot.reported) == ("running", False)
        producer.cancel_raises = None
        producer.finish(JobOutcome(status="completed"))


async def test_first_outcome_wins() -> None:
    owner = parent()
    producer = ScriptedProducer(cancel_raises=RuntimeError("no"))
    registry, notices = registry_with_notices()
    async with registry:
        job = registry.start(spec(producer, owner))
        other = parent("other")
        await registry.dispose_owner(other)  # unrelated owner: nothing happens
        assert registry.get(job, owner).status == "running"
        # A force-failed teardown record is not overridden by the producer's late outcome.
        # (It is removed by dispose_owner, so observe it through a done listener.)
        seen: list[JobSnapshot] = []
        registry.on_done(lambda s, o: seen.append(s))
        await registry.dispose_owner(owner)
        producer.finish(JobOutcome(status="completed", output="late"))
        await until(lambda: producer.done_returned)
        await anyio.lowlevel.checkpoint()
    assert [(s.status, s.detail) for s in seen] == [
        (
            "failed",
            "cancel threw during teardown; work may be orphaned: RuntimeError: no",
        )
    ]
    assert notices == []
