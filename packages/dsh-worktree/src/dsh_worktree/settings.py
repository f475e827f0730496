"""``Worktree``: the isolation settings (what the Python API, the profile and the CLI take)."""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

if TYPE_CHECKING:
    from dsh_subagent import SubagentProvider

    from dsh_worktree.provider import WorktreeProvider

__all__ = ["DEFAULT_BRANCH", "MAX_WARM", "Worktree", "default_root"]

DEFAULT_BRANCH: Final = "dsh/{id}"
"""The branch name pattern: ``{id}`` is the delegation's fresh id (12 hex digits)."""


MAX_WARM: Final = 64
"""The largest warm pool (worktrees kept ready per repository)."""


def default_root() -> str:
    """Where worktrees live by default: ``$XDG_CACHE_HOME/dsh/worktrees`` (or ``~/.cache/...``).

    Outside every repository, per user; one directory per repository below it.
    """
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return os.path.join(cache, "dsh", "worktrees")


class Worktree(BaseModel):
    """Run each delegation in a fresh git worktree of the cwd's repository, on a new branch.

    Attributes:
        base: The commit the worktree starts from (any ref git resolves: a branch, a tag,
            a sha). Default: the ``HEAD`` of the repository the delegation's cwd is in.
            Uncommitted changes of the main working tree are not part of the base.
        branch: The new branch's name; ``{id}`` is replaced by the delegation's fresh id.
            The branch must not exist yet.
        root: The directory worktrees are created under (default: :func:`default_root`);
            must be outside the repository's working tree. A relative path resolves
            against the current directory when the settings are made.
        keep: Keep the worktree after its changes were committed (default: remove it;
            the branch always stays when it holds a commit).
        warm: How many worktrees per repository a long-lived provider keeps checked out
            and ready (0 to :data:`MAX_WARM`; default 0: every run checks out its own).
            A run then claims a ready worktree with a few ref writes instead of a
            checkout, and after collection the worktree is reset to the base in the
            background and reused. Only while the provider is entered (``async with``);
            see docs/worktrees.md.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    base: str = Field(default="HEAD", min_length=1)
    branch: str = Field(default=DEFAULT_BRANCH, min_length=1)
    root: str | None = None
    keep: StrictBool = False
    warm: StrictInt = Field(default=0, ge=0, le=MAX_WARM)

    @field_validator("branch")
    @classmethod
    def _pattern(cls, value: str) -> str:
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
        except ValueError as exc:
            raise ValueError(f"is not a valid branch pattern ({exc})") from None
        if any(name != "id" for name in fields):
            raise ValueError("may use only the {id} placeholder")
        return value

    @field_validator("base")
    @classmethod
    def _base(cls, value: str) -> str:
        if value.startswith("-") or "\0" in value or value != value.strip():
            raise ValueError("is not a ref")
        return value

    @field_validator("root")
    @classmethod
    def _root(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip() or "\0" in value:
            raise ValueError("must be a directory path")
        return os.path.abspath(os.path.expanduser(value))

    def branch_for(self, run_id: str) -> str:
        """The branch name for the delegation ``run_id``."""
        return self.branch.format(id=run_id)

    def root_dir(self) -> str:
        """The configured root, or :func:`default_root`."""
        return self.root if self.root is not None else default_root()

    def isolate(self, provider: SubagentProvider) -> WorktreeProvider:
        """``provider`` with every run in its own worktree (:class:`WorktreeProvider`)."""
        from dsh_worktree.provider import WorktreeProvider

        return WorktreeProvider(provider, self)
