"""The Claude Code provider: one task → the real CLI through the official Agent SDK.

The provider runtime (:class:`dsh_subagent.ProductProvider`) owns the lifecycle: the
task and cwd checks, the spawn through dsh-subprocess, rollback, publication,
settlement, the diagnostic with the CLI's exit facts, and whole-tree teardown. This
module supplies only the product:

* :meth:`~ClaudeCodeProvider.launch`: the CLI argv built by the SDK's own builder
  for this run's options, and the SDK's environment additions;
* :meth:`~ClaudeCodeProvider.open` (stage ``query-start``): the run is published only
  with a live CLI; a ready CLI (``warm``) is also taken past the SDK's ``initialize``
  before its task (:meth:`~ClaudeCodeProvider.open_ahead`,
  :mod:`~dsh_subagent_claude_code.ahead`);
* :meth:`~ClaudeCodeProvider.run` (stage ``query-run``): the SDK's ``query()`` over
  :class:`~dsh_subagent_claude_code.transport.ManagedCLITransport`, consumed to the end;
  ``completed`` only for a strict success followed by a normal end of stream. Each
  message is also reported as progress
  (:class:`~dsh_subagent_claude_code.progress.ClaudeProgress`), the result's usage last.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, cast

import anyio
from claude_agent_sdk import (
    ClaudeAgentOptions,
    Message,
    PermissionResultDeny,
    ProcessError,
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
    Launch,
    LineTooLongError,
    ProductChild,
    ProductFailure,
    ProductFailureError,
    ProductProvider,
    ProductReach,
    SubagentError,
    SubagentErrorCode,
    default_reach,
)
from pydantic import JsonValue, ValidationError

from dsh_subagent_claude_code.ahead import Connected, connect_ahead
from dsh_subagent_claude_code.config import ClaudeCodeConfig, PermissionMode
from dsh_subagent_claude_code.failures import PermissionFact, accepted_answer, result_failure
from dsh_subagent_claude_code.launch import (
    build_cli_argv,
    build_env_overlay,
    build_sdk_options,
    config_dir,
    session_file,
)
from dsh_subagent_claude_code.product import PRODUCT, bundled_cli_path
from dsh_subagent_claude_code.progress import ClaudeProgress
from dsh_subagent_claude_code.structured import structured_answer, with_output_schema
from dsh_subagent_claude_code.transport import ManagedCLITransport

__all__ = ["APPROVAL_DENIED_MESSAGE", "MAX_FRAME_BYTES", "ClaudeCodeProvider"]

_log = logging.getLogger("dsh_subagent_claude_code")

APPROVAL_DENIED_MESSAGE: Final = (
    "This unattended Claude Code subagent cannot request human approval."
)
"""What the product hears when it asks the provider for a permission decision."""

ANTHROPIC_PORT: Final = 443
"""The port of Anthropic's API, the endpoint when ``ANTHROPIC_BASE_URL`` is unset."""

MAX_FRAME_BYTES: Final = 1024 * 1024
"""The longest stdout frame accepted: the SDK's own default message bound
(``max_buffer_size``), so a frame the official SDK would refuse is refused here too."""


def _default_cli_prefix() -> Sequence[str]:
    return (bundled_cli_path(),)


class _Run:
    """One run's facts; never shared between runs."""

    __slots__ = (
        "answer",
        "failure",
        "mode",
        "permission",
        "result_seen",
        "session_id",
        "structured",
    )

    def __init__(self, mode: PermissionMode, structured: bool = False) -> None:
        self.mode: PermissionMode = mode
        self.structured = structured
        self.session_id: str | None = None
        self.answer: str | None = None
        self.failure: ProductFailure | None = None
        self.permission: PermissionFact | None = None
        self.result_seen = False

    def record(self, fact: PermissionFact) -> None:
        self.permission = fact  # the latest fact wins

    def detail(self) -> str | None:
        return None if self.permission is None else self.permission.line()

    def observe(self, message: Message) -> None:
        if isinstance(message, ResultMessage):
            # The latest result wins: a failure after a success fails the run.
            self.result_seen = True
            self.session_id = message.session_id or None
            if self.structured:
                self.answer, self.failure = structured_answer(message)
            else:
                self.answer = accepted_answer(message)
                self.failure = None if self.answer is not None else result_failure(message)
        elif isinstance(message, SystemMessage) and message.subtype == "permission_denied":
            self.record(
                PermissionFact(
                    self.mode,
                    "tool permission",
                    "denied",
                    "Claude Code denied the request before an interactive prompt",
                )
            )

    def classify(self, child: ProductChild, error: Exception) -> ProductFailureError:
        """The safe facts of an exception out of the SDK's message stream."""
        if isinstance(error, ResultError) and self.failure is not None:
            # The SDK raises ResultError for the non-zero exit after an error result.
            return ProductFailureError(self.failure, self.detail())
        if isinstance(error, LineTooLongError):
            return child.fail("line-too-long", detail=self.detail())
        if not self.result_seen and child.exit_facts is not None:
            return child.fail("process-exit", stage="process", detail=self.detail())
        # The SDK's ProcessError is the CLI's failed exit status: that exit is the failure.
        return child.fail("unknown", detail=self.detail(), exited=isinstance(error, ProcessError))


