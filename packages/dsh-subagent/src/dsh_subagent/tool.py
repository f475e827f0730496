"""The model-facing subagent tool (the dsh-tool-subagent role).

One tool per configured row binds a fixed tool name to a fixed provider instance name;
the model never chooses the provider. ``run_in_background`` omitted or false runs in the
foreground: the call waits for the result, always disposes the run, and returns the
final text or an error with the headline, then the ``Diagnostic:`` line, then any partial
output. ``true`` hands the same run to the Jobs runtime through a
:class:`BackgroundLauncher` and returns the Job id once it is registered.

When the provider declares the ``continuation`` capability, a completed foreground
result names a short continuation id, and the optional ``continue_id`` argument starts
a follow-up delegation in that product session. An id is valid only for the parent
session it was issued to; any other id gets the fixed :data:`CONTINUE_ID_REFUSED`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final, Literal, Protocol, runtime_checkable

import anyio
from pydantic import BaseModel, ConfigDict, JsonValue, StrictBool, StrictInt, field_validator

from dsh_subagent.changes import render_changes
from dsh_subagent.continuation import ContinuationHandle, ContinuationIds
from dsh_subagent.errors import SubagentError, SubagentErrorCode
from dsh_subagent.events import ProviderAdded, ProviderRemoved, SubagentEvent, render_error
from dsh_subagent.service import MAX_SAFE_INTEGER, PublishedRun, SubagentService
from dsh_subagent.structured import JsonOutputSchema
from dsh_subagent.tool_protocol import (
    ABORTED_BEFORE_DISPATCH,
    ModelTool,
    ToolCallContext,
    ToolError,
    ToolResult,
    error_message,
    run_tool_call,
    tool_error,
)
from dsh_subagent.types import (
    ABORTED,
    COMPLETED,
    ERROR,
    MAX_TOKENS,
    REFUSAL,
    AgentOptions,
    ParentContext,
    SubagentResult,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
    text_of,
)

__all__ = [
    "ABORTED_BEFORE_DISPATCH",
    "CONTINUE_ID_REFUSED",
    "BackgroundLauncher",
    "ModelTool",
    "SubagentTool",
    "SubagentToolConfig",
    "ToolCallContext",
    "ToolError",
    "ToolResult",
    "mount_subagent_tool",
    "render_foreground_failure",
    "run_tool_call",
    "stop_headline",
]

_log = logging.getLogger("dsh_subagent")

DESCRIPTION_PARAMETER: Final = "A short (3-5 word) description of the delegated task, for display."
PROMPT_FRESH: Final = (
    "The complete, self-contained task for the subagent. It does not share this "
    "conversation's context, so include everything it needs."
)
PROMPT_INHERITED: Final = (
    "The task for the subagent. It already sees this conversation's completed turns, so "
    "build on them freely and state only what is new."
)
RUN_IN_BACKGROUND_PARAMETER: Final = (
    "Whether to run as a background job and return its id. Defaults to false; collect with "
    "job_output or stop with job_kill."
)
BASE_FRESH: Final = (
    "Delegate a self-contained task to a subagent (a separate agent that works in its own "
    "context) to offload focused, independent work — research, a scoped implementation, an "
    "analysis — so it does not consume this conversation's context. The subagent returns its "
    "result, not its intermediate steps. Give it a complete, standalone prompt: it does not "
    "see this conversation."
)
BASE_INHERITED: Final = (
    "Delegate a task to a subagent that inherits this conversation: a child agent seeded with "
    "all completed turns so far (it does not see the current in-flight turn). Use this when "
    "the subtask builds on this conversation's context — a follow-up analysis, a review, a "
    "continuation — without consuming this conversation's context for the work itself. You "
    "receive its result, not its intermediate steps."
)
SUFFIX_BACKGROUND: Final = (
    " This call waits for the result by default. Set `run_in_background: true` to return a "
    "job id; collect with `job_output` and stop with `job_kill`."
)
SUFFIX_FOREGROUND_ONLY: Final = " This call waits for the subagent and returns its result."

BACKGROUND_UNAVAILABLE: Final = "background jobs unavailable: load dsh-tool-jobs"

CONTINUE_ID_PARAMETER: Final = (
    "Optional: the continuation id a previous result of this tool named, to continue that "
    "subagent's session. The subagent then remembers its earlier task and answer, so the "
    "prompt states only the follow-up."
)
CONTINUE_ID_REFUSED: Final = (
    "unknown continuation id (an id is valid only in the conversation that received it)"
)
"""The one refusal of a ``continue_id`` that this parent session was not given."""


def continuation_note(short_id: str) -> str:
    """The line appended to a continuable answer (the model-visible id)."""
    return f"\n\n[continuation id: {short_id} — pass it as continue_id to follow up]"


_HEADLINES: Final = {
    ABORTED: "subagent run was cancelled",
    ERROR: "subagent run failed",
    MAX_TOKENS: "subagent run hit its token limit before finishing",
    REFUSAL: "subagent declined the task",
}


def stop_headline(stop_reason: str) -> str:
    """The one headline of a run that did not complete, by its stop reason (the tool's
    failure text and ``dsh run``'s status line say the same)."""
    return _HEADLINES.get(stop_reason, f"subagent run ended abnormally ({stop_reason})")


class SubagentToolConfig(BaseModel):
    """One configured subagent tool row (validated at load).

    Attributes:
        tool_name: The tool's model-visible name; unique per loaded tool.
        provider: The provider instance name this tool delegates to (not model-visible).
        background_mode: Only ``one-shot``: foreground by default, background means a Job.
        enable_run_in_background: When false, ``run_in_background`` is neither offered
            nor accepted.
        max_depth: A non-negative safe integer sent as the request's ``max_depth``
            (needs the provider's ``depth_limit``), or ``provider-managed`` to send none
            and leave the recursion budget to the provider (what product rows use).
        persona: Forwarded when set (needs the ``persona`` capability).
        tool_filter: Forwarded when set (needs ``tool_filter``); must name allow or deny.
        agent_options: Forwarded when set (needs ``agent_options``).
        output_schema: Forwarded when set (needs ``output_schema``): the JSON Schema every
            answer of this tool must match; the host validates it (``output:*`` rules).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    tool_name: str = "subagent"
    provider: str
    background_mode: Literal["one-shot"] = "one-shot"
    enable_run_in_background: StrictBool = True
    max_depth: StrictInt | Literal["provider-managed"] = 3
    persona: str | None = None
    tool_filter: ToolFilter | None = None
    agent_options: AgentOptions | None = None
    output_schema: JsonOutputSchema | None = None

    @field_validator("tool_name", "provider")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("max_depth")
    @classmethod
    def _safe_depth(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 0 <= value <= MAX_SAFE_INTEGER:
            raise ValueError("subagent max_depth must be a non-negative safe integer")
        return value

    @field_validator("tool_filter")
    @classmethod
    def _filled_filter(cls, value: ToolFilter | None) -> ToolFilter | None:
        if value is not None and value.allow is None and value.deny is None:
            raise ValueError(
                "tool-subagent: `tool_filter` is configured but names neither `allow` nor "
                "`deny` — remove the key or fill the filter"
            )
        return value


@runtime_checkable
class BackgroundLauncher(Protocol):
    """Implemented by the Jobs runtime (dsh-tool-jobs) to take a run into the background.

    The launcher is bound to the same :class:`SubagentService` as the tool.
    """

    def launch(
        self,
        *,
        provider: str,
        request: SubagentStartRequest,
        label: str,
        parent: ParentContext,
    ) -> str:
        """Run Job preflight and registration synchronously and return the Job id.

        It must not wait for the provider to start: startup continues inside the Job,
        under a Job-owned cancel signal that replaces ``request.cancel`` (the tool
        passes a fresh, never-cancelled signal: the tool call stops owning the child
        once the id returns). If preflight raises, the provider is never started.
        """
        ...


def render_foreground_failure(result: SubagentResult) -> str:
    """The message of a non-completed foreground result (without the ``Error: `` prefix).

    ``<headline>``, then ``\\nDiagnostic: <diagnostic>`` when there is one, then the
    ``\\nChanges: ...`` line of an isolated run (a failed run's work is committed too),
    then ``\\nPartial output before the run ended:\\n<text>`` when the text is non-empty.
    """
    message = stop_headline(result.stop_reason)
    if result.diagnostic:
        message += f"\nDiagnostic: {result.diagnostic}"
    if result.changes is not None:
        message += f"\n{render_changes(result.changes)}"
    partial = result.text
    if partial:
        message += f"\nPartial output before the run ended:\n{partial}"
    return message


# continue_id is known even where the schema does not offer it: an id this parent session
# was not given gets the one fixed continuation refusal, never a different error.
_ARGUMENTS: Final = frozenset({"description", "prompt", "run_in_background", "continue_id"})
_MAX_ARGUMENT_NAME_CHARS: Final = 64


def _check_arguments(arguments: Mapping[str, object]) -> None:
    """Refuse an argument the schema does not declare (``additionalProperties: false``).

    The job tools refuse them the same way; a misspelt argument must not be ignored
    silently (``run_in_backgroud: true`` would otherwise run in the foreground).
    """
    for name in arguments:
        if name not in _ARGUMENTS:
            shown = name if len(name) <= _MAX_ARGUMENT_NAME_CHARS else name[:63] + "…"
            raise ToolError(f"unexpected argument {shown}")


def _string_argument(arguments: Mapping[str, object], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str):
        raise ToolError(f'argument "{key}" must be a string')
    return value


class SubagentTool:
    """The model-facing delegation tool bound to one provider instance.

    Args:
        service: The running subagent service.
        config: The tool row.
        background: The Jobs launcher; without it ``run_in_background: true`` fails.
    """

    def __init__(
        self,
        service: SubagentService,
        config: SubagentToolConfig,
        background: BackgroundLauncher | None = None,
    ) -> None:
        self._service = service
        self._config = config
        self._background = background
        self._continuations = ContinuationIds()
        self.check_mount()

    @property
    def config(self) -> SubagentToolConfig:
        """The tool row."""
        return self._config

    @property
    def name(self) -> str:
        """The configured tool name."""
        return self._config.tool_name

    def _inherits(self) -> bool:
        provider = self._service.get_provider(self._config.provider)
        return provider is not None and provider.inherits_parent_context

    def _continues(self) -> bool:
        provider = self._service.get_provider(self._config.provider)
        return provider is not None and provider.capabilities.continuation

    @property
    def description(self) -> str:
        """Wording follows the provider's ``inherits_parent_context`` and background."""
        base = BASE_INHERITED if self._inherits() else BASE_FRESH
        suffix = (
            SUFFIX_BACKGROUND if self._config.enable_run_in_background else SUFFIX_FOREGROUND_ONLY
        )
        return base + suffix

    @property
    def parameters(self) -> dict[str, JsonValue]:
        """``description``, ``prompt``, with background ``run_in_background``, and with a
        provider that declares ``continuation`` the optional ``continue_id``."""
        properties: dict[str, JsonValue] = {
            "description": {"type": "string", "description": DESCRIPTION_PARAMETER},
            "prompt": {
                "type": "string",
                "description": PROMPT_INHERITED if self._inherits() else PROMPT_FRESH,
            },
        }
        if self._config.enable_run_in_background:
            properties["run_in_background"] = {
                "type": "boolean",
                "description": RUN_IN_BACKGROUND_PARAMETER,
            }
        if self._continues():
            properties["continue_id"] = {"type": "string", "description": CONTINUE_ID_PARAMETER}
        return {
            "type": "object",
            "properties": properties,
            "required": ["description", "prompt"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, arguments: Mapping[str, object]) -> bool:
        """Always true: sibling delegations in one assistant message run in parallel."""
        del arguments
        return True

    def check_mount(self) -> None:
        """Refuse a numeric ``max_depth`` for a registered provider without ``depth_limit``.

        Runs at construction (when the provider is already registered) and on every call
        (the provider may be registered or replaced later).

        Raises:
            SubagentError: ``INVALID_CONFIG`` naming ``provider-managed``.
        """
        provider = self._service.get_provider(self._config.provider)
        if (
            provider is not None
            and isinstance(self._config.max_depth, int)
            and not provider.capabilities.depth_limit
        ):
            raise SubagentError(
                SubagentErrorCode.INVALID_CONFIG,
                f'tool-subagent: provider "{self._config.provider}" cannot enforce max_depth '
                "(no depth_limit capability) — set max_depth: 'provider-managed' to leave the "
                "recursion budget to the provider",
            )

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        """Delegate one task; every failure comes back as an ``Error: ...`` result."""
        if context.cancel.aborted:
            return tool_error(ABORTED_BEFORE_DISPATCH)
        try:
            return await self._call(arguments, context)
        except Exception as exc:
            return tool_error(error_message(exc))

    async def _call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        if context.parent is None:
            raise ToolError("subagent tool requires a calling agent (no parent context)")
        _check_arguments(arguments)
        description = _string_argument(arguments, "description")
        prompt = _string_argument(arguments, "prompt")
        background = arguments.get("run_in_background", False)
        if background is None:
            background = False
        if not isinstance(background, bool):
            raise ToolError('argument "run_in_background" must be a boolean')
        if background and not self._config.enable_run_in_background:
            raise ToolError(
                "run_in_background is disabled for this tool instance "
                "(enable_run_in_background: false)"
            )
        self.check_mount()
        config = self._config
        resume = None
        continue_id = arguments.get("continue_id")
        if continue_id is not None:
            if not isinstance(continue_id, str):
                raise ToolError('argument "continue_id" must be a string')
            resume = self._continuations.resolve(context.parent.session_id, continue_id)
            if resume is None or resume.provider != config.provider:
                raise ToolError(CONTINUE_ID_REFUSED)
        fields = {
            "prompt": (TextBlock(text=prompt),),
            "parent": context.parent,
            "label": description,
            "agent_options": config.agent_options,
            "max_depth": config.max_depth if isinstance(config.max_depth, int) else None,
            "tool_filter": config.tool_filter,
            "persona": config.persona,
            "resume": resume,
            "output_schema": config.output_schema,
        }
        if background:
            if self._background is None:
                raise ToolError(BACKGROUND_UNAVAILABLE)
            job_id = self._background.launch(
                provider=config.provider,
                request=SubagentStartRequest.model_validate(fields),
                label=description,
                parent=context.parent,
            )
            return ToolResult(f"started background subagent job {job_id}")
        request = SubagentStartRequest.model_validate({**fields, "cancel": context.cancel})
        run = await self._service.start(config.provider, request)
        if context.on_run is not None:
            try:
                context.on_run(run)
            except Exception:  # the harness's hook must not cost the run its disposal
                _log.exception("dsh_subagent: a tool call's on_run hook raised")
        session_id = context.parent.session_id
        return await _collect_foreground(
            run, lambda handle: self._continuations.issue(session_id, handle)
        )


def mount_subagent_tool(
    service: SubagentService,
    config: SubagentToolConfig,
    *,
    on_mount: Callable[[SubagentTool], None],
    on_unmount: Callable[[SubagentTool], None],
    background: BackgroundLauncher | None = None,
) -> Callable[[], None]:
    """Keep one tool mounted exactly while its provider is registered.

    The tool mounts now if the provider is registered, or when it appears later (no
    load order); it unmounts when the provider is removed and mounts again, with fresh
    wording, when it comes back. Events for other providers are ignored. A numeric
    ``max_depth`` on a provider without ``depth_limit`` raises from the
    ``provider-added`` listener, so that provider's registration fails loudly.

    Returns:
        A disposer: stops tracking and unmounts a mounted tool; afterwards nothing
        mounts again.
    """
    mounted: list[SubagentTool] = []

    def mount() -> None:
        tool = SubagentTool(service, config, background)
        on_mount(tool)
        mounted.append(tool)

    def unmount() -> None:
        while mounted:
            on_unmount(mounted.pop())

    def listener(event: SubagentEvent) -> None:
        if isinstance(event, ProviderAdded) and event.provider.name == config.provider:
            unmount()
            mount()
        elif isinstance(event, ProviderRemoved) and event.name == config.provider:
            unmount()

    if service.get_provider(config.provider) is not None:
        mount()
    else:
        _log.info(
            'subagent provider "%s" not registered yet; the "%s" tool will register when it '
            "appears",
            config.provider,
            config.tool_name,
        )
    remove_listener = service.add_listener(listener)

    def dispose() -> None:
        remove_listener()
        unmount()

    return dispose


async def _collect_foreground(
    run: PublishedRun, issue: Callable[[ContinuationHandle], str]
) -> ToolResult:
    """Wait for the result, then always dispose; report both failures when both happen.

    A completed result with a continuation handle names a short id ``issue`` mints."""
    result_message: str | None = None
    text = ""
    try:
        result = await run.result()
        if result.stop_reason == COMPLETED:
            text = text_of(result.output)
            if result.changes is not None:
                text += f"\n{render_changes(result.changes)}"
            if result.continuation is not None:
                text += continuation_note(issue(result.continuation))
        else:
            result_message = render_foreground_failure(result)
    except Exception as exc:
        result_message = f"subagent run failed: {render_error(exc)}"
    finally:
        # Shielded: a cancelled tool call still waits for the child's teardown.
        with anyio.CancelScope(shield=True):
            dispose_error: Exception | None = None
            try:
                await run.dispose()
            except Exception as exc:
                dispose_error = exc
    if dispose_error is None:
        return tool_error(result_message) if result_message is not None else ToolResult(text)
    dispose_line = f"dispose failed: {error_message(dispose_error)}"
    if result_message is None:
        return tool_error(dispose_line)
    # The dispose failure goes before any partial output so the partial text stays last.
    head, sep, partial = result_message.partition("\nPartial output before the run ended:\n")
    combined = f"{head}\n{dispose_line}"
    if sep:
        combined += sep + partial
    return tool_error(combined)
