"""P3: cancel mid-turn → ``aborted`` → whole tree gone, per product; the Claude SDK's own.

Each sample holds the model request open at the loopback fixture, cancels through the
request's ``CancelController`` once the request is held, and times (a) cancel → the
``aborted`` result and (b) cancel → ``dispose()`` returned, which is after whole-tree
exit. The reference is bare ``claude_agent_sdk.query()`` cancelled by cancelling the task
iterating it (its ``close()`` waits 5 s for a graceful exit before SIGTERM).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from dsh_contract_tests.fixtures.responses import (
    Hold,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import CancelController, SubagentProvider, SubagentService
from dsh_subagent_acp.config import DEFAULT_DISPOSE_EOF_GRACE

from bench.bench_claude import claude_cancel_ours, claude_cancel_sdk
from bench.bench_codex import TASK, codex_home, start_request
from bench.bench_common import Profile, Samples, clock, temp_root

__all__ = ["CancelRow", "run_p3"]

TARGET_SECONDS = 0.25
_ACP_INSTALLER = Path(__file__).resolve().parents[1] / "scripts" / "install-acp-agent"
_ACP_AGENTS_DIR = _ACP_INSTALLER.parents[1] / ".cache" / "acp-agents"
_ACP_MODEL = "gpt-5.4-mini"  # a slug codex-acp knows (products.md pitfall A1)


@dataclass
class CancelRow:
    """One product/side: cancel → aborted, cancel → whole tree gone."""

    product: str
    side: str
    settled: Samples | None
    gone: Samples | None
    honours_sigterm: bool
    notes: list[str] = field(default_factory=list)
    reference: bool = False

    @property
    def met(self) -> bool | None:
        if self.gone is None or not self.honours_sigterm or self.reference:
            return None
        return self.gone.median <= TARGET_SECONDS

    def as_json(self) -> dict[str, Any]:
        return {
            "product": self.product,
            "side": self.side,
            "cancel_to_aborted": None if self.settled is None else self.settled.as_json(),
            "cancel_to_tree_gone": None if self.gone is None else self.gone.as_json(),
            "target": f"cancel→tree gone ≤ {TARGET_SECONDS} s (SIGTERM-honouring products)",
            "target_met": self.met,
            "notes": self.notes,
        }


async def _cancel_held(
    provider: SubagentProvider, workspace: Path, wait_for_hold: Callable[[], None]
) -> tuple[float, float]:
    controller = CancelController()
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start(
            provider.name, start_request(workspace, TASK, cancel=controller.signal)
        )
        await anyio.to_thread.run_sync(wait_for_hold)
        cancelled = clock()
        controller.cancel()
        result = await run.result()
        settled = clock()
        await run.dispose()
        gone = clock()
    if result.stop_reason != "aborted":
        raise RuntimeError(f"{provider.name}: cancelled run settled {result.stop_reason}")
    return settled - cancelled, gone - cancelled


async def _codex_once(root: Path) -> tuple[float, float]:
    with ResponsesFixture([Hold()]) as fixture:
        home = codex_home(root, fixture.base_url)
        return await _cancel_held(home.provider(), home.workspace, fixture.wait_for_hold)


def acp_agent() -> tuple[str | None, str]:
    """The pinned codex-acp binary via the project's installer (fast path when present)."""
    try:
        done = subprocess.run(
            [str(_ACP_INSTALLER)],
            # The checkout's ignored cache, as the tests use: never the user's data dir.
            env={**os.environ, "DSH_ACP_AGENTS_DIR": str(_ACP_AGENTS_DIR)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"scripts/install-acp-agent could not run: {exc}"
    if done.returncode != 0:
        return None, f"scripts/install-acp-agent exited {done.returncode} (no agent)"
    return done.stdout.strip().splitlines()[-1], "codex-acp 0.16.0"


def _acp_once_factory(binary: str, eof_grace: float | None) -> Callable[[Path], Awaitable[Any]]:
    async def once(root: Path) -> tuple[float, float]:
        from dsh_subagent_acp import AcpConfig, AcpProvider

        with ResponsesFixture([Hold()]) as fixture:
            env = codex_keyless_env(root)
            write_codex_config(env["CODEX_HOME"], fixture.base_url, model=_ACP_MODEL)
            env["RUST_LOG"] = "warn"
            workspace = root / "workspace"
            workspace.mkdir(exist_ok=True)
            extra: dict[str, Any] = {}
            if eof_grace is not None:
                extra["dispose_eof_grace"] = eof_grace
            provider = AcpProvider(
                AcpConfig(provider_name="codex-acp", command=binary, env=env, **extra)
            )
            return await _cancel_held(provider, workspace, fixture.wait_for_hold)

    return once


async def _samples(
    once: Callable[[Path], Awaitable[Any]], root: Path, count: int
) -> tuple[Samples, Samples]:
    settled: list[float] = []
    gone: list[float] = []
    for _ in range(count):
        a, b = await once(root)
        settled.append(a)
        gone.append(b)
    return Samples(tuple(settled)), Samples(tuple(gone))


async def run_p3(profile: Profile) -> list[CancelRow]:
    """Codex, Claude Code and codex-acp through our providers; the Claude SDK's own."""
    rows: list[CancelRow] = []
    n = profile.p3_ours
    with temp_root("p3") as root:
        await _codex_once(root / "codex")  # warm-up: CODEX_HOME initialised once
        settled, gone = await _samples(_codex_once, root / "codex", n)
        rows.append(CancelRow("Codex app-server 0.163.0", "ours", settled, gone, True))

        await claude_cancel_ours(root / "claude")
        settled, gone = await _samples(claude_cancel_ours, root / "claude", n)
        rows.append(CancelRow("Claude Code 2.1.332", "ours", settled, gone, True))
        settled, gone = await _samples(
            claude_cancel_sdk, root / "claude-sdk", profile.p3_claude_sdk
        )
        rows.append(
            CancelRow(
                "Claude Code 2.1.332",
                "claude_agent_sdk.query() task cancel",
                settled,
                gone,
                True,
                ["reference; the SDK's close() waits 5 s for a graceful exit before SIGTERM"],
                reference=True,
            )
        )

        binary, why = acp_agent()
        if binary is None:
            rows.append(CancelRow("codex-acp (ACP)", "ours", None, None, True, [why]))
        else:
            tuned = _acp_once_factory(binary, 0.2)
            await tuned(root / "acp")
            settled, gone = await _samples(tuned, root / "acp", n)
            rows.append(
                CancelRow(
                    "codex-acp 0.16.0 (ACP)",
                    "ours, dispose_eof_grace=0.2",
                    settled,
                    gone,
                    True,
                    ["codex-acp never exits on stdin EOF (products.md A7)"],
                )
            )
            if profile.p3_acp_default:
                default = _acp_once_factory(binary, None)
                settled, gone = await _samples(default, root / "acp", profile.p3_acp_default)
                rows.append(
                    CancelRow(
                        "codex-acp 0.16.0 (ACP)",
                        f"ours, default dispose_eof_grace={DEFAULT_DISPOSE_EOF_GRACE}",
                        settled,
                        gone,
                        True,
                        ["dispose waits the whole EOF grace before SIGTERM"],
                    )
                )
    return rows
