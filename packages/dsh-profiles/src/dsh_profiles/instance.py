"""One constructed, unstarted provider instance of a composition: the data type the
Loader builds and the tool rows' own instances copy (it imports nothing of either)."""

from __future__ import annotations

from dataclasses import dataclass

from dsh_subagent import SubagentProvider
from dsh_worktree import Worktree
from pydantic import BaseModel

__all__ = ["LoadedProvider"]


@dataclass(frozen=True)
class LoadedProvider:
    """One constructed, unstarted provider instance.

    Attributes:
        row: 1-based row number in the profile's ``providers`` array.
        type: The entry-point name the row asked for.
        origin: ``module:attr`` (and distribution) the class came from.
        config: The validated ``Config`` instance.
        provider: The constructed provider (wrapped in its worktree isolation when the
            row asks for it); nothing has been started.
        worktree: The instance's worktree isolation settings, or ``None``.
        tool: The tool row this instance exists for, when that row's ``worktree`` setting
            differs from its provider row's (a second instance of the row, named
            ``<provider_name>@<tool name>``); ``None`` for a provider row's own instance.
    """

    row: int
    type: str
    origin: str
    config: BaseModel
    provider: SubagentProvider
    worktree: Worktree | None = None
    tool: str | None = None

    @property
    def name(self) -> str:
        """The registry name (``provider_name``)."""
        return self.provider.name
