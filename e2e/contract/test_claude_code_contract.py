"""The contract kit's keyless and loader tiers against the real Claude Code provider.

The bundled Claude Code CLI (through the official Agent SDK) runs against the kit's
loopback Messages fixture; every request is answered by the kit directive found in its
body (``complete`` → the token, ``fail`` → HTTP 500 carrying the planted raw error,
``hold`` → an open stream, ``reach`` → a ``Bash`` call, then the token and its output).
The CLI runs in ``bypassPermissions``, as unattended delegations do: the confinement
rules need its ``Bash`` tool to run the model's command (the default mode denies it, and
the attempt would prove nothing).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from dsh_contract_tests import (
    ChildSetup,
    MessagesDirectiveRoute,
    ProviderContract,
    ProviderFactory,
)
from dsh_contract_tests.fixtures.messages import (
    MessagesFixture,
    keyless_claude_home,
)
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider


@pytest.fixture
def anyio_backend() -> str:
    # The SDK runs on trio too (package tests use both backends); the real-product tier
    # runs once, on asyncio, to keep the shared cores for the other engineers.
    return "asyncio"


class TestClaudeCodeContract(ProviderContract):
    entry_point_name = "claude-code"
    hold_timeout = 120.0
    settle_timeout = 120.0
    secret_examples = 2

    @pytest.fixture
    def messages(self) -> Iterator[MessagesFixture]:
        router = MessagesDirectiveRoute()
        with MessagesFixture(route=router) as fixture:
            self._fixture = fixture
            self._router = router
            yield fixture

    @pytest.fixture
    def provider_factory(self, messages: MessagesFixture) -> ProviderFactory:
        def make(setup: ChildSetup) -> ClaudeCodeProvider:
            self._router.error_text = setup.error_text
            home = keyless_claude_home(setup.scratch, messages.base_url)
            env: dict[str, str | None] = {**home.env, **setup.env}
            env["CLAUDE_CONFIG_DIR"] = str(home.config_dir)
            if os.geteuid() == 0:
                env["IS_SANDBOX"] = "1"  # root refuses the bypass unless told (test_keyless.py)
            # continuation on: the kit's opt-in continuation rules run against real Claude Code.
            config = ClaudeCodeConfig(
                env=env,
                cwd=setup.cwd_override,
                dispose_grace=2.0,
                continuation=True,
                permission_mode="bypassPermissions",
            )
            return ClaudeCodeProvider(config)

        return make

    async def wait_until_holding(self, setup: ChildSetup, token: str) -> None:
        fixture = self._fixture

        def held() -> bool:
            seen = any(token.encode() in r.raw_body for r in fixture.requests())
            return bool(fixture.holding and seen)

        # Polling: the fixture serves from threads and cannot set an anyio event.
        while not held():  # noqa: ASYNC110
            await anyio.sleep(0.02)

    def describe_hold(self, setup: ChildSetup, token: str) -> str:
        return f"the loopback Messages fixture to hold a model request carrying {token}"

    def loader_config(self, setup: ChildSetup) -> dict[str, Any]:
        return {"env": dict(setup.env)}
