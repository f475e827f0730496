"""Typed shapes of the app-server messages this provider sends and consumes.

Own models, checked against the pinned binary's generated JSON schema by the package
tests (see the README for why not the official ``openai-codex`` models):

* client → server params are strict (``extra="forbid"``): we send exactly these keys;
* server → client shapes validate only the fields the provider reads and ignore every
  other field, so a server adding fields (it adds many per release) is tolerated while
  a wrong type in a consumed field is a protocol failure.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "CLIENT_INFO",
    "AgentMessageItem",
    "ClientInfo",
    "DeclinableItem",
    "InitializeCapabilities",
    "InitializeParams",
    "ItemCompletedParams",
    "NonEmptyStr",
    "ServerRequestParams",
    "TextInput",
    "ThreadRef",
    "ThreadResumeParams",
    "ThreadStartParams",
    "ThreadStartResult",
    "TurnCompletedParams",
    "TurnInterruptParams",
    "TurnRef",
    "TurnStartParams",
    "TurnStartResult",
    "TurnStartedParams",
    "TurnTerminal",
]

NonEmptyStr = Annotated[str, Field(min_length=1)]

_SEND = ConfigDict(frozen=True, extra="forbid")
_RECEIVE = ConfigDict(frozen=True, extra="ignore")


# -- client → server ----------------------------------------------------------------------


class ClientInfo(BaseModel):
    """``initialize.clientInfo``."""

    model_config = _SEND
    name: str
    title: str
    version: str


class InitializeCapabilities(BaseModel):
    """``initialize.capabilities``: no experimental API, no request attestation."""

    model_config = _SEND
    experimentalApi: bool = False
    requestAttestation: bool = False


CLIENT_INFO: Final = ClientInfo(name="dsh-python", title="DSH Python", version="0.1.0")


class InitializeParams(BaseModel):
    """``initialize`` params."""

    model_config = _SEND
    clientInfo: ClientInfo = CLIENT_INFO
    capabilities: InitializeCapabilities = InitializeCapabilities()


class ThreadStartParams(BaseModel):
    """``thread/start`` params; ``None`` fields are left out of the frame."""

    model_config = _SEND
    cwd: str
    ephemeral: bool = True
    approvalPolicy: Literal["never", "on-request"]
    approvalsReviewer: Literal["auto_review"] | None = None
    sandbox: Literal["workspace-write", "danger-full-access"] | None = None
    model: str | None = None


class ThreadResumeParams(BaseModel):
    """``thread/resume`` params (by thread id, from the product home); ``None`` fields
    are left out of the frame. ``excludeTurns``: the history is the product's to read,
    not the client's."""

    model_config = _SEND
    threadId: str
    cwd: str
    excludeTurns: Literal[True] = True
    approvalPolicy: Literal["never", "on-request"]
    approvalsReviewer: Literal["auto_review"] | None = None
    sandbox: Literal["workspace-write", "danger-full-access"] | None = None
    model: str | None = None


class TextInput(BaseModel):
    """One ``turn/start`` text input item."""

    model_config = _SEND
    type: Literal["text"] = "text"
    text: str
    text_elements: tuple[JsonValue, ...] = ()


class TurnStartParams(BaseModel):
    """``turn/start`` params."""

    model_config = _SEND
    threadId: str
    input: tuple[TextInput, ...]
    outputSchema: dict[str, JsonValue] | None = None
    """The JSON Schema the turn's final message must match (sent only when set)."""


class TurnInterruptParams(BaseModel):
    """``turn/interrupt`` params."""

    model_config = _SEND
    threadId: str
    turnId: str


# -- server → client ----------------------------------------------------------------------


class ThreadRef(BaseModel):
    """The consumed part of a ``Thread``."""

    model_config = _RECEIVE
    id: NonEmptyStr
    ephemeral: bool


class ThreadStartResult(BaseModel):
    """``thread/start`` result."""

    model_config = _RECEIVE
    thread: ThreadRef


class TurnRef(BaseModel):
    """A turn known only by id."""

    model_config = _RECEIVE
    id: NonEmptyStr


class TurnStartResult(BaseModel):
    """``turn/start`` result."""

    model_config = _RECEIVE
    turn: TurnRef


class TurnStartedParams(BaseModel):
    """``turn/started`` params."""

    model_config = _RECEIVE
    threadId: NonEmptyStr
    turn: TurnRef


class TurnTerminal(BaseModel):
    """The consumed part of ``turn/completed.turn``.

    ``status`` is the terminal status; ``inProgress`` (legal in the schema's
    ``TurnStatus``) is rejected because a completion notification must be terminal.
    ``error`` stays raw: only its ``codexErrorInfo`` is ever mapped, never copied.
    """

    model_config = _RECEIVE
    id: NonEmptyStr
    status: Literal["completed", "interrupted", "failed"]
    error: Any = None


class TurnCompletedParams(BaseModel):
    """``turn/completed`` params."""

    model_config = _RECEIVE
    threadId: NonEmptyStr
    turn: TurnTerminal


class AgentMessageItem(BaseModel):
    """An ``agentMessage`` thread item.

    ``phase`` is required: the pinned schema allows ``final_answer``, ``commentary``,
    ``partial_answer`` or ``null``; a missing key or another value is a protocol failure
    rather than a silent ``null``.
    """

    model_config = _RECEIVE
    type: Literal["agentMessage"]
    text: str
    phase: Literal["final_answer", "commentary", "partial_answer"] | None


class DeclinableItem(BaseModel):
    """A ``commandExecution`` or ``fileChange`` item: only its status is read."""

    model_config = _RECEIVE
    type: Literal["commandExecution", "fileChange"]
    status: str


class ItemCompletedParams(BaseModel):
    """``item/completed`` params; ``item`` is validated by type afterwards."""

    model_config = _RECEIVE
    threadId: NonEmptyStr
    turnId: NonEmptyStr
    item: dict[str, Any]


class ServerRequestParams(BaseModel):
    """The routing fields common to the server requests answered unattended.

    ``turnId`` is optional here because MCP elicitation may carry ``null``; the
    per-method rules decide whether it is required. ``availableDecisions`` stays raw
    (the pinned schema does not declare it, yet the binary sends it).
    """

    model_config = _RECEIVE
    threadId: NonEmptyStr
    turnId: str | None = None
    availableDecisions: Any = None
