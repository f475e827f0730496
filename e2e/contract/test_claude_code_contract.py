"""The contract kit's keyless and loader tiers against the real Claude Code provider.

The bundled Claude Code CLI (through the official Agent SDK) runs against the kit's
loopback Messages fixture; every request is answered by the kit directive found in its
body (``complete`` → the token, ``fail`` → HTTP 500 carrying the planted raw error,
``hold`` → an open stream).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from dsh_contract_tests import ChildSetup, ProviderContract, ProviderFactory, find_directive
from dsh_contract_tests.fixtures.messages import (
    Behaviour,
    Hold,
    HttpError,
    MessagesFixture,
    RecordedRequest,
    TextAnswer,
    keyless_claude_home,
)
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider


@pytest.fixture
def anyio_backend() -> str:
    # The SDK runs on trio too (package tests use both backends); the real-product tier
    # runs once, on asyncio, to keep the shared cores for the other engineers.
    return "asyncio"


def _text(request: RecordedRequest) -> str:
    return json.dumps(request.body, ensure_ascii=False)


class _RoutedMessages(MessagesFixture):
    """Answers each message request by the directive in its body instead of a FIFO script.

    The handler records the request and then asks for the next behaviour in the same
    thread, so a thread-local hand-over pairs them.
    """

    error_text = "fixture error"

    def __init__(self) -> None:
        super().__init__()
        self._current = threading.local()
        self.held_tokens: list[str] = []

    def _add(self, request: RecordedRequest) -> None:
        self._current.request = request
        super()._add(request)

    def _next_behaviour(self) -> Behaviour | None:
        request: RecordedRequest | None = getattr(self._current, "request", None)
        directive = None if request is None else find_directive(_text(request))
        if directive is None:
            return TextAnswer("ok")
        if directive.behaviour == "complete":
            return TextAnswer(directive.token)
        if directive.behaviour == "fail":
            return HttpError(500, self.error_text)
        return Hold()


class TestClaudeCodeContract(ProviderContract):
    entry_point_name = "claude-code"
    hold_timeout = 120.0
    settle_timeout = 120.0
    secret_examples = 2

    @pytest.fixture
    def messages(self) -> Iterator[_RoutedMessages]:
        fixture = _RoutedMessages()
        with fixture:
            self._fixture = fixture
            yield fixture

    @pytest.fixture
    def provider_factory(self, messages: _RoutedMessages) -> ProviderFactory:
        def make(setup: ChildSetup) -> ClaudeCodeProvider:
            messages.error_text = setup.error_text
            home = keyless_claude_home(setup.scratch, messages.base_url)
            env: dict[str, str | None] = {**home.env, **setup.env}
            env["CLAUDE_CONFIG_DIR"] = str(home.config_dir)
            config = ClaudeCodeConfig(env=env, cwd=setup.cwd_override, dispose_grace=2.0)
            return ClaudeCodeProvider(config)

        return make

    async def wait_until_holding(self, setup: ChildSetup, token: str) -> None:
        fixture = self._fixture

        def held() -> bool:
            return bool(fixture.holding and any(token in _text(r) for r in fixture.requests()))

        # Polling: the fixture serves from threads and cannot set an anyio event.
        while not held():  # noqa: ASYNC110
            await anyio.sleep(0.02)

    def loader_config(self, setup: ChildSetup) -> dict[str, Any]:
        return {"env": dict(setup.env)}
