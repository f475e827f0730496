"""Configuration validated at load; construction starts nothing."""

from __future__ import annotations

import math
import os
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from dsh_subagent import NO_START_CAPABILITIES
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_acp.config import DEFAULT_DISPOSE_EOF_GRACE, DEFAULT_DISPOSE_GRACE
from pydantic import ValidationError


def test_defaults() -> None:
    config = AcpConfig(command="codex-acp")
    assert config.provider_name == "acp"
    assert config.args == ()
    assert config.env == {}
    assert config.cwd is None
    assert config.permission == "reject"
    assert config.dispose_eof_grace == DEFAULT_DISPOSE_EOF_GRACE
    assert config.dispose_grace == DEFAULT_DISPOSE_GRACE
    # Deliberately short, unlike the reference's 6 s: the real agents ignore stdin EOF, so a
    # long EOF window would only delay every dispose (cancel -> tree gone stays under 0.25 s).
    assert DEFAULT_DISPOSE_EOF_GRACE <= 0.25


@pytest.mark.parametrize(
    "overrides",
    [
        {"command": ""},
        {"command": "   "},
        {"provider_name": ""},
        {"provider_name": " "},
        {"permission": "ask"},
        {"permission": "allow_always"},
        {"env": {"A=B": "x"}},
        {"unknown_key": 1},
        {"dispose_grace": 0},
        {"dispose_grace": -1},
        {"dispose_grace": math.nan},
        {"dispose_grace": math.inf},
        {"dispose_eof_grace": 0.0},
        {"dispose_eof_grace": 1e12},
        {"dispose_eof_grace": True},
    ],
)
def test_invalid_values_rejected_at_load(overrides: dict[str, Any]) -> None:
    values: dict[str, Any] = {"command": "agent", **overrides}
    with pytest.raises(ValidationError):
        AcpConfig.model_validate(values)


def test_grace_message_names_the_key() -> None:
    with pytest.raises(ValidationError, match=r"dispose_grace\n.*must be a positive finite"):
        AcpConfig(command="agent", dispose_grace=-2)
    with pytest.raises(ValidationError, match=r"dispose_eof_grace\n.*must be a positive finite"):
        AcpConfig(command="agent", dispose_eof_grace=-2)


def test_empty_cwd_rejected_with_reason() -> None:
    with pytest.raises(ValidationError, match="config cwd must not be empty"):
        AcpConfig(command="agent", cwd="")


def test_relative_cwd_resolved_once_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path)
    config = AcpConfig(command="agent", cwd="ws")
    assert config.cwd == str(tmp_path / "ws")
    monkeypatch.chdir("/")
    assert config.cwd == str(tmp_path / "ws")


@pytest.mark.parametrize("kind", ["missing", "file", "no-search"])
def test_unusable_cwd_rejected_at_load(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "file":
        target.write_text("x")
    elif kind == "no-search":
        target.mkdir()
        os.chmod(target, 0o600)
    with pytest.raises(ValidationError, match="config cwd is not an accessible directory"):
        AcpConfig(command="agent", cwd=str(target))


def test_frozen() -> None:
    config = AcpConfig(command="agent")
    with pytest.raises(ValidationError):
        config.command = "other"  # type: ignore[misc]


def test_named_instances_coexist() -> None:
    first = AcpProvider(AcpConfig(provider_name="codex-acp", command="codex-acp"))
    second = AcpProvider(
        AcpConfig(
            provider_name="claude-acp", command="node", args=("index.js",), permission="allow"
        )
    )
    assert (first.name, second.name) == ("codex-acp", "claude-acp")
    assert first.config.permission == "reject"
    assert second.config.permission == "allow"


def test_provider_shape_and_entry_point() -> None:
    provider = AcpProvider(AcpConfig(command="agent"))
    assert AcpProvider.Config is AcpConfig
    assert provider.capabilities == NO_START_CAPABILITIES
    assert provider.inherits_parent_context is False
    (entry,) = [e for e in entry_points(group="dsh.subagent.providers") if e.name == "acp"]
    assert entry.load() is AcpProvider
