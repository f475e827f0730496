"""The one requirement manifest of the kit: every rule, its id and its seed sentence.

Ids are stable: ``<area>:<rule>``. An id is never reused for a different rule; new ids
arrive only in minor releases. Every kit test carries exactly one id through the
``dsh_requirement`` marker (see :func:`requirement`), and the kit's own test-suite checks
both directions: every id here has a test, and every test names an id listed here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

import pytest

from dsh_contract_tests.plugin import REQUIREMENT_MARKER

__all__ = ["REQUIREMENTS", "Requirement", "requirement"]

Tier = Literal["keyless", "loader", "credentialed"]

_F = TypeVar("_F", bound=Callable[..., object])


@dataclass(frozen=True, slots=True)
class Requirement:
    """One contract rule.

    Attributes:
        id: Stable identifier ``<area>:<rule>``.
        rule: The behaviour the kit test asserts, in one sentence.
        source: Where the rule comes from: ``seed <file-prefix>`` or ``issue 7``.
        sentence: The source sentence, quoted verbatim.
        tier: The tier marker its test carries.
    """

    id: str
    rule: str
    source: str
    sentence: str
    tier: Tier = "keyless"


_S000 = "seed 000 (bounded structured failure facts)"
_S002 = "seed 002 (external agent as your subagent)"
_S004 = "seed 004 (Claude Code and Codex subagent backends)"
_I7 = "issue 7 (contract kit)"

_ALL: Final = (
    Requirement(
        "capability:refused-before-start",
        "Each request field whose capability flag is false is refused with "
        "UNSUPPORTED_CAPABILITY before start(): no run, no lifecycle event, no process.",
        _S002,
        "Codex 一旗都没有，要求了任何一面就是 UNSUPPORTED_CAPABILITY。这些失败都在 "
        "provider.start() 之前发生：没有 run、没有生命周期事件，只有一句固定格式的错误。",
    ),
    Requirement(
        "capability:out-of-process-declares-none",
        "An out-of-process provider (its runs have no local agent) advertises no start "
        "capability and does not inherit the parent context.",
        _S002,
        "外部 provider 的声明全部一样：Object.freeze({ agentOptions: false, outputSchema: "
        "false, depthLimit: false, toolFilter: false, persona: false })；"
        "inheritsParentContext = false 是外部 provider 的第二个共同点。",
    ),
    Requirement(
        "cwd:parent-session",
        "Without a configured override the child process runs in the parent session cwd, "
        "not in the host process cwd.",
        _S002,
        "没有配置 → 父会话的 workspace cwd（request.parent.session.header.cwd）；",
    ),
    Requirement(
        "cwd:override-wins",
        "A configured cwd override wins over the parent session cwd; a provider without an "
        "override refuses the key at load instead of ignoring it.",
        _S002,
        "部署配置的 cwd 覆盖（加载时已校验：空串拒绝——path.resolve('') 是进程 cwd，"
        "会静默重新引入启动目录回退；相对路径按 harness 启动目录解析；必须是可进入的目录）；",
    ),
    Requirement(
        "cwd:missing-is-loud",
        "With neither an override nor a parent cwd, start() fails loudly before any process "
        "starts; the host process cwd is never used.",
        _S002,
        "都没有 → 响亮失败：“no working directory for the child — configure cwd or "
        "delegate from a parent session that has one”。",
    ),
    Requirement(
        "env:credential-scrubbed",
        "A credential planted in the parent environment does not reach any process of the "
        "run's tree.",
        _S002,
        "子进程的环境是凭据擦除后的副本加显式层叠，父会话能传给孩子的只有工作目录。",
    ),
    Requirement(
        "env:overlay-reaches-child",
        "A variable layered explicitly through the provider's env configuration reaches the "
        "child, even when it is credential-shaped.",
        _S002,
        "孩子要自己的 DEEPSEEK_API_KEY，必须显式配进 env，父环境里的同类凭据不会隐式泄漏进子进程。",
    ),
    Requirement(
        "settlement:completed",
        "A child that answers settles completed with exactly its answer and no diagnostic.",
        _S000,
        "Successful results and local cancellation expose no failure fact.",
    ),
    Requirement(
        "settlement:result-never-raises",
        "After publication result() never raises: a failing child settles as a result "
        "(error), and every call returns the same value.",
        _S002,
        "发布后：settleRunResult 的契约是一句话——result never rejects。",
    ),
    Requirement(
        "settlement:cancel-before-start",
        "A request whose signal is already aborted makes start() raise: no run, no "
        "lifecycle event, no process left.",
        _S002,
        "“Provider ownership lasts until its promise fulfills; a rejection therefore has no "
        "run for the caller to dispose and emits no run lifecycle events”",
    ),
    Requirement(
        "settlement:cancel-during-start",
        "Cancellation while start() is in progress either rolls back (start raises, no "
        "event, no process) or, if publication won, settles aborted without a diagnostic.",
        _S002,
        "发布前失败还有一个额外语义：start() 的注释说”Provider ownership lasts until its "
        "promise fulfills; a rejection therefore has no run for the caller to dispose and "
        "emits no run lifecycle events”",
    ),
    Requirement(
        "settlement:cancel-mid-run",
        "Cancellation of a published, working run settles aborted with no diagnostic.",
        _S002,
        "本地取消已抢先定案 → { output: collectOutput(), stopReason: 'aborted' }；",
    ),
    Requirement(
        "settlement:cancel-after-completion",
        "Cancellation after the run completed leaves the completed result unchanged.",
        _S002,
        "attempt 正常完成且未取消 → 正常结果（stopReason 由 attempt 提供）；",
    ),
    Requirement(
        "diagnostic:fixed-line",
        "A failed run carries a diagnostic whose first line is the fixed product failure "
        "line with its fields in the fixed order and unavailable fields omitted.",
        _S000,
        "The structured line has this fixed order: Product subagent failure (product: "
        "<product>; stage: <stage>; category: <category>; HTTP status: <status>; exit code: "
        "<code>; signal: <signal>) The Provider omits unavailable optional fields.",
    ),
    Requirement(
        "diagnostic:bounded",
        "Every diagnostic is at most 4096 UTF-8 bytes and truncation never splits a character.",
        _S000,
        "The shared result boundary limits the complete text to 4096 UTF-8 bytes.",
    ),
    Requirement(
        "diagnostic:no-planted-secret",
        "No planted secret (task text, path, env value, stderr line, raw error) appears in "
        "the diagnostic, the output or a lifecycle event (hypothesis-generated secrets).",
        _S000,
        "Raw product errors, stderr, tool input, paths, environment values, credentials, and "
        "protocol payloads never enter the diagnostic.",
    ),
    Requirement(
        "quiescence:after-dispose",
        "When dispose() returns, no process of the run's tree is alive.",
        _S004,
        "Each route must hand the product one self-contained task, let it work in the parent "
        "Session's workspace, return a final answer or an explicit failure or cancellation, "
        "and leave no managed product process behind.",
    ),
    Requirement(
        "quiescence:after-cancel-any-phase",
        "After cancellation at any phase (before start, during start, mid-run, after "
        "completion) and the consumer's dispose, no process of the run's tree is alive.",
        _S004,
        "Foreground return and Job settlement both wait for idempotent disposal and "
        "whole-tree exit",
    ),
    Requirement(
        "quiescence:dispose-idempotent",
        "Repeated and concurrent dispose() calls share one teardown: all return after "
        "whole-tree exit and none raises.",
        _S002,
        "幂等：一次 memoized teardown，重复 dispose 返回同一个 promise。",
    ),
    Requirement(
        "lifecycle:paired",
        "Every published run gets exactly one subagent/start and exactly one subagent/end "
        "with the same run id, start first.",
        _S004,
        "Unsupported context or malformed input fails before a run is published; start and "
        "terminal events remain paired",
    ),
    Requirement(
        "concurrency:independent-runs",
        "N parallel runs of one provider instance settle independently: cancelling one "
        "does not disturb the others' answers.",
        _S000,
        "Claude Code package tests pin all four SDK subtypes, invalid success, missing result, "
        "unknown values and exceptions, all four stages, independent exit code and signal "
        "fields, permission-fact ordering, sanitization, successful-result and cancellation "
        "omission, concurrent-run isolation, and cleanup completion.",
    ),
    Requirement(
        "loader:entry-point-starts-nothing",
        "The provider loads from its dsh.subagent.providers entry point, validates its "
        "Config and is constructed with an empty PATH without starting any process.",
        _S004,
        "a Loader composition test proves that the public package and documented tool "
        "configuration load without starting the product",
        tier="loader",
    ),
    Requirement(
        "credentialed:unique-answer",
        "Against the real DeepSeek service the provider returns a unique nonce as the "
        "complete answer and leaves no process; self-skips without DEEPSEEK_API_KEY.",
        _S004,
        "a credentialed e2e proves that the production provider and real product can obtain "
        "a unique answer from the real DeepSeek service.",
        tier="credentialed",
    ),
    Requirement(
        "kit:no-silent-opt-out",
        "Every kit test is present on the provider's test class; overriding one is allowed "
        "only with xfail(strict=True, reason=...).",
        _I7,
        "Opt-out of a single rule only by xfail(strict=True, reason=...); a guard test fails "
        "when a kit test is removed or overridden silently.",
    ),
)

REQUIREMENTS: Final[Mapping[str, Requirement]] = {req.id: req for req in _ALL}
"""Every requirement id of the kit, in manifest order."""


def requirement(req_id: str) -> Callable[[_F], _F]:
    """Tie a kit test to its manifest id (and to the id's tier marker).

    Raises:
        KeyError: ``req_id`` is not in :data:`REQUIREMENTS` (caught at import time).
    """
    req = REQUIREMENTS[req_id]

    def mark(func: _F) -> _F:
        marked = getattr(pytest.mark, REQUIREMENT_MARKER)(req.id)(func)
        return getattr(pytest.mark, req.tier)(marked)  # type: ignore[no-any-return]

    return mark
