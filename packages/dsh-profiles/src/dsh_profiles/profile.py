"""The TOML profile: which provider instances exist and which model-visible tools bind them.

A profile is deployment configuration: product and instance selection never
reach the model. Shape::

    [[providers]]
    type = "codex"                 # entry-point name in the ``dsh.subagent.providers`` group
    provider_name = "codex-fast"   # registry name; defaults to the provider's own default
    pass_env = ["OPENAI_API_KEY"]  # copied from the host into config.env when set
    [providers.config]             # validated by the provider class's ``Config`` model
    model = "gpt-5.4-mini"

    [providers.worktree]           # optional isolation: a git worktree per delegation
    base = "main"                  # dsh_worktree.Worktree settings; {} for the defaults

    [[tools]]
    name = "subagent_codex_fast"   # model-visible tool name
    provider = "codex-fast"        # the instance this tool binds, statically
    background_mode = "one-shot"   # or "disabled": no ``run_in_background`` parameter
    [tools.worktree]               # optional: this tool's isolation, field by field over
    keep = true                    # its provider row's; ``worktree = false``: not isolated

    [jobs]                         # optional: omit or set tools = false to bind no job tools
    tools = true
    config = { max_concurrent_jobs_per_owner = 4 }

    [mcp]                          # optional: settings of ``dsh mcp`` (dsh-mcp checks them)
    workspace = "."

Parsing here checks only the profile's own shape; the Loader validates each ``config``
table against its provider's model once the entry point is resolved.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from dsh_subagent.structured import JsonOutputSchema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dsh_profiles.errors import ProfileError

__all__ = [
    "JobsSection",
    "Profile",
    "ProviderRow",
    "ToolRow",
    "describe_validation_error",
    "parse_profile",
    "read_profile",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""What model APIs accept as a function/tool name."""


class ProviderRow(BaseModel):
    """One provider instance."""

    model_config = _FROZEN
    type: Annotated[str, Field(min_length=1)]
    """Entry-point name in the ``dsh.subagent.providers`` group (``codex``, ``claude-code``, …)."""
    provider_name: Annotated[str, Field(min_length=1)] | None = None
    """Registry name of this instance; omitted → the provider's default (its entry-point name)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The provider's configuration, validated by its ``Config`` model at load."""
    pass_env: tuple[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], ...] = ()
    """Host variables copied into ``config.env`` at load when set (keys stay out of profiles)."""
    worktree: dict[str, Any] | None = None
    """Isolation: every run of this instance in its own git worktree (``dsh_worktree.Worktree``
    settings: ``base``, ``branch``, ``root``, ``keep``; ``worktree = {}`` for the defaults)."""


class ToolRow(BaseModel):
    """One model-visible subagent tool bound to exactly one provider instance."""

    model_config = _FROZEN
    name: Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
    """Model-visible tool name, unique in the profile."""
    provider: Annotated[str, Field(min_length=1)]
    """The ``provider_name`` of the instance this tool delegates to."""
    background_mode: Literal["one-shot", "disabled"] = "one-shot"
    """``one-shot``: foreground unless ``run_in_background``; ``disabled``: never a Job."""
    worktree: dict[str, Any] | Literal[False] | None = None
    """This tool's isolation (``dsh_worktree.Worktree`` settings), laid field by field over
    its provider row's ``worktree``; ``{}`` isolates with the provider row's settings or the
    defaults, ``false`` runs this tool without isolation; omitted: as the provider row says.
    A tool whose isolation differs from its provider row's gets its own instance of that
    provider (see ``Composition.instance_for``)."""

    output_schema: JsonOutputSchema | None = None
    """A JSON Schema (object root, as a TOML table) every answer of this tool must match:
    the run's result then carries the validated object (``dsh mcp`` declares it as the
    tool's output schema). The provider must enforce schemas (Codex, Claude Code). A
    background Job of such a tool is validated the same way; its output is the answer's
    text."""

    @field_validator("worktree", mode="before")
    @classmethod
    def _table_or_false(cls, value: object) -> object:
        if value is None or value is False or isinstance(value, dict):
            return value
        raise ValueError("must be a table of worktree settings ({} for the defaults) or false")


