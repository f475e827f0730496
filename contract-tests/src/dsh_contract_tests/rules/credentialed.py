"""Rules of the ``credentialed`` area: the real product against the real DeepSeek service."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from dsh_subagent import COMPLETED, ParentContext, SubagentProvider, SubagentStartRequest, TextBlock

from dsh_contract_tests.failures import kit_skip, requirement
from dsh_contract_tests.harness import ContractHarness, CredentialedTests, wait_ready_file
from dsh_contract_tests.scenario import ChildSetup

__all__ = ["test_real_service_returns_unique_answer"]


@requirement("credentialed:unique-answer")
@pytest.mark.anyio
async def test_real_service_returns_unique_answer(
    self: CredentialedTests,
    credentialed_factory: Callable[[str, ChildSetup], SubagentProvider],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A random nonce comes back as the complete answer; nothing is left running."""
    key = os.environ.get("DEEPSEEK_API_KEY")
    if not key:
        kit_skip("DEEPSEEK_API_KEY is not set: the credentialed tier needs a real key")
    harness = ContractHarness(
        factory=lambda setup: credentialed_factory(key, setup),
        root=tmp_path / "contract",
        monkeypatch=monkeypatch,
        hold_timeout=self.settle_timeout,
        settle_timeout=self.settle_timeout,
        wait_until_holding=wait_ready_file,
    )
    harness.root.mkdir()
    monkeypatch.delenv("DEEPSEEK_API_KEY")  # only the explicit configuration carries it
    nonce = uuid.uuid4().hex
    provider = harness.provider(harness.setup())
    request = SubagentStartRequest(
        prompt=(TextBlock(text=f"Reply with exactly this string and nothing else: {nonce}"),),
        parent=ParentContext(session_id="contract-credentialed", cwd=str(harness.workspace())),
    )
    async with harness.service(provider) as svc:
        run = await harness.start(svc, request)
        try:
            result = await harness.result(run)
        finally:
            await harness.dispose(run)
    assert result.stop_reason == COMPLETED, (
        f"the run settled {result.stop_reason} ({(result.diagnostic or '').split(chr(10))[0]}), "
        f"not {COMPLETED}"
    )
    assert result.text.strip() == nonce, (
        f"the answer is {result.text.strip()[:200]!r}, not exactly the nonce {nonce!r}"
    )
    await harness.check_quiescent("after dispose")
