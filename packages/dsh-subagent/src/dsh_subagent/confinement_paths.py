"""Facts a provider reads to compute what its product may reach (no policy here).

Each function answers one question from the filesystem or the configuration: where a
program is installed, which git metadata a working directory uses, which TCP ports the
model endpoints a configuration names listen on.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "endpoint_port",
    "env_endpoint_ports",
    "git_paths",
    "program_install",
    "python_install",
    "toml_endpoint_ports",
]

_DEFAULT_PORTS = {"https": 443, "http": 80, "wss": 443, "ws": 80}


def endpoint_port(url: str) -> int | None:
    """The TCP port a model endpoint URL connects to, or ``None`` for no URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if port is not None:
        return port
    return _DEFAULT_PORTS.get(parts.scheme.lower())


def env_endpoint_ports(env: Mapping[str, str | None]) -> set[int]:
    """Ports of every ``*_BASE_URL`` variable the environment overlay sets."""
    ports: set[int] = set()
    for name, value in env.items():
        if name.upper().endswith("_BASE_URL") and value:
            port = endpoint_port(value)
            if port is not None:
                ports.add(port)
    return ports


def _base_urls(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "base_url" and isinstance(value, str):
                yield value
            else:
                yield from _base_urls(value)
    elif isinstance(node, list):
        for item in node:
            yield from _base_urls(item)


def toml_endpoint_ports(path: str) -> set[int] | None:
    """Ports of every ``base_url`` in a TOML file (Codex's ``config.toml``).

    ``None`` when the file is missing or not TOML: the caller falls back to the product's
    default endpoint.
    """
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return {port for url in _base_urls(document) if (port := endpoint_port(url)) is not None}


def program_install(program: str, search_path: str | None = None) -> list[str]:
    """Where a program lives: its own directory and, resolved through symlinks, the
    package it belongs to (the nearest ``node_modules`` root, else the directory).

    A bare name is looked up on ``search_path`` (the child's ``PATH``).
    """
    found = program if os.path.isabs(program) else shutil.which(program, path=search_path)
    if found is None:
        return []
    dirs = [os.path.dirname(found)]
    real = os.path.realpath(found)
    parts = real.split(os.sep)
    if "node_modules" in parts:
        root = os.sep.join(parts[: parts.index("node_modules")])
        dirs.append(root or os.sep)
    else:
        dirs.append(os.path.dirname(real))
    return dirs


def python_install() -> list[str]:
    """The running Python's installation and import path (a product that is a Python
    program started with ``sys.executable``)."""
    entries = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    entries += [entry for entry in sys.path if entry and os.path.isabs(entry)]
    return entries


def _gitdir_of(dotgit: str) -> str | None:
    try:
        with open(dotgit, encoding="utf-8") as handle:
            first = handle.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not first.startswith("gitdir:"):
        return None
    target = first.removeprefix("gitdir:").strip()
    return os.path.normpath(os.path.join(os.path.dirname(dotgit), target))


def git_paths(cwd: str) -> tuple[list[str], list[str]]:
    """The git metadata outside ``cwd`` that git needs in it: ``(read, write)``.

    A linked worktree's ``.git`` is a file naming its private git directory (written:
    index, ``HEAD``) inside the main repository's common directory (read: objects, refs,
    config; never written, so a run cannot plant a hook the host later runs). A cwd below
    the top of its repository or worktree reads that top (git scans the whole tree).
    """
    start = os.path.abspath(cwd)
    here = start
    while True:
        dotgit = os.path.join(here, ".git")
        top = [here] if here != start else []
        if os.path.isfile(dotgit):
            private = _gitdir_of(dotgit)
            if private is None:
                return top, []
            common = private
            try:
                with open(os.path.join(private, "commondir"), encoding="utf-8") as handle:
                    common = os.path.normpath(os.path.join(private, handle.read().strip()))
            except (OSError, UnicodeDecodeError):
                pass
            return [*top, common], [private]
        if os.path.isdir(dotgit):
            return top, []
        parent = os.path.dirname(here)
        if parent == here:
            return [], []
        here = parent
