"""Confinement as a profile setting: the ``--confinement`` override of every instance's
mode (the flag is shared by ``dsh`` and ``dsh-mcp``), the one line shown before anything
starts when it cannot be applied, and each instance's effective policy as lines
(:func:`policy_lines`, what ``dsh check`` prints; docs/security.md)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Any, Final, TextIO, get_args

from dsh_subagent import (
    ConfinementSetting,
    SubagentProvider,
    confinement_fallback_line,
    confinement_refusal_line,
    effective_policy,
    makes_private_tmp,
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
    "policy_lines",
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


def _join(paths: Iterable[str]) -> str:
    return ", ".join(paths) or "nothing"


def _holds(path: str, inner: str) -> bool:
    path = os.path.realpath(path)
    return inner == path or inner.startswith(path.rstrip("/") + "/")


def _reach_warnings(
    setting_paths: Iterable[str], read: Iterable[str], write: Iterable[str]
) -> list[str]:
    """What a user would not want granted without knowing: a path that holds the home
    directory (the product then reaches ``~/.ssh`` and every repository there), and an
    added path that does not exist (skipped when the policy is applied)."""
    home = os.path.realpath(os.path.expanduser("~"))
    lines = [
        f"  warning: {kind} {path} holds the home directory {home}: the product may {kind}"
        " ~/.ssh, ~/.aws and every repository there"
        for kind, paths in (("write", write), ("read", read))
        for path in paths
        if _holds(path, home)
    ]
    missing = [path for path in setting_paths if not os.path.lexists(path)]
    if missing:
        lines.append(f"  skipped (does not exist now): {', '.join(missing)}")
    return lines


def policy_lines(provider: SubagentProvider, cwd: str | None = None) -> list[str]:
    """``dsh check``'s lines for one instance: the mode, whether this kernel applies it,
    and what a run may read, write and connect to (in the instance's configured cwd, else
    ``cwd``, else where the command runs)."""
    inner = getattr(provider, "inner", provider)
    configured = getattr(getattr(inner, "config", None), "cwd", None)
    cwd = configured if isinstance(configured, str) else (cwd or os.getcwd())
    found = effective_policy(provider, cwd)
    if found is None:
        return [f"confinement: {NOT_CONFINED}"]
    setting, policy = found
    if policy is None:
        return ["confinement: off (the product runs with the host user's whole reach)"]
    effective = policy.effective()
    abi = effective.abi
    state = (
        f"applied (Landlock ABI {abi})" if effective.enforced else "NOT applied: no Landlock here"
    )
    if setting.mode == "required" and not effective.enforced:
        state = "a run would be refused: no Landlock here"
    write = list(policy.write)
    if makes_private_tmp(provider):
        write.append("a private TMPDIR made for each run")
    ports = ", ".join(str(port) for port in policy.connect_ports) or "none"
    warnings = _reach_warnings(
        (*setting.read, *setting.write),
        [p for p in policy.read if p not in policy.write],
        policy.write,
    )
    return [
        f"confinement: {setting.mode}, {state}; for a run in {cwd}:",
        f"  read: {_join(policy.read)}",
        f"  write: {_join(write)}",
        f"  tcp connect: ports {ports} (any host on them)",
        f"  not enforced here: {', '.join(effective.not_enforced)}",
        *warnings,
    ]
