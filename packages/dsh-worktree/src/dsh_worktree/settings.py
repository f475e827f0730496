"""The isolation settings' fields (what the Python API, the profile and the CLI take);
:class:`~dsh_worktree.Worktree` adds ``isolate`` in the module of the wrapper it makes."""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

__all__ = ["DEFAULT_BRANCH", "MAX_WARM", "WorktreeSettings", "default_root"]

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


class WorktreeSettings(BaseModel):
    """The isolation settings' fields and their checks: what the worktree lifecycle and the
    warm pool read. :class:`~dsh_worktree.Worktree` is these plus ``isolate`` (documented
    there); this base keeps the lower modules free of the isolation wrapper."""

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
