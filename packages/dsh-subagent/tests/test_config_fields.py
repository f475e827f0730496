"""Shared provider-config field validators name the field and keep the core's messages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
from dsh_subagent import configured_cwd, env_overlay
from pydantic import BaseModel, Field, ValidationError


class _Config(BaseModel):
    cwd: Annotated[str | None, configured_cwd("p")] = None
    env: Annotated[dict[str, str | None], env_overlay("p")] = Field(default_factory=dict)


def _only_error(exc: pytest.ExceptionInfo[ValidationError]) -> tuple[tuple[str | int, ...], str]:
    errors = exc.value.errors()
    assert len(errors) == 1
    return errors[0]["loc"], errors[0]["msg"]


def test_valid_values_pass_through(tmp_path: Path) -> None:
    config = _Config(cwd=str(tmp_path), env={"A": "1", "GONE": None})
    assert config.cwd == str(tmp_path)
    assert config.env == {"A": "1", "GONE": None}


def test_empty_cwd_is_reported_against_the_cwd_field() -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(cwd="")
    loc, msg = _only_error(caught)
    assert loc == ("cwd",)
    assert "p: config cwd must not be empty" in msg


def test_missing_cwd_is_reported_against_the_cwd_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(cwd=str(tmp_path / "absent"))
    loc, msg = _only_error(caught)
    assert loc == ("cwd",)
    assert "is not an accessible directory" in msg


@pytest.mark.parametrize("env", [{"": "x"}, {"A=B": "x"}, {"A": "nul\0"}])
def test_unappliable_env_is_reported_against_the_env_field(env: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config(env=env)
    loc, msg = _only_error(caught)
    assert loc == ("env",)
    assert "p: env " in msg
