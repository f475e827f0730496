"""The Codex cells of the fault matrix (a scripted app-server fake)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh_subagent import SubagentProvider

from reliability.cell import ANSWER, Builder, Cell, Outcome
from reliability.cell_parts import (
    LONG_LINE_RSS_BOUND,
    daemon,
    flood_stderr,
    flood_stdout,
    grandchild,
    ignore_term,
    long_line,
    oversized_line,
    ready,
    secret_text,
)
from reliability.fakes import FakeSetup
from reliability.profiles import Profile

__all__ = ["codex_cells"]


def _codex_init(setup: FakeSetup) -> list[dict[str, Any]]:
    return [
        {"op": "expect", "method": "initialize"},
        {
            "op": "reply",
            "result": {"userAgent": secret_text(setup), "codexHome": str(setup.workspace)},
        },
    ]


def _codex_thread(setup: FakeSetup) -> list[dict[str, Any]]:
    return [
        *_codex_init(setup),
        {"op": "expect", "method": "initialized"},
        {"op": "expect", "method": "thread/start"},
        {"op": "reply", "result": {"thread": {"id": "thr-1", "ephemeral": True}}},
    ]


def _codex_turn(setup: FakeSetup) -> list[dict[str, Any]]:
    return [
        *_codex_thread(setup),
        {"op": "expect", "method": "turn/start"},
        {"op": "reply", "result": {"turn": {"id": "turn-1", "status": "inProgress", "items": []}}},
    ]


def _codex_notify(method: str, params: Any) -> dict[str, Any]:
    return {"op": "send", "frame": {"method": method, "params": params}}


def _codex_answer() -> list[dict[str, Any]]:
    item = {
        "type": "agentMessage",
        "id": "m",
        "text": ANSWER,
        "phase": "final_answer",
        "memoryCitation": None,
    }
    return [
        _codex_notify("item/completed", {"threadId": "thr-1", "turnId": "turn-1", "item": item}),
        _codex_notify(
            "turn/completed",
            {
                "threadId": "thr-1",
                "turn": {"id": "turn-1", "status": "completed", "error": None, "items": []},
            },
        ),
    ]


def _codex_prefix(stage: str, setup: FakeSetup) -> list[dict[str, Any]]:
    if stage == "initialize":
        return [{"op": "expect", "method": "initialize"}]
    if stage == "thread-start":
        return [
            *_codex_init(setup),
            {"op": "expect", "method": "initialized"},
            {"op": "expect", "method": "thread/start"},
        ]
    return _codex_turn(setup)


def _codex(steps: Callable[[FakeSetup, Profile], list[dict[str, Any]]]) -> Builder:
    return lambda setup, profile: setup.codex(steps(setup, profile))


def codex_cells() -> list[Cell]:
    cells: list[Cell] = []
    for stage in ("initialize", "thread-start", "turn"):
        published = stage == "turn"

        def crash(s: FakeSetup, _p: Profile, stage: str = stage) -> list[dict[str, Any]]:
            return [*_codex_prefix(stage, s), {"op": "exit", "code": 3}]

        def hang(s: FakeSetup, _p: Profile, stage: str = stage) -> list[dict[str, Any]]:
            return [
                *_codex_prefix(stage, s),
                {"op": "ready", "path": str(s.ready_marker)},
                {"op": "hang"},
            ]

        def error_payload(s: FakeSetup, _p: Profile, stage: str = stage) -> list[dict[str, Any]]:
            if stage != "turn":
                return [
                    *_codex_prefix(stage, s),
                    {"op": "reply_error", "code": -32000, "message": secret_text(s)},
                ]
            error = {
                "message": secret_text(s),
                "codexErrorInfo": "internalServerError",
                "additionalDetails": secret_text(s),
            }
            return [
                *_codex_turn(s),
                _codex_notify(
                    "turn/completed",
                    {
                        "threadId": "thr-1",
                        "turn": {"id": "turn-1", "status": "failed", "error": error, "items": []},
                    },
                ),
            ]

        cells += [
            Cell(
                "codex",
                "crash",
                stage,
                _codex(crash),
                (
                    Outcome("error", "process", "process-exit", 3)
                    if published
                    else Outcome("start-error", stage, "process-exit", 3),
                ),
            ),
            Cell(
                "codex",
                "hang-then-cancel",
                stage,
                _codex(hang),
                (Outcome("aborted") if published else Outcome("start-aborted"),),
                cancel_when=ready,
            ),
            Cell(
                "codex",
                "secret-error-payload",
                stage,
                _codex(error_payload),
                (
                    Outcome("error", "turn", "internalServerError")
                    if published
                    else Outcome("start-error", stage, "unknown"),
                ),
            ),
        ]

    def turn_then(*steps: Callable[[FakeSetup, Profile], list[dict[str, Any]]]) -> Builder:
        def build(s: FakeSetup, p: Profile) -> SubagentProvider:
            body = [step for make in steps for step in make(s, p)]
            return s.codex([*_codex_turn(s), *body])

        return build

    def answer(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return _codex_answer()

    def hang_here(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "ready", "path": str(s.ready_marker)}, {"op": "hang"}]

    def crash_here(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "exit", "code": 3}]

    def garbage(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "write", "data": f"garbage{{ {secret_text(s)}\n"}]

    def oversized(_s: FakeSetup, p: Profile) -> list[dict[str, Any]]:
        return [{"op": "write", "data": oversized_line(p) + "\n"}]

    def truncated(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [
            {"op": "write", "data": '{"method": "turn/completed", "params": {"threadId'},
            {"op": "exit", "code": 0},
        ]

    def unknown_request(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [
            {
                "op": "send",
                "frame": {
                    "id": 99,
                    "method": "reliability/unknownRequest",
                    "params": {"detail": secret_text(s)},
                },
            }
        ]

    def clean_exit(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "exit", "code": 0}]

    completed = (Outcome("completed"),)
    cells += [
        Cell("codex", "success", "turn", turn_then(answer), completed),
        Cell(
            "codex",
            "ignore-sigterm-then-cancel",
            "turn",
            turn_then(hang_here),
            (Outcome("aborted"),),
            cancel_when=ready,
            prelude=ignore_term,
        ),
        Cell(
            "codex",
            "setsid-grandchild-holds-stdout",
            "turn",
            turn_then(answer),
            completed,
            prelude=grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "codex",
            "setsid-grandchild-then-crash",
            "turn",
            turn_then(crash_here),
            (Outcome("error", "process", "process-exit", 3),),
            prelude=grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "codex",
            "double-fork-daemon",
            "turn",
            turn_then(answer),
            completed,
            prelude=daemon,
            pidfiles=("daemon",),
        ),
        Cell("codex", "flood-stderr", "turn", turn_then(answer), completed, prelude=flood_stderr),
        # The wire skips lines that are not JSON frames (the provider's "skip" policy), so
        # junk before the handshake is survivable.
        Cell(
            "codex",
            "flood-stdout",
            "initialize",
            turn_then(answer),
            completed,
            prelude=flood_stdout,
        ),
        Cell("codex", "malformed-frame", "turn", turn_then(garbage, answer), completed),
        # 256 MiB without a newline before the handshake: the bounded line reader fails
        # the line at its bound, so the host never holds more than the bound.
        Cell(
            "codex",
            "long-line-no-newline",
            "initialize",
            turn_then(answer),
            (Outcome("start-error", "initialize", "line-too-long", check_exit=False),),
            prelude=long_line,
            max_rss_growth=LONG_LINE_RSS_BOUND,
        ),
        # Read below the provider's 32 MiB line bound (ci: 2 MiB); a longer line (nightly:
        # 64 MiB) fails the run instead of growing the host's memory.
        Cell(
            "codex",
            "oversized-frame",
            "turn",
            turn_then(oversized, answer),
            (Outcome("completed"), Outcome("error", "turn", "line-too-long")),
        ),
        Cell(
            "codex",
            "truncated-frame-then-exit",
            "turn",
            turn_then(truncated),
            (Outcome("error", "process", "process-exit", 0),),
        ),
        Cell(
            "codex",
            "unknown-server-request",
            "turn",
            turn_then(unknown_request),
            (Outcome("error", "turn", "unknown"),),
        ),
        Cell(
            "codex",
            "clean-exit-without-terminal",
            "turn",
            turn_then(clean_exit),
            (Outcome("error", "process", "process-exit", 0),),
        ),
    ]
    return cells
