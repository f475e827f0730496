"""``warm`` on the command line: the surfaces' defaults, ``--warm N`` and its refusals."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from dsh_profiles import StaticDiscovery, compose, parse_profile
from dsh_profiles.warm import Warm, add_warm_flag, batch_warm, warm_from_flag
from dsh_subagent_codex import CodexConfig, CodexProvider
from test_loader import AlphaConfig, AlphaProvider

DISCOVERY = StaticDiscovery({"codex": [CodexProvider], "alpha": [AlphaProvider]})


def _warm_of(rows: list[dict[str, Any]], warm: Warm | None) -> dict[str, int | None]:
    profile = parse_profile({"providers": rows}, "p.toml")
    composition = compose(profile, source="p.toml", discovery=DISCOVERY, warm=warm)
    out: dict[str, int | None] = {}
    for loaded in composition.providers:
        config = loaded.config
        out[loaded.name] = config.warm if isinstance(config, CodexConfig) else None
        assert isinstance(config, CodexConfig | AlphaConfig)
    return out


ROWS: list[dict[str, Any]] = [
    {"type": "codex", "provider_name": "unset"},
    {"type": "codex", "provider_name": "set", "config": {"warm": 3}},
    {"type": "alpha"},  # no warm field: no ready starts, left alone
]


def test_a_surface_default_fills_only_the_rows_that_set_no_warm() -> None:
    assert _warm_of(ROWS, batch_warm(None, 16)) == {"unset": 4, "set": 3, "alpha": None}
    assert _warm_of(ROWS, batch_warm(None, 2)) == {"unset": 2, "set": 3, "alpha": None}


def test_the_flag_is_over_the_profile() -> None:
    assert _warm_of(ROWS, warm_from_flag(0, 1)) == {"unset": 0, "set": 0, "alpha": None}


def test_the_library_default_is_off() -> None:
    assert _warm_of(ROWS, None) == {"unset": 0, "set": 3, "alpha": None}


@pytest.mark.parametrize("text", ["-1", "65", "two", "1.5"])
def test_a_bad_warm_flag_is_one_line_naming_the_flag(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="dsh")
    add_warm_flag(parser, "1")
    with pytest.raises(SystemExit):
        parser.parse_args(["--warm", text])
    assert f"--warm must be an integer from 0 to 64, not '{text}'" in capsys.readouterr().err
