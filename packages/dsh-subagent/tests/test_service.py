"""SubagentService: registry, the fixed start order, lifecycle events (seeds 002, 004)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    MAX_SAFE_INTEGER,
    AgentOptions,
    CancelController,
    ParentContext,
    ProviderAdded,
    ProviderRemoved,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentError,
    SubagentErrorCode,
    SubagentEvent,
    SubagentResult,
    SubagentRunEnded,
    SubagentRunStarted,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
)
from dsh_subagent.testing import Script, ScriptedProvider

pytestmark = pytest.mark.anyio

ALL = SubagentCapabilities(
    agent_options=True, output_schema=True, depth_limit=True, tool_filter=True, persona=True
)


def make_request(*, cwd: Path | None = None, **fields: object) -> SubagentStartRequest:
    parent = ParentContext(session_id="parent-1", cwd=str(cwd) if cwd else None)
    return SubagentStartRequest.model_validate(
        {"prompt": (TextBlock(text="task"),), "parent": parent, **fields}
    )


def request_with(fields: dict[str, object]) -> SubagentStartRequest:
    return make_request().model_copy(update=fields)


class Recorder:
    def __init__(self) -> None:
        self.events: list[SubagentEvent] = []
        self.ended = anyio.Event()

    def __call__(self, event: SubagentEvent) -> None:
        self.events.append(event)
        if isinstance(event, SubagentRunEnded):
            self.ended.set()

    def types(self) -> list[str]:
        return [event.type for event in self.events]


# -- registry ---------------------------------------------------------------------------


async def test_register_list_get_start_and_remove() -> None:
    service = SubagentService()
    recorder = Recorder()
    service.add_listener(recorder)
    provider = ScriptedProvider("alpha")
    remove = service.register_provider(provider)
    other = ScriptedProvider("beta")
    service.register_provider(other)
    assert service.list() == ("alpha", "beta")
    assert service.get_provider("alpha") is provider
    assert service.get_provider("missing") is None
    async with service:
        run = await service.start("alpha", make_request())
        assert (await run.result()).text == "done"
        await run.dispose()
    remove()
    remove()  # idempotent: one removal event
    assert service.list() == ("beta",)
    assert [e for e in recorder.events if isinstance(e, ProviderAdded | ProviderRemoved)] == [
        ProviderAdded(provider),
        ProviderAdded(other),
        ProviderRemoved("alpha"),
    ]


async def test_several_instances_of_one_class_under_different_names() -> None:
    service = SubagentService()
    service.register_provider(ScriptedProvider("codex-a", [Script.answer("a")]))
    service.register_provider(ScriptedProvider("codex-b", [Script.answer("b")]))
    async with service:
        for name, text in (("codex-a", "a"), ("codex-b", "b")):
            run = await service.start(name, make_request())
            assert (await run.result()).text == text
            await run.dispose()


def test_duplicate_name_raises_synchronously() -> None:
    service = SubagentService()
    service.register_provider(ScriptedProvider("alpha"))
    with pytest.raises(SubagentError) as caught:
        service.register_provider(ScriptedProvider("alpha"))
    assert caught.value.code is SubagentErrorCode.DUPLICATE_PROVIDER
    assert caught.value.message == 'a subagent provider named "alpha" is already registered'


def test_raising_provider_added_listener_rolls_registration_back() -> None:
    service = SubagentService()
    recorder = Recorder()
    service.add_listener(recorder)

    def refuse(event: SubagentEvent) -> None:
        if isinstance(event, ProviderAdded):
            raise RuntimeError("mount failed")

    stop_refusing = service.add_listener(refuse)
    provider = ScriptedProvider("alpha")
    with pytest.raises(RuntimeError, match="mount failed"):
        service.register_provider(provider)
    assert service.list() == ()
    # The earlier listener heard the addition, so it also hears the rollback.
    assert recorder.events == [ProviderAdded(provider), ProviderRemoved("alpha")]
    stop_refusing()
    service.register_provider(ScriptedProvider("alpha"))  # the name is free again


async def test_removed_provider_blocks_new_starts_but_not_live_runs() -> None:
    service = SubagentService()
    hold = anyio.Event()
    remove = service.register_provider(
        ScriptedProvider("alpha", [replace(Script.answer("late"), hold_result=hold)])
    )
    async with service:
        run = await service.start("alpha", make_request())
        remove()
        with pytest.raises(SubagentError) as caught:
            await service.start("alpha", make_request())
        assert caught.value.code is SubagentErrorCode.NO_PROVIDER
        hold.set()
        assert (await run.result()).text == "late"
        await run.dispose()


# -- start order --------------------------------------------------------------------------


async def test_unknown_provider() -> None:
    async with SubagentService() as service:
        with pytest.raises(SubagentError) as caught:
            await service.start("nope", make_request())
    assert caught.value.code is SubagentErrorCode.NO_PROVIDER
    assert caught.value.message == 'no subagent provider registered for "nope"'


async def test_provider_receives_a_new_resolved_request(tmp_path: Path) -> None:
    provider = ScriptedProvider("alpha", capabilities=ALL)
    service = SubagentService()
    service.register_provider(provider)
    cancel = CancelController()
    request = make_request(cwd=tmp_path, cancel=cancel.signal, label="Fix the bug", max_depth=0)
    async with service:
        run = await service.start("alpha", request)
        await run.dispose()
        unlabelled = await service.start("alpha", make_request())
        await unlabelled.dispose()
    resolved = provider.records[0].request
    assert isinstance(resolved, ResolvedSubagentStartRequest)
    assert resolved is not request
    assert resolved.prompt == request.prompt
    assert resolved.parent is request.parent
    assert resolved.cancel is cancel.signal
    assert resolved.max_depth == 0
    assert resolved.descriptor.model_dump() == {
        "version": 1,
        "mode": "one-shot",
        "provider": "alpha",
        "label": "Fix the bug",
    }
    assert provider.records[1].request.descriptor.label is None
    assert resolved.model_dump(exclude={"descriptor", "cancel"}) == request.model_dump(
        exclude={"cancel"}
    )


GATED = [
    ("agent_options", AgentOptions(model="m"), "agent_options"),
    ("output_schema", {"type": "object"}, "output_schema"),
    ("max_depth", 0, "depth_limit"),  # 0 counts: the check is "is not None"
    ("tool_filter", ToolFilter(allow=("read",)), "tool_filter"),
    ("persona", "", "persona"),  # an empty persona is still a persona
]


@pytest.mark.parametrize(("field", "value", "flag"), GATED)
async def test_each_gated_field_needs_its_capability(field: str, value: object, flag: str) -> None:
    provider = ScriptedProvider("codex")
    service = SubagentService()
    recorder = Recorder()
    service.register_provider(provider)
    service.add_listener(recorder)
    async with service:
        with pytest.raises(SubagentError) as caught:
            await service.start("codex", request_with({field: value}))
    assert caught.value.code is SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert caught.value.message == (
        f'subagent provider "codex" does not support the "{flag}" capability '
        f'(request field "{field}")'
    )
    assert provider.start_count == 0
    assert recorder.types() == []  # listener added after registration: no run events


async def test_capability_check_order_first_unsupported_wins() -> None:
    fields = {field: value for field, value, _ in GATED}
    for index, (_, _, flag) in enumerate(GATED):
        # Grant every flag before this one; this one is the first unsupported.
        granted = {f: True for _, _, f in GATED[:index]}
        provider = ScriptedProvider("p", capabilities=SubagentCapabilities(**granted))
        service = SubagentService()
        service.register_provider(provider)
        async with service:
            with pytest.raises(SubagentError, match=f'"{flag}" capability'):
                await service.start("p", request_with(fields))
        assert provider.start_count == 0


async def test_bad_depth_on_incapable_provider_is_unsupported_not_invalid() -> None:
    provider = ScriptedProvider("codex")
    async with SubagentService() as service:
        service.register_provider(provider)
        with pytest.raises(SubagentError) as caught:
            await service.start("codex", make_request(max_depth=-1))
    assert caught.value.code is SubagentErrorCode.UNSUPPORTED_CAPABILITY


@pytest.mark.parametrize(
    "value", [-1, 1.5, float("nan"), float("inf"), -0.0, "3", True, MAX_SAFE_INTEGER + 1]
)
async def test_invalid_max_depth_on_capable_provider(value: object) -> None:
    provider = ScriptedProvider("p", capabilities=ALL)
    async with SubagentService() as service:
        service.register_provider(provider)
        with pytest.raises(SubagentError, match="non-negative safe integer") as caught:
            await service.start("p", make_request(max_depth=value))
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    assert provider.start_count == 0


async def test_largest_safe_depth_is_accepted() -> None:
    provider = ScriptedProvider("p", capabilities=ALL)
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start("p", make_request(max_depth=MAX_SAFE_INTEGER))
        await run.dispose()
    assert provider.start_count == 1


async def test_non_object_output_schema_is_refused_before_start() -> None:
    provider = ScriptedProvider("p", capabilities=ALL)
    async with SubagentService() as service:
        service.register_provider(provider)
        with pytest.raises(SubagentError, match="object-rooted") as caught:
            await service.start("p", make_request(output_schema={"type": "string"}))
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    assert provider.start_count == 0


async def test_depth_is_validated_before_the_schema() -> None:
    async with SubagentService() as service:
        service.register_provider(ScriptedProvider("p", capabilities=ALL))
        with pytest.raises(SubagentError, match="max_depth"):
            await service.start("p", make_request(max_depth=-1, output_schema={"type": "x"}))


async def test_start_outside_the_service_context_is_refused() -> None:
    service = SubagentService()
    service.register_provider(ScriptedProvider("p"))
    with pytest.raises(RuntimeError, match="not running"):
        await service.start("p", make_request())


# -- lifecycle events ------------------------------------------------------------------------


async def test_start_event_only_after_publication_and_end_after_settlement() -> None:
    hold_start = anyio.Event()
    hold_result = anyio.Event()
    provider = ScriptedProvider(
        "p", [replace(Script.answer("answer"), hold_start=hold_start, hold_result=hold_result)]
    )
    service = SubagentService()
    service.register_provider(provider)
    recorder = Recorder()
    service.add_listener(recorder)
    runs = []
    with anyio.fail_after(5):
        async with service:

            async def starter() -> None:
                runs.append(await service.start("p", make_request()))

            async with anyio.create_task_group() as group:
                group.start_soon(starter)
                await provider.wait_started()
                await anyio.wait_all_tasks_blocked()
                assert recorder.types() == []  # start pending: nothing published yet
                hold_start.set()
            assert recorder.types()[-1] == "subagent/start"
            await provider.wait_attempts()
            await anyio.wait_all_tasks_blocked()
            assert recorder.types()[-1] == "subagent/start"  # not settled yet
            hold_result.set()
            await recorder.ended.wait()
            await runs[0].dispose()
    start, end = recorder.events
    assert isinstance(start, SubagentRunStarted)
    assert isinstance(end, SubagentRunEnded)
    assert (start.run_id, start.provider, start.id, start.local, start.parent) == (
        end.run_id,
        end.provider,
        end.id,
        end.local,
        end.parent,
    )
    assert start.run_id == runs[0].run_id
    assert start.parent.session_id == "parent-1"
    assert start.local is False
    assert end.stop_reason == COMPLETED
    assert end.last_assistant_message == (TextBlock(text="answer"),)


async def test_same_child_id_still_gets_distinct_run_ids() -> None:
    service = SubagentService()
    provider = ScriptedProvider("p", [replace(Script.answer("x"), run_id="child-1")])
    service.register_provider(provider)
    recorder = Recorder()
    service.add_listener(recorder)
    async with service:
        first = await service.start("p", make_request())
        second = await service.start("p", make_request())
        for run in (first, second):
            await run.result()
            await run.dispose()
    starts = [e for e in recorder.events if isinstance(e, SubagentRunStarted)]
    assert [s.id for s in starts] == ["child-1", "child-1"]
    assert len({s.run_id for s in starts}) == 2
    assert first.run_id != second.run_id


async def test_failed_provider_start_emits_nothing() -> None:
    service = SubagentService()
    provider = ScriptedProvider("p", [Script(start_error=RuntimeError("setup failed"))])
    service.register_provider(provider)
    recorder = Recorder()
    service.add_listener(recorder)
    async with service:
        with pytest.raises(RuntimeError, match="setup failed"):
            await service.start("p", make_request())
    assert provider.start_count == 1
    assert recorder.types() == []


async def test_empty_output_leaves_last_assistant_message_out() -> None:
    service = SubagentService()
    service.register_provider(ScriptedProvider("p", [Script(stop_reason=ERROR)]))
    recorder = Recorder()
    service.add_listener(recorder)
    async with service:
        run = await service.start("p", make_request())
        await run.result()
        await recorder.ended.wait()
        await run.dispose()
    end = recorder.events[-1]
    assert isinstance(end, SubagentRunEnded)
    assert end.stop_reason == ERROR
    assert end.last_assistant_message is None


async def test_raising_result_still_closes_the_pair_with_error() -> None:
    service = SubagentService()
    service.register_provider(
        ScriptedProvider("p", [replace(Script.answer("x"), result_error=OSError("gone"))])
    )
    recorder = Recorder()
    service.add_listener(recorder)
    async with service:
        run = await service.start("p", make_request())
        with pytest.raises(OSError, match="gone"):
            await run.result()
        await recorder.ended.wait()
        await run.dispose()
    end = recorder.events[-1]
    assert isinstance(end, SubagentRunEnded)
    assert end.stop_reason == ERROR
    assert end.last_assistant_message is None
    assert recorder.types().count("subagent/end") == 1


class Unrenderable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot render")


async def test_raising_listeners_are_contained_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = SubagentService()
    remove = service.register_provider(ScriptedProvider("p"))
    recorder = Recorder()

    def throws(event: SubagentEvent) -> None:
        if not isinstance(event, ProviderAdded):
            raise ValueError(f"bad {event.type}")

    def unrenderable(event: SubagentEvent) -> None:
        if not isinstance(event, ProviderAdded):
            raise Unrenderable

    async def rejects(event: SubagentEvent) -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyError("async")

    service.add_listener(throws)
    service.add_listener(unrenderable)
    service.add_listener(rejects)
    service.add_listener(recorder)
    caplog.set_level(logging.ERROR, logger="dsh_subagent")
    async with service:
        run = await service.start("p", make_request())
        assert (await run.result()).stop_reason == COMPLETED
        await recorder.ended.wait()
        await run.dispose()
        remove()
    assert recorder.types() == ["subagent/start", "subagent/end", "subagent/provider-removed"]
    text = caplog.text
    assert "subagent: subagent/start listener threw: ValueError: bad subagent/start" in text
    assert "subagent: subagent/end listener threw: <unrenderable thrown value>" in text
    assert "subagent: subagent/end listener rejected: KeyError: 'async'" in text
    assert "subagent/provider-removed listener threw: ValueError" in text


async def test_subagent_error_shape() -> None:
    error = SubagentError(SubagentErrorCode.NO_PROVIDER, "m")
    assert isinstance(error, Exception)
    assert type(error).__name__ == "SubagentError"
    assert error.code == "NO_PROVIDER"
    assert error.message == "m"


# -- concurrency and shutdown ---------------------------------------------------------------


async def test_concurrent_starts_of_one_provider_are_isolated() -> None:
    holds = [anyio.Event(), anyio.Event()]
    provider = ScriptedProvider(
        "p",
        [
            replace(Script.answer("first"), hold_result=holds[0], partial=(TextBlock(text="p1"),)),
            replace(Script.answer("second"), hold_result=holds[1]),
        ],
    )
    service = SubagentService()
    service.register_provider(provider)
    first_cancel = CancelController()
    results: dict[str, SubagentResult] = {}
    with anyio.fail_after(5):
        async with service:

            async def delegate(key: str, request: SubagentStartRequest) -> None:
                run = await service.start("p", request)
                results[key] = await run.result()
                await run.dispose()

            async with anyio.create_task_group() as group:
                group.start_soon(delegate, "a", make_request(cancel=first_cancel.signal))
                await provider.wait_started(1)  # trio schedules randomly; pin the script order
                group.start_soon(delegate, "b", make_request())
                await provider.wait_attempts(2)  # both in flight at once
                first_cancel.cancel()  # cancelling one run leaves its sibling alone
                await anyio.wait_all_tasks_blocked()
                assert "b" not in results
                holds[1].set()
    assert results["a"] == SubagentResult(output=(TextBlock(text="p1"),), stop_reason=ABORTED)
    assert results["b"].text == "second"
    assert [r.teardowns for r in provider.records] == [1, 1]
    assert provider.records[1].cancel_reasons == []


async def test_exiting_the_service_disposes_live_runs_and_closes_pairs() -> None:
    provider = ScriptedProvider("p", [replace(Script.answer("x"), hold_result=anyio.Event())])
    service = SubagentService()
    service.register_provider(provider)
    recorder = Recorder()
    service.add_listener(recorder)
    with anyio.fail_after(5):
        async with service:
            run = await service.start("p", make_request())
            await provider.wait_attempts()
    assert provider.records[0].teardowns == 1
    assert (await run.result()).stop_reason == ABORTED
    end = recorder.events[-1]
    assert isinstance(end, SubagentRunEnded)
    assert end.stop_reason == ABORTED


async def test_disposed_runs_are_not_disposed_again_at_exit() -> None:
    provider = ScriptedProvider("p")
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start("p", make_request())
        await run.result()
        await run.dispose()
    assert provider.records[0].teardowns == 1
    assert provider.records[0].cancel_requests == 1


async def test_dispose_failure_at_exit_is_reported() -> None:
    provider = ScriptedProvider("p", [replace(Script.answer("x"), dispose_error=OSError("reap"))])
    service = SubagentService()
    service.register_provider(provider)

    async def use_and_leave() -> None:
        async with service:
            await service.start("p", make_request())

    with pytest.raises(ExceptionGroup) as caught:
        await use_and_leave()
    assert caught.group_contains(OSError, match="reap")


async def test_run_published_while_the_service_closes_is_torn_down() -> None:
    hold = anyio.Event()
    provider = ScriptedProvider("p", [replace(Script.answer("x"), hold_start=hold)])
    service = SubagentService()
    service.register_provider(provider)
    recorder = Recorder()
    service.add_listener(recorder)
    failures: list[BaseException] = []

    async def starter() -> None:
        try:
            await service.start("p", make_request())
        except RuntimeError as exc:
            failures.append(exc)

    async def release_once_exit_waits() -> None:
        await anyio.wait_all_tasks_blocked()  # the service's exit is waiting for the start
        hold.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as outer, service:
            outer.start_soon(starter)
            await provider.wait_started()
            outer.start_soon(release_once_exit_waits)
    assert [str(f) for f in failures] == ["SubagentService closed while the run was starting"]
    assert provider.records[0].teardowns == 1
    assert recorder.types() == []  # never published: no lifecycle events
