"""Hypothesis state machine over the registry lifecycle.

Random sequences of start / finish / kill / wait / read / owner-dispose keep the
invariants: one terminal state per job that never changes, no admission slot leak,
and a notice only for an owned job the model had not been told about.

The registry runs in a blocking portal's event loop (asyncio and trio); every rule
calls into that loop and then lets the registry's watcher tasks run to quiescence.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import ClassVar

import anyio
import anyio.lowlevel
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from dsh_subagent import ParentContext
from dsh_tool_jobs import JobError, JobErrorCode, JobOutcome, JobRegistry, JobSnapshot, JobStart
from dsh_tool_jobs.testing import ScriptedProducer
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

LIMIT = 3
STATUSES = ("completed", "killed", "failed")


class RegistryMachine(RuleBasedStateMachine):
    backend: ClassVar[str] = "asyncio"

    def __init__(self) -> None:
        super().__init__()
        self.stack = ExitStack()
        self.portal: BlockingPortal = self.stack.enter_context(start_blocking_portal(self.backend))
        self.notices: list[tuple[ParentContext, str]] = []
        self.registry = JobRegistry(
            max_concurrent_jobs_per_owner=LIMIT,
            notice_sink=lambda owner, text: self.notices.append((owner, text)),
        )
        self.stack.enter_context(self.portal.wrap_async_context_manager(self.registry))
        self.done: list[JobSnapshot] = []
        self.registry.on_done(lambda snapshot, owner: self.done.append(snapshot))
        # Two owners share a session id: separate buckets, shared visibility.
        self.owners = [
            ParentContext(session_id="a"),
            ParentContext(session_id="a"),
            ParentContext(session_id="b"),
        ]
        self.jobs: dict[str, tuple[int | None, ScriptedProducer]] = {}
        self.removed: set[str] = set()
        self.first_terminal: dict[str, str] = {}
        self.reported_before_settle: set[str] = set()

    def teardown(self) -> None:
        self.stack.close()
        # Registry exit settles everything and leaves nothing.
        assert self.registry.list(None) == []
        for _, producer in self.jobs.values():
            assert producer.runs == 1

    # -- helpers ---------------------------------------------------------------------

    def owner(self, index: int | None) -> ParentContext | None:
        return None if index is None else self.owners[index]

    def settle(self, job: str) -> None:
        """Let the registry's watcher settle a job whose producer has finished."""

        async def settled() -> None:
            with anyio.fail_after(5):
                while not self.snapshot(job).terminal:
                    await anyio.lowlevel.checkpoint()

        self.portal.call(settled)

    def live_ids(self) -> list[str]:
        return [job for job in self.jobs if job not in self.removed]

    def snapshot(self, job: str) -> JobSnapshot:
        index, _ = self.jobs[job]
        return self.registry.get(job, self.owner(index))

    # -- rules -----------------------------------------------------------------------

    @rule(
        index=st.one_of(st.none(), st.integers(0, 2)),
        kind=st.sampled_from(["bash", "subagent"]),
        stuck=st.booleans(),
    )
    def start(self, index: int | None, kind: str, stuck: bool) -> None:
        owner = self.owner(index)
        producer = ScriptedProducer(cancel_raises=RuntimeError("stuck") if stuck else None)
        active = sum(
            1
            for job in self.live_ids()
            if self.jobs[job][0] == index and not self.snapshot(job).terminal
        )
        try:
            job = self.portal.call(self.registry.start, JobStart(kind, "task", owner, producer.run))
        except JobError as exc:
            code = exc.code
            assert code is JobErrorCode.LIMIT_REACHED
            assert active >= LIMIT
            assert producer.runs == 0
            return
        assert active < LIMIT
        assert job not in self.jobs
        self.jobs[job] = (index, producer)

    @precondition(lambda self: bool(self.live_ids()))
    @rule(data=st.data(), status=st.sampled_from(STATUSES))
    def finish(self, data: st.DataObject, status: str) -> None:
        job = data.draw(st.sampled_from(self.live_ids()))
        before = self.snapshot(job)
        outcome = JobOutcome.model_validate({"status": status})
        self.portal.call(self.jobs[job][1].finish, outcome)  # events belong to the loop thread
        self.settle(job)
        after = self.snapshot(job)
        if before.terminal:
            assert after.status == before.status  # first outcome wins

    @precondition(lambda self: bool(self.live_ids()))
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.live_ids()))
        index, producer = self.jobs[job]
        was_terminal = self.snapshot(job).terminal
        try:
            outcome = self.portal.call(self.registry.kill, job, self.owner(index), None)
        except RuntimeError:
            assert producer.cancel_raises is not None
            assert not self.snapshot(job).reported or was_terminal
            return
        assert outcome == ("already-finished" if was_terminal else "requested")
        assert self.snapshot(job).reported
        self.settle(job)

    @precondition(lambda self: bool(self.live_ids()))
    @rule(data=st.data())
    def wait(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.live_ids()))
        index, _ = self.jobs[job]
        result = self.portal.call(self.registry.wait, job, 1, self.owner(index), None)
        if result.terminal:
            assert result.reported
        else:
            assert not result.reported or self.snapshot(job).reported

    @precondition(lambda self: bool(self.live_ids()))
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.live_ids()))
        index, _ = self.jobs[job]
        terminal = self.snapshot(job).terminal
        assert self.portal.call(self.registry.read, job, self.owner(index)) == ""
        assert self.snapshot(job).reported or not terminal

    @rule(index=st.integers(0, 2))
    def dispose_owner(self, index: int) -> None:
        owner = self.owners[index]
        self.portal.call(self.registry.dispose_owner, owner)
        for job, (job_index, _) in self.jobs.items():
            if job_index == index:
                self.removed.add(job)
                with pytest.raises(JobError):
                    self.registry.get(job, owner)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def terminal_state_is_final_and_single(self) -> None:
        for job in self.live_ids():
            status = self.snapshot(job).status
            if job in self.first_terminal:
                assert status == self.first_terminal[job]
            elif status in STATUSES:
                self.first_terminal[job] = status
        seen = [snapshot.id for snapshot in self.done]
        assert len(seen) == len(set(seen))  # one done event per job

    @invariant()
    def no_slot_leak(self) -> None:
        for index in (None, 0, 1, 2):
            expected = sum(
                1
                for job in self.live_ids()
                if self.jobs[job][0] == index and not self.snapshot(job).terminal
            )
            assert expected <= LIMIT
        # Every live job is exactly what the registry lists, in order.
        listed = [s.id for s in self.registry.list(ParentContext(session_id="a"))]
        listed += [s.id for s in self.registry.list(ParentContext(session_id="b"))]
        assert sorted(set(listed)) == sorted(self.live_ids())

    @invariant()
    def notices_only_when_unreported(self) -> None:
        by_id = {snapshot.id: snapshot for snapshot in self.done}
        noticed = [text.split()[2] for _, text in self.notices]
        assert len(noticed) == len(set(noticed))
        for job in noticed:
            assert job in by_id
            assert not by_id[job].reported
            assert self.jobs[job][0] is not None
        for job, snapshot in by_id.items():
            if not snapshot.reported and self.jobs[job][0] is not None:
                assert job in noticed
        for owner, text in self.notices:
            index, _ = self.jobs[text.split()[2]]
            assert index is not None
            assert owner is self.owners[index]


class TrioRegistryMachine(RegistryMachine):
    backend = "trio"


TestRegistryMachineAsyncio = RegistryMachine.TestCase
TestRegistryMachineTrio = TrioRegistryMachine.TestCase
