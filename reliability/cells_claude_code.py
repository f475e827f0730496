"""The Claude Code cells of the fault matrix (a scripted CLI stand-in behind the SDK)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reliability.cell import ANSWER, Builder, Cell, Outcome
from reliability.cell_parts import (
    LONG_LINE_RSS_BOUND,
    crash_early,
    daemon,
    flood_stderr,
    flood_stdout,
    grandchild,
    hang_early,
    ignore_term,
    long_line,
    oversized_early,
    ready,
    secret_text,
)
from reliability.fakes import FakeSetup
from reliability.profiles import Profile

__all__ = ["claude_code_cells"]


def _claude(steps: Callable[[FakeSetup, Profile], list[dict[str, Any]]]) -> Builder:
    return lambda setup, profile: setup.claude(steps(setup, profile))


def _claude_answer(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
    return [{"op": "init"}, {"op": "assistant", "text": ANSWER}, {"op": "result", "result": ANSWER}]


def claude_code_cells() -> list[Cell]:
    def then(*steps: Callable[[FakeSetup, Profile], list[dict[str, Any]]]) -> Builder:
        return _claude(lambda s, p: [step for make in steps for step in make(s, p)])

    def hang(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "init"}, {"op": "touch", "path": str(s.ready_marker)}, {"op": "hang"}]

    def crash(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "init"}, {"op": "assistant", "text": "partial"}, {"op": "exit", "code": 3}]

    def clean_exit(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "init"}, {"op": "assistant", "text": "partial"}, {"op": "exit", "code": 0}]

    def error_payload(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [
            {"op": "init"},
            {
                "op": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "result": secret_text(s),
                "errors": [secret_text(s)],
            },
        ]

    def garbage(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "raw", "line": "{garbage " + secret_text(s)}]

    def truncated(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [
            {"op": "raw", "line": '{"type": "result", "subtype": "succ'},
            {"op": "exit", "code": 0},
        ]

    def unknown_request(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [
            {
                "op": "emit",
                "message": {
                    "type": "control_request",
                    "request_id": "rel-1",
                    "request": {"subtype": "reliability_unknown", "detail": secret_text(s)},
                },
            }
        ]

    completed = (Outcome("completed"),)
    return [
        Cell("claude-code", "success", "query-run", then(_claude_answer), completed),
        # The SDK's initialize exchange runs after publication, in the driver, so a CLI
        # that dies before replying is seen either while start() still runs
        # (query-start) or by the published run (process).
        Cell(
            "claude-code",
            "crash",
            "initialize",
            then(_claude_answer),
            (
                Outcome("start-error", "query-start", "process-exit", 3),
                Outcome("error", "process", "process-exit", 3),
            ),
            prelude=crash_early,
        ),
        Cell(
            "claude-code",
            "hang-then-cancel",
            "initialize",
            then(_claude_answer),
            (Outcome("aborted"), Outcome("start-aborted")),
            cancel_when=ready,
            prelude=hang_early,
        ),
        Cell(
            "claude-code",
            "crash",
            "query-run",
            then(crash),
            (Outcome("error", "process", "process-exit", 3),),
        ),
        Cell(
            "claude-code",
            "hang-then-cancel",
            "query-run",
            then(hang),
            (Outcome("aborted"),),
            cancel_when=ready,
        ),
        Cell(
            "claude-code",
            "ignore-sigterm-then-cancel",
            "query-run",
            then(hang),
            (Outcome("aborted"),),
            cancel_when=ready,
            prelude=ignore_term,
        ),
        Cell(
            "claude-code",
            "secret-error-payload",
            "query-run",
            then(error_payload),
            (Outcome("error", "query-run", "error_during_execution"),),
        ),
        Cell(
            "claude-code",
            "setsid-grandchild-holds-stdout",
            "query-run",
            then(_claude_answer),
            completed,
            prelude=grandchild,
            pidfiles=("grandchild",),
            timeout=5.0,
        ),
        Cell(
            "claude-code",
            "setsid-grandchild-then-crash",
            "query-run",
            then(crash),
            (Outcome("error", "process", "process-exit", 3),),
            prelude=grandchild,
            pidfiles=("grandchild",),
            timeout=5.0,
        ),
        Cell(
            "claude-code",
            "double-fork-daemon",
            "query-run",
            then(_claude_answer),
            completed,
            prelude=daemon,
            pidfiles=("daemon",),
        ),
        Cell(
            "claude-code",
            "flood-stderr",
            "query-run",
            then(_claude_answer),
            completed,
            prelude=flood_stderr,
        ),
        # Like the SDK's own transport, stdout lines that do not start with "{" are skipped.
        Cell(
            "claude-code",
            "flood-stdout",
            "initialize",
            then(_claude_answer),
            completed,
            prelude=flood_stdout,
        ),
        Cell(
            "claude-code",
            "malformed-frame",
            "query-run",
            then(garbage, _claude_answer),
            # Under load the CLI may have exited (and its stdout ended) before the SDK
            # reads the garbage line: both are the documented outcome of a broken stream.
            (
                Outcome("error", "query-run", "unknown", check_exit=False),
                Outcome("error", "process", "process-exit", check_exit=False),
            ),
        ),
        # Lines above the SDK's 1 MiB message bound fail the run (prelude: the stand-in's
        # scenario travels in an environment variable, which cannot hold such a line).
        Cell(
            "claude-code",
            "oversized-frame",
            "initialize",
            then(_claude_answer),
            (Outcome("error", "query-run", "line-too-long", check_exit=False),),
            prelude=oversized_early,
        ),
        # 256 MiB without a newline: the bounded line reader fails the line at its bound,
        # so the host never holds more than the bound (ProductProvider.max_line_bytes).
        Cell(
            "claude-code",
            "long-line-no-newline",
            "initialize",
            then(_claude_answer),
            (
                Outcome("error", "query-run", "line-too-long", check_exit=False),
                Outcome("start-error", "query-start", "line-too-long", check_exit=False),
            ),
            prelude=long_line,
            max_rss_growth=LONG_LINE_RSS_BOUND,
        ),
        # The cut frame and the exit arrive together: which the provider sees first is a
        # race, and both are documented outcomes (the Claude Code README's stage and category list).
        Cell(
            "claude-code",
            "truncated-frame-then-exit",
            "query-run",
            then(truncated),
            (
                Outcome("error", "query-run", "unknown", check_exit=False),
                Outcome("error", "process", "process-exit", 0),
            ),
        ),
        Cell(
            "claude-code",
            "unknown-server-request",
            "query-run",
            then(unknown_request, _claude_answer),
            completed,
        ),
        # README: "missing-result: the stream ended with no result"; an exit 0 ends the
        # stream normally, so the provider reports missing-result rather than process-exit,
        # and the line carries no exit code: the exit is not part of that failure, as in
        # the peer's line (docs/rules.md, diagnostic:fixed-line).
        Cell(
            "claude-code",
            "clean-exit-without-terminal",
            "query-run",
            then(clean_exit),
            (Outcome("error", "query-run", "missing-result"),),
        ),
    ]
