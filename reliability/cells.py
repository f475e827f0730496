"""The hostile-product fault matrix: one cell per (provider, behaviour, stage).

Every cell names the outcome its provider documents for that fault (README / seed 000
stage and category tables). A few cells accept two outcomes where the provider's own
contract makes the split a race (e.g. a Claude Code CLI that dies before its
``initialize`` reply may be seen during ``query-start`` or after publication).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from dsh_subagent import SubagentProvider

from reliability.fakes import FakeSetup
from reliability.profiles import Profile

__all__ = ["ANSWER", "Cell", "Outcome", "all_cells"]

ANSWER: Final = "the reliable answer"

Kind = Literal["completed", "error", "aborted", "start-error", "start-aborted"]


@dataclass(frozen=True)
class Outcome:
    """One acceptable settlement.

    Attributes:
        kind: ``completed`` / ``error`` / ``aborted`` (a published run's stop reason),
            ``start-error`` (``start()`` raised the safe line) or ``start-aborted``
            (``start()`` raised because the caller cancelled).
        stage: The safe line's stage (``None`` when no line is expected).
        category: The safe line's category.
        exit_code: Expected ``exit code`` field (``None``: must be absent).
        signal: Expected ``signal`` field (``None``: must be absent).
        check_exit: Whether ``exit_code`` / ``signal`` are checked at all.
    """

    kind: Kind
    stage: str | None = None
    category: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    check_exit: bool = True


Builder = Callable[[FakeSetup, Profile], SubagentProvider]
Ready = Callable[[FakeSetup], bool]


@dataclass(frozen=True)
class Cell:
    """One fault: how to build the hostile product and what must come out.

    Attributes:
        provider: ``codex`` / ``claude-code`` / ``acp``.
        behaviour: The fault's name.
        stage: Where in the protocol the fault strikes.
        build: Builds the provider against its hostile fake.
        expect: Acceptable outcomes (usually one).
        cancel_when: When set, the caller cancels once this holds (hang cells).
        prelude: Hostile process-level actions (see :mod:`reliability.hostile`).
        pidfiles: Prelude pidfiles of escapees to check explicitly after disposal.
        xfail: A finding this cell reveals (kept ``xfail(strict=True)`` until fixed).
        timeout: Seconds the whole cell may take.
    """

    provider: str
    behaviour: str
    stage: str
    build: Builder
    expect: tuple[Outcome, ...]
    cancel_when: Ready | None = None
    prelude: Callable[[FakeSetup, Profile], list[dict[str, Any]]] = lambda _s, _p: []
    pidfiles: tuple[str, ...] = ()
    xfail: str | None = None
    timeout: float = 30.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``provider/behaviour@stage``."""
        return f"{self.provider}/{self.behaviour}@{self.stage}"


def _ready(setup: FakeSetup) -> bool:
    return setup.ready_marker.exists()


def _grandchild(setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "setsid_grandchild", "pidfile": str(setup.pidfile("grandchild"))}]


def _daemon(setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "daemon", "pidfile": str(setup.pidfile("daemon"))}]


def _ignore_term(_setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "ignore_term"}]


def _flood_stderr(_setup: FakeSetup, profile: Profile) -> list[dict[str, Any]]:
    from reliability.planted import ENV_NAME

    return [{"do": "flood_stderr", "bytes": profile.flood_bytes, "env": ENV_NAME}]


def _flood_stdout(_setup: FakeSetup, profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "flood_stdout", "bytes": profile.flood_bytes}]


def _oversized_early(_setup: FakeSetup, profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "stdout_line", "bytes": profile.oversize_bytes}]


def _endless_line(_setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "endless_line", "bytes": 256 * 1024 * 1024}]


def _crash_early(_setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "exit", "code": 3}]


def _hang_early(setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "hang", "path": str(setup.ready_marker)}]


def _secret_text(setup: FakeSetup) -> str:
    p = setup.planted
    return f"product failure: env={p.env} task={p.task} cwd={setup.workspace}"


def _oversized_line(profile: Profile) -> str:
    return '{"type": "reliability_padding", "pad": "' + "x" * profile.oversize_bytes + '"}'


# -- Codex ----------------------------------------------------------------------------


