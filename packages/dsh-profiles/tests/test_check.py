"""``check_profile``, ``describe_config`` and ``policy_lines``: what ``dsh check`` shows, as
the library computes it (the command's rendering is dsh-cli's; its tests drive ``dsh``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import pytest
from dsh_profiles import ProfileError, StaticDiscovery
from dsh_profiles.check import check_profile, describe_config
from dsh_profiles.confinement import NOT_CONFINED, policy_lines
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess import _landlock
from pydantic import BaseModel, ConfigDict


class PlainConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "plain"
    env: dict[str, str] = {}


class PlainProvider(ScriptedProvider):
    """A provider that does not spawn through dsh-subprocess (no confinement setting)."""

    Config: ClassVar[type[PlainConfig]] = PlainConfig

    def __init__(self, config: PlainConfig) -> None:
        super().__init__(config.provider_name, [Script()])


DISCOVERY = StaticDiscovery({"plain": [PlainProvider], "codex": [CodexProvider]})


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(
        '[[providers]]\ntype = "plain"\n[providers.config.env]\nTOKEN = "s3cret-value"\n\n'
        '[[tools]]\nname = "subagent_plain"\nprovider = "plain"\nbackground_mode = "disabled"\n',
        encoding="utf-8",
    )
    return path


def test_check_profile_binds_every_tool_and_starts_nothing(tmp_path: Path) -> None:
    check = check_profile(_profile(tmp_path), discovery=DISCOVERY)
    assert check.spawned == 0
    assert [schema["name"] for schema in check.schemas] == ["subagent_plain"]
    assert check.composition.tool_names == ("subagent_plain",)


def test_check_profile_raises_the_profiles_problems(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[providers]]\ntype = "plain"\n[providers.config]\nnope = 1\n')
    with pytest.raises(ProfileError, match=r"field 'config\.nope'"):
        check_profile(path, discovery=DISCOVERY)


def test_describe_config_shows_env_names_never_their_values(tmp_path: Path) -> None:
    (loaded,) = check_profile(_profile(tmp_path), discovery=DISCOVERY).composition.providers
    assert describe_config(loaded.config) == "env=['TOKEN']"


def test_a_provider_without_a_confinement_setting_is_not_confined() -> None:
    assert policy_lines(PlainProvider(PlainConfig())) == [f"confinement: {NOT_CONFINED}"]


def test_off_is_shown_as_off() -> None:
    provider = CodexProvider(CodexConfig(confinement={"mode": "off"}))
    assert policy_lines(provider, "/") == [
        "confinement: off (the product runs with the host user's whole reach)"
    ]


def test_the_policy_names_the_run_directory_and_warns_of_a_grant_over_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    gone = tmp_path / "gone"
    config = CodexConfig(
        confinement={"write": [str(tmp_path / "home")], "read": [str(gone)]},
    )
    lines = policy_lines(CodexProvider(config), str(tmp_path))
    state = (
        f"applied (Landlock ABI {_landlock.abi()})"
        if _landlock.abi()
        else "NOT applied: no Landlock here"
    )
    assert lines[0] == f"confinement: auto, {state}; for a run in {tmp_path}:"
    assert lines[1].startswith("  read: ")
    assert lines[2].startswith("  write: ")
    assert str(tmp_path / "home") in lines[2]
    assert (
        f"  warning: write {tmp_path / 'home'} holds the home directory {home}: the "
        "product may write ~/.ssh, ~/.aws and every repository there"
    ) in lines
    assert f"  skipped (does not exist now): {gone}" in lines


def test_without_a_cwd_the_policy_is_for_where_the_host_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = policy_lines(CodexProvider(CodexConfig()))
    assert lines[0].endswith(f"for a run in {os.getcwd()}:")


def test_required_without_landlock_says_a_run_would_be_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_landlock, "abi", lambda: 0)
    provider = CodexProvider(CodexConfig(confinement={"mode": "required"}))
    (first, *_) = policy_lines(provider, "/")
    assert first == (
        "confinement: required, a run would be refused: no Landlock here; for a run in /:"
    )