class JobsSection(BaseModel):
    """Generic background Job controls (``job_output``, ``job_list``, ``job_kill``)."""

    model_config = _FROZEN
    tools: bool = True
    """Bind the three job control tools."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Job tool and registry settings, validated by ``dsh_tool_jobs.JobsToolsConfig``."""


class Profile(BaseModel):
    """A whole profile."""

    model_config = _FROZEN
    providers: tuple[ProviderRow, ...] = ()
    tools: tuple[ToolRow, ...] = ()
    jobs: JobsSection | None = None
    mcp: dict[str, Any] | None = None
    """Settings of ``dsh mcp``, validated by the dsh-mcp distribution when it serves this
    profile; every other command ignores the table."""

    @property
    def job_tools(self) -> bool:
        """Whether the job control tools are bound."""
        return self.jobs is not None and self.jobs.tools


_SECTION_NAMES = {"providers": "providers row", "tools": "tools row"}


def describe_location(loc: tuple[int | str, ...], raw: Mapping[str, Any] | None = None) -> str:
    """Render a pydantic error location as ``providers row 2 ('name') field 'config.model'``."""
    if len(loc) >= 2 and loc[0] in _SECTION_NAMES and isinstance(loc[1], int):
        section, index = str(loc[0]), loc[1]
        label = f"{_SECTION_NAMES[section]} {index + 1}"
        rows = raw.get(section) if raw is not None else None
        if isinstance(rows, list) and index < len(rows) and isinstance(rows[index], Mapping):
            row = rows[index]
            ident = row.get("provider_name") or row.get("name") or row.get("type")
            if isinstance(ident, str) and ident:
                label += f" ({ident!r})"
        rest = ".".join(str(part) for part in loc[2:])
        return f"{label} field {rest!r}" if rest else label
    return "field " + repr(".".join(str(part) for part in loc)) if loc else "profile"


def describe_validation_error(
    error: ValidationError,
    *,
    prefix: tuple[int | str, ...] = (),
    raw: Mapping[str, Any] | None = None,
) -> list[str]:
    """One readable line per pydantic error; values are never echoed (they may be secrets)."""
    lines = []
    for item in error.errors(include_input=False, include_url=False):
        loc = (*prefix, *item["loc"])
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        elif item["type"] == "missing":
            message = "required field is missing"
        else:
            message = item["msg"]
        lines.append(f"{describe_location(loc, raw)}: {message}")
    return lines


def parse_profile(raw: Mapping[str, Any], source: str = "<profile>") -> Profile:
    """Validate a decoded TOML document as a :class:`Profile`.

    Raises:
        ProfileError: naming every offending row and field.
    """
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        raise ProfileError(source, describe_validation_error(exc, raw=raw)) from None


MAX_PROFILE_BYTES = 1_048_576
"""A profile file longer than this is refused unread (a profile is a few rows of TOML)."""


def read_profile(path: str | Path) -> Profile:
    """Read and validate a TOML profile file.

    Raises:
        ProfileError: the file is missing, too large, not UTF-8, not TOML, or has the
            wrong shape.
    """
    source = str(path)
    try:
        with Path(path).open("rb") as stream:
            data = stream.read(MAX_PROFILE_BYTES + 1)  # bounded: /dev/zero never ends
    except OSError as exc:
        raise ProfileError(source, [f"cannot read profile: {exc.strerror or exc}"]) from None
    if len(data) > MAX_PROFILE_BYTES:
        raise ProfileError(source, [f"larger than {MAX_PROFILE_BYTES} bytes: not a profile"])
    try:
        # A byte order mark (Windows editors write one) is no TOML statement: dropped.
        text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(
            source, [f"not UTF-8 text (an undecodable byte at {exc.start})"]
        ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(source, [f"not valid TOML: {exc}"]) from None
    return parse_profile(raw, source)
