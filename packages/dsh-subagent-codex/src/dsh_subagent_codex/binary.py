"""The fixed app-server command, from the pinned ``openai-codex-cli-bin`` wheel only."""

from __future__ import annotations

import os
from typing import Final

__all__ = [
    "APP_SERVER_ARGS",
    "PACKAGE_MANIFEST",
    "PINNED_CODEX_VERSION",
    "codex_app_server_argv",
    "codex_package_dir",
]

PINNED_CODEX_VERSION: Final = "0.163.0"
"""The ``openai-codex-cli-bin`` version this provider's mapping and evidence belong to."""

APP_SERVER_ARGS: Final = (
    "app-server",
    "--listen",
    "stdio://",
    "-c",
    "features.shell_snapshot=false",
    "-c",
    "features.shell_snapshot_v2=false",
)
"""The documented stdio listener of the pinned binary (``--stdio`` is an undocumented
alias there), with Codex's shell snapshots turned off.

A shell snapshot is a file under ``$CODEX_HOME/shell_snapshots/`` holding every exported
variable of the app-server's environment, so the product key layered through ``env``
among them; a run torn down while Codex writes it leaves the file behind (never persist a
credential). ``-c`` overrides outrank ``config.toml``, so a user's ``[features]`` cannot
turn them back on. The argv never carries a model, a permission mode or task text."""


def codex_app_server_argv() -> tuple[str, ...]:
    """The app-server argv: the pinned wheel's native binary plus :data:`APP_SERVER_ARGS`.

    The native binary is spawned directly (no Node shim, whose SIGKILL would orphan the
    real process) and never looked up on ``PATH``.

    Raises:
        FileNotFoundError: The wheel or its binary payload is missing or damaged (no
            fallback exists; the first delegation fails at ``initialize``).
    """
    try:
        import codex_cli_bin  # type: ignore[import-untyped]  # the wheel ships no py.typed
    except ImportError as exc:
        raise FileNotFoundError("openai-codex-cli-bin is not installed") from exc
    path: object = codex_cli_bin.bundled_codex_path()
    return (str(path), *APP_SERVER_ARGS)


PACKAGE_MANIFEST: Final = "codex-package.json"
"""The file that marks a Codex package: the binary reads it at start to find its
``codex-path/`` (the bundled ``rg``, put first on its commands' ``PATH``) and
``codex-resources/`` beside ``bin/``."""


def codex_package_dir(binary: str) -> str | None:
    """The Codex package ``binary`` belongs to: the directory above its ``bin/`` that holds
    :data:`PACKAGE_MANIFEST` (the pinned wheel's ``codex_cli_bin``), else ``None``."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(binary)))
    return package if os.path.isfile(os.path.join(package, PACKAGE_MANIFEST)) else None