async def _first(messages: AsyncGenerator[Message, None]) -> Message | None:
    """The stream's first message (``None`` when it is empty); the stream stays open."""
    async for message in messages:
        return message
    return None


def _deny_every_prompt(run: _Run) -> CanUseTool:
    async def can_use_tool(
        tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        del tool_name, tool_input, context  # never recorded: they may hold paths or secrets
        run.record(
            PermissionFact(
                run.mode,
                "tool permission",
                "denied",
                "the provider does not request human approval",
            )
        )
        return PermissionResultDeny(message=APPROVAL_DENIED_MESSAGE)

    return can_use_tool


def _decline_elicitation(run: _Run) -> HookCallback:
    async def decline(
        hook_input: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        del hook_input, tool_use_id, context
        run.record(
            PermissionFact(
                run.mode,
                "MCP elicitation",
                "declined",
                "the provider does not collect interactive MCP input",
            )
        )
        output: Any = {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "decline"}}
        return output  # type: ignore[no-any-return]

    return decline


class ClaudeCodeProvider(ProductProvider[ClaudeCodeConfig]):
    """Delegates one self-contained text task to the Claude Code CLI of the pinned SDK.

    Construction validates the configuration and starts nothing.

    Args:
        config: The instance configuration (or a mapping validated into it).
        cli_prefix: Test seam: returns the command that starts the CLI. Production
            uses the pinned SDK's bundled binary and never ``PATH``.
        options_hook: Test seam that may adjust the SDK options of each run, before
            the argv is built (the keyless tier injects ``max_turns`` to provoke a real
            ``error_max_turns``).
    """

    Config: ClassVar[type[ClaudeCodeConfig]] = ClaudeCodeConfig
    product: ClassVar[str] = PRODUCT
    open_stage: ClassVar[str] = "query-start"
    offers_ready_starts: ClassVar[bool] = True
    run_stage: ClassVar[str] = "query-run"
    max_line_bytes: ClassVar[int] = MAX_FRAME_BYTES
    # The malformed-line policy is the SDK's and lives in the transport, which reads
    # raw lines: skip a line not starting with "{", fail a "{" line that is not JSON.

    def __init__(
        self,
        config: ClaudeCodeConfig | dict[str, Any] | None = None,
        *,
        cli_prefix: Callable[[], Sequence[str]] = _default_cli_prefix,
        options_hook: Callable[[ClaudeAgentOptions], ClaudeAgentOptions] | None = None,
    ) -> None:
        if config is None:
            config = ClaudeCodeConfig()
        elif not isinstance(config, ClaudeCodeConfig):
            try:
                config = ClaudeCodeConfig.model_validate(config)
            except ValidationError as exc:
                raise SubagentError(
                    SubagentErrorCode.INVALID_CONFIG, f"{self.prefix}: invalid configuration"
                ) from exc
        super().__init__(config)
        self._cli_prefix = cli_prefix
        self._options_hook = options_hook

    def _sdk_options(
        self,
        cwd: str,
        run: _Run,
        resume: str | None = None,
        schema: dict[str, JsonValue] | None = None,
    ) -> ClaudeAgentOptions:
        mode = self.config.permission_mode
        options = build_sdk_options(
            cwd=cwd,
            permission_mode=mode,
            model=self.config.model,
            env=self.config.env,
            can_use_tool=None if mode == "bypassPermissions" else _deny_every_prompt(run),
            elicitation_hook=_decline_elicitation(run),
            max_budget_usd=self.config.max_budget_usd,
            persist_session=self.config.continuation,
            resume=resume,
        )
        if schema is not None:
            options = with_output_schema(options, schema)
        return options if self._options_hook is None else self._options_hook(options)

    @property
    def enforces_output_schema(self) -> bool:
        """``True``: the CLI takes the schema (``--json-schema``, the SDK's
        ``output_format``), has the model answer through its structured-output tool and
        reports a failure to comply (``error_max_structured_output_retries``)."""
        return True

    def launch_structured(
        self, launch: Launch, cwd: str, resume: str | None, schema: dict[str, JsonValue]
    ) -> Launch:
        """As :meth:`launch`, with the SDK's ``output_format`` for ``schema``."""
        del launch
        return self._launch(cwd, resume, schema)

    @property
    def offers_continuation(self) -> bool:
        """The configured ``continuation`` (sessions kept in the config directory)."""
        return self.config.continuation

    def has_session(self, session: str, cwd: str) -> bool:
        """Whether the config directory still holds ``session`` (see :func:`session_file`)."""
        return session_file(self.config.env, cwd, session).is_file()

    def launch(self, cwd: str) -> Launch:
        """The CLI argv the SDK would build for this run's options, and its env additions."""
        return self._launch(cwd, None)

    def launch_continuation(self, cwd: str, session: str) -> Launch:
        """As :meth:`launch`, resuming ``session`` (the SDK's ``resume``)."""
        return self._launch(cwd, session)

    def confinement_reach(
        self, launch: Launch, env: Mapping[str, str | None], cwd: str
    ) -> ProductReach:
        """The bundled CLI's directory (read), the config directory (written: sessions,
        settings, ``.claude.json`` when ``CLAUDE_CONFIG_DIR`` is set) and the port of
        ``ANTHROPIC_BASE_URL`` (443, Anthropic's API, when unset)."""
        base = default_reach(launch.argv, env)
        ports = set(base.connect_ports) or {ANTHROPIC_PORT}
        return ProductReach(
            read=base.read, write=(config_dir(env),), connect_ports=tuple(sorted(ports))
        )

    def _launch(
        self, cwd: str, resume: str | None, schema: dict[str, JsonValue] | None = None
    ) -> Launch:
        # The callbacks of these options are never called: only the argv is read.
        options = self._sdk_options(cwd, _Run(self.config.permission_mode), resume, schema)
        return Launch(
            argv=build_cli_argv(options, self._cli_prefix()),
            env=build_env_overlay(self.config.env, cwd),
        )

    async def open(self, child: ProductChild) -> None:
        """The run is published only with a live CLI (stage ``query-start``)."""
        await anyio.lowlevel.checkpoint()
        if child.exit_facts is not None:
            raise child.fail("process-exit")

    async def open_ahead(self, child: ProductChild) -> None:
        """A ready CLI: the SDK's ``initialize`` sent and answered before the task
        (:mod:`~dsh_subagent_claude_code.ahead`); ``run()`` continues from it.

        A ready product is prepared for a fresh, untyped delegation only (a continuation
        or a typed one starts cold), so the options are a plain run's in the cwd.
        """
        run = _Run(self.config.permission_mode)
        child.state = await connect_ahead(child, lambda: self._sdk_options(child.cwd, run), run)

    async def release_state(self, child: ProductChild) -> None:
        """End the SDK client a ready CLI was connected with (claimed or not)."""
        if isinstance(child.state, Connected):
            await child.state.close()

    async def run(self, child: ProductChild) -> str:
        """Consume the SDK's ``query()`` to the end; the answer of a strict success.

        The SDK's initialize request, the prompt and every control request travel over
        the child's stdio; a permission prompt is denied and an MCP elicitation declined,
        each leaving a permission fact that follows a failure line. A ready CLI
        (``open_ahead()``) answered ``initialize`` already: it is handed the prompt on
        the connected client and its messages are consumed the same way.
        """
        ahead = child.state if isinstance(child.state, Connected) else None
        run: _Run
        if ahead is not None:
            run = ahead.run
            messages = ahead.messages(child.task)
        else:
            run = _Run(self.config.permission_mode, structured=child.output_schema is not None)
            messages = cast(
                AsyncGenerator[Message, None],
                query(
                    prompt=child.task,
                    options=self._sdk_options(child.cwd, run, child.resume, child.output_schema),
                    transport=ManagedCLITransport(child),
                ),
            )
        progress = ClaudeProgress(
            child.report, include_commands=child.include_commands, resumed=child.resume is not None
        )
        try:
            # The first message answers the prompt (the CLI's system init; on a cold CLI
            # the SDK's initialize too): it is bounded by response_timeout_seconds, the
            # rest is the turn and is not.
            first = await child.await_response(lambda: _first(messages))
            if first is not None:
                run.observe(first)
                progress.observe(first)
            async for message in messages:
                run.observe(message)
                progress.observe(message)
        except ProductFailureError:
            raise
        except Exception as exc:
            # One scheduling point so an exit observed together with the error is visible.
            await anyio.lowlevel.checkpoint()
            raise run.classify(child, exc) from exc
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await messages.aclose()
                    if ahead is not None:
                        await ahead.close()
                except Exception:
                    _log.debug("%s: closing the SDK query raised", self.prefix, exc_info=True)
        if run.failure is not None:
            raise ProductFailureError(run.failure, run.detail())
        if run.answer is None:
            # The CLI ended cleanly (a failed exit is the SDK's ProcessError, classified
            # above) but sent no result: the result's validation failed, not the exit, so
            # the line carries no "exit code: 0" (diagnostic:fixed-line).
            raise child.fail("missing-result", detail=run.detail(), exited=False)
        child.session_id = run.session_id
        return run.answer
