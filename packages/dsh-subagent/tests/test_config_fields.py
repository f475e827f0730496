"""ProductConfig's shared fields: checked once at load, each error naming its field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from dsh_subagent import DEFAULT_DISPOSE_GRACE, DEFAULT_RESPONSE_TIMEOUT, ProductConfig
from dsh_subprocess import MAX_GRACE_SECONDS
from pydantic import ValidationError


class _Config(ProductConfig):
    provider_name: str = "p"


def _only_error(exc: pytest.ExceptionInfo[ValidationError]) -> tuple[tuple[str | int, ...], str]:
    errors = exc.value.errors()
    assert len(errors) == 1
    return errors[0]["loc"], errors[0]["msg"]


def test_valid_values_pass_through(tmp_path: Path) -> None:
    config = _Config(cwd=str(tmp_path), env={"A": "1", "GONE": None}, dispose_grace=0.5)
    assert config.cwd == str(tmp_path)
    assert config.env == {"A": "1", "GONE": None}
    assert config.dispose_grace == 0.5


def test_defaults_are_no_override_no_overlay_no_budget() -> None:
    config = _Config()
    assert (config.cwd, config.env, config.dispose_grace) == (None, {}, DEFAULT_DISPOSE_GRACE)
    assert (config.deadline_seconds, config.idle_timeout_seconds) == (None, None)


def test_a_relative_cwd_resolves_against_the_launch_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _Config(cwd="work").cwd == str(tmp_path / "work")


def test_empty_cwd_is_reported_against_the_cwd_field() -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(cwd="")
    loc, msg = _only_error(caught)
    assert loc == ("cwd",)
    assert "config cwd must not be empty" in msg


def test_missing_cwd_is_reported_against_the_cwd_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(cwd=str(tmp_path / "absent"))
    loc, msg = _only_error(caught)
    assert loc == ("cwd",)
    assert "is not an accessible directory" in msg


@pytest.mark.parametrize("name", ["a\nb", "a\x1b]0;title\x07", "rtl\u202ename"])
def test_a_provider_name_with_a_control_character_is_refused(name: str) -> None:
    """The name heads every line dsh prints about the instance (``dsh: NAME: ...``)."""
    with pytest.raises(ValidationError) as caught:
        _Config(provider_name=name)
    loc, msg = _only_error(caught)
    assert (loc, msg) == (
        ("provider_name",),
        "Value error, must not hold control or format characters",
    )
    assert _Config(provider_name="codex-primary.2").provider_name == "codex-primary.2"


@pytest.mark.parametrize("env", [{"": "x"}, {"A=B": "x"}, {"A": "nul\0"}])
def test_unappliable_env_is_reported_against_the_env_field(env: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(env=env)
    loc, _msg = _only_error(caught)
    assert loc == ("env",)


@pytest.mark.parametrize("grace", [0, -1, math.inf, math.nan, True, "2", MAX_GRACE_SECONDS * 2])
def test_a_bad_grace_is_reported_against_its_field(grace: object) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(dispose_grace=grace)
    loc, _msg = _only_error(caught)
    assert loc == ("dispose_grace",)


@pytest.mark.parametrize("field", ["deadline_seconds", "idle_timeout_seconds"])
def test_budgets_must_be_positive(field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(**{field: 0})
    loc, _msg = _only_error(caught)
    assert loc == (field,)


def test_unknown_keys_are_refused_and_the_config_is_frozen() -> None:
    with pytest.raises(ValidationError):
        _Config(colour="blue")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        _Config().provider_name = "q"  # type: ignore[misc]


def test_the_response_bound_defaults_to_a_generous_finite_number() -> None:
    assert _Config().response_timeout_seconds == DEFAULT_RESPONSE_TIMEOUT == 120.0
    assert _Config(response_timeout_seconds=0.5).response_timeout_seconds == 0.5


@pytest.mark.parametrize("value", [0, -1, math.inf, math.nan])
def test_a_response_bound_that_is_not_a_positive_finite_number_is_refused(value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(response_timeout_seconds=value)
    loc, _ = _only_error(caught)
    assert loc == ("response_timeout_seconds",)
