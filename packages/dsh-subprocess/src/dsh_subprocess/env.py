"""Credential-scrubbed child environments (the kit's ``env:credential-scrubbed``).

The rule: the child starts from a copy of the parent environment that leaves out

* every name containing ``KEY``, ``PASSWORD``, ``SECRET`` or ``TOKEN`` anywhere, compared
  case-insensitively (so ``TOKENIZERS_PARALLELISM`` and ``KEYBOARD_LAYOUT`` go too),
* every name whose upper-case form starts with ``DSH_`` (so ``dsh_x`` goes too),
* the OpenTelemetry exporter header variables (``OTEL_EXPORTER_OTLP_HEADERS`` and its
  per-signal forms such as ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``), which carry the
  collector's credentials in their values, and
* every variable whose value carries a URL with a password in its userinfo
  (``scheme://user:password@host…``, e.g. ``DATABASE_URL=postgres://u:pw@h/db`` or
  ``HTTPS_PROXY=http://user:pass@proxy``), whatever its name: see
  :func:`is_scrubbed_value`.

Everything else (``PATH``, ``HOME``, locale, proxies without a password, ``TERM``) passes
untouched. The explicit overlay is layered on top and always wins, even for
credential-shaped or ``DSH_*`` names and for values with a URL password; an overlay value
of ``None`` deletes the name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = [
    "check_env_overlay",
    "child_env",
    "is_scrubbed_name",
    "is_scrubbed_value",
    "scrubbed_parent_env",
]

_CREDENTIAL_SHAPED = re.compile("KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)
_OWN_PREFIX = "DSH_"
# The host's telemetry credentials (``authorization=Bearer …``) sit in these values.
_OTLP_HEADERS = re.compile(r"OTEL_EXPORTER_OTLP_(?:[A-Z]+_)?HEADERS", re.IGNORECASE)
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_AUTHORITY = re.compile(r"[^/\s]*")


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
        (case-insensitive substring), its upper-case form starts with ``DSH_``, or it is
        an OpenTelemetry exporter header variable (``OTEL_EXPORTER_OTLP[_<SIGNAL>]_HEADERS``).
    """
    return (
        _CREDENTIAL_SHAPED.search(name) is not None
        or name.upper().startswith(_OWN_PREFIX)
        or _OTLP_HEADERS.fullmatch(name) is not None
    )


def is_scrubbed_value(value: str) -> bool:
    """Tell whether an inherited variable with this value is withheld from children.

    It is when the value carries, anywhere, a URL whose userinfo has a non-empty password:
    ``<scheme>://<user>:<password>@<host>…``. Every ``://`` preceded by a scheme
    character is looked at, so a value listing several URLs is caught by any one of
    them, and the scheme's case does not matter. The authority is the text after ``://``
    up to the first ``/`` or whitespace; when it contains ``@``, the userinfo is what
    precedes its last ``@``, and the password what follows the first ``:`` of that.

    So ``postgres://u:pw@h/db``, ``HTTP://user:pass@[::1]:3128`` and
    ``a https://x.test,https://:pw@y.test`` are withheld, while ``https://host/@scope/pkg``
    and ``https://host/a:b@c`` (``@`` in the path), ``https://token@host`` (a user without
    a password) and ``https://user:@host`` (an empty password) pass. The authority runs to
    the first ``/`` rather than stopping at ``?`` or ``#`` as RFC 3986 would, so a password
    holding those unencoded is still caught; a ``/`` in a password must be percent-encoded
    (``%2F``), as URL parsers require anyway, to be recognised.

    Args:
        value: An environment variable's value.

    Returns:
        ``True`` when some URL in it has a userinfo with a non-empty password.
    """
    start = 0
    while (separator := value.find("://", start)) >= 0:
        start = separator + 3
        if separator == 0 or value[separator - 1] not in _SCHEME_CHARS:
            continue  # no scheme: not a URL
        authority = _AUTHORITY.match(value, start)
        assert authority is not None  # the pattern matches the empty string
        userinfo, at, _host = authority.group().rpartition("@")
        if at and userinfo.partition(":")[2]:
            return True
    return False


def scrubbed_parent_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Copy an environment without the variables the scrub withholds.

    Those are the credential-shaped and ``DSH_*`` names (:func:`is_scrubbed_name`) and
    the values that carry a URL with a password (:func:`is_scrubbed_value`).

    Args:
        environ: The environment to copy; ``os.environ`` when omitted.

    Returns:
        A new dict; the source is not modified.
    """
    source = os.environ if environ is None else environ
    return {
        name: value
        for name, value in source.items()
        if not is_scrubbed_name(name) and not is_scrubbed_value(value)
    }


def child_env(
    overlay: Mapping[str, str | None], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Build a child's environment: the scrubbed parent environment plus the overlay.

    Args:
        overlay: Explicit entries. A string sets the name, winning over the scrub (a
            credential-shaped name or a value with a URL password is passed when layered
            here); ``None`` removes it.
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