def _codex_init(setup: FakeSetup) -> list[dict[str, Any]]:
    return [
        {"op": "expect", "method": "initialize"},
        {
            "op": "reply",
            "result": {"userAgent": _secret_text(setup), "codexHome": str(setup.workspace)},
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


def _codex_cells() -> list[Cell]:
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
                    {"op": "reply_error", "code": -32000, "message": _secret_text(s)},
                ]
            error = {
                "message": _secret_text(s),
                "codexErrorInfo": "internalServerError",
                "additionalDetails": _secret_text(s),
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
                    else Outcome("start-error", stage, "unknown", 3),
                ),
            ),
            Cell(
                "codex",
                "hang-then-cancel",
                stage,
                _codex(hang),
                (Outcome("aborted") if published else Outcome("start-aborted"),),
                cancel_when=_ready,
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
        return [{"op": "write", "data": f"garbage{{ {_secret_text(s)}\n"}]

    def oversized(_s: FakeSetup, p: Profile) -> list[dict[str, Any]]:
        return [{"op": "write", "data": _oversized_line(p) + "\n"}]

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
                    "params": {"detail": _secret_text(s)},
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
            cancel_when=_ready,
            prelude=_ignore_term,
        ),
        Cell(
            "codex",
            "setsid-grandchild-holds-stdout",
            "turn",
            turn_then(answer),
            completed,
            prelude=_grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "codex",
            "setsid-grandchild-then-crash",
            "turn",
            turn_then(crash_here),
            (Outcome("error", "process", "process-exit", 3),),
            prelude=_grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "codex",
            "double-fork-daemon",
            "turn",
            turn_then(answer),
            completed,
            prelude=_daemon,
            pidfiles=("daemon",),
        ),
        Cell("codex", "flood-stderr", "turn", turn_then(answer), completed, prelude=_flood_stderr),
        # The wire skips lines that are not JSON objects (jsonrpc.py: "a stray unparseable
        # line is not a frame"), so junk before the handshake is survivable.
        Cell(
            "codex",
            "flood-stdout",
            "initialize",
            turn_then(answer),
            completed,
            prelude=_flood_stdout,
        ),
        Cell("codex", "malformed-frame", "turn", turn_then(garbage, answer), completed),
        Cell("codex", "oversized-frame", "turn", turn_then(oversized, answer), completed),
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


# -- Claude Code ----------------------------------------------------------------------


def _claude(steps: Callable[[FakeSetup, Profile], list[dict[str, Any]]]) -> Builder:
    return lambda setup, profile: setup.claude(steps(setup, profile))


def _claude_answer(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
    return [{"op": "init"}, {"op": "assistant", "text": ANSWER}, {"op": "result", "result": ANSWER}]


def _claude_cells() -> list[Cell]:
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
                "result": _secret_text(s),
                "errors": [_secret_text(s)],
            },
        ]

    def garbage(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"op": "raw", "line": "{garbage " + _secret_text(s)}]

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
                    "request": {"subtype": "reliability_unknown", "detail": _secret_text(s)},
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
                Outcome("start-error", "query-start", "unknown", 3),
                Outcome("error", "process", "process-exit", 3),
            ),
            prelude=_crash_early,
        ),
        Cell(
            "claude-code",
            "hang-then-cancel",
            "initialize",
            then(_claude_answer),
            (Outcome("aborted"), Outcome("start-aborted")),
            cancel_when=_ready,
            prelude=_hang_early,
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
            cancel_when=_ready,
        ),
        Cell(
            "claude-code",
            "ignore-sigterm-then-cancel",
            "query-run",
            then(hang),
            (Outcome("aborted"),),
            cancel_when=_ready,
            prelude=_ignore_term,
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
            prelude=_grandchild,
            pidfiles=("grandchild",),
            timeout=5.0,
        ),
        Cell(
            "claude-code",
            "setsid-grandchild-then-crash",
            "query-run",
            then(crash),
            (Outcome("error", "process", "process-exit", 3),),
            prelude=_grandchild,
            pidfiles=("grandchild",),
            timeout=5.0,
        ),
        Cell(
            "claude-code",
            "double-fork-daemon",
            "query-run",
            then(_claude_answer),
            completed,
            prelude=_daemon,
            pidfiles=("daemon",),
        ),
        Cell(
            "claude-code",
            "flood-stderr",
            "query-run",
            then(_claude_answer),
            completed,
            prelude=_flood_stderr,
        ),
        # Like the SDK's own transport, stdout lines that do not start with "{" are skipped.
        Cell(
            "claude-code",
            "flood-stdout",
            "initialize",
            then(_claude_answer),
            completed,
            prelude=_flood_stdout,
        ),
        Cell(
            "claude-code",
            "malformed-frame",
            "query-run",
            then(garbage, _claude_answer),
            (Outcome("error", "query-run", "unknown", check_exit=False),),
        ),
        # Lines above the SDK's 1 MiB message bound fail the run (prelude: the stand-in's
        # scenario travels in an environment variable, which cannot hold such a line).
        Cell(
            "claude-code",
            "oversized-frame",
            "initialize",
            then(_claude_answer),
            (Outcome("error", "query-run", "unknown", check_exit=False),),
            prelude=_oversized_early,
        ),
        # The cut frame and the exit arrive together: which the provider sees first is a
        # race, and both are documented outcomes (seed 000 stage table).
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
        # stream normally, so the provider reports missing-result rather than process-exit.
        Cell(
            "claude-code",
            "clean-exit-without-terminal",
            "query-run",
            then(clean_exit),
            (Outcome("error", "query-run", "missing-result"),),
        ),
    ]


