"""Waits, completion notices and teardown (reference-core §4.4, §4.5, §4.7, §7.14–7.16)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest
from dsh_subagent import CancelController, ParentContext
from dsh_tool_jobs import JobError, JobErrorCode, JobOutcome, JobRegistry, JobSnapshot, JobStart
from dsh_tool_jobs.testing import ScriptedProducer

pytestmark = pytest.mark.anyio

Notices = list[tuple[ParentContext, str]]


def parent(session: str = "s1") -> ParentContext:
    return ParentContext(session_id=session, cwd="/tmp")


def spec(
    producer: ScriptedProducer, owner: ParentContext | None, label: str = "pnpm test"
) -> JobStart:
    return JobStart(kind="bash", label=label, owner=owner, run=producer.run)


async def until(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not predicate():
            await anyio.lowlevel.checkpoint()


def make_registry() -> tuple[JobRegistry, Notices]:
    notices: Notices = []
    return JobRegistry(notice_sink=lambda o, t: notices.append((o, t))), notices


def waiters(registry: JobRegistry, job_id: str) -> int:
    return len(registry._records[job_id].waiters)


# -- wait ------------------------------------------------------------------------------


async def test_wait_resolves_at_settlement_marked_reported_and_suppresses_the_notice() -> None:
    owner = parent()
    producer = ScriptedProducer()
    registry, notices = make_registry()
    async with registry:
        job = registry.start(spec(producer, owner))
        result: list[JobSnapshot] = []

        async def waiter() -> None:
            result.append(await registry.wait(job, 60_000, owner))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await until(lambda: waiters(registry, job) == 1)
            producer.finish(JobOutcome(status="completed", output="ok"))
        assert (result[0].status, result[0].reported) == ("completed", True)
        assert waiters(registry, job) == 0
    assert notices == []


async def test_wait_timeout_returns_the_live_snapshot_and_is_not_an_error() -> None:
    owner = parent()
    producer = ScriptedProducer()
    registry, notices = make_registry()
    async with registry:
        job = registry.start(spec(producer, owner))
        for _ in range(3):
            snapshot = await registry.wait(job, 1, owner)
            assert (snapshot.status, snapshot.reported) == ("running", False)
        assert waiters(registry, job) == 0  # timed-out waits leave no resolver behind
        producer.finish(JobOutcome(status="completed"))
        await until(lambda: len(notices) == 1)
    assert notices[0][0] is owner


async def test_wait_on_a_terminal_job_returns_at_once_and_marks_reported() -> None:
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, None))
        producer.finish(JobOutcome(status="failed", detail="boom"))
        await until(lambda: registry.get(job, None).terminal)
        aborted = CancelController()
        aborted.cancel()
        # Terminal beats an already-aborted signal.
        snapshot = await registry.wait(job, 5, None, aborted.signal)
        assert (snapshot.status, snapshot.detail, snapshot.reported) == ("failed", "boom", True)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True])
async def test_invalid_wait_timeouts_are_rejected_after_the_access_check(bad: float) -> None:
    async with JobRegistry() as registry:
        with pytest.raises(JobError, match="unknown job"):
            await registry.wait("bash-1", bad, None)
        job = registry.start(spec(ScriptedProducer(), None))
        with pytest.raises(JobError) as info:
            await registry.wait(job, bad, None)
        assert info.value.code is JobErrorCode.INVALID_TIMEOUT
        assert str(info.value).startswith(
            "invalid wait timeout: expected a positive number of milliseconds, got "
        )


async def test_wait_abort_raises_and_leaves_the_job_running() -> None:
    owner = parent()
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, owner))
        controller = CancelController()
        pre_aborted = CancelController()
        pre_aborted.cancel()
        with pytest.raises(JobError, match=r"^wait aborted$"):
            await registry.wait(job, 60_000, owner, pre_aborted.signal)

        async def abort_soon() -> None:
            await until(lambda: waiters(registry, job) == 1)
            controller.cancel("turn ended")

        async with anyio.create_task_group() as tg:
            tg.start_soon(abort_soon)
            with pytest.raises(JobError) as info:
                await registry.wait(job, 60_000, owner, controller.signal)
        assert info.value.code is JobErrorCode.WAIT_ABORTED
        assert registry.get(job, owner).status == "running"
        assert waiters(registry, job) == 0


async def test_abort_in_the_same_tick_before_settlement_keeps_the_notice() -> None:
    owner = parent()
    producer = ScriptedProducer()
    registry, notices = make_registry()
    async with registry:
        job = registry.start(spec(producer, owner))
        controller = CancelController()
        outcome: list[BaseException] = []

        async def waiter() -> None:
            try:
                await registry.wait(job, 60_000, owner, controller.signal)
            except JobError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await until(lambda: waiters(registry, job) == 1)
            # done resolves, and before the registry can settle the waiter aborts.
            producer.finish(JobOutcome(status="completed"))
            controller.cancel()
        await until(lambda: registry.get(job, owner).terminal)
        assert str(outcome[0]) == "wait aborted"
        assert registry.get(job, owner).reported is False
    assert [text for _, text in notices] == [
        f"background job {job} (bash: pnpm test) finished [status: completed]. "
        "Read its output with job_output."
    ]


async def test_abort_after_settlement_released_the_waiter_still_resolves() -> None:
    owner = parent()
    producer = ScriptedProducer()
    registry, notices = make_registry()
    async with registry:
        job = registry.start(spec(producer, owner))
        controller = CancelController()
        # Aborting from a done listener runs in the settlement's own tick, after release.
        registry.on_done(lambda s, o: controller.cancel())
        result: list[JobSnapshot] = []

        async def waiter() -> None:
            result.append(await registry.wait(job, 60_000, owner, controller.signal))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await until(lambda: waiters(registry, job) == 1)
            producer.finish(JobOutcome(status="completed"))
        assert controller.signal.aborted
        assert (result[0].status, result[0].reported) == ("completed", True)
    assert notices == []


async def test_cancelling_the_waiting_task_removes_its_waiter() -> None:
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        job = registry.start(spec(producer, None))
        with anyio.move_on_after(0.01):
            await registry.wait(job, 60_000, None)
        assert waiters(registry, job) == 0


# -- notices ---------------------------------------------------------------------------


async def test_notice_text_and_exact_owner_object() -> None:
    owner, replacement = parent("s"), parent("s")
    first, second = ScriptedProducer(), ScriptedProducer()
    registry, notices = make_registry()
    async with registry:
        a = registry.start(spec(first, owner))
        b = registry.start(spec(second, replacement, label="lint"))
        first.finish(JobOutcome(status="completed", detail="exit code: 0"))
        second.finish(JobOutcome(status="failed", detail="error; diagnostic: denied"))
        await until(lambda: len(notices) == 2)
        # get and list never mark a job reported.
        registry.get(a, owner)
        registry.list(owner)
        assert registry.get(a, owner).reported is False
    by_owner = {id(o): text for o, text in notices}  # settlement order is not fixed on trio
    assert by_owner == {
        id(owner): f"background job {a} (bash: pnpm test) finished "
        "[status: completed, exit code: 0]. Read its output with job_output.",
        id(replacement): f"background job {b} (bash: lint) finished "
        "[status: failed, error; diagnostic: denied]. Read its output with job_output.",
    }


async def test_notice_is_suppressed_after_a_terminal_read_and_for_unowned_jobs() -> None:
    owner = parent()
    producer, unowned = ScriptedProducer(), ScriptedProducer()
    registry, notices = make_registry()
    seen: list[str] = []
    async with registry:
        registry.on_done(lambda s, o: seen.append(s.id))
        job = registry.start(spec(producer, owner))
        free = registry.start(spec(unowned, None))
        unowned.finish(JobOutcome(status="completed"))
        await until(lambda: seen == [free])
        # A read of a live job does not report; a read of a terminal one does.
        assert registry.read(job, owner) == ""
        producer.finish(JobOutcome(status="completed", output="x"))
        await until(lambda: len(seen) == 2)
    assert len(notices) == 1  # the owned job was not read after settling
    registry2, notices2 = make_registry()
    async with registry2:
        producer = ScriptedProducer(cancel_settles=None)
        job = registry2.start(spec(producer, owner))
        producer.finish(JobOutcome(status="completed", output="x"))
        # Read in the same tick as done resolving: the job is not terminal yet.
        assert registry2.read(job, owner) == ""
        await until(lambda: registry2.get(job, owner).terminal)
    assert len(notices2) == 1


async def test_a_raising_notice_sink_is_contained(caplog: pytest.LogCaptureFixture) -> None:
    owner = parent()
    producer = ScriptedProducer()

    def sink(o: ParentContext, text: str) -> None:
        raise RuntimeError("host gone")

    async with JobRegistry(notice_sink=sink) as registry:
        job = registry.start(spec(producer, owner))
        producer.finish(JobOutcome(status="completed"))
        await until(lambda: registry.get(job, owner).terminal)
    assert "notice sink raised" in caplog.text


# -- owner disposal --------------------------------------------------------------------


async def test_owner_disposal_cancels_awaits_and_removes_without_notice() -> None:
    owner, replacement = parent("s"), parent("s")
    mine = [ScriptedProducer(), ScriptedProducer(cancel_settles=None)]
    theirs = ScriptedProducer()
    registry, notices = make_registry()
    changes: list[ParentContext | None] = []
    async with registry:
        registry.on_change(changes.append)
        ids = [registry.start(spec(p, owner)) for p in mine]
        other = registry.start(spec(theirs, replacement))
        disposed = anyio.Event()

        async def dispose() -> None:
            await registry.dispose_owner(owner)
            disposed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(dispose)
            await until(lambda: mine[1].cancels == ["owner disposed"])
            assert registry.get(ids[1], owner).status == "stopping"
            assert registry.get(ids[1], owner).reported is True
            with pytest.raises(JobError, match="owner is being disposed"):
                registry.start(spec(ScriptedProducer(), owner))
            assert not disposed.is_set()  # still waiting for the slow producer
            mine[1].finish(JobOutcome(status="killed"))
        assert mine[0].cancels == ["owner disposed"]
        for job in ids:
            with pytest.raises(JobError, match="unknown job"):
                registry.get(job, owner)
        assert [s.id for s in registry.list(replacement)] == [other]
        assert theirs.cancels == []
        assert changes[-1] is owner
        # The owner is not fenced forever: only while its disposal runs.
        registry.start(spec(ScriptedProducer(), owner))
    assert notices == []


async def test_owner_disposal_force_fails_a_throwing_cancel_without_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner = parent()
    stuck = ScriptedProducer(cancel_raises=RuntimeError("wedged"))
    registry, notices = make_registry()
    seen: list[JobSnapshot] = []
    async with registry:
        registry.on_done(lambda s, o: seen.append(s))
        registry.start(spec(stuck, owner))
        with anyio.fail_after(5):
            await registry.dispose_owner(owner)
        assert registry.list(owner) == []
    assert [(s.status, s.reported) for s in seen] == [("failed", True)]
    assert (
        seen[0].detail == "cancel threw during teardown; work may be orphaned: RuntimeError: wedged"
    )
    assert "work may be orphaned" in caplog.text
    assert caplog.records[0].levelno == logging.ERROR
    assert notices == []


# -- registry disposal -----------------------------------------------------------------


async def test_registry_exit_cancels_everything_and_fires_no_done_or_notice() -> None:
    owner = parent()
    producers = [ScriptedProducer(), ScriptedProducer(), ScriptedProducer(cancel_raises=OSError())]
    registry, notices = make_registry()
    done: list[str] = []
    changed: list[ParentContext | None] = []
    async with registry:
        registry.on_done(lambda s, o: done.append(s.id))
        registry.start(spec(producers[0], owner))
        registry.start(spec(producers[1], None))
        registry.start(spec(producers[2], owner))
        registry.on_change(changed.append)
    assert [p.cancels for p in producers] == [["jobs service disposed"]] * 3
    assert done == []
    assert notices == []
    assert registry.list(owner) == []
    assert changed[-2:] == [owner, None]
    with pytest.raises(JobError, match="not running") as info:
        registry.start(spec(ScriptedProducer(), owner))
    assert info.value.code is JobErrorCode.UNAVAILABLE


async def test_start_before_enter_is_refused() -> None:
    with pytest.raises(JobError, match="not running"):
        JobRegistry().start(spec(ScriptedProducer(), None))
