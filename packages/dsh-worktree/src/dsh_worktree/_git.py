"""Git, run through dsh-subprocess: scrubbed environment, bounded output, nothing left.

Every dsh-worktree git command goes through :func:`git`. Git comes from ``PATH``
(:func:`git_executable` says so clearly when it is missing). The environment is the
credential-scrubbed parent environment with git's repository-redirecting variables
removed (a host running inside a git hook must not point these commands elsewhere), no
terminal prompt and the C locale. Repository hooks, automatic garbage collection and
commit signing are off for these commands: a hook must not be able to refuse the commit
that keeps a run's work, and a background ``gc`` must not outlive the command.
"""

from __future__ import annotations

import contextlib
import shutil
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import anyio
from dsh_subprocess import SpawnError, SpawnSpec, spawn

from dsh_worktree.errors import WorktreeError

__all__ = ["MAX_GIT_OUTPUT_BYTES", "GitResult", "git", "git_executable"]

MAX_GIT_OUTPUT_BYTES: Final = 1 << 20
"""stdout kept per git command; the rest is drained and dropped."""

_MAX_STDERR_LINES: Final = 20

_CONFIG: Final = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.fsmonitor=false",
)

_ENV: Final[Mapping[str, str | None]] = {
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "LANGUAGE": None,
    "GIT_DIR": None,
    "GIT_WORK_TREE": None,
    "GIT_INDEX_FILE": None,
    "GIT_COMMON_DIR": None,
    "GIT_OBJECT_DIRECTORY": None,
    "GIT_ALTERNATE_OBJECT_DIRECTORIES": None,
    "GIT_NAMESPACE": None,
    "GIT_PREFIX": None,
}


@dataclass(frozen=True, slots=True)
class GitResult:
    """One finished git command."""

    code: int | None
    stdout: str
    stderr: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.code == 0

    def first_line(self) -> str:
        """Git's own first ``fatal:``/``error:`` line (or the first stderr line), for a message."""
        for line in self.stderr:
            if line.startswith(("fatal:", "error:")):
                return line
        return self.stderr[0] if self.stderr else f"exit status {self.code}"


def git_executable() -> str:
    """The absolute path of ``git`` on ``PATH``.

    Raises:
        WorktreeError: git is not on ``PATH``.
    """
    found = shutil.which("git")
    if found is None:
        raise WorktreeError("git is not on PATH (worktree isolation runs the git command)")
    return found


async def git(
    cwd: str,
    *args: str,
    env: Mapping[str, str | None] | None = None,
    executable: str | None = None,
    stdin: bytes | None = None,
) -> GitResult:
    """Run ``git <args>`` in ``cwd`` and return its exit status, stdout and stderr lines.

    ``stdin`` is written to git's standard input (then closed); without it git reads
    ``/dev/null``. The process tree is gone when this returns, also when the caller is
    cancelled.

    Raises:
        WorktreeError: git could not be started.
    """
    argv: Sequence[str] = (executable or git_executable(), *_CONFIG, *args)
    stderr: deque[str] = deque(maxlen=_MAX_STDERR_LINES)
    spec = SpawnSpec(
        argv=tuple(argv),
        cwd=cwd,
        env={**_ENV, **(env or {})},
        stdin="devnull" if stdin is None else "pipe",
        stdout="pipe",
        stderr="pipe",
        grace=1.0,
    )
    try:
        proc = await spawn(spec, stderr_observer=stderr.append)
    except SpawnError as exc:
        raise WorktreeError(f"git could not be started: {exc}") from exc
    kept = bytearray()
    async with proc:
        if stdin is not None:
            sink = proc.stdin
            assert sink is not None
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await sink.send(stdin)
            await sink.aclose()
        stream = proc.stdout
        assert stream is not None
        try:
            async for chunk in stream:
                room = MAX_GIT_OUTPUT_BYTES - len(kept)
                if room > 0:
                    kept += chunk[:room]
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        facts = await proc.wait()
    return GitResult(facts.exit_code, kept.decode("utf-8", "replace"), tuple(stderr))
