"""Follow-up delegations in the core: the handle, the service's and the runtime's refusals,
the handle on a finished turn, ``delegate(resume=)`` and the tool's short ids.

The product here is the scripted runtime child; its "session" is a transcript the test
provider keeps by session id, which is what a real product keeps on disk (the real
products are covered by each provider's keyless tests).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest
from dsh_subagent import (
    COMPLETED,
    CONTINUATION_UNAVAILABLE_CATEGORY,
    CONTINUATION_UNAVAILABLE_MESSAGE,
    CONTINUE_ID_REFUSED,
    CancelController,
    ContinuationHandle,
    ContinuationIds,
    ContinuationUnavailableError,
    ParentContext,
    ProductChild,
    SubagentError,
    SubagentErrorCode,
    SubagentService,
    SubagentTool,
    SubagentToolConfig,
    ToolCallContext,
    delegate,
)
from subagent_echo import EchoConfig, EchoProvider, assert_gone

pytestmark = pytest.mark.anyio


class ResumableEcho(EchoProvider):
    """Echo with sessions: ``answer recall`` answers the session's earlier tasks."""

    known: ClassVar[set[str]] = set()

    def __init__(self, config: EchoConfig, *, offers: bool = True) -> None:
        super().__init__(config)
        self._offers = offers
        self.transcripts: dict[str, list[str]] = {}
        self.missing: set[str] = set()
        self.on_disk: set[str] = set()
        self.resumed: list[str | None] = []

    @property
    def offers_continuation(self) -> bool:
        return self._offers

    def has_session(self, session: str, cwd: str) -> bool:
        return session not in self.on_disk

    async def open(self, child: ProductChild) -> None:
        await super().open(child)
        self.resumed.append(child.resume)
        if child.resume is not None and child.resume in self.missing:
            raise child.fail(CONTINUATION_UNAVAILABLE_CATEGORY)
        child.session_id = child.resume or str(uuid.uuid4())

    async def run(self, child: ProductChild) -> str:
        assert child.session_id is not None
        earlier = self.transcripts.setdefault(child.session_id, [])
        if child.task == "answer recall":
            await super().run(child)
            return " | ".join(earlier)
        earlier.append(child.task)
        return await super().run(child)


@pytest.fixture
async def service() -> AsyncIterator[SubagentService]:
    async with SubagentService() as subagents:
        yield subagents


def test_a_handle_round_trips_as_one_token_and_a_bad_token_is_refused_without_echo() -> None:
    handle = ContinuationHandle(provider="codex-main", product="codex", session="019a-ff")
    token = handle.dumps()
    assert token.startswith("dshc1.")
    assert " " not in token
    assert ContinuationHandle.loads(token) == handle
    for bad in ("", "dshc1.%%%", "dshc1." + "e30", "nope." + token[6:], token[:-4]):
        with pytest.raises(SubagentError) as caught:
            ContinuationHandle.loads(bad)
        assert caught.value.code == SubagentErrorCode.INVALID_REQUEST
        assert bad not in caught.value.message or not bad
    with pytest.raises(ValueError, match="session"):
        ContinuationHandle(provider="p", product="codex", session="../../etc/passwd")


