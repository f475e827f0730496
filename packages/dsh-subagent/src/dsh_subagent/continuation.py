"""Follow-up delegations: the continuation handle a result carries and a later start takes.

A follow-up is a new, separate delegation (its own process tree, its own single result,
its own cancellation) that the product starts from the saved session of an earlier one.
The earlier result names that session with a :class:`ContinuationHandle`: the provider
instance it came from, the product, and the product's own session id. Nothing in it is
secret or usable without the provider instance that issued it; a model never sees one
(the model-facing tool shows a short id valid only for the parent session that received
it, see :class:`ContinuationIds`).

A handle the provider cannot continue (another instance or product, a session the
product no longer has, a cleaned home) is refused before publication with
:class:`~dsh_subagent.ContinuationUnavailableError`, whose message is the fixed
:data:`CONTINUATION_UNAVAILABLE_MESSAGE` (rule ``continuation:refused``).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dsh_subagent.errors import ContinuationUnavailableError, SubagentError, SubagentErrorCode

__all__ = [
    "CONTINUATION_UNAVAILABLE_CATEGORY",
    "CONTINUATION_UNAVAILABLE_MESSAGE",
    "CONTINUATION_UNSUPPORTED_CATEGORY",
    "HANDLE_PREFIX",
    "MAX_CONTINUATION_IDS",
    "ContinuationHandle",
    "ContinuationIds",
]

HANDLE_PREFIX: Final = "dshc1."
"""The serialised form's prefix (format version 1)."""

CONTINUATION_UNAVAILABLE_MESSAGE: Final = (
    "subagent: cannot continue: the continuation handle names no session this provider "
    "instance can continue"
)
"""The one fixed line of every refused continuation (foreign, stale or cleaned away)."""

CONTINUATION_UNAVAILABLE_CATEGORY: Final = "continuation-unavailable"
"""The failure category a product hook raises (``child.fail(...)``) when the product does
not have the session; the runtime turns it into the fixed refusal."""

CONTINUATION_UNSUPPORTED_CATEGORY: Final = "continuation-unsupported"
"""The failure category a product hook raises when the product, as started, turns out
not to offer continuation at all (an ACP agent without ``loadSession``); the runtime
turns it into an ``UNSUPPORTED_CAPABILITY`` start error after the rollback."""

MAX_CONTINUATION_IDS: Final = 1024
"""How many short continuation ids a tool remembers (oldest forgotten first)."""

_SAFE_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"

SafeId = Annotated[str, Field(pattern=_SAFE_ID)]


class ContinuationHandle(BaseModel):
    """An opaque, serialisable reference to a finished delegation's product session.

    Attributes:
        provider: The provider instance (registry name) that issued it; only that
            instance may continue it.
        product: The product's slug (``codex``, ``claude-code``, ``acp``, ...).
        session: The product's own session id (a Codex thread, a Claude Code session,
            an ACP session).
        workspace: Set by an isolating wrapper (dsh-worktree): the directory the run
            worked in, where a follow-up works again (a product may key its sessions
            by directory). ``None`` for a run that worked in its own cwd.
        branch: Set by an isolating wrapper: the branch holding the run's changes, which
            a follow-up continues (``None``: no branch holds them).

    :meth:`dumps` / :meth:`loads` give the string form ``dshc1.<base64url JSON>`` that
    ``dsh run --resume`` takes and ``dsh run --json`` prints.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    provider: Annotated[str, Field(min_length=1, max_length=200)]
    product: SafeId
    session: SafeId
    workspace: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    branch: Annotated[str, Field(min_length=1, max_length=1024)] | None = None

    def dumps(self) -> str:
        """The handle as one printable token."""
        # Unset isolation fields stay out: a plain run's token is as it always was.
        raw = self.model_dump_json(exclude_none=True).encode()
        return HANDLE_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def loads(cls, token: str) -> ContinuationHandle:
        """Parse :meth:`dumps` output.

        Raises:
            SubagentError: ``INVALID_REQUEST`` (``continuation handle is malformed``);
                the message never repeats the token.
        """
        try:
            if not token.startswith(HANDLE_PREFIX):
                raise ValueError("prefix")
            body = token[len(HANDLE_PREFIX) :]
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return cls.model_validate(json.loads(raw))
        except (ValueError, binascii.Error, ValidationError, UnicodeDecodeError):
            raise SubagentError(
                SubagentErrorCode.INVALID_REQUEST,
                "subagent: the continuation handle is malformed (expected the dshc1. token a "
                "result printed)",
            ) from None


class ContinuationIds:
    """Short, model-facing continuation ids, each valid only for the parent session it
    was issued to.

    The model-facing subagent tool names a run's continuation with :meth:`issue` and
    resolves the model's argument with :meth:`resolve`. An id of another parent session
    resolves exactly like an unknown id: the caller learns nothing about other sessions.
    At most :data:`MAX_CONTINUATION_IDS` ids are kept; the oldest is forgotten first.
    """

    def __init__(self, limit: int = MAX_CONTINUATION_IDS) -> None:
        self._limit = limit
        self._ids: OrderedDict[tuple[str, str], ContinuationHandle] = OrderedDict()

    def issue(self, session_id: str, handle: ContinuationHandle) -> str:
        """A fresh short id for ``handle``, valid for ``session_id`` only."""
        while True:
            short = f"c-{secrets.token_hex(4)}"
            if (session_id, short) not in self._ids:
                break
        self._ids[(session_id, short)] = handle
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)
        return short

    def resolve(self, session_id: str, short: str) -> ContinuationHandle | None:
        """The handle issued to ``session_id`` as ``short``, else ``None``."""
        return self._ids.get((session_id, short))

    def __len__(self) -> int:
        return len(self._ids)


def session_to_continue(
    handle: ContinuationHandle | None,
    *,
    offers: bool,
    provider: str,
    product: str,
    has_session: Callable[[str], bool],
) -> str | None:
    """The product session a start continues (``None``: a fresh start).

    Raises:
        ContinuationUnavailableError: the provider instance ``provider`` of ``product``
            does not continue sessions, the handle is another instance's or product's,
            or ``has_session`` says the session is gone; nothing has been started.
    """
    if handle is None:
        return None
    if (
        not offers
        or handle.provider != provider
        or handle.product != product
        or not has_session(handle.session)
    ):
        raise ContinuationUnavailableError(CONTINUATION_UNAVAILABLE_MESSAGE)
    return handle.session


def handle_for(session: str, *, provider: str, product: str) -> ContinuationHandle | None:
    """The handle a finished turn's result offers for the product's ``session``;
    ``None`` for a session id outside the handle's safe alphabet (the run is unaffected)."""
    try:
        return ContinuationHandle(provider=provider, product=product, session=session)
    except ValidationError:
        return None
