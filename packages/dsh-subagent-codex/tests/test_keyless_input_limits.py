"""What the real Codex cannot take, against the loopback fixture (keyless tier).

* Over the input limit: the pinned app-server rejects a ``turn/start`` whose text inputs
  total more than 1,048,576 characters (``-32602``, ``input_too_large``). The provider
  refuses such a task before anything starts, naming its length and the limit; a
  rejection that still happens (past the check) has its own category.
* Text it cannot parse: a lone surrogate makes the app-server log "Failed to deserialize
  JSONRPCMessage" and never answer. The service refuses such text at admission; past it,
  the response bound ends the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from codex_harness import make_request
from dsh_contract_tests.fixtures.responses import (
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    ParentContext,
    ProductChild,
    SubagentError,
    SubagentErrorCode,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_codex import MAX_TASK_CHARS, CodexConfig, CodexProvider
from dsh_subprocess.testing import host_descendants

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

TAIL = " Reply with OK."
LINE = "Product subagent failure (product: Codex; stage: {stage}; category: {category})"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fixture() -> Iterator[ResponsesFixture]:
    with ResponsesFixture() as running:
        running.enqueue(PlainAnswer("OK", "final_answer"))
        yield running


@pytest.fixture
def env(tmp_path: Path, fixture: ResponsesFixture) -> dict[str, str]:
    root = tmp_path / "keyless"
    root.mkdir()
    keyless = codex_keyless_env(root)
    write_codex_config(keyless["CODEX_HOME"], fixture.base_url)
    return dict(keyless)


class _Unchecked(CodexProvider):
    """The provider without its admission check: what the app-server itself does."""

    max_task_chars: ClassVar[int | None] = None


async def _through_service(provider: CodexProvider, task: str, cwd: Path) -> SubagentResult:
    async with SubagentService() as service:
        service.register_provider(provider)
        request = SubagentStartRequest(
            prompt=(TextBlock(text=task),), parent=ParentContext(session_id="s", cwd=str(cwd))
        )
        with anyio.fail_after(240):
            run = await service.start(provider.name, request)
            try:
                return await run.result()
            finally:
                await run.dispose()


def _task(chars: int) -> str:
    return "x" * (chars - len(TAIL)) + TAIL


async def test_a_task_over_the_input_limit_is_refused_before_anything_starts(
    env: dict[str, str], fixture: ResponsesFixture, tmp_path: Path
) -> None:
    provider = CodexProvider(CodexConfig(env=env))
    with pytest.raises(SubagentError) as caught:
        await _through_service(provider, _task(MAX_TASK_CHARS + 1), tmp_path)
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    assert caught.value.message == (
        "subagent-codex: the task is 1,048,577 characters; Codex accepts at most 1,048,576 "
        "(its input limit): shorten it or pass the content as a file"
    )
    assert fixture.requests == ()
    assert [p for p in host_descendants() if "codex" in " ".join(p.cmdline())] == []


async def test_a_task_at_the_input_limit_reaches_the_real_codex(
    env: dict[str, str], fixture: ResponsesFixture, tmp_path: Path
) -> None:
    # Characters, not bytes: a two-byte character counts once, as the app-server counts.
    task = "é" * (MAX_TASK_CHARS - len(TAIL)) + TAIL
    result = await _through_service(CodexProvider(CodexConfig(env=env)), task, tmp_path)
    assert (result.stop_reason, result.text) == ("completed", "OK")


async def test_past_the_check_the_real_codex_rejection_says_what_happened(
    env: dict[str, str], fixture: ResponsesFixture, tmp_path: Path
) -> None:
    # Two blocks: the limit holds for all text inputs together.
    provider = _Unchecked(CodexConfig(env=env))
    async with anyio.create_task_group() as tg:
        request = make_request(
            tg, str(tmp_path), prompt=("x" * (MAX_TASK_CHARS // 2), _task(MAX_TASK_CHARS // 2 + 1))
        )
        with anyio.fail_after(240):
            run = await provider.start(request)
            try:
                result = await run.result()
            finally:
                await run.dispose()
    assert result.stop_reason == "error"
    assert result.diagnostic == LINE.format(stage="turn-start", category="input-too-large")
    assert fixture.requests == ()


async def test_past_admission_a_lone_surrogate_is_ended_by_the_response_bound(
    env: dict[str, str], fixture: ResponsesFixture, tmp_path: Path, monkeypatch: Any
) -> None:
    # provider.start() directly skips the service's UTF-8 admission: the real app-server
    # then never answers turn/start. Only turn/start gets a short bound here (the others
    # cover the binary's startup on a loaded machine).
    def deadline(self: ProductChild) -> float:
        return anyio.current_time() + (2.0 if self.stage == "turn-start" else 600.0)

    monkeypatch.setattr(ProductChild, "response_deadline", deadline)
    provider = CodexProvider(CodexConfig(env=env))
    async with anyio.create_task_group() as tg:
        request = make_request(tg, str(tmp_path), prompt=("fix \udcff this",))
        with anyio.fail_after(240):
            run = await provider.start(request)
            try:
                result = await run.result()
                left = [p for p in host_descendants() if "codex" in " ".join(p.cmdline())]
            finally:
                await run.dispose()
    assert result.diagnostic == LINE.format(stage="turn-start", category="response-timeout")
    assert left == []  # the tree was ended at settlement
    assert fixture.requests == ()
