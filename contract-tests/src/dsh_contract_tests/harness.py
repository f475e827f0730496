"""The per-test harness every rule of the kit shares: setups, requests, the service, processes.

One :class:`ContractHarness` is built per kit test (the ``contract`` fixture of
:class:`~dsh_contract_tests.ProviderContract`). It hands out fresh workspaces and
:class:`ChildSetup` directories, builds start requests carrying a behaviour directive,
drives the provider through a fresh service, bounds every wait, and checks that no process
of the run's tree is left.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_subagent import (
    CancelController,
    ParentContext,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
    TextBlock,
)

from dsh_contract_tests.driver import ServiceDriver, drive
from dsh_contract_tests.processes import ProcessWatch
from dsh_contract_tests.scenario import (
    ENV_ERROR_TEXT,
    ENV_READY_DIR,
    ENV_STDERR_TEXT,
    Behaviour,
    ChildSetup,
    Directive,
    PlantedSecrets,
    ProductHome,
    ProviderFactory,
    new_token,
)

__all__ = ["OVERLAY_CREDENTIAL_NAME", "ContractHarness", "wait_ready_file"]

OVERLAY_CREDENTIAL_NAME = "CONTRACT_OVERLAY_API_KEY"
"""Credential-shaped variable the kit layers explicitly (must reach the child)."""


@dataclass
class ContractHarness:
    """Per-test helper the kit's tests share: setups, requests, the service, processes.

    Attributes:
        factory: The author's provider factory.
        root: A private temporary directory for this test.
        monkeypatch: Used to plant parent environment variables and move the host cwd.
        hold_timeout: Seconds a holding child may take to reach its hold point.
        settle_timeout: Seconds any single start, result or dispose may take.
        wait_until_holding: How the kit learns a hold run is working (see
            :meth:`ProviderContract.wait_until_holding`).
    """

    factory: ProviderFactory
    root: Path
    monkeypatch: pytest.MonkeyPatch
    hold_timeout: float
    settle_timeout: float
    wait_until_holding: Callable[[ChildSetup, str], Awaitable[None]]
    watch: ProcessWatch = field(default_factory=ProcessWatch)
    _count: int = 0

    def _dir(self, name: str) -> Path:
        self._count += 1
        path = self.root / f"{self._count:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def workspace(self, name: str = "workspace") -> Path:
        """A fresh parent-session workspace directory."""
        return self._dir(name)

    def setup(
        self, *, cwd_override: str | None = None, secrets: PlantedSecrets | None = None
    ) -> ChildSetup:
        """A fresh :class:`ChildSetup` with temporary homes and the kit's overlay."""
        base = self._dir("setup")
        home = ProductHome(base / "home", base / "codex-home", base / "claude", base / "tmp")
        for path in (home.home, home.codex_home, home.claude_config_dir, home.tmpdir):
            path.mkdir()
        ready = base / "ready"
        ready.mkdir()
        scratch = base / "scratch"
        scratch.mkdir()
        error_text = secrets.raw_error if secrets else "contract raw error " + "中" * 1500
        stderr_text = secrets.stderr if secrets else "contract stderr line"
        env = {
            **home.env(),
            ENV_READY_DIR: str(ready),
            ENV_ERROR_TEXT: error_text,
            ENV_STDERR_TEXT: stderr_text,
            OVERLAY_CREDENTIAL_NAME: "overlay-" + uuid.uuid4().hex,
        }
        return ChildSetup(
            env=env,
            cwd_override=cwd_override,
            home=home,
            ready_dir=ready,
            scratch=scratch,
            error_text=error_text,
            stderr_text=stderr_text,
            secrets=secrets,
        )

    def provider(self, setup: ChildSetup) -> SubagentProvider:
        """Build the provider under test through the author's factory."""
        return self.factory(setup)

    def request(
        self,
        behaviour: Behaviour,
        *,
        cwd: Path | None,
        cancel: CancelController | None = None,
        task_text: str = "",
        **fields: Any,
    ) -> tuple[SubagentStartRequest, Directive, CancelController]:
        """A start request whose task carries the behaviour directive."""
        directive = Directive(behaviour, new_token())
        controller = cancel or CancelController()
        text = f"{directive.line}\nContract task. {task_text}".rstrip()
        request = SubagentStartRequest(
            prompt=(TextBlock(text=text),),
            parent=ParentContext(
                session_id="contract-" + uuid.uuid4().hex[:8],
                cwd=None if cwd is None else str(cwd),
            ),
            cancel=controller.signal,
            label="contract",
            **fields,
        )
        return request, directive, controller

    @asynccontextmanager
    async def service(self, provider: SubagentProvider) -> AsyncIterator[ServiceDriver]:
        """A fresh service with ``provider`` registered."""
        async with drive(provider) as driver:
            yield driver

    async def result(self, run: SubagentRun) -> SubagentResult:
        """``run.result()`` bounded by the settle timeout."""
        with anyio.fail_after(self.settle_timeout):
            return await run.result()

    async def dispose(self, run: SubagentRun) -> None:
        """``run.dispose()`` bounded by the settle timeout."""
        with anyio.fail_after(self.settle_timeout):
            await run.dispose()

    async def holding(self, setup: ChildSetup, directive: Directive) -> None:
        """Wait until the hold run reached its hold point."""
        with anyio.fail_after(self.hold_timeout):
            await self.wait_until_holding(setup, directive.token)

    def assert_quiescent(self, when: str) -> None:
        """Fail (after killing them) if any process of the run's tree is alive."""
        leftover = self.watch.kill_leftovers()
        assert not leftover, f"processes of the run's tree alive {when}: {'; '.join(leftover)}"


async def wait_ready_file(setup: ChildSetup, token: str) -> None:
    """Return once the child wrote the ready file of ``token`` (the default hold signal)."""
    path = setup.ready_path(token)
    while not path.exists():  # noqa: ASYNC110 - the child signals through the file system
        await anyio.sleep(0.01)
