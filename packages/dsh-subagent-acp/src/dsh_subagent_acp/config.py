"""Configuration of one named ACP provider instance, validated once at load."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from dsh_subagent import SubagentError, configured_cwd, env_overlay
from dsh_subagent.workdir import assert_positive_finite
from dsh_subprocess import MAX_GRACE_SECONDS
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dsh_subagent_acp.names import PREFIX

__all__ = [
    "DEFAULT_DISPOSE_EOF_GRACE",
    "DEFAULT_DISPOSE_GRACE",
    "AcpConfig",
    "PermissionPolicy",
]

PermissionPolicy = Literal["reject", "allow"]
"""How ``session/request_permission`` is answered; nobody is ever asked.

* ``reject`` (default): select the offered option whose ``kind`` is ``reject_once``
  (else ``reject_always``); when the agent offers no reject-shaped option, answer
  ``{"outcome": "cancelled"}``. Nothing is approved.
* ``allow``: select the offered ``allow_once`` option (else ``allow_always``); when no
  allow-shaped option is offered, answer exactly as ``reject`` does.

Options are always chosen by ``kind``, never by ``optionId`` (agents name them freely).
"""

DEFAULT_DISPOSE_EOF_GRACE: Final = 0.2
"""Seconds a disposed agent gets to exit on stdin EOF before tree termination.

Deliberately short (the reference waits 6 s): every agent tried here (codex-acp,
claude-agent-acp) ignores stdin EOF, so a long window only delays each dispose, while an
agent that does exit on EOF does so within milliseconds.
"""

DEFAULT_DISPOSE_GRACE: Final = 3.0
"""Seconds between SIGTERM and SIGKILL of the agent's process tree."""


class AcpConfig(BaseModel):
    """One ACP provider instance (``[[subagent.providers]]`` row of a Loader profile).

    Attributes:
        provider_name: Registry name of this instance; several instances coexist.
        command: The agent executable (absolute path, or a bare name looked up on the
            child's ``PATH`` by the operating system).
        args: Arguments after ``command``.
        env: Explicit environment overlay, layered over the credential-scrubbed parent
            environment by dsh-subprocess. An agent's own key (``OPENAI_API_KEY``...)
            reaches it only when listed here.
        cwd: Working directory override for every run of this instance; relative paths
            are resolved against the launch directory once, at load. Omit it to run in
            the delegating parent session's workspace.
        permission: The unattended permission policy (see :data:`PermissionPolicy`).
        dispose_eof_grace: Seconds to wait for the whole tree to exit after stdin is
            closed, before termination. Kept apart from (and by default wider than)
            ``dispose_grace`` so a cooperative agent's flush on EOF can land.
        dispose_grace: Seconds between SIGTERM and SIGKILL of the whole tree.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: str = Field(default="acp", min_length=1)
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: Annotated[dict[str, str], env_overlay(PREFIX)] = Field(default_factory=dict)
    cwd: Annotated[str | None, configured_cwd(PREFIX)] = None
    permission: PermissionPolicy = "reject"
    dispose_eof_grace: float = DEFAULT_DISPOSE_EOF_GRACE
    dispose_grace: float = DEFAULT_DISPOSE_GRACE

    @field_validator("provider_name", "command")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    # The core's checks raise SubagentError; a ValueError here lets pydantic (and so the
    # Loader) report the problem against the field that caused it.

    @field_validator("dispose_eof_grace", "dispose_grace", mode="before")
    @classmethod
    def _grace(cls, value: Any, info: ValidationInfo) -> Any:
        try:
            return assert_positive_finite(
                PREFIX, info.field_name or "grace", value, MAX_GRACE_SECONDS
            )
        except SubagentError as exc:
            raise ValueError(exc.message) from None
