"""dsh-subagent-claude-code: delegate one task to the real Claude Code CLI.

The CLI is the one bundled in the pinned ``claude-agent-sdk`` wheel, driven through the
SDK's official ``query()`` over a transport whose process belongs to dsh-subprocess.
"""

from dsh_subagent_claude_code.config import (
    DEFAULT_DISPOSE_GRACE,
    DEFAULT_PROVIDER_NAME,
    PERMISSION_MODES,
    ClaudeCodeConfig,
    PermissionMode,
)
from dsh_subagent_claude_code.errors import ClaudeCodeError, StartAborted
from dsh_subagent_claude_code.failures import (
    FIXED_CATEGORIES,
    SDK_ERROR_SUBTYPES,
    ClaudeRunFailure,
    PermissionFact,
)
from dsh_subagent_claude_code.product import (
    PINNED_CLI_VERSION,
    PINNED_SDK_VERSION,
    PRODUCT,
    bundled_cli_path,
)
from dsh_subagent_claude_code.provider import APPROVAL_DENIED_MESSAGE, ClaudeCodeProvider
from dsh_subagent_claude_code.transport import EXIT_DRAIN_GRACE, ManagedCLITransport

__all__ = [
    "APPROVAL_DENIED_MESSAGE",
    "DEFAULT_DISPOSE_GRACE",
    "DEFAULT_PROVIDER_NAME",
    "EXIT_DRAIN_GRACE",
    "FIXED_CATEGORIES",
    "PERMISSION_MODES",
    "PINNED_CLI_VERSION",
    "PINNED_SDK_VERSION",
    "PRODUCT",
    "SDK_ERROR_SUBTYPES",
    "ClaudeCodeConfig",
    "ClaudeCodeError",
    "ClaudeCodeProvider",
    "ClaudeRunFailure",
    "ManagedCLITransport",
    "PermissionFact",
    "PermissionMode",
    "StartAborted",
    "bundled_cli_path",
]
