"""Permission modes and the unattended answers to the app-server's server requests.

Nothing here waits for a person: every request either gets a non-approving answer
right away or fails the run. Permission facts come only from structured protocol
items (server requests, declined ``commandExecution`` / ``fileChange`` items and a
``sandboxError`` terminal); stderr is never classified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from dsh_subagent_codex.config import PermissionMode
from dsh_subagent_codex.errors import CodexProtocolError

__all__ = [
    "COMMAND_APPROVAL",
    "ELICITATION",
    "FILE_APPROVAL",
    "PERMISSIONS_APPROVAL",
    "SUPPORTED_REQUESTS",
    "USER_INPUT",
    "PermissionFact",
    "UnattendedAnswer",
    "answer_request",
    "declined_item_fact",
    "mode_thread_fields",
    "sandbox_failure_fact",
]

COMMAND_APPROVAL: Final = "item/commandExecution/requestApproval"
FILE_APPROVAL: Final = "item/fileChange/requestApproval"
PERMISSIONS_APPROVAL: Final = "item/permissions/requestApproval"
USER_INPUT: Final = "item/tool/requestUserInput"
ELICITATION: Final = "mcpServer/elicitation/request"

SUPPORTED_REQUESTS: Final = frozenset(
    {COMMAND_APPROVAL, FILE_APPROVAL, PERMISSIONS_APPROVAL, USER_INPUT, ELICITATION}
)
"""Server requests answered unattended; any other method fails the run."""


def mode_thread_fields(mode: PermissionMode) -> dict[str, str]:
    """The ``thread/start`` fields of a permission mode.

    The mode is applied per thread because CLI-global flags do not configure threads an
    app-server client creates; ``never`` sends no ``sandbox`` so native config decides.
    """
    if mode == "never":
        return {"approvalPolicy": "never"}
    if mode == "approve-for-me":
        return {
            "approvalPolicy": "on-request",
            "approvalsReviewer": "auto_review",
            "sandbox": "workspace-write",
        }
    return {"approvalPolicy": "never", "sandbox": "danger-full-access"}


@dataclass(frozen=True, slots=True)
class PermissionFact:
    """A safe permission fact: fixed request/decision/reason vocabulary only."""

    request: str
    decision: str
    reason: str

    def render(self, mode: PermissionMode) -> str:
        """The diagnostic's second line for a run under ``mode``."""
        return (
            f"Codex unattended decision (mode: {mode}; request: {self.request}; "
            f"decision: {self.decision}): {self.reason}"
        )


@dataclass(frozen=True, slots=True)
class UnattendedAnswer:
    """The JSON-RPC ``result`` to send and the fact it establishes."""

    result: dict[str, Any]
    fact: PermissionFact


_NO_APPROVAL = "the provider does not grant interactive approval"


def _approval_decision(offered: Any) -> str:
    # Absent or null: the stable request shape without an offered list → decline.
    if offered is None:
        return "decline"
    if isinstance(offered, list):
        if "cancel" in offered:
            return "cancel"
        if "decline" in offered:
            return "decline"
    raise CodexProtocolError("app-server offered no unattended approval decision")


def answer_request(method: str, available_decisions: Any) -> UnattendedAnswer:
    """Pick the unattended answer to a supported server request.

    Args:
        method: The request method (one of :data:`SUPPORTED_REQUESTS`).
        available_decisions: ``params.availableDecisions`` of an approval request.

    Returns:
        The result and its permission fact. Approvals get ``cancel`` when offered, else
        ``decline`` when offered or when no list is offered; permission grants get no
        permissions; user input gets no answers; MCP elicitation is declined.

    Raises:
        CodexProtocolError: An unsupported method, or an approval offering no
            non-approving decision.
    """
    if method in (COMMAND_APPROVAL, FILE_APPROVAL):
        decision = _approval_decision(available_decisions)
        request = "command approval" if method == COMMAND_APPROVAL else "file approval"
        verdict = "cancelled" if decision == "cancel" else "declined"
        return UnattendedAnswer(
            {"decision": decision}, PermissionFact(request, verdict, _NO_APPROVAL)
        )
    if method == PERMISSIONS_APPROVAL:
        return UnattendedAnswer(
            {"permissions": {}, "scope": "turn"},
            PermissionFact(
                "permission grant", "denied", "the provider grants no additional turn permissions"
            ),
        )
    if method == USER_INPUT:
        return UnattendedAnswer(
            {"answers": {}},
            PermissionFact(
                "user input", "empty response", "the provider does not collect interactive answers"
            ),
        )
    if method == ELICITATION:
        return UnattendedAnswer(
            {"action": "decline", "content": None, "_meta": None},
            PermissionFact(
                "MCP elicitation",
                "declined",
                "the provider does not collect interactive MCP input",
            ),
        )
    raise CodexProtocolError("unsupported app-server request")


def declined_item_fact(item_type: str) -> PermissionFact:
    """The fact of a ``commandExecution`` / ``fileChange`` item that ended ``declined``."""
    if item_type == "commandExecution":
        return PermissionFact(
            "command execution",
            "declined",
            "Codex declined the command under the selected permission mode",
        )
    return PermissionFact(
        "file change",
        "declined",
        "Codex declined the file change under the selected permission mode",
    )


def sandbox_failure_fact() -> PermissionFact:
    """The fact of a failed terminal whose category is ``sandboxError``."""
    return PermissionFact("sandbox execution", "failed", "Codex reported a sandbox failure")
