"""What a verify child hands the provider: the profile's values under the kit's overlay.

The kit's own variables win over the profile's ``[env]`` (its rules check them), and a
product home's variables lie under both, with one exception pinned here: the Claude Code
home's ``CLAUDE_CONFIG_DIR`` wins over the kit's temporary one, because the keyless
``settings.json`` is written there (as the in-repo Claude Code contract class does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dsh_contract_tests.scenario import ChildSetup, ProductHome
from dsh_contract_tests.verify_profile import ModelNeed, VerifyProfile
from dsh_contract_tests.verify_setup import check_config, config_values, running_model

_VERIFY = [sys.executable, "-m", "dsh_contract_tests", "verify"]


def _setup(root: Path) -> ChildSetup:
    home = ProductHome(root / "home", root / "codex", root / "claude", root / "tmp")
    for path in (home.home, home.codex_home, home.claude_config_dir, home.tmpdir):
        path.mkdir()
    env = {**home.env(), "DSH_CONTRACT_ERROR_TEXT": "planted", "SHARED": "kit"}
    (root / "scratch").mkdir()
    return ChildSetup(env, None, home, root / "ready", root / "scratch", "planted", "line")


def test_the_kits_overlay_wins_over_the_profiles_env(tmp_path: Path) -> None:
    profile = VerifyProfile(config={"flag": True}, env={"SHARED": "profile", "OWN": "x"})
    values = config_values(profile, None, _setup(tmp_path))
    assert values["flag"] is True
    assert values["env"]["SHARED"] == "kit"
    assert values["env"]["OWN"] == "x"


@pytest.mark.parametrize("home", ["codex", "claude-code"])
def test_a_product_home_points_at_the_fixture_under_the_kits_overlay(
    tmp_path: Path, home: str
) -> None:
    wire = "responses" if home == "codex" else "messages"
    setup = _setup(tmp_path)
    profile = VerifyProfile(model=ModelNeed(wire=wire, home=home), env={"URL": "{model_url}"})
    with running_model(profile.model) as model:
        assert model is not None
        values = config_values(profile, model, setup)
        env = model.prepare(setup, values["env"])
        assert env["URL"] == model.base_url
        assert env["SHARED"] == "kit"
        assert env["HOME"] == str(setup.home.home)
        if home == "codex":
            assert env["CODEX_HOME"] == str(setup.home.codex_home)
            config = (setup.home.codex_home / "config.toml").read_text("utf-8")
            assert model.base_url in config
        else:
            assert env["ANTHROPIC_BASE_URL"] == model.base_url
            assert env["CLAUDE_CONFIG_DIR"] != str(setup.home.claude_config_dir)
            assert Path(str(env["CLAUDE_CONFIG_DIR"])).is_relative_to(setup.scratch)
        assert not model.holds("T-0123456789ab")


def test_the_config_check_names_the_refused_field_and_accepts_the_rest(tmp_path: Path) -> None:
    spec = "dsh_example_provider:ExampleProvider"
    refused = VerifyProfile(config={"dispose_grace": 1.0, "bogus": 1})
    assert check_config(spec, refused, tmp_path / "a") == (
        "ExampleConfig refuses config.bogus: Extra inputs are not permitted"
    )
    accepted = VerifyProfile(config={"dispose_grace": 1.0}, env={"X": "1"})
    assert check_config(spec, accepted, tmp_path / "b") is None
    # A provider that cannot load here is left to the rules (each fails under its id).
    assert check_config("no_such_module:Provider", refused, tmp_path / "c") is None


def test_a_check_without_an_answer_leaves_the_verdict_to_the_rules(tmp_path: Path) -> None:
    # A provider module that ends the process on import gives the Config check no
    # answer; that stops nothing, and the rule's own run fails under its id.
    (tmp_path / "exits_on_import.py").write_text("raise SystemExit(0)\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(tmp_path)
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [*_VERIFY, "exits_on_import:Provider", "--rule", "settlement:completed"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 1, lines
    assert lines[-1].endswith(": 1 of 1 rules failed: settlement:completed"), lines
