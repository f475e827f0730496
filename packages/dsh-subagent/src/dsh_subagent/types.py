"""The provider-neutral delegation contract (docs/rules.md).

A :class:`SubagentProvider` turns one resolved start request into one published
:class:`SubagentRun`. Everything a consumer learns about the child arrives as one
:class:`SubagentResult`; foreground tools and background Jobs consume the same value.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeVar, runtime_checkable

from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from dsh_subagent.budget import Budget
from dsh_subagent.cancel import CancelController, CancelSignal
from dsh_subagent.changes import Changes
from dsh_subagent.continuation import ContinuationHandle
from dsh_subagent.progress import Usage

__all__ = [
    "ABORTED",
    "COMPLETED",
    "ERROR",
    "KNOWN_STOP_REASONS",
    "MAX_TOKENS",
    "NO_START_CAPABILITIES",
    "REFUSAL",
    "SUBAGENT_DESCRIPTOR_VERSION",
    "AgentOptions",
    "ContentBlock",
    "ParentContext",
    "ResolvedSubagentStartRequest",
    "SubagentCapabilities",
    "SubagentDescriptor",
    "SubagentProvider",
    "SubagentResult",
    "SubagentRun",
    "SubagentStartRequest",
    "TextBlock",
    "ToolFilter",
    "text_of",
]

# Stop reasons. The set is merge-extensible: consumers treat any other value as failure.
COMPLETED: Final = "completed"
ABORTED: Final = "aborted"
ERROR: Final = "error"
MAX_TOKENS: Final = "max-tokens"
REFUSAL: Final = "refusal"
KNOWN_STOP_REASONS: Final = frozenset({COMPLETED, ABORTED, ERROR, MAX_TOKENS, REFUSAL})

SUBAGENT_DESCRIPTOR_VERSION: Final = 1

ModelT = TypeVar("ModelT", bound=BaseModel)

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class TextBlock(BaseModel):
    """A text content block: the only block kind product subagents exchange."""

    model_config = _FROZEN
    type: Literal["text"] = "text"
    text: str


ContentBlock = TextBlock
"""Content block union. One-shot product delegation carries text only."""


def text_of(blocks: tuple[ContentBlock, ...] | list[ContentBlock]) -> str:
    """Concatenate the text of every text block, with no separator (the contract's render rule)."""
    return "".join(block.text for block in blocks if block.type == "text")


@dataclass(frozen=True, slots=True)
class SubagentCapabilities:
    """Start-time features a provider can honour; each flag gates exactly one request field.

    ``agent_options`` → ``agent_options``, ``output_schema`` → ``output_schema``,
    ``depth_limit`` → ``max_depth``, ``tool_filter`` → ``tool_filter``,
    ``persona`` → ``persona``, ``continuation`` → ``resume``. A request carrying a field
    whose flag is false is refused before ``start()`` — never accepted and then ignored.

    ``continuation`` differs from the other five: it is not a feature the parent
    enforces on the child but the product's own saved session, so an out-of-process
    provider may declare it (only when it can continue a session and issues handles).
    """

    agent_options: bool = False
    output_schema: bool = False
    depth_limit: bool = False
    tool_filter: bool = False
    persona: bool = False
    continuation: bool = False


NO_START_CAPABILITIES: Final = SubagentCapabilities()
"""Every flag false: what an out-of-process provider advertises (``continuation`` aside,
which it may declare)."""


class ParentContext(BaseModel):
    """The delegating parent, as far as a child may see it.

    Out-of-process providers read only ``cwd``. Jobs use ``session_id`` for visibility
    and the object's identity for ownership (a replacement parent with the same session
    id is a different owner).
    """

    model_config = _FROZEN
    session_id: str
    cwd: str | None = None
    """The parent session's workspace directory; the only thing a product child inherits."""


class AgentOptions(BaseModel):
    """Start-time agent option overrides (gated by the ``agent_options`` capability)."""

    model_config = _FROZEN
    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None


class ToolFilter(BaseModel):
    """Tool allow/deny lists for the child (gated by the ``tool_filter`` capability)."""

    model_config = _FROZEN
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None


def _never_cancelled() -> CancelSignal:
    return CancelController().signal


class SubagentStartRequest(BaseModel):
    """What a caller asks for. Optional fields are gated by provider capabilities."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    prompt: tuple[ContentBlock, ...]
    """The child's user message; the subagent tool sends one text block."""
    parent: ParentContext
    cancel: CancelSignal = Field(default_factory=_never_cancelled)
    """The one cancellation channel, before and after publication."""
    label: str | None = None
    agent_options: AgentOptions | None = None
    output_schema: Mapping[str, JsonValue] | type[BaseModel] | None = None
    """The shape the final answer must have: a pydantic model class or an object-rooted
    JSON Schema (gated by the ``output_schema`` capability; the host validates the answer
    whatever the provider: :mod:`dsh_subagent.structured`)."""
    max_depth: Any = None
    """Absolute depth cap; validated by the service (non-negative safe integer)."""
    tool_filter: ToolFilter | None = None
    persona: str | None = None
    budget: Budget | None = None
    """Host-only bounds that tighten the provider's configured deadline and idle timeout.
    Refused (``UNSUPPORTED_CAPABILITY``) by a provider that does not honour budgets."""
    progress_commands: bool = False
    """Host opt-in: progress events of command tools carry the command text."""
    resume: ContinuationHandle | None = None
    """Continue the product session an earlier result's ``continuation`` names (gated by
    the ``continuation`` capability). The run is still a new delegation of its own."""


class SubagentDescriptor(BaseModel):
    """The service's snapshot of how a run was started."""

    model_config = _FROZEN
    version: int = SUBAGENT_DESCRIPTOR_VERSION
    mode: Literal["one-shot"] = "one-shot"
    provider: str
    label: str | None = None


class ResolvedSubagentStartRequest(SubagentStartRequest):
    """The provider-facing request: a new object, never the caller's mutated.

    ``task_group`` belongs to the service. A provider starts the background work of a
    *published* run in it (for example the task that reads the product's protocol
    stream); setup before publication runs in the caller's task.
    """

    descriptor: SubagentDescriptor
    task_group: TaskGroup = Field(exclude=True, repr=False)


class SubagentResult(BaseModel):
    """The one outcome of a run, consumed identically in foreground and background.

    ``diagnostic`` is provider-written, non-assistant failure detail, at most 4096 UTF-8
    bytes, shown apart from ``output``; it is absent on success and on local
    cancellation.
    """

    model_config = _FROZEN
    output: tuple[ContentBlock, ...] = ()
    structured: Any = None
    """The validated answer of a run started with an ``output_schema``: an instance of
    the model when a model class was given, the parsed JSON otherwise; ``None`` without a
    schema or when the run failed."""
    diagnostic: str | None = None
    stop_reason: str
    usage: Usage | None = None
    """What the product reported it used (tokens, cost); ``None`` when it reported none."""
    changes: Changes | None = None
    """What an isolated run changed (branch, commit, counts); ``None`` without isolation."""
    continuation: ContinuationHandle | None = None
    """How to continue this run's product session with a follow-up delegation
    (``resume=``); ``None`` unless the provider instance offers continuation and the
    product finished its turn."""

    @property
    def text(self) -> str:
        """The output's text blocks joined with no separator."""
        return text_of(self.output)

    def structured_as(self, model: type[ModelT]) -> ModelT:
        """:attr:`structured` typed as ``model`` (validated into it if it is plain JSON).

        Raises:
            ValueError: The result carries no structured answer (it failed, or was not
                started with an ``output_schema``).
            pydantic.ValidationError: The structured answer does not fit ``model``.
        """
        if self.structured is None:
            raise ValueError(
                f"the result carries no structured answer (stop reason {self.stop_reason})"
            )
        if isinstance(self.structured, model):
            return self.structured
        return model.model_validate(self.structured)


@runtime_checkable
class SubagentRun(Protocol):
    """A published child.

    Contract:

    * ``result()`` may be awaited any number of times and returns the same value. It
      does not raise for child-level failures (they settle as ``error`` with a safe
      diagnostic); it raises only for an infrastructure fault no stop reason can
      represent.
    * ``dispose()`` cancels whatever work is left, waits until no process of the run is
      alive and releases resources. It is idempotent: every call shares one teardown
      and reports its outcome. Consumers always call it, on success and on failure.
    """

    @property
    def id(self) -> str:
        """Provider-minted id, unique among the parent's runs (never a product thread id)."""
        ...

    @property
    def local_agent(self) -> object | None:
        """The in-process child agent, or ``None`` for an out-of-process run."""
        ...

    async def result(self) -> SubagentResult:
        """Wait for the run to settle."""
        ...

    async def dispose(self) -> None:
        """Cancel remaining work and wait for quiescence (memoised)."""
        ...


class SubagentProvider(abc.ABC):
    """A named transport for one-shot child agents.

    Ownership: until ``start()`` returns, the provider owns setup and must release every
    partial resource before it raises (a raise publishes nothing and emits no lifecycle
    event). Returning is the single point of publication; afterwards every failure
    settles through ``run.result()`` and ``start()`` must not raise. The service may
    call ``start()`` concurrently; per-run state stays isolated.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Registry name, fixed when the instance is configured."""

    @property
    @abc.abstractmethod
    def capabilities(self) -> SubagentCapabilities:
        """Static start-time feature flags checked by the service before ``start()``."""

    @property
    @abc.abstractmethod
    def inherits_parent_context(self) -> bool:
        """Whether the child sees the parent's conversation (descriptive; wording only)."""

    @property
    def honours_budgets(self) -> bool:
        """Whether ``start()`` enforces ``request.budget`` (deadline, idle timeout).

        ``False`` by default: the service then refuses a request that carries a budget
        rather than accept and ignore it. The provider runtime honours budgets.
        """
        return False

    @abc.abstractmethod
    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        """Build and publish one child for ``request``."""
