"""Exit facts: what was observed about how a process ended."""

from __future__ import annotations

import signal
from dataclasses import dataclass

__all__ = ["ExitFacts", "signal_name"]


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """How the product process ended. Both fields are independent observations.

    A normal exit gives ``(code, None)``; death by a signal gives ``(None, "SIGTERM")``.
    Neither field is ever inferred from the other.

    Attributes:
        exit_code: The exit status when the process exited normally.
        signal: The name of the signal that killed it (``"SIGKILL"``…).
    """

    exit_code: int | None
    signal: str | None


def signal_name(signum: int) -> str:
    """Name a signal number (``15`` → ``"SIGTERM"``; an unnamed one → ``"SIG<n>"``)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"
