"""The pinned codex-acp binary for tests and benchmarks, from ``scripts/install-acp-agent``.

The installer puts npm ``@zed-industries/codex-acp`` (its pinned version) into the ignored
``.cache/acp-agents/`` and prints the native binary's path; a second call is a fast path.
Tests take :func:`codex_acp_or_skip`: a visible skip when the npm registry cannot be
reached, a failure for anything else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

__all__ = ["INSTALLER", "RegistryUnreachableError", "codex_acp_or_skip", "install_codex_acp"]

INSTALLER: Final = Path(__file__).resolve().with_name("install-acp-agent")
_REGISTRY_UNREACHABLE: Final = 3  # the installer's exit status for it


class RegistryUnreachableError(RuntimeError):
    """The npm registry could not be reached, so codex-acp could not be installed."""


def install_codex_acp() -> str:
    """The absolute path of the native codex-acp binary, installing it when missing.

    Raises:
        RegistryUnreachableError: npm's registry cannot be reached.
        RuntimeError: the installer failed otherwise, or printed no existing binary.
    """
    try:
        done = subprocess.run(
            [str(INSTALLER)], capture_output=True, text=True, timeout=600, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"scripts/install-acp-agent could not run: {exc}") from exc
    if done.returncode == _REGISTRY_UNREACHABLE:
        raise RegistryUnreachableError(
            "npm registry unreachable: scripts/install-acp-agent could not install codex-acp"
        )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/install-acp-agent failed ({done.returncode}): {done.stderr}")
    lines = done.stdout.strip().splitlines()
    if not lines or not Path(lines[-1]).is_file():
        raise RuntimeError(f"scripts/install-acp-agent printed no binary: {done.stdout!r}")
    return lines[-1]


def codex_acp_or_skip() -> str:
    """:func:`install_codex_acp` for a test: skip visibly without the registry, else fail."""
    import pytest

    try:
        return install_codex_acp()
    except RegistryUnreachableError as exc:
        pytest.skip(str(exc))
    except RuntimeError as exc:
        pytest.fail(str(exc))
