"""Loader: entry-point resolution, config validation, row/field error messages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import pytest
from dsh_profiles import ProfileError, StaticDiscovery, compose, load_profile, parse_profile
from dsh_profiles.profile import MAX_PROFILE_BYTES
from dsh_subagent import (
    NO_START_CAPABILITIES,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentProvider,
    SubagentRun,
)
from pydantic import BaseModel, ConfigDict, Field


class AlphaConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: Annotated[str, Field(min_length=1)] = "alpha"
    env: dict[str, str | None] = Field(default_factory=dict)
    mode: Literal["never", "always"] = "never"
    model: Annotated[str, Field(min_length=1)] | None = None


class AlphaProvider(SubagentProvider):
    Config: ClassVar[type[AlphaConfig]] = AlphaConfig
    constructed: ClassVar[int] = 0
    started: ClassVar[int] = 0

    def __init__(self, config: AlphaConfig) -> None:
        type(self).constructed += 1
        self.config = config

    @property
    def name(self) -> str:
        return self.config.provider_name

    @property
    def capabilities(self) -> SubagentCapabilities:
        return NO_START_CAPABILITIES

    @property
    def inherits_parent_context(self) -> bool:
        return False

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        type(self).started += 1
        raise AssertionError("the Loader must never start a provider")


class BetaProvider(AlphaProvider):
    """A second class, used to make a name ambiguous."""


class NotAProvider:
    Config = AlphaConfig


DISCOVERY = StaticDiscovery({"alpha": [AlphaProvider], "twin": [AlphaProvider, BetaProvider]})


def _compose(raw: dict[str, Any]) -> Any:
    return compose(parse_profile(raw, "p.toml"), source="p.toml", discovery=DISCOVERY)


def _problems(raw: dict[str, Any]) -> tuple[str, ...]:
    with pytest.raises(ProfileError) as info:
        _compose(raw)
    return info.value.problems


def test_two_named_instances_of_one_type_keep_their_own_config() -> None:
    comp = _compose(
        {
            "providers": [
                {"type": "alpha", "provider_name": "a1", "config": {"mode": "always"}},
                {"type": "alpha", "provider_name": "a2", "config": {"model": "m2"}},
                {"type": "alpha"},
            ],
            "tools": [{"name": "t1", "provider": "a1"}, {"name": "t2", "provider": "alpha"}],
            "jobs": {},
        }
    )
    assert [p.name for p in comp.providers] == ["a1", "a2", "alpha"]
    assert [p.row for p in comp.providers] == [1, 2, 3]
    first, second, default = (p.config for p in comp.providers)
    assert isinstance(first, AlphaConfig)
    assert (first.mode, first.model) == ("always", None)
    assert isinstance(second, AlphaConfig)
    assert (second.mode, second.model) == ("never", "m2")
    assert isinstance(default, AlphaConfig)
    assert default.provider_name == "alpha"
    assert comp.tool_names == ("t1", "t2", "job_output", "job_list", "job_kill")


def test_unknown_type_names_row_field_and_installed_names() -> None:
    (problem,) = _problems({"providers": [{"type": "alhpa"}]})
    assert problem.startswith("providers row 1 ('alhpa') field 'type': no provider named 'alhpa'")
    assert "installed: alpha, twin" in problem


def test_ambiguous_type_is_refused_naming_both_classes() -> None:
    (problem,) = _problems({"providers": [{"type": "twin"}]})
    assert "field 'type': provider name 'twin' is ambiguous" in problem
    assert "AlphaProvider" in problem
    assert "BetaProvider" in problem


def test_duplicate_provider_name_is_refused_naming_both_rows() -> None:
    (problem,) = _problems(
        {
            "providers": [
                {"type": "alpha", "provider_name": "x"},
                {"type": "alpha", "provider_name": "x"},
            ]
        }
    )
    assert problem.startswith(
        "providers row 2 ('x') field 'provider_name': duplicate provider name"
    )
    assert "providers row 1" in problem


def test_default_names_collide_too() -> None:
    (problem,) = _problems({"providers": [{"type": "alpha"}, {"type": "alpha"}]})
    assert "duplicate provider name 'alpha'" in problem


def test_unknown_row_field_and_unknown_config_field_name_row_and_field() -> None:
    problems = _problems(
        {
            "providers": [
                {"type": "alpha", "provider_name": "a", "colour": "red"},
                {"type": "alpha", "provider_name": "b", "config": {"mdoel": "x"}},
            ]
        }
    )
    assert problems == ("providers row 1 ('a') field 'colour': unknown field",)
    problems = _problems(
        {"providers": [{"type": "alpha", "provider_name": "b", "config": {"mdoel": "x"}}]}
    )
    assert problems == ("providers row 1 ('b') field 'config.mdoel': unknown field",)


def test_invalid_config_value_is_reported_without_echoing_the_value() -> None:
    (problem,) = _problems(
        {"providers": [{"type": "alpha", "config": {"mode": "sk-secret-looking-value"}}]}
    )
    assert problem.startswith("providers row 1 ('alpha') field 'config.mode':")
    assert "sk-secret-looking-value" not in problem


def test_empty_provider_name_is_refused() -> None:
    (problem,) = _problems({"providers": [{"type": "alpha", "provider_name": ""}]})
    assert "field 'provider_name'" in problem


def test_provider_name_inside_config_is_refused() -> None:
    (problem,) = _problems({"providers": [{"type": "alpha", "config": {"provider_name": "z"}}]})
    assert "field 'config.provider_name': set provider_name on the row itself" in problem


def test_a_shipped_type_not_installed_names_its_distribution_once() -> None:
    """The tools of a row that failed are not reported again: the row's line says why
    (and, for a type this project ships, what to install)."""
    problems = _problems(
        {
            "providers": [
                {"type": "alpha"},
                {"type": "claude-code", "provider_name": "claude-primary"},
                {"type": "nosuch"},
            ],
            "tools": [
                {"name": "t", "provider": "claude-primary", "background_mode": "disabled"},
                {"name": "u", "provider": "nosuch", "background_mode": "disabled"},
                {"name": "v", "provider": "ghost", "background_mode": "disabled"},
            ],
        }
    )
    assert problems == (
        "providers row 2 ('claude-primary') field 'type': no provider named 'claude-code' is "
        "installed (installed: alpha, twin); install dsh-subagent-claude-code beside "
        "dsh-profiles",
        "providers row 3 ('nosuch') field 'type': no provider named 'nosuch' is installed "
        "(installed: alpha, twin)",
        "tools row 3 ('v') field 'provider': no provider instance named 'ghost' (instances: alpha)",
    )


def test_tool_rows_are_checked_against_instances_and_each_other() -> None:
    problems = _problems(
        {
            "providers": [{"type": "alpha"}],
            "tools": [
                {"name": "t", "provider": "alpha"},
                {"name": "t", "provider": "ghost"},
                {"name": "job_list", "provider": "alpha", "background_mode": "disabled"},
            ],
            "jobs": {"tools": True},
        }
    )
    assert problems == (
        "tools row 2 ('t') field 'name': duplicate tool name (already used by tools row 1)",
        "tools row 2 ('t') field 'provider': no provider instance named 'ghost' (instances: alpha)",
        "tools row 3 ('job_list') field 'name': 'job_list' is a job control tool name",
    )


def test_background_tool_without_job_controls_is_refused() -> None:
    (problem,) = _problems(
        {"providers": [{"type": "alpha"}], "tools": [{"name": "t", "provider": "alpha"}]}
    )
    assert "tools row 1 ('t') field 'background_mode'" in problem
    assert "[jobs]" in problem
    comp = _compose(
        {
            "providers": [{"type": "alpha"}],
            "tools": [{"name": "t", "provider": "alpha", "background_mode": "disabled"}],
        }
    )
    assert comp.tool_names == ("t",)


def test_bad_tool_name_is_refused() -> None:
    (problem,) = _problems(
        {"providers": [{"type": "alpha"}], "tools": [{"name": "has space", "provider": "alpha"}]}
    )
    assert problem.startswith("tools row 1 ('has space') field 'name':")


def test_every_problem_is_reported_at_once() -> None:
    problems = _problems(
        {"providers": [{"type": "nope"}, {"type": "alpha", "config": {"bogus": 1}}]}
    )
    assert len(problems) == 2


def test_not_a_provider_class_is_refused() -> None:
    discovery = StaticDiscovery({"odd": [NotAProvider]})
    with pytest.raises(ProfileError, match="is not a SubagentProvider class"):
        compose(parse_profile({"providers": [{"type": "odd"}]}), discovery=discovery)


def test_import_failure_names_the_row() -> None:
    from dsh_profiles.discovery import ProviderCandidate

    def boom() -> object:
        raise ImportError("missing native payload")

    class Broken:
        def candidates(self, name: str) -> list[ProviderCandidate]:
            return [ProviderCandidate(name, "broken.mod:P", "broken-dist", boom)]

        def names(self) -> list[str]:
            return ["broken"]

    with pytest.raises(ProfileError) as info:
        compose(parse_profile({"providers": [{"type": "broken"}]}), discovery=Broken())
    assert "providers row 1 ('broken') field 'type'" in str(info.value)
    assert "broken-dist" in str(info.value)
    assert "missing native payload" in str(info.value)


def test_loading_constructs_but_never_starts() -> None:
    before_constructed, before_started = AlphaProvider.constructed, AlphaProvider.started
    _compose({"providers": [{"type": "alpha", "provider_name": "a"}, {"type": "alpha"}]})
    assert AlphaProvider.constructed == before_constructed + 2
    assert AlphaProvider.started == before_started


def test_a_profile_that_is_not_utf8_is_a_profile_error(tmp_path: Path) -> None:
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'[[providers]]\ntype = "alpha"\nprovider_name = "caf\xe9"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(latin, discovery=DISCOVERY)
    assert str(info.value) == f"{latin}: not UTF-8 text (an undecodable byte at 49)"


def test_a_profile_saved_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    marked = tmp_path / "marked.toml"
    marked.write_bytes(b'\xef\xbb\xbf[[providers]]\ntype = "alpha"\nprovider_name = "a"\n')
    assert [p.name for p in load_profile(marked, discovery=DISCOVERY).providers] == ["a"]


def test_an_endless_profile_is_refused_unread_past_the_bound() -> None:
    """``/dev/zero`` (or a runaway generator behind a path) never ends: the read stops at
    the bound instead of growing until the machine runs out of memory."""
    with pytest.raises(ProfileError) as info:
        load_profile("/dev/zero", discovery=DISCOVERY)
    assert str(info.value) == f"/dev/zero: larger than {MAX_PROFILE_BYTES} bytes: not a profile"


def test_profile_file_errors_are_readable(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read profile"):
        load_profile(tmp_path / "missing.toml", discovery=DISCOVERY)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[providers]\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(bad, discovery=DISCOVERY)
    good = tmp_path / "good.toml"
    good.write_text('[[providers]]\ntype = "alpha"\nprovider_name = "a"\n', encoding="utf-8")
    assert [p.name for p in load_profile(good, discovery=DISCOVERY).providers] == ["a"]
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('providers = "alpha"\n', encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(wrong, discovery=DISCOVERY)
    assert str(info.value).startswith(f"{wrong}: field 'providers'")


def test_pass_env_copies_only_set_host_variables_into_config_env() -> None:
    profile = parse_profile(
        {
            "providers": [
                {
                    "type": "alpha",
                    "pass_env": ["HOST_KEY", "ABSENT_KEY"],
                    "config": {"env": {"EXPLICIT": "1"}},
                }
            ]
        }
    )
    comp = compose(profile, discovery=DISCOVERY, host_env={"HOST_KEY": "k", "OTHER": "x"})
    config = comp.providers[0].config
    assert isinstance(config, AlphaConfig)
    assert config.env == {"EXPLICIT": "1", "HOST_KEY": "k"}


def test_pass_env_name_also_in_config_env_is_refused() -> None:
    profile = parse_profile(
        {"providers": [{"type": "alpha", "pass_env": ["K"], "config": {"env": {"K": "v"}}}]}
    )
    with pytest.raises(ProfileError, match=r"field 'pass_env': 'K' is also set in config\.env"):
        compose(profile, discovery=DISCOVERY, host_env={"K": "host"})


def test_jobs_config_is_validated_by_the_job_tools_model() -> None:
    comp = _compose({"jobs": {"config": {"max_concurrent_jobs_per_owner": 3}}})
    assert comp.jobs_config.max_concurrent_jobs_per_owner == 3
    (problem,) = _problems({"jobs": {"config": {"max_concurrent_jobs_per_owner": 0}}})
    assert problem.startswith("[jobs] field 'config.max_concurrent_jobs_per_owner':")
    (problem,) = _problems({"jobs": {"config": {"bogus": 1}}})
    assert problem == "[jobs] field 'config.bogus': unknown field"
