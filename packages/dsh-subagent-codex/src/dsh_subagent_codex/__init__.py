"""dsh-subagent-codex: delegate one self-contained task to the real Codex app-server.

The public surface is the provider, its configuration and the pinned product version.
Its failures are :mod:`dsh_subagent` errors (``SubagentError``, ``ProductStartError``,
``StartCancelledError``, ``ProductTeardownError``); the modules behind it (the wire, the
turn driver, the error-info mapping) are internal.
"""

import logging

from dsh_subagent_codex.binary import PINNED_CODEX_VERSION
from dsh_subagent_codex.config import CodexConfig, PermissionMode
from dsh_subagent_codex.provider import MAX_TASK_CHARS, CodexProvider

# Records reach the host's own handlers only, never Python's last-resort stderr output.
logging.getLogger("dsh_subagent_codex").addHandler(logging.NullHandler())

__all__ = [
    "MAX_TASK_CHARS",
    "PINNED_CODEX_VERSION",
    "CodexConfig",
    "CodexProvider",
    "PermissionMode",
]
