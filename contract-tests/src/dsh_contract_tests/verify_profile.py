"""What a provider needs to be verified: the verify profile (``verify --config FILE``).

A provider that runs as it is (a scripted child, the kit's ready file) needs none. A
provider whose product talks to a model, or whose ``Config`` has required fields, says
what it needs in a TOML (``.toml``) or JSON file, and the verify run provides it in each
rule's process, with no conftest or test class of the author's involved::

    hold_timeout = 90          # seconds the kit waits for a hold run to be working
    settle_timeout = 90        # seconds each provider call may take (--settle-timeout wins)

    [model]                    # a loopback model fixture the kit starts in each rule's process
    wire = "responses"         # responses | messages | chat-completions
    home = "codex"             # optional: a keyless codex | claude-code home pointing at it

    [config]                   # the provider's Config values
    dispose_grace = 2.0

    [env]                      # added to the env overlay the kit hands the provider
    ACME_MODEL_URL = "{model_url}"

``{model_url}`` in a ``[config]`` or ``[env]`` string is the fixture's base URL. The
fixture answers every request by the kit directive in it (see
:mod:`dsh_contract_tests.routes`) and the kit knows a ``hold`` run is working once the
fixture holds a request carrying its token, so the product creates no ready file.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator
from pydantic_core import ErrorDetails

from dsh_contract_tests.contract import SETTLE_TIMEOUT_CAP

__all__ = [
    "MODEL_URL",
    "ModelNeed",
    "ProfileError",
    "VerifyProfile",
    "load_profile",
    "substitute",
]

MODEL_URL: Final = "{model_url}"
"""Replaced by the loopback model fixture's base URL in ``[config]`` and ``[env]`` strings."""

_HOME_WIRE: Final = {"codex": "responses", "claude-code": "messages"}
_KIT_OWNED: Final = ("env", "cwd")
_MAX_BYTES: Final = 1 << 20


class ProfileError(ValueError):
    """A verify profile that cannot be used, naming the file and the field."""


class ModelNeed(BaseModel):
    """``[model]``: the loopback model fixture the kit starts in each rule's process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wire: Literal["responses", "messages", "chat-completions"]
    home: Literal["codex", "claude-code"] | None = None

    @model_validator(mode="after")
    def _home_speaks_the_wire(self) -> ModelNeed:
        if self.home is not None and _HOME_WIRE[self.home] != self.wire:
            raise ValueError(
                f"home {self.home!r} talks to the {_HOME_WIRE[self.home]!r} wire, not {self.wire!r}"
            )
        return self


class VerifyProfile(BaseModel):
    """What the verify run provides a provider in each rule's process (all optional)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hold_timeout: float = Field(default=60.0, gt=0, le=SETTLE_TIMEOUT_CAP)
    settle_timeout: float | None = Field(default=None, gt=0, le=SETTLE_TIMEOUT_CAP)
    model: ModelNeed | None = None
    config: dict[str, JsonValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> VerifyProfile:
        owned = [key for key in _KIT_OWNED if key in self.config]
        if owned:
            # The kit's env overlay and cwd override are what its rules check: a profile
            # cannot replace them (extra variables go under [env]).
            raise ValueError(
                f"config.{owned[0]}: set by the kit in every rule (its cwd and env rules "
                "check them); extra variables go under [env]"
            )
        if self.model is None and MODEL_URL in json.dumps([self.config, self.env]):
            raise ValueError(f"{MODEL_URL} is used, but there is no [model] to give it a URL")
        return self


def _location(error: ErrorDetails) -> str:
    return ".".join(str(part) for part in error["loc"]) or "the file"


def load_profile(path: Path) -> VerifyProfile:
    """Read and validate a verify profile (``.toml``, else JSON).

    Raises:
        ProfileError: unreadable, not TOML/JSON, or a field that is wrong (named).
    """
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise ProfileError(f"--config {path}: larger than {_MAX_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"--config {path}: cannot be read: {exc}") from None
    try:
        data: object = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if path.suffix == ".toml" else "JSON (use a .toml name for TOML)"
        raise ProfileError(f"--config {path}: not valid {kind}: {exc}") from None
    try:
        return VerifyProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if not first["loc"]:  # a check across fields: its message names them
            message = first["msg"].removeprefix("Value error, ")
            raise ProfileError(f"--config {path}: {message}") from None
        raise ProfileError(f"--config {path}: {_location(first)}: {first['msg']}") from None


def substitute(value: JsonValue, model_url: str | None) -> JsonValue:
    """``value`` with :data:`MODEL_URL` replaced in every string it holds."""
    if isinstance(value, str):
        return value if model_url is None else value.replace(MODEL_URL, model_url)
    if isinstance(value, list):
        return [substitute(item, model_url) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, model_url) for key, item in value.items()}
    return value
