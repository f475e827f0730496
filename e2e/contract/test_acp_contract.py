"""The contract kit's keyless and loader tiers against the ACP provider and a real agent.

The pinned native codex-acp (installed by ``scripts/install-acp-agent``) runs against
the kit's loopback Responses fixture; every
request is answered by the kit directive found in its body (``complete`` → the token,
``fail`` → HTTP 500 carrying the planted raw error, ``hold`` → an open stream, ``reach``
→ a shell call, then the token and its output).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from acp_agent import codex_acp_or_skip
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
from dsh_subagent_acp import AcpConfig, AcpProvider

# A slug codex-acp knows: an unknown one makes it stream a metadata warning as answer text.
MODEL = "gpt-5.4-mini"


# The acp library's connection is asyncio-only.
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def codex_acp() -> str:
    """The native codex-acp binary, installed on demand by the project's script."""
    return codex_acp_or_skip()


class TestAcpContract(ProviderContract):
    entry_point_name = "acp"
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
    def provider_factory(self, responses: ResponsesFixture, codex_acp: str) -> ProviderFactory:
        self._command = codex_acp

        def make(setup: ChildSetup) -> AcpProvider:
            self._router.error_text = setup.error_text
            env = codex_keyless_env(setup.scratch, codex_home=setup.home.codex_home)
            # Its own command sandbox (bubblewrap) cannot start inside the kernel policy
            # dsh applies (docs/security.md, ACP agents): the policy is the sandbox, and the
            # confinement rules need the model's command to run.
            write_codex_config(
                setup.home.codex_home,
                responses.base_url,
                model=MODEL,
                approval_policy="never",
                sandbox_mode="danger-full-access",
            )
            config = AcpConfig(
                command=codex_acp,
                env={**env, **setup.env, "RUST_LOG": "warn"},
                cwd=setup.cwd_override,
                # codex-acp never exits on stdin EOF: a short EOF window keeps dispose quick.
                dispose_eof_grace=0.2,
                dispose_grace=2.0,
                # The kit's opt-in continuation rules run against codex-acp's session/load.
                continuation=True,
            )
            return AcpProvider(config)

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
        return {"command": "codex-acp", "env": dict(setup.env)}
