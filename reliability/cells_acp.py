"""The ACP cells of the fault matrix (a scripted agent on the real ``acp`` library)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from reliability.cell import ANSWER, Builder, Cell, Outcome
from reliability.cell_parts import (
    LONG_LINE_RSS_BOUND,
    daemon,
    flood_stderr,
    flood_stdout,
    grandchild,
    long_line,
    oversized_early,
    secret_text,
)
from reliability.fakes import FakeSetup
from reliability.profiles import Profile

__all__ = ["acp_cells"]


_ACP_READY: Final = {
    "initialize": "initialize",
    "session-new": "session/new",
    "prompt": "session/prompt",
}


def _acp(script: Callable[[FakeSetup, Profile], dict[str, Any]]) -> Builder:
    return lambda setup, profile: setup.acp(script(setup, profile))


def _acp_answer() -> list[dict[str, Any]]:
    return [{"chunk": ANSWER}]


def acp_cells() -> list[Cell]:
    cells: list[Cell] = []
    for stage in ("initialize", "session-new", "prompt"):
        key = {"initialize": "initialize", "session-new": "session_new"}.get(stage)

        def at(action: dict[str, Any], step: dict[str, Any], key: str | None = key) -> Builder:
            def script(s: FakeSetup, _p: Profile) -> dict[str, Any]:
                resolved = {
                    k: (secret_text(s) if v == "$SECRET" else v)
                    for k, v in (action if key else step).items()
                }
                if key:
                    return {key: resolved, "prompt": _acp_answer()}
                return {"prompt": [resolved]}

            return _acp(script)

        def ready(s: FakeSetup, stage: str = stage) -> bool:
            return s.acp_frames(_ACP_READY[stage])

        published = key is None
        cells += [
            Cell(
                "acp",
                "crash",
                stage,
                at({"do": "exit", "code": 3}, {"exit": 3}),
                (
                    Outcome("error", "process", "process-exit", 3)
                    if published
                    else Outcome("start-error", stage, "process-exit", 3),
                ),
            ),
            Cell(
                "acp",
                "hang-then-cancel",
                stage,
                at({"do": "hang"}, {"hang": True}),
                (Outcome("aborted") if published else Outcome("start-aborted"),),
                cancel_when=ready,
            ),
            Cell(
                "acp",
                "secret-error-payload",
                stage,
                at({"do": "error", "message": "$SECRET"}, {"error": "$SECRET"}),
                (
                    Outcome("error", "prompt", "error-response")
                    if published
                    else Outcome("start-error", stage, "error-response"),
                ),
            ),
        ]

    def prompt(
        *steps: Callable[[FakeSetup, Profile], list[dict[str, Any]]], **extra: Any
    ) -> Builder:
        def script(s: FakeSetup, p: Profile) -> dict[str, Any]:
            return {"prompt": [step for make in steps for step in make(s, p)], **extra}

        return _acp(script)

    def answer(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return _acp_answer()

    def hang(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"hang": True}]

    def crash(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"chunk": "partial"}, {"exit": 3}]

    def clean_exit(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"chunk": "partial"}, {"exit": 0}]

    def garbage(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"malformed": "garbage{ " + secret_text(s)}]

    def truncated(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"malformed": '{"jsonrpc": "2.0", "method": "session/upd'}]

    def unknown_request(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"request": "reliability/unknownRequest", "params": {"detail": secret_text(s)}}]

    def prompt_ready(s: FakeSetup) -> bool:
        return s.acp_frames("session/prompt")

    completed = (Outcome("completed"),)
    cells += [
        Cell("acp", "success", "prompt", prompt(answer), completed),
        # codex-acp and claude-agent-acp ignore stdin EOF; this one also ignores SIGTERM.
        Cell(
            "acp",
            "ignore-sigterm-then-cancel",
            "prompt",
            prompt(hang, trap_term=True, on_eof="ignore"),
            (Outcome("aborted"),),
            cancel_when=prompt_ready,
        ),
        Cell(
            "acp",
            "setsid-grandchild-holds-stdout",
            "prompt",
            prompt(answer),
            completed,
            prelude=grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "acp",
            "setsid-grandchild-then-crash",
            "prompt",
            prompt(crash),
            (Outcome("error", "process", "process-exit", 3),),
            prelude=grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "acp",
            "double-fork-daemon",
            "prompt",
            prompt(answer),
            completed,
            prelude=daemon,
            pidfiles=("daemon",),
        ),
        Cell("acp", "flood-stderr", "prompt", prompt(answer), completed, prelude=flood_stderr),
        # The ACP transport ends the stream on the first line that is not a JSON-RPC frame.
        Cell(
            "acp",
            "flood-stdout",
            "initialize",
            prompt(answer),
            (Outcome("start-error", "initialize", "malformed-frame", check_exit=False),),
            prelude=flood_stdout,
        ),
        Cell(
            "acp",
            "malformed-frame",
            "prompt",
            prompt(garbage),
            (Outcome("error", "prompt", "malformed-frame", check_exit=False),),
        ),
        # Written before the handshake: the agent's asyncio stdout is non-blocking later.
        # A JSON line that is not a frame: malformed-frame within the provider's 16 MiB
        # line bound (ci), line-too-long beyond it (nightly).
        Cell(
            "acp",
            "oversized-frame",
            "initialize",
            prompt(answer),
            (
                Outcome("start-error", "initialize", "malformed-frame", check_exit=False),
                Outcome("start-error", "initialize", "line-too-long", check_exit=False),
            ),
            prelude=oversized_early,
        ),
        # 256 MiB without a newline: the bounded reader gives up at its 16 MiB bound, so
        # the host never holds more than the bound.
        Cell(
            "acp",
            "long-line-no-newline",
            "initialize",
            prompt(answer),
            (Outcome("start-error", "initialize", "line-too-long", check_exit=False),),
            prelude=long_line,
            max_rss_growth=LONG_LINE_RSS_BOUND,
        ),
        Cell(
            "acp",
            "truncated-frame",
            "prompt",
            prompt(truncated),
            (Outcome("error", "prompt", "malformed-frame", check_exit=False),),
        ),
        Cell("acp", "unknown-server-request", "prompt", prompt(unknown_request, answer), completed),
        Cell(
            "acp",
            "clean-exit-without-terminal",
            "prompt",
            prompt(clean_exit),
            (Outcome("error", "process", "process-exit", 0),),
        ),
    ]
    return cells
