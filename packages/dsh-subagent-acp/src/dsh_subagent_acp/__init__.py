"""dsh-subagent-acp: delegate one self-contained task to any Agent Client Protocol agent.

The provider spawns the configured ``command + args`` through dsh-subprocess, speaks ACP
to it with the ``agent-client-protocol`` library (``initialize`` → ``session/new`` →
publication → ``session/prompt``), answers permission requests unattended by policy and
tears the whole process tree down on dispose.
"""

from dsh_subagent_acp.config import (
    DEFAULT_DISPOSE_EOF_GRACE,
    DEFAULT_DISPOSE_GRACE,
    AcpConfig,
    PermissionPolicy,
)
from dsh_subagent_acp.errors import AcpError, AcpFailure, Category, Stage
from dsh_subagent_acp.permissions import answer_permission
from dsh_subagent_acp.provider import AcpProvider
from dsh_subagent_acp.stop_reasons import map_stop_reason

__all__ = [
    "DEFAULT_DISPOSE_EOF_GRACE",
    "DEFAULT_DISPOSE_GRACE",
    "AcpConfig",
    "AcpError",
    "AcpFailure",
    "AcpProvider",
    "Category",
    "PermissionPolicy",
    "Stage",
    "answer_permission",
    "map_stop_reason",
]
