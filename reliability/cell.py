"""What one cell of the fault matrix is: a hostile product and the outcomes it may settle to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from dsh_subagent import SubagentProvider

from reliability.fakes import FakeSetup
from reliability.profiles import Profile

__all__ = ["ANSWER", "Builder", "Cell", "Outcome", "Ready"]

ANSWER: Final = "the reliable answer"

Kind = Literal["completed", "error", "aborted", "start-error", "start-aborted"]


@dataclass(frozen=True)
class Outcome:
    """One acceptable settlement.

    Attributes:
        kind: ``completed`` / ``error`` / ``aborted`` (a published run's stop reason),
            ``start-error`` (``start()`` raised the safe line) or ``start-aborted``
            (``start()`` raised because the caller cancelled).
        stage: The safe line's stage (``None`` when no line is expected).
        category: The safe line's category.
        exit_code: Expected ``exit code`` field (``None``: must be absent).
        signal: Expected ``signal`` field (``None``: must be absent).
        check_exit: Whether ``exit_code`` / ``signal`` are checked at all.
    """

    kind: Kind
    stage: str | None = None
    category: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    check_exit: bool = True


Builder = Callable[[FakeSetup, Profile], SubagentProvider]
Ready = Callable[[FakeSetup], bool]


@dataclass(frozen=True)
class Cell:
    """One fault: how to build the hostile product and what must come out.

    Attributes:
        provider: ``codex`` / ``claude-code`` / ``acp``.
        behaviour: The fault's name.
        stage: Where in the protocol the fault strikes.
        build: Builds the provider against its hostile fake.
        expect: Acceptable outcomes (usually one).
        cancel_when: When set, the caller cancels once this holds (hang cells).
        prelude: Hostile process-level actions (see :mod:`reliability.hostile`).
        pidfiles: Prelude pidfiles of escapees to check explicitly after disposal.
        xfail: A finding this cell reveals (kept ``xfail(strict=True)`` until fixed).
        timeout: Seconds the whole cell may take.
        max_rss_growth: When set, the host's RSS may grow at most this many bytes above
            its level before the cell, sampled throughout the cell.
    """

    provider: str
    behaviour: str
    stage: str
    build: Builder
    expect: tuple[Outcome, ...]
    cancel_when: Ready | None = None
    prelude: Callable[[FakeSetup, Profile], list[dict[str, Any]]] = lambda _s, _p: []
    pidfiles: tuple[str, ...] = ()
    xfail: str | None = None
    timeout: float = 30.0
    max_rss_growth: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``provider/behaviour@stage``."""
        return f"{self.provider}/{self.behaviour}@{self.stage}"
