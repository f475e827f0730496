"""The contract kit's keyless and loader tiers against the real Codex provider.

The pinned Codex app-server runs against the kit's loopback Responses fixture; every
request is answered by the kit directive found in its body (``complete`` → the token,
``fail`` → HTTP 500 carrying the planted raw error, ``hold`` → an open stream).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from dsh_contract_tests import (
    ChildSetup,
    ProviderContract,
    ProviderFactory,
    ResponsesDirectiveRoute,
)
from dsh_contract_tests.fixtures.responses import (
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent_codex import CodexConfig, CodexProvider


@pytest.fixture
def anyio_backend() -> str:
    # The provider runs on trio too (its package tests use both backends); the real
    # product tier runs once, on asyncio, to keep the shared cores for other engineers.
    return "asyncio"


class TestCodexContract(ProviderContract):
    entry_point_name = "codex"
    hold_timeout = 90.0
    settle_timeout = 90.0
    secret_examples = 2

    @pytest.fixture
    def responses(self) -> Iterator[ResponsesFixture]:
        router = ResponsesDirectiveRoute()
        with ResponsesFixture(route=router) as fixture:
            self._fixture = fixture
            self._router = router
            yield fixture

    @pytest.fixture
    def provider_factory(self, responses: ResponsesFixture) -> ProviderFactory:
        def make(setup: ChildSetup) -> CodexProvider:
            self._router.error_text = setup.error_text
            env = codex_keyless_env(setup.scratch, codex_home=setup.home.codex_home)
            write_codex_config(setup.home.codex_home, responses.base_url)
            # continuation on: the kit's opt-in continuation rules run against real Codex.
            config = CodexConfig(
                env={**env, **setup.env},
                cwd=setup.cwd_override,
                dispose_grace=2.0,
                continuation=True,
            )
            return CodexProvider(config)

        return make

    async def wait_until_holding(self, setup: ChildSetup, token: str) -> None:
        fixture = self._fixture

        def held() -> bool:
            return bool(
                fixture.holding and any(token.encode() in r.raw_body for r in fixture.requests)
            )

        # Polling: the fixture serves from threads and cannot set an anyio event.
        while not held():  # noqa: ASYNC110
            await anyio.sleep(0.02)

    def describe_hold(self, setup: ChildSetup, token: str) -> str:
        return f"the loopback Responses fixture to hold a model request carrying {token}"

    def loader_config(self, setup: ChildSetup) -> dict[str, Any]:
        return {"env": dict(setup.env)}
