"""Isolation by the ``--worktree`` flags of ``dsh run`` and ``dsh batch``, and the refusal of
bad input before start.

The flags isolate the target instance for this command (over the profile's own
``worktree`` setting, when it has one): every run works in its own git worktree of its
cwd's repository and its changes are committed on a new branch (see dsh-worktree).
:func:`check_isolation` runs dsh-worktree's bad-input checks for every cwd the command
will use, so a cwd outside a repository, a bare repository, an unknown base or an
existing branch exits 2 with one line before any product starts.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable

import anyio
from dsh_worktree import MAX_WARM, Worktree, WorktreeError, WorktreeProvider, preflight
from pydantic import ValidationError

from dsh_profiles.errors import UsageError
from dsh_profiles.loader import Composition
from dsh_profiles.profile import describe_validation_error

__all__ = [
    "check_branch_count",
    "check_isolation",
    "isolate",
    "isolate_from_flags",
    "preflight_isolation",
    "worktree_from_flags",
]


def _settings(args: argparse.Namespace, base: Worktree | None) -> Worktree | None:
    given = {
        "base": args.worktree_base,
        "branch": args.worktree_branch,
        "root": args.worktree_root,
        "keep": True if args.worktree_keep else None,
        "warm": getattr(args, "worktree_warm", None),
    }
    overrides = {key: value for key, value in given.items() if value is not None}
    if not args.worktree:
        if overrides:
            raise UsageError("--worktree-base/-branch/-root/-keep/-warm need --worktree")
        return None
    start = base.model_dump(exclude_unset=True) if base is not None else {}
    try:
        return Worktree.model_validate({**start, **overrides})
    except ValidationError as exc:
        line = describe_validation_error(exc)[0].replace("field '", "--worktree-", 1)
        raise UsageError(line.replace("'", "", 1)) from None


def isolate(composition: Composition, provider: str, settings: Worktree) -> Composition:
    """The composition with ``provider`` isolated by ``settings`` (over its own isolation).

    Raises:
        WorktreeError: the instance cannot be isolated (it configures its own cwd).
    """
    loaded = composition.provider(provider)
    inner = loaded.provider
    if isinstance(inner, WorktreeProvider):
        inner = inner.inner
    replaced = dataclasses.replace(loaded, provider=settings.isolate(inner), worktree=settings)
    providers = tuple(replaced if p is loaded else p for p in composition.providers)
    return dataclasses.replace(composition, providers=providers)


def worktree_from_flags(
    composition: Composition, provider: str, args: argparse.Namespace
) -> Worktree | None:
    """The isolation the ``--worktree`` flags ask for (over the profile's), or ``None``.

    Raises:
        UsageError: a setting flag without ``--worktree``, or a bad setting.
    """
    return _settings(args, composition.provider(provider).worktree)


def isolate_from_flags(
    composition: Composition, provider: str, args: argparse.Namespace, *, warm: int = 0
) -> Composition:
    """The composition with ``provider`` isolated as the ``--worktree`` flags ask.

    ``warm`` is the warm pool's size when neither the profile nor ``--worktree-warm``
    sets one (``dsh batch``: its concurrency; see docs/worktrees.md).

    Raises:
        UsageError: a setting flag without ``--worktree``, a bad setting, or an instance
            that configures its own cwd.
    """
    settings = worktree_from_flags(composition, provider, args)
    if settings is None:
        return composition
    if "warm" not in settings.model_fields_set:  # neither the profile nor a flag set it
        settings = settings.model_copy(update={"warm": min(warm, MAX_WARM)})
    try:
        return isolate(composition, provider, settings)
    except WorktreeError as exc:
        raise UsageError(exc.message) from None


def check_branch_count(settings: Worktree | None, runs: int) -> None:
    """Refuse a branch name without ``{id}`` for more than one run: the second run would
    find the first one's branch taken.

    Raises:
        UsageError: naming the branch and the number of runs.
    """
    if settings is None or runs < 2:
        return
    if settings.branch_for("0") == settings.branch_for("1"):
        raise UsageError(
            f"--worktree-branch {settings.branch!r} names one branch for {runs} tasks; "
            "give a pattern with {id} (the default is dsh/{id}); nothing started"
        )


def check_isolation(composition: Composition, provider: str, cwds: Iterable[str]) -> None:
    """dsh-worktree's bad-input checks for every cwd, when ``provider`` is isolated.

    Raises:
        UsageError: the first refusal (one line), before anything was started.
    """
    if composition.provider(provider).worktree is not None:
        anyio.run(preflight_isolation, composition, provider, list(cwds))


async def preflight_isolation(composition: Composition, provider: str, cwds: Iterable[str]) -> None:
    """:func:`check_isolation` inside an event loop.

    Raises:
        UsageError: the first refusal (one line), before anything was started.
    """
    settings = composition.provider(provider).worktree
    if settings is None:
        return
    try:
        for cwd in dict.fromkeys(cwds):
            await preflight(cwd, settings)
    except WorktreeError as exc:
        raise UsageError(exc.message) from None
