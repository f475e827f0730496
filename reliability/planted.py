"""Planted secrets: values a hostile product knows and must never make model-visible.

Each cell plants three fresh values: one in the provider's environment overlay, one in
the task text, one in the working directory's name. The fakes write all three into
stderr and into error payloads; :func:`find_leaks` then scans every model-visible
surface for them.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ENV_NAME", "Planted", "find_leaks"]

ENV_NAME = "RELIABILITY_PLANTED_VALUE"
"""The overlay variable carrying the env secret (not credential-shaped on purpose: the
overlay must deliver it, so only the provider's handling can keep it out of results)."""


@dataclass(frozen=True)
class Planted:
    """Three secrets for one cell.

    Attributes:
        env: Value of :data:`ENV_NAME` in the provider's env overlay.
        task: A token inside the task text.
        cwd: A token inside the workspace directory's name.
    """

    env: str = field(default_factory=lambda: f"PLANTED-env-{secrets.token_hex(8)}")
    task: str = field(default_factory=lambda: f"PLANTED-task-{secrets.token_hex(8)}")
    cwd: str = field(default_factory=lambda: f"PLANTED-cwd-{secrets.token_hex(8)}")

    @property
    def values(self) -> dict[str, str]:
        """Secret kind → value."""
        return {"env": self.env, "task": self.task, "cwd": self.cwd}

    def prompt(self, what: str = "answer briefly") -> str:
        """A task text that carries the task secret."""
        return f"Reliability task {self.task}: {what}."


def find_leaks(planted: Planted, surfaces: Mapping[str, str | None]) -> list[str]:
    """``"<surface>: <kind>"`` for every planted value found in a surface's text."""
    found = []
    for surface, text in surfaces.items():
        if not text:
            continue
        for kind, value in planted.values.items():
            if value in text:
                found.append(f"{surface}: {kind}")
    return found
