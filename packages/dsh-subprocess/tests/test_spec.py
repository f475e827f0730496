"""SpawnSpec validation: every invalid value is refused at construction, naming the field."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from dsh_subprocess import MAX_GRACE_SECONDS, SpawnSpec
from pydantic import ValidationError


def _spec(**fields: Any) -> SpawnSpec:
    return SpawnSpec.model_validate({"argv": ("true",), "cwd": "/", **fields})


@pytest.mark.parametrize("argv", [(), ("",), ("", "x")])
def test_empty_argv_or_program_is_refused(argv: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError, match="argv") as info:
        _spec(argv=argv)
    assert "expected a non-empty program name at argv[0]" in str(info.value)


@pytest.mark.parametrize(
    "grace", [0, -1, -0.001, math.nan, math.inf, -math.inf, MAX_GRACE_SECONDS + 0.001, 2**31, True]
)
def test_bad_grace_is_refused(grace: float) -> None:
    with pytest.raises(ValidationError, match="grace"):
        _spec(grace=grace)


@pytest.mark.parametrize("grace", [0.001, 1, 2.5, MAX_GRACE_SECONDS])
def test_good_grace_is_kept(grace: float) -> None:
    assert _spec(grace=grace).grace == grace


def test_max_grace_is_the_reference_bound_in_seconds() -> None:
    assert MAX_GRACE_SECONDS * 1000 == 2**31 - 1


@pytest.mark.parametrize(
    "env", [{"": "x"}, {"A=B": "x"}, {"A\0": "x"}, {"A": "x\0y"}], ids=["empty", "eq", "nul", "val"]
)
def test_bad_env_entries_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="env"):
        _spec(env=env)


def test_nul_in_argv_or_cwd_is_refused() -> None:
    with pytest.raises(ValidationError, match="argv"):
        _spec(argv=("echo", "a\0b"))
    with pytest.raises(ValidationError, match="cwd"):
        _spec(cwd="/tmp\0x")


def test_unknown_fields_and_bad_dispositions_are_refused() -> None:
    with pytest.raises(ValidationError, match="shell"):
        _spec(shell=True)
    with pytest.raises(ValidationError, match="stdout"):
        _spec(stdout="inherit")
    with pytest.raises(ValidationError, match="stderr"):
        _spec(stderr="collect")


def test_spec_is_frozen_and_accepts_a_path_cwd(tmp_path: Path) -> None:
    spec = _spec(cwd=tmp_path)
    assert spec.cwd == str(tmp_path)
    with pytest.raises(ValidationError):
        spec.grace = 1.0  # type: ignore[misc]


def test_defaults() -> None:
    spec = _spec()
    assert (spec.stdin, spec.stdout, spec.stderr) == ("pipe", "pipe", "pipe")
    assert spec.env == {}
    assert spec.grace == 2.0
    assert spec.host_death_guard is True
