"""Known ACP agents as tested profile data: pinned npm package, command, settings.

Each ``profiles/<name>.toml`` beside this module describes one agent the keyless tier runs
(docs/agents.md has the profile and its evidence): its pinned npm package and the file
inside an npm prefix to run, the ACP-mode arguments, fixed settings for unattended runs,
the variables naming state directories the deployer should own, and its keyless wiring
to a loopback model fixture (``wire`` and an ``env`` template with ``$base_url``,
``$api_key`` and ``$model``).

Nothing here installs or starts anything: :meth:`AgentProfile.entry_in` only looks at a
directory, :meth:`AgentProfile.config` only builds an :class:`AcpConfig`.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dsh_subagent_acp.config import AcpConfig

__all__ = ["AgentProfile", "KeylessWiring", "agent_profile", "known_agents"]

ModelWire = Literal["responses", "messages", "chat-completions", "gemini"]


class KeylessWiring(BaseModel):
    """How the agent is pointed at a loopback model fixture without a real key.

    Attributes:
        wire: The model API the agent speaks to the fixture (the kit's ``responses``,
            ``messages``, ``chat_completions`` or ``gemini`` fixture).
        env: Variables to layer, templated with ``$base_url``, ``$api_key``, ``$model``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    wire: ModelWire
    env: dict[str, str] = Field(default_factory=dict)


class AgentProfile(BaseModel):
    """One known ACP agent (``profiles/<name>.toml``).

    Attributes:
        name: The profile's name (also the ``scripts/install-acp-agent`` argument).
        title: Display name.
        package: The npm package to install.
        version: Its pinned version (the one the keyless tier tested).
        entry: The file to run, relative to the npm prefix it was installed into.
        runtime: ``native`` (run ``entry``) or ``node`` (run ``node entry``).
        args: ACP-mode arguments after the entry.
        serve_port_arg: The argument setting the loopback port the agent serves itself
            on (``AcpConfig.serve_port_arg``).
        env: Fixed settings for unattended runs (no paths, no credentials).
        root_env: Further settings it needs when it runs as root (uid 0).
        state_env: Variables naming where it writes state; point them at directories
            you own (the keyless tier points them under a temporary root).
        credential_env: Variables carrying its credential, to list in ``pass_env``.
        keyless: Its keyless wiring to a loopback model fixture.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    title: str
    package: str
    version: str
    entry: str
    runtime: Literal["native", "node"]
    args: tuple[str, ...] = ()
    serve_port_arg: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    root_env: dict[str, str] = Field(default_factory=dict)
    state_env: tuple[str, ...] = ()
    credential_env: tuple[str, ...] = ()
    keyless: KeylessWiring

    def entry_in(self, prefix: str | Path) -> Path | None:
        """The entry inside npm prefix ``prefix`` when the pinned version is installed there.

        ``None`` when the entry is missing or the installed package's ``package.json``
        states another version.
        """
        root = Path(prefix)
        entry = root / self.entry
        manifest = root / "node_modules" / self.package / "package.json"
        try:
            version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
        except (OSError, ValueError, AttributeError):
            return None
        return entry if version == self.version and entry.is_file() else None

    def command(self, entry: str | Path) -> tuple[str, tuple[str, ...]]:
        """``(command, args)`` that start the agent in ACP mode from ``entry``."""
        if self.runtime == "node":
            return "node", (str(entry), *self.args)
        return str(entry), self.args

    def keyless_env(
        self, base_url: str, api_key: str, model: str = "fixture-model"
    ) -> dict[str, str]:
        """The keyless wiring's variables with the fixture's values filled in."""
        values = {"base_url": base_url, "api_key": api_key, "model": model}
        return {name: Template(text).substitute(values) for name, text in self.keyless.env.items()}

    def config(
        self, entry: str | Path, *, env: Mapping[str, str | None] = {}, **overrides: Any
    ) -> AcpConfig:
        """An :class:`AcpConfig` running this agent from ``entry``.

        ``env`` is layered over the profile's fixed settings (and, when this process
        runs as root, its ``root_env``: the agent runs with the same uid); ``overrides``
        are further ``AcpConfig`` fields (``provider_name`` defaults to the profile's
        name).
        """
        command, args = self.command(entry)
        values: dict[str, Any] = {"provider_name": self.name, "command": command, "args": args}
        if self.serve_port_arg is not None:
            values["serve_port_arg"] = self.serve_port_arg
        as_root = self.root_env if os.geteuid() == 0 else {}
        values["env"] = {**self.env, **as_root, **env}
        return AcpConfig(**{**values, **overrides})


@cache
def known_agents() -> tuple[AgentProfile, ...]:
    """Every profile shipped with this package, by name."""
    folder = resources.files("dsh_subagent_acp") / "profiles"
    profiles = [
        AgentProfile.model_validate(tomllib.loads(item.read_text(encoding="utf-8")))
        for item in folder.iterdir()
        if item.name.endswith(".toml")
    ]
    return tuple(sorted(profiles, key=lambda profile: profile.name))


def agent_profile(name: str) -> AgentProfile:
    """The shipped profile called ``name``.

    Raises:
        ValueError: No such profile (the message lists the known names).
    """
    for profile in known_agents():
        if profile.name == name:
            return profile
    known = ", ".join(profile.name for profile in known_agents())
    raise ValueError(f"unknown ACP agent profile {name!r} (known: {known})")
