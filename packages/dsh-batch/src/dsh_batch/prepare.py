"""From a batch's settings to a :class:`~dsh_batch.runner.BatchSetup`: the checks made before
its results file is opened, shared by ``run_batch`` and ``dsh batch``.

:func:`check_places` checks the paths the user gave (the files directory, the base cwd,
the results file) and :func:`load_setup` loads the profile, finds the target, folds the
output schema into the tasks and isolates the target as asked. Both raise one
:class:`~dsh_profiles.errors.UsageError` for the first problem, worded by a
:class:`Wording` (``dsh batch`` names its flags, ``run_batch`` its fields); nothing is
started or recorded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import UsageError
from dsh_profiles.isolation import isolate
from dsh_profiles.loader import Composition
from dsh_profiles.options import resolve_target, typed_row_schema
from dsh_profiles.output_schema import check_schema
from dsh_profiles.warm import batch_warm
from dsh_subagent import Budget
from dsh_worktree import MAX_WARM, Worktree, WorktreeError
from pydantic import JsonValue

from dsh_batch.checks import check_base, check_out_path
from dsh_batch.engine import FILES_PLACEHOLDER, default_concurrency, load_batch_profile
from dsh_batch.files import BatchTask
from dsh_batch.runner import BatchSetup, RaySetup

__all__ = ["COMMAND_WORDING", "Places", "Wording", "check_places", "load_setup"]


@dataclass(frozen=True)
class Wording:
    """How a batch's usage errors name what was given.

    Attributes:
        files: Names the files directory (``--files``).
        cwd: Names the base cwd (``--cwd``).
        ray_cwd: The whole error for a relative base cwd on Ray.
        out: Names the results file (``--out``).
        output_schema: Starts the error for a bad batch-wide schema.
        worktree: Starts the error when the target cannot be isolated.
        no_files: The whole error for a task cwd naming ``${DSH_FILES}`` without files.
    """

    files: str
    cwd: str
    ray_cwd: str
    out: str
    output_schema: str
    worktree: str
    no_files: str


COMMAND_WORDING = Wording(
    files="--files",
    cwd="--cwd",
    ray_cwd="with --ray, --cwd must be an absolute path on the worker nodes",
    out="--out",
    output_schema="--output-schema",
    worktree="",
    no_files=f"a task cwd uses {FILES_PLACEHOLDER}: pass --files DIR",
)
"""``dsh batch``'s words: its flags."""


@dataclass(frozen=True)
class Places:
    """The checked paths of a batch.

    Attributes:
        files: The files directory, absolute (``None``: none).
        base: The base directory of task cwds here, absolute (``None``: on Ray).
        ray_cwd: The base cwd on Ray's nodes as given (``None``: not given, or not on Ray).
    """

    files: str | None
    base: str | None
    ray_cwd: str | None


def check_places(
    files: str | Path | None,
    cwd: str | Path | None,
    *,
    on_ray: bool,
    out: str | Path | None,
    tasks_path: str | None,
    profile: str | Path,
    wording: Wording,
) -> Places:
    """Check the paths of a batch before anything is read or loaded.

    Raises:
        UsageError: ``files`` is not a directory, the base ``cwd`` is not an accessible
            directory (on Ray: not absolute), or ``out`` cannot receive records.
    """
    found: str | None = None
    if files is not None:
        found = os.path.abspath(files)
        if not os.path.isdir(found):
            raise UsageError(f"{wording.files} {str(files)!r} is not a directory")
    given = None if cwd is None else str(cwd)
    base: str | None = None
    if not on_ray:
        base = check_base(given, name=wording.cwd)
    elif given is not None and not os.path.isabs(given):
        raise UsageError(wording.ray_cwd)
    if out is not None:
        check_out_path(str(out), tasks_path, str(profile), name=wording.out)
    return Places(found, base, given if on_ray else None)


def load_setup(
    profile: str | Path,
    target: str,
    tasks: tuple[BatchTask, ...],
    places: Places,
    *,
    wording: Wording,
    instance: bool = False,
    output_schema: dict[str, JsonValue] | None = None,
    budget: Budget | None = None,
    concurrency: int | None = None,
    retry_failed: bool = False,
    confinement: str | None = None,
    warm: int | None = None,
    worktree: Callable[[Composition, str], Worktree | None] | None = None,
    ray: bool | str = False,
    ray_retries: int = 0,
    discovery: ProviderDiscovery | None = None,
    announce: Callable[[Composition, str], None] | None = None,
    line_of: Mapping[str, int] | None = None,
    tasks_name: str = "the tasks",
) -> BatchSetup:
    """Load the profile and decide everything the batch runs with.

    Args:
        output_schema: For every task without its own (default: the tool row's schema).
        worktree: The isolation the target runs with, from the loaded composition and
            the target's instance (``None``: the profile's own).
        ray: ``False`` here; ``True`` on Ray's default cluster; a string: its address.
        announce: Called with the composition and the instance before isolation, when
            the batch runs here (``dsh batch`` shows the confinement line there).

    Raises:
        UsageError: the target is unknown, the schema is bad, the target cannot be
            isolated; ProfileError: the profile is invalid.
    """
    on_ray = ray is not False
    local_concurrency = concurrency or default_concurrency()
    composition = load_batch_profile(
        profile,
        places.files,
        discovery=discovery,
        confinement=confinement,
        warm=batch_warm(warm, local_concurrency),
    )
    provider = resolve_target(composition, target, instance)
    if output_schema is None:
        output_schema = typed_row_schema(composition, target, instance)
    else:
        output_schema = check_schema(output_schema, wording.output_schema)
    if output_schema is not None:
        tasks = tuple(
            t
            if t.output_schema is not None
            else t.model_copy(update={"output_schema": output_schema})
            for t in tasks
        )
    if announce is not None and not on_ray:  # with Ray each node decides at each task's start
        announce(composition, provider)
    # With Ray the settings travel to the actors, which isolate on their nodes; they are
    # checked here either way.
    settings = worktree(composition, provider) if worktree is not None else None
    if settings is not None:
        pooled = settings
        if "warm" not in settings.model_fields_set:  # a pool as large as the concurrency
            pooled = settings.model_copy(update={"warm": min(local_concurrency, MAX_WARM)})
        try:
            composition = isolate(composition, provider, pooled)
        except WorktreeError as exc:
            raise UsageError(f"{wording.worktree}{exc.message}") from None
    ray_setup = None
    if on_ray:
        ray_setup = RaySetup(
            ray if isinstance(ray, str) else None,
            places.ray_cwd,
            retries=ray_retries,
            worktree=settings,
            confinement=confinement,
            warm=warm,
        )
    return BatchSetup(
        composition,
        provider,
        tasks,
        profile=Path(profile),
        base=places.base,
        files=places.files,
        no_files=wording.no_files,
        budget=budget,
        concurrency=concurrency if on_ray else local_concurrency,
        retry_failed=retry_failed,
        ray=ray_setup,
        isolation=settings if settings is not None else composition.provider(provider).worktree,
        line_of=line_of or {},
        tasks_name=tasks_name,
    )
