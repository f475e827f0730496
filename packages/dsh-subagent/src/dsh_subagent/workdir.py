"""Configuration checks shared by out-of-process providers: numbers and the child's cwd.

The child's working directory resolves in a fixed order (``cwd:*`` in docs/rules.md):

1. a configured override, validated once at load (:func:`validate_configured_cwd`);
2. else the parent session's cwd, probed at start (:func:`assert_usable_cwd`);
3. else a loud failure. Never the host process's cwd: one host serves many sessions,
   each with its own workspace, so falling back would silently bind the child to the
   server's launch directory.
"""

from __future__ import annotations

import math
import os

from dsh_subprocess import probe_cwd

from dsh_subagent.errors import SubagentError, SubagentErrorCode

__all__ = [
    "assert_positive_finite",
    "assert_usable_cwd",
    "resolve_child_cwd",
    "validate_configured_cwd",
]


def assert_positive_finite(
    prefix: str, name: str, value: float, maximum: float | None = None
) -> float:
    """Check a configured duration-like number.

    Args:
        prefix: Message prefix naming the component, e.g. ``"subagent-codex"``.
        name: The configuration key, e.g. ``"dispose_grace"``.
        value: The configured value.
        maximum: Optional inclusive upper bound.

    Returns:
        ``value`` unchanged.

    Raises:
        SubagentError: ``INVALID_CONFIG`` with ``<prefix>: <name> must be a positive
            finite number`` for zero, negatives, NaN, ±inf, bools and non-numbers, or
            ``<prefix>: <name> must be no greater than <maximum>`` above ``maximum``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise SubagentError(
            SubagentErrorCode.INVALID_CONFIG, f"{prefix}: {name} must be a positive finite number"
        )
    if maximum is not None and value > maximum:
        raise SubagentError(
            SubagentErrorCode.INVALID_CONFIG,
            f"{prefix}: {name} must be no greater than {maximum}",
        )
    return value


def assert_usable_cwd(
    prefix: str,
    label: str,
    cwd: str,
    *,
    code: SubagentErrorCode = SubagentErrorCode.NO_WORKING_DIRECTORY,
) -> str:
    """Probe that ``cwd`` is an absolute, enterable directory.

    Args:
        prefix: Message prefix naming the component.
        label: What the path is, e.g. ``"parent session cwd"`` or ``"config cwd"``.
        cwd: The path to probe.
        code: The error code to raise with (``INVALID_CONFIG`` at load).

    Returns:
        ``cwd`` unchanged (no normalisation).

    Raises:
        SubagentError: ``<prefix>: <label> must be an absolute path: <cwd>`` or
            ``<prefix>: <label> is not an accessible directory: <cwd>`` (missing, a
            file, no execute permission). The rule is :func:`dsh_subprocess.probe_cwd`,
            the one the spawn applies, so a directory without any execute bit is refused
            even when the host runs as root.
    """
    problem = probe_cwd(cwd)
    # One line whatever the path holds: a newline or an escape is shown quoted.
    shown = cwd if cwd.isprintable() else repr(cwd)
    if problem == "relative":
        raise SubagentError(code, f"{prefix}: {label} must be an absolute path: {shown}")
    if problem is not None:
        raise SubagentError(code, f"{prefix}: {label} is not an accessible directory: {shown}")
    return cwd


def validate_configured_cwd(
    prefix: str, cwd: str | None, *, launch_dir: str | None = None
) -> str | None:
    """Validate a configured cwd override once, at load.

    Args:
        prefix: Message prefix naming the component.
        cwd: The configured value; ``None`` means no override.
        launch_dir: Directory a relative path resolves against; defaults to the
            harness launch directory (the process cwd at load time).

    Returns:
        ``None`` for no override, else the absolute, lexically normalised path.

    Raises:
        SubagentError: ``INVALID_CONFIG``: ``<prefix>: config cwd must not be empty —
            omit the key to inherit the parent session cwd`` for ``""`` (resolving it
            would silently yield the process cwd), or a failed probe.
    """
    if cwd is None:
        return None
    if cwd == "":
        raise SubagentError(
            SubagentErrorCode.INVALID_CONFIG,
            f"{prefix}: config cwd must not be empty — omit the key to inherit the parent "
            "session cwd",
        )
    base = launch_dir if launch_dir is not None else os.getcwd()
    resolved = os.path.normpath(os.path.join(base, cwd))
    return assert_usable_cwd(prefix, "config cwd", resolved, code=SubagentErrorCode.INVALID_CONFIG)


def resolve_child_cwd(prefix: str, configured: str | None, parent_cwd: str | None) -> str:
    """Pick the child's working directory at start.

    Args:
        prefix: Message prefix naming the component.
        configured: The override already validated by :func:`validate_configured_cwd`;
            returned as is, not probed again.
        parent_cwd: The delegating parent session's cwd.

    Returns:
        The directory the child runs in.

    Raises:
        SubagentError: ``NO_WORKING_DIRECTORY`` when neither exists
            (``<prefix>: no working directory for the child — configure `cwd` or
            delegate from a parent session that has one``) or when the parent cwd fails
            the probe (``<prefix>: the parent session cwd is not an absolute, accessible
            directory``: the path itself stays on ``__cause__``, never in the message a
            model or a log may see).
    """
    if configured is not None:
        return configured
    if parent_cwd is None:
        raise SubagentError(
            SubagentErrorCode.NO_WORKING_DIRECTORY,
            f"{prefix}: no working directory for the child — configure `cwd` or delegate "
            "from a parent session that has one",
        )
    try:
        return assert_usable_cwd(prefix, "parent session cwd", parent_cwd)
    except SubagentError as exc:
        raise SubagentError(
            SubagentErrorCode.NO_WORKING_DIRECTORY,
            f"{prefix}: the parent session cwd is not an absolute, accessible directory",
        ) from exc