# -- ACP ------------------------------------------------------------------------------

_ACP_READY: Final = {
    "initialize": "initialize",
    "session-new": "session/new",
    "prompt": "session/prompt",
}


def _acp(script: Callable[[FakeSetup, Profile], dict[str, Any]]) -> Builder:
    return lambda setup, profile: setup.acp(script(setup, profile))


def _acp_answer() -> list[dict[str, Any]]:
    return [{"chunk": ANSWER}]


def _acp_cells() -> list[Cell]:
    cells: list[Cell] = []
    for stage in ("initialize", "session-new", "prompt"):
        key = {"initialize": "initialize", "session-new": "session_new"}.get(stage)

        def at(action: dict[str, Any], step: dict[str, Any], key: str | None = key) -> Builder:
            def script(s: FakeSetup, _p: Profile) -> dict[str, Any]:
                resolved = {
                    k: (_secret_text(s) if v == "$SECRET" else v)
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
        return [{"malformed": "garbage{ " + _secret_text(s)}]

    def truncated(_s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"malformed": '{"jsonrpc": "2.0", "method": "session/upd'}]

    def unknown_request(s: FakeSetup, _p: Profile) -> list[dict[str, Any]]:
        return [{"request": "reliability/unknownRequest", "params": {"detail": _secret_text(s)}}]

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
            prelude=_grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "acp",
            "setsid-grandchild-then-crash",
            "prompt",
            prompt(crash),
            (Outcome("error", "process", "process-exit", 3),),
            prelude=_grandchild,
            pidfiles=("grandchild",),
        ),
        Cell(
            "acp",
            "double-fork-daemon",
            "prompt",
            prompt(answer),
            completed,
            prelude=_daemon,
            pidfiles=("daemon",),
        ),
        Cell("acp", "flood-stderr", "prompt", prompt(answer), completed, prelude=_flood_stderr),
        # The ACP transport ends the stream on the first line that is not a JSON-RPC frame.
        Cell(
            "acp",
            "flood-stdout",
            "initialize",
            prompt(answer),
            (Outcome("start-error", "initialize", "malformed-frame", check_exit=False),),
            prelude=_flood_stdout,
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
            prelude=_oversized_early,
        ),
        # 256 MiB without a newline: the bounded reader gives up at 16 MiB (the host's
        # RSS bound is asserted by the package's own test).
        Cell(
            "acp",
            "endless-line",
            "initialize",
            prompt(answer),
            (Outcome("start-error", "initialize", "line-too-long", check_exit=False),),
            prelude=_endless_line,
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


def all_cells() -> list[Cell]:
    """Every cell of the matrix, in a stable order."""
    return [*_codex_cells(), *_claude_cells(), *_acp_cells()]
