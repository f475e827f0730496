"""The confinement policy ``dsh check`` prints for each instance (docs/security.md)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from dsh_profiles.confinement import NOT_CONFINED
from dsh_subagent import SubagentProvider, effective_policy, makes_private_tmp

__all__ = ["policy_lines"]


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
