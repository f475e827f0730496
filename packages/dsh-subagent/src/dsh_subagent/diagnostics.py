"""Safe, bounded failure diagnostics (rules ``diagnostic:*`` in docs/rules.md).

A diagnostic is non-assistant failure detail shown apart from a run's output. It is
display text, never a protocol: consumers present it and do not parse it. Two rules
live here so every provider and consumer shares them:

* the bound: at most :data:`MAX_SUBAGENT_DIAGNOSTIC_BYTES` UTF-8 bytes, truncated on a
  code-point boundary and marked with :data:`DIAGNOSTIC_TRUNCATED_SUFFIX`;
* the product failure line: fixed wording and field order, built only from allowlisted
  facts (never from raw product text, stderr, paths or payloads).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DIAGNOSTIC_TRUNCATED_SUFFIX",
    "MAX_SUBAGENT_DIAGNOSTIC_BYTES",
    "ProductFailure",
    "format_product_failure",
    "limit_diagnostic",
]

MAX_SUBAGENT_DIAGNOSTIC_BYTES: Final = 4096
"""Upper bound, in UTF-8 bytes, of every diagnostic a result carries."""

DIAGNOSTIC_TRUNCATED_SUFFIX: Final = "\n[diagnostic truncated]"
"""Appended to a diagnostic that had to be cut (23 bytes, newline included)."""

_SUFFIX_BYTES: Final = DIAGNOSTIC_TRUNCATED_SUFFIX.encode("utf-8")


def limit_diagnostic(text: str) -> str:
    """Bound ``text`` to :data:`MAX_SUBAGENT_DIAGNOSTIC_BYTES` UTF-8 bytes.

    Text that fits is returned unchanged (exactly 4096 bytes fits). Longer text keeps
    the longest prefix that, followed by :data:`DIAGNOSTIC_TRUNCATED_SUFFIX`, fits the
    bound without splitting a UTF-8 sequence. Never raises: a lone surrogate (which
    UTF-8 cannot encode) is replaced by ``?`` so the result is always encodable.

    Args:
        text: The diagnostic as written by a provider.

    Returns:
        The bounded diagnostic.
    """
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= MAX_SUBAGENT_DIAGNOSTIC_BYTES:
        return encoded.decode("utf-8")
    cut = MAX_SUBAGENT_DIAGNOSTIC_BYTES - len(_SUFFIX_BYTES)
    # Step back over continuation bytes (0b10xxxxxx) so the cut lands on a lead byte.
    while cut > 0 and encoded[cut] & 0xC0 == 0x80:
        cut -= 1
    return encoded[:cut].decode("utf-8") + DIAGNOSTIC_TRUNCATED_SUFFIX


# Allowlisted fact shape: product names ("Claude Code"), stages ("query-start"), product
# categories ("error_max_turns", "httpConnectionFailed") and signal names ("SIGKILL").
# Anything else is most likely raw product text and must not reach the model.
_SAFE_FACT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}")


def _check_fact(name: str, value: str | None, *, required: bool) -> None:
    if value is None:
        if required:
            raise ValueError(f"ProductFailure.{name} is required")
        return
    if not _SAFE_FACT.fullmatch(value) or value != value.strip():
        raise ValueError(
            f"ProductFailure.{name} must be a short allowlisted token "
            "(letters, digits, space, '_', '.', '-'; at most 64 characters)"
        )


def _check_int(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"ProductFailure.{name} must be an int")


@dataclass(frozen=True, slots=True)
class ProductFailure:
    """The allowlisted facts of one product failure.

    Attributes:
        product: Product display name, e.g. ``"Codex"`` or ``"Claude Code"``.
        stage: The provider operation that failed, e.g. ``"initialize"``, ``"turn"``.
        category: The product's structured category, or ``"unknown"``; ``None`` omits it.
        http_status: Numeric HTTP status when the product reported one.
        exit_code: Observed exit code of the product process (independent of ``signal``).
        signal: Observed terminating signal name, e.g. ``"SIGKILL"``.

    Raises:
        ValueError: A text fact is not a short allowlisted token (it looks like raw
            product text), or a number is not an ``int``.
    """

    product: str
    stage: str
    category: str | None = None
    http_status: int | None = None
    exit_code: int | None = None
    signal: str | None = None

    def __post_init__(self) -> None:
        _check_fact("product", self.product, required=True)
        _check_fact("stage", self.stage, required=True)
        _check_fact("category", self.category, required=False)
        _check_fact("signal", self.signal, required=False)
        _check_int("http_status", self.http_status)
        _check_int("exit_code", self.exit_code)

    def with_exit(self, exit_code: int | None, signal: str | None) -> ProductFailure:
        """These facts with the product process's observed exit merged in.

        The one place exit facts join a failure: observed values replace absent ones and
        never overwrite facts the failure already carries.
        """
        return dataclasses.replace(
            self,
            exit_code=self.exit_code if self.exit_code is not None else exit_code,
            signal=self.signal if self.signal is not None else signal,
        )


def format_product_failure(failure: ProductFailure, permission_fact: str | None = None) -> str:
    """Render the fixed safe product failure line (``diagnostic:fixed-line``).

    The line reads ``Product subagent failure (product: <product>; stage: <stage>;
    category: <category>; HTTP status: <status>; exit code: <code>; signal: <signal>)``
    in that order, with absent optional fields left out. A contributing permission fact
    follows on the next line. The whole text is bounded by :func:`limit_diagnostic`.

    Args:
        failure: The allowlisted facts.
        permission_fact: The provider's safe permission line, if one contributed.

    Returns:
        The diagnostic text, also usable as a start or teardown error message.
    """
    parts = [f"product: {failure.product}", f"stage: {failure.stage}"]
    if failure.category is not None:
        parts.append(f"category: {failure.category}")
    if failure.http_status is not None:
        parts.append(f"HTTP status: {failure.http_status}")
    if failure.exit_code is not None:
        parts.append(f"exit code: {failure.exit_code}")
    if failure.signal is not None:
        parts.append(f"signal: {failure.signal}")
    line = f"Product subagent failure ({'; '.join(parts)})"
    if permission_fact:
        line = f"{line}\n{permission_fact}"
    return limit_diagnostic(line)
