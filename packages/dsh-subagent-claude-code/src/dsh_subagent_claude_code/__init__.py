"""dsh-subagent-claude-code: delegate one task to the real Claude Code CLI.

The CLI is the one bundled in the pinned ``claude-agent-sdk`` wheel, driven through the
SDK's official ``query()`` over a transport whose process belongs to the provider runtime
(:class:`dsh_subagent.ProductProvider`, spawning through dsh-subprocess).
"""

import logging

from dsh_subagent_claude_code.config import ClaudeCodeConfig
from dsh_subagent_claude_code.endpoint import (
    DEEPSEEK_ANTHROPIC_BASE_URL,
    DEEPSEEK_FAST_MODEL,
    DEEPSEEK_MAIN_MODEL,
    anthropic_endpoint_env,
    deepseek_env,
)
from dsh_subagent_claude_code.product import PINNED_CLI_VERSION, PINNED_SDK_VERSION
from dsh_subagent_claude_code.provider import ClaudeCodeProvider

# Records reach the host's own handlers only, never Python's last-resort stderr output.
logging.getLogger("dsh_subagent_claude_code").addHandler(logging.NullHandler())

__all__ = [
    "DEEPSEEK_ANTHROPIC_BASE_URL",
    "DEEPSEEK_FAST_MODEL",
    "DEEPSEEK_MAIN_MODEL",
    "PINNED_CLI_VERSION",
    "PINNED_SDK_VERSION",
    "ClaudeCodeConfig",
    "ClaudeCodeProvider",
    "anthropic_endpoint_env",
    "deepseek_env",
]
