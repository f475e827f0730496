"""What an isolated run changed: a plain value on the result, and its one model-facing line.

dsh-subagent knows nothing about how a run is isolated (no version control here): an
isolation layer (for example dsh-worktree, a git worktree per delegation) fills
:attr:`SubagentResult.changes <dsh_subagent.SubagentResult.changes>`; without isolation
the field is ``None``. What wraps a provider into an isolated one is
:class:`~dsh_subagent.Isolation` (beside :func:`~dsh_subagent.delegate`, which accepts it).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, NonNegativeInt

__all__ = ["Changes", "render_changes"]


class Changes(BaseModel):
    """Where an isolated run's changes went.

    Attributes:
        branch: The branch the run worked on.
        commit: The commit holding every change the run made; ``None`` when it changed
            nothing (the branch was then deleted).
        base: The commit the run started from.
        files_changed: Files changed between ``base`` and ``commit``.
        insertions: Lines inserted.
        deletions: Lines deleted.
        worktree: The kept working tree's path, or ``None`` when it was removed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    branch: str
    commit: str | None
    base: str
    files_changed: NonNegativeInt = 0
    insertions: NonNegativeInt = 0
    deletions: NonNegativeInt = 0
    worktree: str | None = None


def render_changes(changes: Changes) -> str:
    """The one line a model sees about an isolated run's changes.

    ``Changes: committed on branch <b> (<n> files changed, <i> insertions(+), <d>
    deletions(-)), commit <short>``; ``Changes: none (branch <b> deleted)``; or, with no
    commit and a kept worktree, ``Changes: not committed; worktree kept at <path> (branch
    <b>)``.
    """
    if changes.commit is None:
        if changes.worktree is not None:
            return (
                f"Changes: not committed; worktree kept at {changes.worktree} "
                f"(branch {changes.branch})"
            )
        return f"Changes: none (branch {changes.branch} deleted)"
    return (
        f"Changes: committed on branch {changes.branch} ({changes.files_changed} files "
        f"changed, {changes.insertions} insertions(+), {changes.deletions} deletions(-)), "
        f"commit {changes.commit[:12]}"
    )
