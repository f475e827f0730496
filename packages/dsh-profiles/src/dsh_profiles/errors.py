"""The dsh-profiles error hierarchy: every problem a user can fix in a profile or in a
command's request (unknown tool, blank task, a bad flag value)."""

from __future__ import annotations

__all__ = ["DshProfilesError", "ProfileError", "UsageError"]


class DshProfilesError(Exception):
    """Root of every error this distribution raises on purpose."""


class ProfileError(DshProfilesError):
    """A profile cannot be loaded; each problem names the profile, the row and the field.

    Attributes:
        source: The profile's path (or a label for an in-memory profile).
        problems: One readable line per problem, in profile order.
    """

    def __init__(self, source: str, problems: list[str] | tuple[str, ...]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__(
            f"{source}: " + problems[0]
            if len(problems) == 1
            else f"{source}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)
        )


class UsageError(DshProfilesError):
    """The command line asks for something the profile cannot do (unknown tool, blank task)."""
