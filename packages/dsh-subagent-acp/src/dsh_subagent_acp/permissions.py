"""Unattended answers to ``session/request_permission`` (no person is ever asked)."""

from __future__ import annotations

from collections.abc import Sequence

from acp.schema import AllowedOutcome, DeniedOutcome, PermissionOption, RequestPermissionResponse

from dsh_subagent_acp.config import PermissionPolicy

__all__ = ["answer_permission"]

_ALLOW_KINDS = ("allow_once", "allow_always")
_REJECT_KINDS = ("reject_once", "reject_always")


def _first_of_kind(options: Sequence[PermissionOption], kinds: tuple[str, ...]) -> str | None:
    # Preference follows ``kinds`` (the narrowest grant first), not the agent's order.
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


def answer_permission(
    policy: PermissionPolicy, options: Sequence[PermissionOption]
) -> RequestPermissionResponse:
    """Choose the answer for one permission request under ``policy``.

    Options are matched by ``kind`` only; ``optionId`` is the agent's free-form name and
    is echoed back untouched. Under ``reject`` a ``reject_once`` (else ``reject_always``)
    option is *selected* rather than answering ``cancelled``: in ACP ``cancelled`` means
    "the prompt turn was cancelled", which agents turn into ``stopReason: cancelled`` —
    and that settles ``aborted``, the word reserved for parent-driven cancellation. A
    selected rejection lets the agent carry on without the tool and still answer.
    ``cancelled`` is used only when the agent offers nothing non-approving to select.

    Args:
        policy: The configured policy.
        options: The options offered by the agent.

    Returns:
        The response to send back.
    """
    chosen = _first_of_kind(options, _ALLOW_KINDS) if policy == "allow" else None
    if chosen is None:
        chosen = _first_of_kind(options, _REJECT_KINDS)
    if chosen is None:
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
    return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen))
