"""The configuration every out-of-process provider shares, validated once at load.

A provider's pydantic ``Config`` subclasses :class:`ProductConfig` and adds its own
product fields; the four common fields and their rules live here, once:

* ``provider_name`` — the registry name;
* ``env`` (:data:`EnvOverlay`) — the explicit overlay on the credential-scrubbed parent
  environment, the only way a scrubbed variable reaches the product;
* ``cwd`` (:data:`ConfiguredCwd`) — an optional working-directory override;
* ``dispose_grace`` (:data:`Grace`) — seconds between SIGTERM and SIGKILL at teardown;
* ``response_timeout_seconds`` — how long a protocol request that expects a direct
  response (a handshake, a session or turn start) may go unanswered.

Every text value of a configuration, the subclass's own fields included, must be valid
UTF-8 (a product reads it on a UTF-8 wire; see :mod:`dsh_subagent.utf8`). ``env`` alone
is exempt: the environment is handed to the OS as bytes, where an undecodable byte of an
inherited variable (``surrogateescape``) is restored exactly.

pydantic (and so the Loader) names the offending field of a ``ValueError``, so every
check raises one with a message that says what is wrong with the value.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Annotated, Any

from dsh_subprocess import MAX_GRACE_SECONDS, check_env_overlay
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationInfo,
    field_validator,
)

from dsh_subagent.confinement import ConfinementSetting
from dsh_subagent.errors import SubagentError
from dsh_subagent.utf8 import NOT_UTF8, first_non_utf8
from dsh_subagent.workdir import validate_configured_cwd

__all__ = [
    "DEFAULT_DISPOSE_GRACE",
    "DEFAULT_RESPONSE_TIMEOUT",
    "ConfiguredCwd",
    "EnvOverlay",
    "Grace",
    "ProductConfig",
]

DEFAULT_DISPOSE_GRACE = 2.0
"""Seconds a product gets between SIGTERM and SIGKILL unless its configuration says."""

DEFAULT_RESPONSE_TIMEOUT = 120.0
"""Seconds a request that expects a direct response may go unanswered by default.

Generous on purpose: a product answers its handshake and a session or turn start at once
when it is healthy (a first start on a fresh home included), so the bound only ends a
product that will never answer (e.g. one that could not parse the request)."""


def _check_env(value: dict[str, str | None]) -> dict[str, str | None]:
    check_env_overlay(value)  # ValueError naming the bad variable
    return value


def _check_cwd(value: str | None) -> str | None:
    try:
        return validate_configured_cwd("config", value)
    except SubagentError as exc:
        raise ValueError(exc.message.removeprefix("config: ")) from None


def _reject_non_number(value: Any) -> Any:
    # bool is an int to Python; a grace of ``true`` is a typo, not one second.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number of seconds")
    return value


def _check_grace(value: float) -> float:
    if not (math.isfinite(value) and 0 < value <= MAX_GRACE_SECONDS):
        raise ValueError(
            f"must be a positive finite number of seconds no greater than {MAX_GRACE_SECONDS}"
        )
    return value


EnvOverlay = Annotated[dict[str, str | None], AfterValidator(_check_env)]
"""Variables layered over the scrubbed parent environment; ``None`` removes one.

Refused at load: an empty name, a name with ``=`` or NUL, a value with NUL.
"""

ConfiguredCwd = Annotated[str | None, AfterValidator(_check_cwd)]
"""An optional working-directory override, resolved against the launch directory and
probed once at load (absolute after resolution, an enterable directory)."""

Grace = Annotated[float, BeforeValidator(_reject_non_number), AfterValidator(_check_grace)]
"""A termination grace in seconds: positive, finite, at most ``MAX_GRACE_SECONDS``."""


class ProductConfig(BaseModel):
    """Base of every out-of-process provider's configuration (frozen, unknown keys refused).

    Subclass it, give ``provider_name`` your default and add the product's own fields::

        class EchoConfig(ProductConfig):
            provider_name: str = "echo"
            model: str | None = None

    Attributes:
        provider_name: Registry name of this instance.
        env: Overlay on the credential-scrubbed parent environment (see :data:`EnvOverlay`).
        cwd: Working-directory override; ``None`` runs the child in the delegating parent
            session's cwd (see :data:`ConfiguredCwd`).
        dispose_grace: Seconds between SIGTERM and SIGKILL of the product's process tree.
        deadline_seconds: Wall-clock bound of a run, startup included; none by default.
            A request's ``budget`` may shorten it, never extend it.
        idle_timeout_seconds: Longest stretch the product may write nothing on its
            stdout; none by default. A request's ``budget`` may shorten it.
        response_timeout_seconds: Longest wait for the direct response to a protocol
            request (Codex ``initialize``, ``thread/start``, ``turn/start``; ACP
            ``initialize``, ``session/new``; Claude Code's first stream message); default
            :data:`DEFAULT_RESPONSE_TIMEOUT`.
            Never the turn itself: a long turn is the product working. When it runs out
            the start fails (or the run settles ``error``) with category
            ``response-timeout`` and the whole tree is ended.
        confinement: Kernel confinement of the product's whole process tree: the mode
            (``auto`` by default) and the paths and ports this instance adds to what the
            provider computes (see :class:`~dsh_subagent.ConfinementSetting` and
            docs/security.md).
        warm: How many products the service keeps started and past their handshake
            for this instance's next delegations (``0``, the default: none; at most
            64). Each serves exactly one delegation (docs/harness.md,
            "Ready products"); ignored by a provider whose handshake depends on the task.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: str = Field(min_length=1)
    env: EnvOverlay = Field(default_factory=dict)
    cwd: ConfiguredCwd = None
    dispose_grace: Grace = DEFAULT_DISPOSE_GRACE
    deadline_seconds: PositiveFloat | None = None
    idle_timeout_seconds: PositiveFloat | None = None
    response_timeout_seconds: float = Field(
        default=DEFAULT_RESPONSE_TIMEOUT, gt=0, allow_inf_nan=False
    )
    confinement: ConfinementSetting = ConfinementSetting()
    warm: int = Field(default=0, ge=0, le=64, strict=True)

    @field_validator("provider_name", mode="after")
    @classmethod
    def _printable_name(cls, value: str) -> str:
        # The name heads every line dsh prints about the instance (and its logs): a
        # newline would forge a line, an escape sequence would reach the terminal.
        if any(unicodedata.category(char) in ("Cc", "Cf") for char in value):
            raise ValueError("must not hold control or format characters")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _utf8_text(cls, value: Any, info: ValidationInfo) -> Any:
        # Every field, a subclass's too; env is bytes for the OS (see the module docstring).
        if info.field_name != "env":
            where = first_non_utf8(value)
            if where is not None:
                at = f" (at {where})" if where else ""
                raise ValueError(f"{NOT_UTF8}{at}")
        return value
