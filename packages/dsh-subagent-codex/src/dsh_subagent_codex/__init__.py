"""dsh-subagent-codex: delegate one self-contained task to the real Codex app-server."""

from dsh_subagent_codex.binary import APP_SERVER_ARGS, PINNED_CODEX_VERSION, codex_app_server_argv
from dsh_subagent_codex.config import PERMISSION_MODES, CodexConfig, PermissionMode
from dsh_subagent_codex.error_info import (
    HTTP_STATUS_VARIANTS,
    OBJECT_VARIANTS,
    STRING_VARIANTS,
    ErrorCategory,
    map_error_info,
)
from dsh_subagent_codex.errors import (
    CodexError,
    CodexFailure,
    CodexProtocolError,
    CodexTransportClosed,
)
from dsh_subagent_codex.permissions import PermissionFact, mode_thread_fields
from dsh_subagent_codex.provider import CodexProvider

__all__ = [
    "APP_SERVER_ARGS",
    "HTTP_STATUS_VARIANTS",
    "OBJECT_VARIANTS",
    "PERMISSION_MODES",
    "PINNED_CODEX_VERSION",
    "STRING_VARIANTS",
    "CodexConfig",
    "CodexError",
    "CodexFailure",
    "CodexProtocolError",
    "CodexProvider",
    "CodexTransportClosed",
    "ErrorCategory",
    "PermissionFact",
    "PermissionMode",
    "codex_app_server_argv",
    "map_error_info",
    "mode_thread_fields",
]