async def test_a_finished_turn_carries_a_handle_and_a_follow_up_sees_the_earlier_turn(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = ResumableEcho(EchoConfig())
    service.register_provider(provider)
    first = await delegate(service, "answer one", cwd=tmp_path, provider="echo")
    assert first.stop_reason == COMPLETED
    assert first.text == "one"
    handle = first.continuation
    assert handle is not None
    assert (handle.provider, handle.product) == ("echo", "echo")
    assert_gone(provider)  # the first run's whole tree exited before the follow-up
    second = await delegate(service, "answer recall", cwd=tmp_path, provider="echo", resume=handle)
    assert second.text == "answer one"
    assert provider.resumed == [None, handle.session]
    assert second.continuation == handle  # the same session goes on
    assert len(provider.spawned) == 2
    assert not any(p.tree_alive() for p in provider.spawned)


async def test_without_the_capability_resume_is_refused_before_start_and_no_handle_issued(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = ResumableEcho(EchoConfig(), offers=False)
    service.register_provider(provider)
    assert provider.capabilities.continuation is False
    plain = await delegate(service, "answer one", cwd=tmp_path, provider="echo")
    assert plain.continuation is None
    handle = ContinuationHandle(provider="echo", product="echo", session="s-1")
    spawned = len(provider.spawned)
    with pytest.raises(SubagentError) as caught:
        await delegate(service, "answer two", cwd=tmp_path, provider="echo", resume=handle)
    assert caught.value.code == SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert '"continuation"' in caught.value.message
    assert '"resume"' in caught.value.message
    assert len(provider.spawned) == spawned


@pytest.mark.parametrize(
    ("provider_name", "product", "why"),
    [("other", "echo", "another instance"), ("echo", "codex", "another product")],
)
async def test_a_foreign_handle_gets_the_fixed_refusal_and_starts_nothing(
    service: SubagentService, tmp_path: Path, provider_name: str, product: str, why: str
) -> None:
    provider = ResumableEcho(EchoConfig())
    service.register_provider(provider)
    handle = ContinuationHandle(provider=provider_name, product=product, session="s-1")
    events: list[object] = []
    service.add_listener(events.append)
    with pytest.raises(ContinuationUnavailableError) as caught:
        await delegate(service, "answer x", cwd=tmp_path, provider="echo", resume=handle)
    assert caught.value.code == SubagentErrorCode.CONTINUATION_UNAVAILABLE, why
    assert caught.value.message == CONTINUATION_UNAVAILABLE_MESSAGE
    assert provider.spawned == []
    assert events == []


async def test_a_session_the_product_no_longer_has_is_refused_and_rolled_back(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = ResumableEcho(EchoConfig())
    service.register_provider(provider)
    first = await delegate(service, "answer one", cwd=tmp_path, provider="echo")
    assert first.continuation is not None
    provider.missing.add(first.continuation.session)  # the product lost it (found at open)
    with pytest.raises(ContinuationUnavailableError) as caught:
        await delegate(
            service, "answer two", cwd=tmp_path, provider="echo", resume=first.continuation
        )
    assert caught.value.message == CONTINUATION_UNAVAILABLE_MESSAGE
    assert len(provider.spawned) == 2
    assert_gone(provider)  # the follow-up's product was started, then rolled back
    provider.on_disk.add(first.continuation.session)  # known gone before any spawn
    with pytest.raises(ContinuationUnavailableError):
        await delegate(
            service, "answer two", cwd=tmp_path, provider="echo", resume=first.continuation
        )
    assert len(provider.spawned) == 2


def _tool_context(session: str, cwd: Path) -> ToolCallContext:
    parent = ParentContext(session_id=session, cwd=str(cwd))
    return ToolCallContext(parent=parent, cancel=CancelController().signal)


async def test_the_tool_names_a_short_id_valid_only_in_the_parent_session_that_got_it(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = ResumableEcho(EchoConfig())
    service.register_provider(provider)
    tool = SubagentTool(service, SubagentToolConfig(provider="echo", max_depth="provider-managed"))
    properties = tool.parameters["properties"]
    assert isinstance(properties, dict)
    assert "continue_id" in properties
    mine = _tool_context("parent-a", tmp_path)
    first = await tool.call({"description": "d", "prompt": "answer one"}, mine)
    assert not first.is_error
    assert first.text.startswith("one\n\n[continuation id: c-")
    short = first.text.split("[continuation id: ")[1].split(" ")[0]
    follow = await tool.call(
        {"description": "d", "prompt": "answer recall", "continue_id": short}, mine
    )
    assert follow.text.startswith("answer one\n\n[continuation id: c-"), follow.text
    spawned = len(provider.spawned)
    other = _tool_context("parent-b", tmp_path)
    for context, continue_id in ((other, short), (mine, "c-00000000"), (mine, "")):
        refused = await tool.call(
            {"description": "d", "prompt": "answer recall", "continue_id": continue_id}, context
        )
        assert (refused.is_error, refused.text) == (True, f"Error: {CONTINUE_ID_REFUSED}")
    assert len(provider.spawned) == spawned  # a refused id starts nothing


async def test_the_tool_offers_no_continue_id_without_the_capability(
    service: SubagentService, tmp_path: Path
) -> None:
    service.register_provider(ResumableEcho(EchoConfig(), offers=False))
    tool = SubagentTool(service, SubagentToolConfig(provider="echo", max_depth="provider-managed"))
    properties = tool.parameters["properties"]
    assert isinstance(properties, dict)
    assert "continue_id" not in properties
    result = await tool.call(
        {"description": "d", "prompt": "answer one"}, _tool_context("a", tmp_path)
    )
    assert result.text == "one"  # no id is named
    refused = await tool.call(
        {"description": "d", "prompt": "answer one", "continue_id": "c-1"},
        _tool_context("a", tmp_path),
    )
    assert refused.text == f"Error: {CONTINUE_ID_REFUSED}"


def test_short_ids_are_bounded_and_scoped() -> None:
    ids = ContinuationIds(limit=3)
    handle = ContinuationHandle(provider="p", product="x", session="s")
    issued = [ids.issue("a", handle) for _ in range(5)]
    assert len(ids) == 3
    assert len(set(issued)) == 5
    assert ids.resolve("a", issued[0]) is None  # the oldest was forgotten
    assert ids.resolve("a", issued[-1]) == handle
    assert ids.resolve("b", issued[-1]) is None
