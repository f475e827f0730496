"""``dsh demo``: the Quickstart main job.

Keyless (default): the REAL Codex app-server and the REAL Claude Code CLI each receive
one self-contained task through the Loader-composed service, and answer through an
EMBEDDED LOOPBACK MODEL — scripted fake model servers on ``127.0.0.1`` inside this
process (``dsh_contract_tests.fixtures``). No credentials and no internet are used; the
answer text is written by the loopback model, which the output says plainly. Every
product gets a temporary ``HOME`` / ``CODEX_HOME`` / ``CLAUDE_CONFIG_DIR`` / ``TMPDIR``
under one temporary root that is removed at the end.

``--deepseek``: Claude Code talks to DeepSeek's Anthropic-compatible endpoint with the
documented model variables and ``DEEPSEEK_API_KEY``
(:func:`dsh_subagent_claude_code.deepseek_env`); Codex stays on the loopback model
(Codex speaks only the Responses wire, DeepSeek offers Chat Completions, and the
Responses→Chat bridge is test-private by design).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import anyio
from dsh_profiles.errors import UsageError
from dsh_profiles.loader import Composition, compose
from dsh_profiles.profile import parse_profile
from dsh_profiles.run import RunOutcome, run_task
from dsh_profiles.signals import watch_signals
from dsh_subagent import COMPLETED, CancelController
from dsh_subprocess.testing import ProcessWatch, become_subreaper, reap_adopted_zombies

__all__ = ["run_demo"]


@dataclass(frozen=True)
class _Job:
    tool: str
    provider: str
    product: str
    task: str
    expected: str
    model: str


async def _run_both(
    composition: Composition, jobs: list[_Job], cwd: str, err: TextIO
) -> list[tuple[RunOutcome, float]]:
    """Both jobs at once, each as ``dsh run`` runs one; Ctrl-C or SIGTERM cancels both.

    Each outcome comes with its seconds, from the call to the product's whole tree gone.
    """
    controller = CancelController()
    settled: dict[int, tuple[RunOutcome, float]] = {}

    async def one(index: int, job: _Job) -> None:
        started = time.monotonic()
        outcome = await run_task(
            composition,
            target=job.provider,
            instance=True,
            task=job.task,
            cwd=cwd,
            cancel=controller.signal,
            session_id="dsh-demo",
            label="demo",
        )
        settled[index] = (outcome, time.monotonic() - started)

    def notify(line: str) -> None:
        print(f"dsh demo: {line}", file=err)

    async with anyio.create_task_group() as outer:
        watch = partial(
            watch_signals,
            controller,
            notify,
            first=lambda name: f"{name}: cancelling both runs",
            again="still cancelling both runs; waiting for the products to exit",
        )
        await outer.start(watch)
        async with anyio.create_task_group() as group:
            for index, job in enumerate(jobs):
                group.start_soon(one, index, job)
        outer.cancel_scope.cancel()
    return [settled[index] for index in range(len(jobs))]


def _fixtures() -> Any:
    try:
        from dsh_contract_tests.fixtures import keyless_profile, scripted
        from dsh_subagent_claude_code import endpoint
    except ImportError as exc:  # pragma: no cover - depends on the installed extra
        raise UsageError("dsh demo needs the demo extra: pip install 'dsh-cli[demo]'") from exc
    return keyless_profile, scripted, endpoint


def run_demo(
    out: TextIO,
    err: TextIO,
    *,
    deepseek: bool = False,
    deepseek_base_url: str | None = None,
) -> int:
    """Run the Quickstart main job; return the process exit status.

    Args:
        out: Where the report goes.
        err: Where signal notices go (products' own stderr is logged; `dsh -v` shows it).
        deepseek: Claude Code talks to DeepSeek (needs ``DEEPSEEK_API_KEY``).
        deepseek_base_url: The Anthropic-compatible endpoint instead of DeepSeek's
            official one; only tests give it.
    """
    api_key = os.environ.get("DEEPSEEK_API_KEY", "") if deepseek else ""
    if deepseek and not api_key:
        raise UsageError("dsh demo --deepseek needs DEEPSEEK_API_KEY in the environment")
    keyless_profile, scripted, endpoint = _fixtures()
    deepseek_base_url = deepseek_base_url or endpoint.DEEPSEEK_ANTHROPIC_BASE_URL
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
            claude_env = endpoint.deepseek_env(api_key, root / "claude", base_url=deepseek_base_url)
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
        with ProcessWatch() as watch:
            outcomes = anyio.run(_run_both, composition, jobs, str(workspace), err)
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
    out: TextIO,
    jobs: list[_Job],
    outcomes: list[tuple[RunOutcome, float]],
    resp: Any,
    msgs: Any,
    deepseek: bool,
) -> bool:
    ok = True
    counts = {"codex": len(resp.requests), "claude-code": len(msgs.message_requests())}
    for job, (outcome, seconds) in zip(jobs, outcomes, strict=True):
        print(f"[{job.provider}] {job.product} via tool {job.tool}", file=out)
        print(f"  task:        {job.task}", file=out)
        print(f"  model:       {job.model}", file=out)
        if outcome.result is None:
            failure = outcome.failure
            why = "cancelled before the product started" if failure is None else failure.message
            stage = (
                "FAILED" if failure is not None and failure.stage == "failed" else "FAILED TO START"
            )
            print(f"  {stage}: {why}", file=out)
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
        print(f"  took {seconds:.1f}s (including whole-tree teardown)", file=out)
        ok = ok and result.stop_reason == COMPLETED and answer == job.expected
    print("", file=out)
    return ok
