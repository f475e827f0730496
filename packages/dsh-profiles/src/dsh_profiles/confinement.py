"""Confinement as a profile setting: the ``--confinement`` override of every instance's
mode (the flag is shared by ``dsh`` and ``dsh-mcp``) and the one line shown before
anything starts when it cannot be applied (docs/security.md)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any, Final, TextIO, get_args

from dsh_subagent import (
    ConfinementSetting,
    SubagentProvider,
    confinement_fallback_line,
    confinement_refusal_line,
)
from dsh_subprocess import ConfinementMode
from pydantic import BaseModel

from dsh_profiles.errors import UsageError

__all__ = [
    "CONFINEMENT_MODES",
    "add_confinement_flag",
    "announce_confinement",
    "confinement_modes",
    "override_confinement",
]

CONFINEMENT_MODES: Final[tuple[str, ...]] = get_args(ConfinementMode)

NOT_CONFINED: Final = (
    "NOT confined: this provider does not spawn through dsh-subprocess, so dsh cannot "
    "confine its product"
)


def add_confinement_flag(parser: argparse.ArgumentParser) -> None:
    """``--confinement auto|required|off``: every instance's mode, over the profile's."""
    parser.add_argument(
        "--confinement",
        choices=CONFINEMENT_MODES,
        default=None,
        help="kernel confinement of every instance's product (default: each instance's "
        "confinement.mode, else auto: confined where the kernel offers Landlock); "
        "required refuses to start without it; see docs/security.md",
    )


def override_confinement(
    raw_config: dict[str, Any], config_model: type[BaseModel], mode: str
) -> str | None:
    """Set ``confinement.mode`` in a row's raw configuration; a problem line when the
    provider has no confinement setting and the mode asks for confinement."""
    if "confinement" not in config_model.model_fields:
        return None if mode == "off" else f"--confinement {mode}: {NOT_CONFINED}"
    current = raw_config.get("confinement", {})
    if isinstance(current, dict):
        raw_config["confinement"] = {**current, "mode": mode}
    return None


def confinement_modes(providers: Iterable[SubagentProvider]) -> list[ConfinementMode]:
    """The confinement mode of each provider that has a confinement setting."""
    modes: list[ConfinementMode] = []
    for provider in providers:
        inner = getattr(provider, "inner", provider)
        setting = getattr(getattr(inner, "config", None), "confinement", None)
        if isinstance(setting, ConfinementSetting):
            modes.append(setting.mode)
    return modes


def announce_confinement(providers: Iterable[SubagentProvider], err: TextIO) -> None:
    """Before anything starts: refuse a ``required`` instance this kernel cannot confine
    (:class:`UsageError`, exit 2), else say once that ``auto`` instances run unconfined."""
    modes = confinement_modes(providers)
    refusal = confinement_refusal_line(modes)
    if refusal is not None:
        raise UsageError(refusal)
    fallback = confinement_fallback_line(modes)
    if fallback is not None:
        print(fallback, file=err)
