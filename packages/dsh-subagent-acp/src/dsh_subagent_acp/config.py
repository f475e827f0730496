"""Configuration of one named ACP provider instance, validated once at load."""

from __future__ import annotations

from typing import Final, Literal

from dsh_subagent import Grace, ProductConfig
from pydantic import Field, field_validator

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

Deliberately short: every agent tried here (codex-acp, claude-agent-acp) ignores stdin
EOF, so a long window only delays each dispose, while an agent that does exit on EOF
does so within milliseconds.
"""

DEFAULT_DISPOSE_GRACE: Final = 3.0
"""Seconds between SIGTERM and SIGKILL of the agent's process tree."""


class AcpConfig(ProductConfig):
    """One ACP provider instance (``[[providers]]`` row of a Loader profile).

    The shared fields (``provider_name``, ``env``, ``cwd``, ``dispose_grace``) and their
    rules are :class:`~dsh_subagent.ProductConfig`'s.

    Attributes:
        command: The agent executable (absolute path, or a bare name looked up on the
            child's ``PATH`` by the operating system).
        args: Arguments after ``command``.
        serve_port_arg: For an agent that serves itself on a loopback TCP port and
            connects back to it (OpenCode's ``--port``): the argument that sets the
            port. Each run gets a free port, passed as ``serve_port_arg PORT``, and
            under confinement may bind and connect to exactly that port.
        permission: The unattended permission policy (see :data:`PermissionPolicy`).
        dispose_eof_grace: Seconds the whole tree may take to exit after stdin is
            closed, before it is terminated.
        dispose_grace: Seconds between SIGTERM and SIGKILL of the whole tree.
        continuation: Offer follow-up delegations through ``session/load``. A run's
            result carries a continuation handle only when the agent advertised
            ``loadSession`` at ``initialize``; a follow-up to an agent that does not
            advertise it is refused (``UNSUPPORTED_CAPABILITY``) and rolled back before
            publication. Where the agent keeps its sessions is the agent's own
            configuration (codex-acp: ``CODEX_HOME``).
    """

    provider_name: str = Field(default="acp", min_length=1)
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    serve_port_arg: str | None = Field(default=None, min_length=1)
    permission: PermissionPolicy = "reject"
    dispose_eof_grace: Grace = DEFAULT_DISPOSE_EOF_GRACE
    dispose_grace: Grace = DEFAULT_DISPOSE_GRACE
    continuation: bool = False

    @field_validator("provider_name", "command")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value
