"""``dsh demo``: the Quickstart main job.

Keyless (default): the REAL Codex app-server and the REAL Claude Code CLI each receive
one self-contained task through the Loader-composed service, and answer through an
EMBEDDED LOOPBACK MODEL — scripted fake model servers on ``127.0.0.1`` inside this
process (``dsh_contract_tests.fixtures``). No credentials and no internet are used; the
answer text is written by the loopback model, which the output says plainly. Every
product gets a temporary ``HOME`` / ``CODEX_HOME`` / ``CLAUDE_CONFIG_DIR`` / ``TMPDIR``
under one temporary root that is removed at the end.

``--deepseek``: Claude Code talks to DeepSeek's Anthropic-compatible endpoint with the
documented model variables and ``DEEPSEEK_API_KEY``; Codex stays on the loopback model
(Codex speaks only the Responses wire, DeepSeek offers Chat Completions, and the
Responses→Chat bridge is test-private by design).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
from dsh_profiles.errors import UsageError
from dsh_profiles.loader import Composition, compose
from dsh_profiles.profile import parse_profile
from dsh_profiles.runtime import Runtime, delegate, open_runtime
from dsh_subagent import (
    COMPLETED,
    CancelController,
    CancelSignal,
    ParentContext,
    SubagentError,
    SubagentResult,
)
from dsh_subprocess.testing import ProcessWatch, become_subreaper, reap_adopted_zombies

__all__ = ["DEEPSEEK_ANTHROPIC_BASE_URL", "deepseek_claude_env", "run_demo"]

DEEPSEEK_ANTHROPIC_BASE_URL: Final = "https://api.deepseek.com/anthropic"
_DEEPSEEK_MAIN_MODEL: Final = "deepseek-v4-pro[1m]"
_DEEPSEEK_FAST_MODEL: Final = "deepseek-v4-flash"


def deepseek_claude_env(
    api_key: str, base: Path, *, base_url: str = DEEPSEEK_ANTHROPIC_BASE_URL
) -> dict[str, str | None]:
    """Claude Code's environment for DeepSeek's Anthropic-compatible API.

    The key travels only in this in-memory overlay (as ``ANTHROPIC_AUTH_TOKEN``); no
    settings file receives it. ``base`` holds the isolated home directories;
    ``base_url`` is the official endpoint except in tests of this code path.
    """
    dirs = {name: base / name for name in ("home", "claude-config", "tmp", "xdg")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    xdg = dirs["xdg"]
    return {
        "ANTHROPIC_API_KEY": None,
        "ANTHROPIC_AUTH_TOKEN": api_key,
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_MODEL": _DEEPSEEK_MAIN_MODEL,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": _DEEPSEEK_MAIN_MODEL,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": _DEEPSEEK_MAIN_MODEL,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": _DEEPSEEK_FAST_MODEL,
        "CLAUDE_CODE_SUBAGENT_MODEL": _DEEPSEEK_FAST_MODEL,
        "CLAUDE_CODE_EFFORT_LEVEL": "max",
        "HOME": str(dirs["home"]),
        "CLAUDE_CONFIG_DIR": str(dirs["claude-config"]),
        "TMPDIR": str(dirs["tmp"]),
        "XDG_CONFIG_HOME": str(xdg / "config"),
        "XDG_CACHE_HOME": str(xdg / "cache"),
        "XDG_DATA_HOME": str(xdg / "data"),
        "XDG_STATE_HOME": str(xdg / "state"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


@dataclass(frozen=True)
class _Job:
    tool: str
    provider: str
    product: str
    task: str
    expected: str
    model: str


@dataclass
class _Outcome:
    result: SubagentResult | None = None
    failure: str | None = None
    seconds: float = 0.0


async def _one(
    runtime: Runtime, job: _Job, parent: ParentContext, cancel: CancelSignal, out: _Outcome
) -> None:
    started = time.monotonic()
    try:
        out.result = await delegate(
            runtime, job.provider, job.task, parent=parent, cancel=cancel, label="demo"
        )
    except SubagentError as exc:
        out.failure = str(exc)
    finally:
        out.seconds = time.monotonic() - started


async def _cancel_on_signal(controller: CancelController, err: TextIO) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            print(f"dsh demo: {signal.Signals(signum).name}: cancelling both runs", file=err)
            controller.cancel("interrupted")


async def _delegate_all(
    composition: Composition, jobs: list[_Job], parent: ParentContext, err: TextIO
) -> list[_Outcome]:
    outcomes = [_Outcome() for _ in jobs]
    controller = CancelController()
    async with open_runtime(composition) as runtime, anyio.create_task_group() as outer:
        outer.start_soon(_cancel_on_signal, controller, err)
        async with anyio.create_task_group() as tg:
            for job, outcome in zip(jobs, outcomes, strict=True):
                tg.start_soon(_one, runtime, job, parent, controller.signal, outcome)
        outer.cancel_scope.cancel()
    return outcomes


def _fixtures() -> Any:
    try:
        from dsh_contract_tests.fixtures import keyless_profile, scripted
    except ImportError as exc:  # pragma: no cover - depends on the installed extra
        raise UsageError("dsh demo needs the demo extra: pip install 'dsh-cli[demo]'") from exc
    return keyless_profile, scripted


def run_demo(
    out: TextIO,
    err: TextIO,
    *,
    deepseek: bool = False,
    deepseek_base_url: str = DEEPSEEK_ANTHROPIC_BASE_URL,
) -> int:
    """Run the Quickstart main job; return the process exit status.

    Args:
        out: Where the report goes.
        err: Where signal notices go (products' own stderr is logged; `dsh -v` shows it).
        deepseek: Claude Code talks to DeepSeek (needs ``DEEPSEEK_API_KEY``).
        deepseek_base_url: The Anthropic-compatible endpoint; only tests change it.
    """
    api_key = os.environ.get("DEEPSEEK_API_KEY", "") if deepseek else ""
    if deepseek and not api_key:
        raise UsageError("dsh demo --deepseek needs DEEPSEEK_API_KEY in the environment")
    keyless_profile, scripted = _fixtures()
    subreaper = become_subreaper()
    wall = time.monotonic()
    codex_answer = "DSH-DEMO: the real Codex app-server answered through the loopback model."
    claude_answer = "DSH-DEMO: the real Claude Code CLI answered through the loopback model."
    nonce = f"DSH_CLAUDE_DEEPSEEK_{secrets.token_hex(16)}"
    # The kit's keyless setup, with each product's own defaults (the tasks run no command);
    # it removes the temporary root when it stops.
    with keyless_profile.serve_keyless_profile(
        scripted.answer_script(codex_answer),
        claude_script=scripted.answer_script(claude_answer),
        run_commands_unasked=False,
        continuation=False,
        temp_prefix="dsh-demo-",
    ) as served:
        root, resp, msgs = served.root, served.models.responses, served.models.messages
        workspace = root / "workspace"
        workspace.mkdir()
        claude_env = None
        if deepseek:
            claude_env = deepseek_claude_env(api_key, root / "claude", base_url=deepseek_base_url)
            claude_task = f"Reply with exactly {nonce} and nothing else. Do not use tools."
            claude_expected, claude_model = nonce, f"DeepSeek ({deepseek_base_url})"
        else:
            claude_task = "Reply with the demo sentence."
            claude_expected, claude_model = claude_answer, f"loopback model {msgs.base_url}"
        jobs = [
            _Job(
                keyless_profile.CODEX_TOOL,
                "codex",
                "Codex app-server",
                "Reply with the demo sentence.",
                codex_answer,
                f"loopback model {resp.base_url}/responses",
            ),
            _Job(
                keyless_profile.CLAUDE_TOOL,
                "claude-code",
                "Claude Code CLI",
                claude_task,
                claude_expected,
                claude_model,
            ),
        ]
        # In memory: it drops the caller's Claude Code model variables (a file cannot say
        # so), and a DeepSeek key never reaches a file.
        source = "<dsh demo profile>"
        data = served.profile_data(claude_env=claude_env)
        composition = compose(parse_profile(data, source), source=source)
        claude_url = deepseek_base_url if deepseek else msgs.base_url
        _banner(out, deepseek, root, resp.base_url, claude_url)
        parent = ParentContext(session_id="dsh-demo", cwd=str(workspace))
        with ProcessWatch() as watch:
            outcomes = anyio.run(_delegate_all, composition, jobs, parent, err)
        survivors = watch.alive()
        reap_adopted_zombies()  # every delegation has settled: nothing is waited for
        ok = _report(out, jobs, outcomes, resp, msgs, deepseek)
        seen = watch.seen
    names = ", ".join(sorted({p.name for p in seen})) or "none"
    print(f"process tree: {len(seen)} process(es) ran ({names}); ", end="", file=out)
    if survivors:
        print("STILL ALIVE: " + ", ".join(f"{p.name}[{p.pid}]" for p in survivors), file=out)
    else:
        print(
            "none is alive now" + (" (watched as child subreaper)" if subreaper else ""), file=out
        )
    print(f"temporary root {root} removed: {not root.exists()}", file=out)
    print(f"wall time: {time.monotonic() - wall:.1f}s", file=out)
    return 0 if ok and not survivors and not root.exists() else 1


def _banner(out: TextIO, deepseek: bool, root: Path, codex_url: str, claude_url: str) -> None:
    print("dsh demo — REAL products, EMBEDDED LOOPBACK MODEL", file=out)
    print(
        "  The real Codex app-server and the real Claude Code CLI run as child processes.\n"
        "  Their model is a scripted fake server on 127.0.0.1 inside this process: no\n"
        "  credentials, no internet. The answers below are written by that loopback model.",
        file=out,
    )
    if deepseek:
        print(
            "  --deepseek: Claude Code talks to DeepSeek instead and must echo a random nonce;\n"
            "  Codex stays on the loopback model (DeepSeek has no Responses endpoint).",
            file=out,
        )
    print(f"  Codex model:       {codex_url}/responses", file=out)
    print(f"  Claude Code model: {claude_url}", file=out)
    print(f"  temporary HOME/CODEX_HOME/CLAUDE_CONFIG_DIR/TMPDIR under {root}", file=out)
    print("", file=out)


def _report(
    out: TextIO, jobs: list[_Job], outcomes: list[_Outcome], resp: Any, msgs: Any, deepseek: bool
) -> bool:
    ok = True
    counts = {"codex": len(resp.requests), "claude-code": len(msgs.message_requests())}
    for job, outcome in zip(jobs, outcomes, strict=True):
        print(f"[{job.provider}] {job.product} via tool {job.tool}", file=out)
        print(f"  task:        {job.task}", file=out)
        print(f"  model:       {job.model}", file=out)
        if outcome.result is None:
            print(f"  FAILED TO START: {outcome.failure}", file=out)
            ok = False
            continue
        result = outcome.result
        answer = result.text.strip() if deepseek and job.provider == "claude-code" else result.text
        print(f"  answer:      {result.text.strip()}", file=out)
        print(f"  stop reason: {result.stop_reason}", file=out)
        if result.diagnostic:
            print(f"  diagnostic:  {result.diagnostic}", file=out)
        if not (deepseek and job.provider == "claude-code"):
            print(f"  loopback model requests: {counts[job.provider]}", file=out)
        print(f"  took {outcome.seconds:.1f}s (including whole-tree teardown)", file=out)
        ok = ok and result.stop_reason == COMPLETED and answer == job.expected
    print("", file=out)
    return ok
