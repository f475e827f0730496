"""dsh-subagent-acp: delegate one self-contained task to any Agent Client Protocol agent.

The provider spawns the configured ``command + args`` through the provider runtime of
dsh-subagent, speaks ACP to it with the ``agent-client-protocol`` library
(``initialize`` → ``session/new`` → publication → ``session/prompt``), answers
permission requests unattended by policy and tears the whole process tree down on
dispose.
"""

import logging

from dsh_subagent_acp.agents import AgentProfile, KeylessWiring, agent_profile, known_agents
from dsh_subagent_acp.config import AcpConfig, PermissionPolicy
from dsh_subagent_acp.installed import (
    AGENTS_DIR_VARIABLE,
    InstalledAgent,
    default_prefixes,
    installed_agents,
    installer_dir,
)
from dsh_subagent_acp.provider import AcpProvider

# Records reach the host's own handlers only, never Python's last-resort stderr output.
logging.getLogger("dsh_subagent_acp").addHandler(logging.NullHandler())

__all__ = [
    "AGENTS_DIR_VARIABLE",
    "AcpConfig",
    "AcpProvider",
    "AgentProfile",
    "InstalledAgent",
    "KeylessWiring",
    "PermissionPolicy",
    "agent_profile",
    "default_prefixes",
    "installed_agents",
    "installer_dir",
    "known_agents",
]
