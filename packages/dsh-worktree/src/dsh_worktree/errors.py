"""The one error of this distribution: an isolated run refused or failed before it started."""

from __future__ import annotations

from dsh_subagent import SubagentError, SubagentErrorCode

__all__ = ["WorktreeError"]


class WorktreeError(SubagentError):
    """Isolation refused (bad input) or could not be set up; nothing was left behind.

    A :class:`~dsh_subagent.SubagentError` with code ``INVALID_REQUEST``, so a harness
    that handles start failures handles it too. The message is one line that starts with
    ``worktree:`` and names what is wrong (the cwd, the base ref, the branch, git).
    """

    def __init__(self, message: str) -> None:
        super().__init__(SubagentErrorCode.INVALID_REQUEST, f"worktree: {message}")
