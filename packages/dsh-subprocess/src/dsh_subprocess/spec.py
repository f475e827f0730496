"""The spawn specification and its validation."""

from __future__ import annotations

import math
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .confinement import Confinement
from .env import check_env_overlay

__all__ = ["MAX_GRACE_SECONDS", "SpawnSpec", "StderrMode", "StdioMode"]

MAX_GRACE_SECONDS = 2147483.647
"""The largest termination grace: 2^31−1 ms, the bound the reference seam uses."""

StdioMode = Literal["pipe", "devnull"]
StderrMode = Literal["pipe", "devnull", "inherit"]


class SpawnSpec(BaseModel):
    """What to run and how. Invalid values raise a pydantic ``ValidationError`` naming the field.

    Attributes:
        argv: The program and its arguments, never shell-interpreted. ``argv[0]`` is an
            absolute path or a bare name looked up on the child's ``PATH``.
        cwd: The working directory. It must be absolute; existence, type and search
            permission are probed when :func:`~dsh_subprocess.spawn` runs.
        env: Overlay on the credential-scrubbed parent environment; ``None`` deletes.
        stdin: ``"pipe"`` (an anyio send stream) or ``"devnull"``.
        stdout: ``"pipe"`` (an anyio receive stream) or ``"devnull"``.
        stderr: ``"pipe"`` (drained by a thread, forwarded line by line to the observer,
            by default Python logging), ``"devnull"`` or ``"inherit"`` (the host's own
            stderr, passed through: an explicit opt-in).
        grace: Seconds between SIGTERM and SIGKILL during :meth:`terminate`.
        host_death_guard: Run the product under the guard program that kills the whole
            tree when the host dies: the Linux guard on Linux, the portable guard on
            other POSIX systems (or when ``DSH_SUBPROCESS_GUARD=portable`` forces it;
            see ``docs/platforms.md``).
        confinement: The kernel confinement of the product's whole tree
            (:class:`~dsh_subprocess.Confinement`), or ``None`` (the default): unconfined.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str | None] = Field(default_factory=dict)
    stdin: StdioMode = "pipe"
    stdout: StdioMode = "pipe"
    stderr: StderrMode = "pipe"
    grace: float = 2.0
    host_death_guard: bool = True
    confinement: Confinement | None = None

    @field_validator("argv")
    @classmethod
    def _check_argv(cls, argv: tuple[str, ...]) -> tuple[str, ...]:
        if not argv or not argv[0]:
            raise ValueError("invalid argv: expected a non-empty program name at argv[0]")
        if any("\0" in arg for arg in argv):
            raise ValueError("invalid argv: arguments must not contain NUL characters")
        return argv

    @field_validator("cwd", mode="before")
    @classmethod
    def _coerce_cwd(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("cwd")
    @classmethod
    def _check_cwd(cls, cwd: str) -> str:
        if "\0" in cwd:
            raise ValueError("invalid cwd: the path must not contain NUL characters")
        return cwd

    @field_validator("env")
    @classmethod
    def _check_env(cls, env: dict[str, str | None]) -> dict[str, str | None]:
        try:
            check_env_overlay(env)
        except ValueError as exc:
            raise ValueError(f"invalid env: {exc}") from None
        return env

    @field_validator("grace", mode="before")
    @classmethod
    def _reject_bool_grace(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("grace must be a number of seconds")
        return value

    @field_validator("grace")
    @classmethod
    def _check_grace(cls, grace: float) -> float:
        if not (math.isfinite(grace) and 0 < grace <= MAX_GRACE_SECONDS):
            raise ValueError(
                "grace must be a positive finite number of seconds "
                f"no greater than {MAX_GRACE_SECONDS}"
            )
        return grace
