"""Credential-scrubbed child environments.

The rule (identical to the reference seam, ``reference-core.md`` §5.2): the child starts
from a copy of the parent environment that leaves out

* every name containing ``KEY``, ``PASSWORD``, ``SECRET`` or ``TOKEN`` anywhere, compared
  case-insensitively (so ``TOKENIZERS_PARALLELISM`` and ``KEYBOARD_LAYOUT`` go too), and
* every name whose upper-case form starts with ``DSH_`` (so ``dsh_x`` goes too).

Everything else (``PATH``, ``HOME``, locale, proxies, ``TERM``) passes untouched. The
explicit overlay is layered on top and always wins, even for credential-shaped or
``DSH_*`` names; an overlay value of ``None`` deletes the name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["check_env_overlay", "child_env", "is_scrubbed_name", "scrubbed_parent_env"]

_CREDENTIAL_SHAPED = re.compile("KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)
_OWN_PREFIX = "DSH_"


def check_env_overlay(env: Mapping[str, str | None]) -> None:
    """Refuse an overlay the OS could not apply, before anything is spawned.

    Configuration models call this at load so a bad name is reported against their
    ``env`` field instead of failing at the first delegation.

    Args:
        env: The explicit overlay (``None`` values delete a name).

    Raises:
        ValueError: A name is empty or contains ``=`` or NUL, or a value contains NUL.
    """
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise ValueError("env names must be non-empty without '=' or NUL")
        if value is not None and "\0" in value:
            raise ValueError("env values must not contain NUL characters")


def is_scrubbed_name(name: str) -> bool:
    """Tell whether an inherited variable of this name is withheld from children.

    Args:
        name: An environment variable name.

    Returns:
        ``True`` when the name contains ``KEY``/``PASSWORD``/``SECRET``/``TOKEN``
        (case-insensitive substring) or its upper-case form starts with ``DSH_``.
    """
    return _CREDENTIAL_SHAPED.search(name) is not None or name.upper().startswith(_OWN_PREFIX)


def scrubbed_parent_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Copy an environment without its credential-shaped and ``DSH_*`` names.

    Args:
        environ: The environment to copy; ``os.environ`` when omitted.

    Returns:
        A new dict; the source is not modified.
    """
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if not is_scrubbed_name(name)}


def child_env(
    overlay: Mapping[str, str | None], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Build a child's environment: the scrubbed parent environment plus the overlay.

    Args:
        overlay: Explicit entries. A string sets the name (winning over the scrub);
            ``None`` removes it.
        environ: The parent environment; ``os.environ`` when omitted.

    Returns:
        The complete environment for the child.
    """
    env = scrubbed_parent_env(environ)
    for name, value in overlay.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
