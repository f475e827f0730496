"""The dsh-subprocess error hierarchy.

Messages are fixed and safe to show: they never contain argv, environment values or
paths. The original :class:`OSError`, when there is one, stays on ``__cause__``.
Invalid :class:`~dsh_subprocess.SpawnSpec` values are rejected earlier, at construction,
with a pydantic ``ValidationError`` naming the field.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ConfinementUnavailableError",
    "CwdProblem",
    "DshSubprocessError",
    "InvalidCwdError",
    "SpawnError",
]


class DshSubprocessError(Exception):
    """Root of every error this distribution raises."""


class SpawnError(DshSubprocessError):
    """The program could not be started; nothing is left running.

    Attributes:
        errno: The OS error number when the failure came from the OS, else ``None``.
    """

    def __init__(self, message: str = "failed to start the program", *, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class ConfinementUnavailableError(SpawnError):
    """The spawn asked for confinement the kernel cannot give; nothing was started.

    Raised before anything starts when a :class:`~dsh_subprocess.Confinement` with
    ``mode="required"`` meets a kernel without Landlock (``errno`` is ``None``), and when
    the kernel refused the ruleset as the product was about to start (``errno`` set; the
    product never ran, whatever the mode).
    """

    def __init__(self, *, errno: int | None = None) -> None:
        if errno is None:
            message = "confinement required: the kernel offers no Landlock here"
        else:
            message = "failed to confine the program: the kernel refused the ruleset"
        super().__init__(message, errno=errno)


CwdProblem = Literal["relative", "missing", "not_a_directory", "not_enterable"]

_CWD_MESSAGES: dict[CwdProblem, str] = {
    "relative": "invalid cwd: the working directory must be an absolute path",
    "missing": "invalid cwd: the working directory does not exist",
    "not_a_directory": "invalid cwd: the working directory is not a directory",
    "not_enterable": "invalid cwd: the working directory is not enterable (no search permission)",
}


class InvalidCwdError(SpawnError):
    """The working directory failed the pre-spawn probe (checked before anything runs).

    Attributes:
        problem: Which check failed: ``relative``, ``missing``, ``not_a_directory`` or
            ``not_enterable``.
    """

    def __init__(self, problem: CwdProblem) -> None:
        super().__init__(_CWD_MESSAGES[problem])
        self.problem: CwdProblem = problem
