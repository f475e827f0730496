"""Field validators shared by provider configuration models.

The core's checks raise :class:`~dsh_subagent.SubagentError`; pydantic (and so the
Loader) names the offending field only for a ``ValueError``, so these wrap them::

    cwd: Annotated[str | None, configured_cwd(PREFIX)] = None
    env: Annotated[dict[str, str | None], env_overlay(PREFIX)] = Field(default_factory=dict)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from dsh_subprocess import check_env_overlay
from pydantic import AfterValidator

from dsh_subagent.errors import SubagentError
from dsh_subagent.workdir import validate_configured_cwd

__all__ = ["configured_cwd", "env_overlay"]

EnvT = TypeVar("EnvT", bound=Mapping[str, str | None])


def configured_cwd(prefix: str) -> AfterValidator:
    """Validate an optional ``cwd`` override once, at load (see ``validate_configured_cwd``)."""

    def check(value: str | None) -> str | None:
        try:
            return validate_configured_cwd(prefix, value)
        except SubagentError as exc:
            raise ValueError(exc.message) from None

    return AfterValidator(check)


def env_overlay(prefix: str) -> AfterValidator:
    """Refuse, at load, an env overlay the OS could not apply (``check_env_overlay``)."""

    def check(value: EnvT) -> EnvT:
        try:
            check_env_overlay(value)
        except ValueError as exc:
            raise ValueError(f"{prefix}: {exc}") from None
        return value

    return AfterValidator(check)
