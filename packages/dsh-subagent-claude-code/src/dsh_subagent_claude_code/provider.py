"""The Claude Code provider: one task → the real CLI through the official Agent SDK.

Lifecycle of one run (seeds 000, 002, 004):

* before publication (caller's task, stage ``query-start``): validate the task, resolve
  the cwd, build SDK options and the CLI argv, spawn the CLI through dsh-subprocess and
  create the SDK ``query()``; any failure rolls back (tree terminated, exit awaited)
  and raises a fixed safe line;
* publication: only when both the query and a live managed CLI exist;
* the driver task (service task group) consumes the whole SDK stream and settles
  through :func:`dsh_subagent.settle_run_result` — ``completed`` only for a strict
  success followed by a normal end of stream;
* disposal: local cancel, query close, whole-tree termination with the configured
  grace, whole-tree exit; idempotent; a cleanup failure is a ``teardown`` line.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, ClassVar, cast

import anyio
from claude_agent_sdk import (
    ClaudeAgentOptions,
    Message,
    PermissionResultDeny,
    ResultError,
    ResultMessage,
    SystemMessage,
    query,
)
from claude_agent_sdk.types import (
    CanUseTool,
    HookCallback,
    HookContext,
    HookInput,
    HookJSONOutput,
    PermissionResultAllow,
    ToolPermissionContext,
)
from dsh_subagent import (
    COMPLETED,
    OutOfProcessProvider,
    ProductStartError,
    ProductTeardownError,
    ResolvedSubagentStartRequest,
    SubagentError,
    SubagentErrorCode,
    SubagentResult,
    SubagentRun,
    TextBlock,
    one_shot_task_texts,
)
from dsh_subagent.run_handle import SubprocessRunHandle
from dsh_subagent.settlement import LocalCancellation, settle_run_result
from dsh_subagent.workdir import assert_usable_cwd
from dsh_subprocess import ExitFacts, SpawnSpec
from pydantic import ValidationError

from dsh_subagent_claude_code.config import PREFIX, ClaudeCodeConfig, PermissionMode
from dsh_subagent_claude_code.errors import StartAborted
from dsh_subagent_claude_code.failures import (
    ClaudeRunFailure,
    PermissionFact,
    accepted_answer,
    result_failure,
)
from dsh_subagent_claude_code.launch import build_cli_argv, build_env_overlay, build_sdk_options
from dsh_subagent_claude_code.product import bundled_cli_path
from dsh_subagent_claude_code.transport import ManagedCLITransport, Spawner

__all__ = ["APPROVAL_DENIED_MESSAGE", "ClaudeCodeProvider"]

_log = logging.getLogger("dsh_subagent_claude_code")

APPROVAL_DENIED_MESSAGE = "This unattended Claude Code subagent cannot request human approval."
"""What the product hears when it asks the provider for a permission decision."""


def _default_cli_prefix() -> Sequence[str]:
    return (bundled_cli_path(),)


def _default_spawner() -> Spawner:
    from dsh_subprocess import spawn

    return spawn


class _RunState:
    """Per-run facts; never shared between runs."""

    __slots__ = (
        "answer",
        "driver_closed",
        "driver_started",
        "failure",
        "permission",
        "result_seen",
    )

    def __init__(self) -> None:
        self.answer: str | None = None
        self.failure: ClaudeRunFailure | None = None
        self.permission: PermissionFact | None = None
        self.result_seen = False
        self.driver_started = False
        self.driver_closed = anyio.Event()

    def record(self, fact: PermissionFact) -> None:
        # Latest fact wins (plain overwrite, as in the reference provider).
        self.permission = fact

    def diagnostic(self) -> str | None:
        return None if self.failure is None else self.failure.diagnostic(self.permission)


def _prompt_text(request: ResolvedSubagentStartRequest) -> str:
    # Text blocks concatenate with no separator (the seeds' rule for Claude Code).
    return "".join(one_shot_task_texts(PREFIX, request.prompt))


def _outcome(facts: ExitFacts | None) -> tuple[int | None, str | None]:
    return (None, None) if facts is None else (facts.exit_code, facts.signal)


class ClaudeCodeProvider(OutOfProcessProvider[ClaudeCodeConfig]):
    """Delegates one self-contained text task to the Claude Code CLI of the pinned SDK.

    Construction validates the configuration and starts nothing.

    Args:
        config: The instance configuration (or a mapping validated into it).
        cli_prefix: Test seam: returns the command that starts the CLI. Production
            uses the pinned SDK's bundled binary and never ``PATH``.
        spawner: Test seam for ``dsh_subprocess.spawn``.
        options_hook: Test seam that may adjust the SDK options of each run (the
            keyless tier injects ``max_turns`` to provoke a real ``error_max_turns``).
    """

    Config: ClassVar[type[ClaudeCodeConfig]] = ClaudeCodeConfig

    def __init__(
        self,
        config: ClaudeCodeConfig | dict[str, Any] | None = None,
        *,
        cli_prefix: Callable[[], Sequence[str]] = _default_cli_prefix,
        spawner: Spawner | None = None,
        options_hook: Callable[[ClaudeAgentOptions], ClaudeAgentOptions] | None = None,
    ) -> None:
        if config is None:
            config = ClaudeCodeConfig()
        elif not isinstance(config, ClaudeCodeConfig):
            try:
                config = ClaudeCodeConfig.model_validate(config)
            except ValidationError as exc:
                raise SubagentError(
                    SubagentErrorCode.INVALID_CONFIG, f"{PREFIX}: invalid configuration"
                ) from exc
        super().__init__(config)
        self._cli_prefix = cli_prefix
        self._spawner = spawner
        self._options_hook = options_hook

    def _stderr_observer(self, line: str) -> None:
        # Forwarded unchanged to the host log; never classified, never in a diagnostic.
        _log.info("%s %r stderr: %s", PREFIX, self.name, line)

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        """Start the CLI for ``request`` and publish the run.

        Raises:
            SubagentError: ``INVALID_REQUEST`` for an empty, non-text or blank task;
                ``NO_WORKING_DIRECTORY`` when neither a configured nor a parent cwd
                exists.
            StartAborted: The request was cancelled before publication.
            ProductStartError: Startup failed (``query-start`` safe line; the original
                failure on ``__cause__``).
        """
        prompt = _prompt_text(request)
        if self._config.cwd is None and request.parent.cwd is None:
            raise SubagentError(
                SubagentErrorCode.NO_WORKING_DIRECTORY,
                f"{PREFIX}: no working directory for the child — configure `cwd` or delegate "
                "from a parent session that has one",
            )
        if request.cancel.aborted:
            raise StartAborted()
        state = _RunState()
        mode = self._config.permission_mode
        transport: ManagedCLITransport | None = None
        agen: AsyncGenerator[Message, None] | None = None
        rollback_error: SubagentError | None = None
        startup = anyio.CancelScope()
        remove_startup_listener = request.cancel.add_listener(lambda _reason: startup.cancel())
        try:
            with startup:
                try:
                    cwd = self._config.cwd or assert_usable_cwd(
                        PREFIX, "parent session cwd", request.parent.cwd or ""
                    )
                    options = build_sdk_options(
                        cwd=cwd,
                        permission_mode=mode,
                        model=self._config.model,
                        env=self._config.env,
                        can_use_tool=None
                        if mode == "bypassPermissions"
                        else self._permission_callback(state, mode),
                        elicitation_hook=self._elicitation_hook(state, mode),
                    )
                    if self._options_hook is not None:
                        options = self._options_hook(options)
                    spec = SpawnSpec(
                        argv=tuple(build_cli_argv(options, self._cli_prefix())),
                        cwd=cwd,
                        env=build_env_overlay(self._config.env, cwd),
                        stdin="pipe",
                        stdout="pipe",
                        stderr="pipe",
                        grace=self._config.dispose_grace,
                    )
                    transport = ManagedCLITransport(
                        spec,
                        stderr_observer=self._stderr_observer,
                        spawner=self._spawner or _default_spawner(),
                    )
                    await transport.connect()
                    # The SDK calls connect() again inside query(); it is idempotent.
                    agen = cast(
                        AsyncGenerator[Message, None],
                        query(prompt=prompt, options=options, transport=transport),
                    )
                    await anyio.lowlevel.checkpoint()
                    if transport.exit_facts is not None:
                        raise RuntimeError("the CLI exited before the run was published")
                except Exception as exc:
                    raise await self._rollback(transport, agen, request, exc) from exc
                except BaseException:
                    # Cancelled (our startup scope or the caller's): release, then let it go.
                    rollback_error = await self._rollback(transport, agen, request, None)
                    raise
            if startup.cancelled_caught or request.cancel.aborted:
                if rollback_error is None:
                    rollback_error = await self._rollback(transport, agen, request, None)
                raise rollback_error
        finally:
            remove_startup_listener()
        assert transport is not None
        assert agen is not None
        return self._publish(request, state, transport, agen)

    async def _rollback(
        self,
        transport: ManagedCLITransport | None,
        agen: AsyncGenerator[Message, None] | None,
        request: ResolvedSubagentStartRequest,
        cause: Exception | None,
    ) -> SubagentError:
        """Release a partial start and return the error ``start()`` raises."""
        with anyio.CancelScope(shield=True):
            cleanup: list[Exception] = []
            facts: ExitFacts | None = None
            if agen is not None:
                try:
                    await agen.aclose()
                except Exception as exc:
                    cleanup.append(exc)
            if transport is not None:
                facts = transport.exit_facts
                try:
                    terminated = await transport.terminate()
                    facts = facts or terminated
                except Exception as exc:
                    cleanup.append(exc)
        exit_code, signal = _outcome(facts)
        start_line = ClaudeRunFailure(
            "query-start", "unknown", exit_code=exit_code, signal=signal
        ).diagnostic()
        if cleanup:
            teardown_line = ClaudeRunFailure(
                "teardown", "unknown", exit_code=exit_code, signal=signal
            ).diagnostic()
            error = ProductStartError(f"{start_line}; {teardown_line}", rollback_failed=True)
            causes: list[Exception] = [cause] if cause is not None else []
            error.__cause__ = ExceptionGroup("Claude Code startup rollback", [*causes, *cleanup])
            _log.error("%s %r: child start failed", PREFIX, self.name, exc_info=error.__cause__)
            return error
        if cause is None or request.cancel.aborted:
            return StartAborted()
        _log.error("%s %r: child start failed", PREFIX, self.name, exc_info=cause)
        return ProductStartError(start_line)

    def _permission_callback(self, state: _RunState, mode: PermissionMode) -> CanUseTool:
        async def can_use_tool(
            tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResultAllow | PermissionResultDeny:
            del tool_name, tool_input, context  # never recorded: they may hold paths or secrets
            state.record(
                PermissionFact(
                    mode,
                    "tool permission",
                    "denied",
                    "the provider does not request human approval",
                )
            )
            return PermissionResultDeny(message=APPROVAL_DENIED_MESSAGE)

        return can_use_tool

    def _elicitation_hook(self, state: _RunState, mode: PermissionMode) -> HookCallback:
        async def decline(
            hook_input: HookInput, tool_use_id: str | None, context: HookContext
        ) -> HookJSONOutput:
            del hook_input, tool_use_id, context
            state.record(
                PermissionFact(
                    mode,
                    "MCP elicitation",
                    "declined",
                    "the provider does not collect interactive MCP input",
                )
            )
            output: Any = {
                "hookSpecificOutput": {"hookEventName": "Elicitation", "action": "decline"}
            }
            return output  # type: ignore[no-any-return]

        return decline

    def _publish(
        self,
        request: ResolvedSubagentStartRequest,
        state: _RunState,
        transport: ManagedCLITransport,
        agen: AsyncGenerator[Message, None],
    ) -> SubagentRun:
        local = LocalCancellation()
        remove = request.cancel.add_listener(local.request_cancel)
        if request.cancel.aborted:  # aborted between the startup check and the listener
            local.request_cancel()
        mode = self._config.permission_mode

        async def attempt() -> SubagentResult:
            state.driver_started = True
            try:
                await self._consume(agen, state, transport, mode)
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await agen.aclose()
                    except Exception:
                        _log.debug("%s %r: query close raised", PREFIX, self.name, exc_info=True)
                    state.driver_closed.set()
            assert state.answer is not None
            return SubagentResult(output=(TextBlock(text=state.answer),), stop_reason=COMPLETED)

        def on_error(error: Exception, stop_reason: str) -> None:
            _log.warning(
                "%s %r: child run failed (%s)", PREFIX, self.name, stop_reason, exc_info=error
            )

        async def settle() -> SubagentResult:
            return await settle_run_result(
                attempt,
                local=local,
                collect_diagnostic=state.diagnostic,
                on_error=on_error,
                remove_cancel_listener=remove,
            )

        async def teardown() -> None:
            await self._teardown(agen, state, transport)

        handle = SubprocessRunHandle(
            request_cancel=local.request_cancel, teardown=teardown, remove_cancel_listener=remove
        )
        request.task_group.start_soon(handle.drive, settle)
        return handle

    async def _consume(
        self,
        agen: AsyncGenerator[Message, None],
        state: _RunState,
        transport: ManagedCLITransport,
        mode: PermissionMode,
    ) -> None:
        try:
            async for message in agen:
                if isinstance(message, ResultMessage):
                    state.result_seen = True
                    answer = accepted_answer(message)
                    if answer is not None:
                        state.answer, state.failure = answer, None
                    else:
                        state.answer, state.failure = None, result_failure(message)
                elif isinstance(message, SystemMessage) and message.subtype == "permission_denied":
                    state.record(
                        PermissionFact(
                            mode,
                            "tool permission",
                            "denied",
                            "Claude Code denied the request before an interactive prompt",
                        )
                    )
        except Exception as exc:
            # One scheduling point so an exit observed together with the error is visible.
            await anyio.lowlevel.checkpoint()
            exit_code, signal = _outcome(transport.exit_facts)
            if isinstance(exc, ResultError) and state.failure is not None:
                failure = state.failure.with_outcome(exit_code, signal)
            elif not state.result_seen and transport.exit_facts is not None:
                failure = ClaudeRunFailure(
                    "process", "process-exit", exit_code=exit_code, signal=signal
                )
            else:
                failure = ClaudeRunFailure(
                    "query-run", "unknown", exit_code=exit_code, signal=signal
                )
            state.answer, state.failure = None, failure
            raise failure from exc
        if state.failure is not None:
            raise state.failure
        if state.answer is None:
            state.failure = ClaudeRunFailure("query-run", "missing-result")
            raise state.failure

    async def _teardown(
        self,
        agen: AsyncGenerator[Message, None],
        state: _RunState,
        transport: ManagedCLITransport,
    ) -> None:
        errors: list[Exception] = []
        if not state.driver_started:
            try:
                await agen.aclose()
            except Exception as exc:
                errors.append(exc)
        facts: ExitFacts | None = None
        try:
            facts = await transport.terminate()
        except Exception as exc:
            errors.append(exc)
        if state.driver_started:
            # The driver closes the query; after the tree is gone its close is prompt.
            await state.driver_closed.wait()
        if errors:
            exit_code, signal = _outcome(facts or transport.exit_facts)
            error = ProductTeardownError(
                ClaudeRunFailure(
                    "teardown", "unknown", exit_code=exit_code, signal=signal
                ).diagnostic()
            )
            error.__cause__ = (
                errors[0]
                if len(errors) == 1
                else ExceptionGroup("Claude Code teardown failures", errors)
            )
            _log.error("%s %r: teardown failed", PREFIX, self.name, exc_info=error.__cause__)
            raise error
