"""The pinned product: the Claude Code CLI bundled inside the pinned Agent SDK wheel."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Final

import claude_agent_sdk
from claude_agent_sdk._cli_version import __cli_version__

__all__ = [
    "PINNED_CLI_VERSION",
    "PINNED_SDK_VERSION",
    "PRODUCT",
    "BundledCliError",
    "bundled_cli_path",
]

PRODUCT: Final = "Claude Code"
"""Product name in every safe diagnostic line."""

PINNED_SDK_VERSION: Final = "0.2.189"
PINNED_CLI_VERSION: Final = "2.1.332"


class BundledCliError(Exception):
    """The pinned CLI cannot be used; it rides on the start error's ``__cause__`` only."""


def bundled_cli_path() -> str:
    """The absolute path of the CLI shipped in the installed ``claude-agent-sdk`` wheel.

    Never consults ``PATH`` or the SDK's npm/home fallbacks: a missing or unusable
    bundled binary fails closed instead of silently running an unpinned host ``claude``.

    Raises:
        BundledCliError: The installed SDK is not the pinned version, or its bundled
            CLI is missing or not executable.
    """
    if claude_agent_sdk.__version__ != PINNED_SDK_VERSION or __cli_version__ != PINNED_CLI_VERSION:
        raise BundledCliError(
            f"installed claude-agent-sdk is not the pinned {PINNED_SDK_VERSION} "
            f"(Claude Code {PINNED_CLI_VERSION})"
        )
    name = "claude.exe" if platform.system() == "Windows" else "claude"
    path = Path(claude_agent_sdk.__file__).resolve().parent / "_bundled" / name
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BundledCliError("the Claude Code CLI bundled with claude-agent-sdk is missing")
    return str(path)
