"""The contract kit's keyless and loader tiers against the known ACP agent profiles.

Each class runs one real agent — installed at its pinned version by
``scripts/install-acp-agent`` and started exactly as its shipped profile says — against
the kit's loopback model fixture of the wire it speaks (Messages, Chat Completions or
Gemini), keyless through the profile's documented base-URL setting. Every model request
is answered by the kit directive found in its body (``complete`` → the token, ``fail`` →
an HTTP error carrying the planted raw error, ``hold`` → an open stream, ``reach`` → a
call of the agent's shell tool, then the token and its output).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import anyio
import pytest
from acp_agent import agent_or_skip
from acp_keyless import ModelFixture, agent_config, directive_fixture
from dsh_contract_tests import ChildSetup, ContractHarness, ProviderContract, ProviderFactory
from dsh_subagent_acp import AcpProvider, agent_profile


# The acp library's connection is asyncio-only.
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _AgentContract(ProviderContract):
    entry_point_name = "acp"
    agent: ClassVar[str]
    hold_timeout = 120.0
    settle_timeout = 120.0
    secret_examples = 2
    concurrency = 2

    @pytest.fixture
    def model(self) -> Iterator[ModelFixture]:
        fixture, route = directive_fixture(agent_profile(self.agent))
        with fixture:
            self._fixture = fixture
            self._route = route
            yield fixture

    @pytest.fixture
    def provider_factory(self, model: ModelFixture) -> ProviderFactory:
        entry = agent_or_skip(self.agent)

        def make(setup: ChildSetup) -> AcpProvider:
            self._route.error_text = setup.error_text
            config = agent_config(
                self.agent,
                entry,
                setup.scratch / "agent",
                model,
                env=dict(setup.env),
                cwd=setup.cwd_override,
                # The unattended mode users choose: the reach rules' shell call runs (and
                # meets the confinement) instead of being refused by the permission policy.
                permission="allow",
            )
            return AcpProvider(config)

        return make

    async def wait_until_holding(self, setup: ChildSetup, token: str) -> None:
        fixture = self._fixture

        def held() -> bool:
            seen = any(fixture.carries(r, token) for r in fixture.model_requests())
            return bool(fixture.holding and seen)

        # Polling: the fixture serves from threads and cannot set an anyio event.
        while not held():  # noqa: ASYNC110
            await anyio.sleep(0.02)

    def describe_hold(self, setup: ChildSetup, token: str) -> str:
        return f"the loopback {self._fixture.wire} fixture to hold a model request carrying {token}"

    def loader_config(self, setup: ChildSetup) -> dict[str, Any]:
        profile = agent_profile(self.agent)
        command, args = profile.command(profile.entry)
        return {"command": command, "args": list(args), "env": {**profile.env, **setup.env}}


class TestClaudeAgentAcpContract(_AgentContract):
    agent = "claude-agent-acp"


class TestGeminiCliContract(_AgentContract):
    agent = "gemini-cli"


class TestQwenCodeContract(_AgentContract):
    agent = "qwen-code"


class TestOpenCodeContract(_AgentContract):
    agent = "opencode"


# Copilot CLI 1.0.102 reports a failed model request as answer text and ends the turn
# `end_turn` ("Error: Failed to get response from the AI model; retried 5 times ... Last
# error: 500 <the server's message>"), so over ACP a failure is indistinguishable from an
# answer: the run settles `completed`, without a diagnostic, with the product's raw error
# in the output. No provider-side mapping can tell them apart without parsing prose.
_COPILOT_FAILS_AS_TEXT = (
    "Copilot CLI 1.0.102 reports a failed model request as answer text with stopReason "
    "end_turn: the run settles completed, the raw error in its output (docs/agents.md#copilot)"
)


class TestCopilotContract(_AgentContract):
    agent = "copilot"

    @pytest.mark.xfail(strict=True, reason=_COPILOT_FAILS_AS_TEXT)
    async def test_failing_child_settles_as_a_result(self, contract: ContractHarness) -> None:
        await super().test_failing_child_settles_as_a_result(contract)

    @pytest.mark.xfail(strict=True, reason=_COPILOT_FAILS_AS_TEXT)
    async def test_failure_diagnostic_is_the_fixed_line(self, contract: ContractHarness) -> None:
        await super().test_failure_diagnostic_is_the_fixed_line(contract)

    @pytest.mark.xfail(strict=True, reason=_COPILOT_FAILS_AS_TEXT)
    async def test_diagnostic_is_bounded(self, contract: ContractHarness) -> None:
        await super().test_diagnostic_is_bounded(contract)

    @pytest.mark.xfail(strict=True, reason=_COPILOT_FAILS_AS_TEXT)
    def test_no_planted_secret_leaks(
        self, contract: ContractHarness, anyio_backend: str, pytestconfig: pytest.Config
    ) -> None:
        super().test_no_planted_secret_leaks(contract, anyio_backend, pytestconfig)
