"""The verify profile (``verify --config FILE``): what a provider needs, checked first.

A wrong profile ends the verify run with exit status 2 and one line naming the file and
the field; no rule's process starts. The kit README's reference profile is the one
parsed here, so the README cannot drift from what the kit accepts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dsh_contract_tests.__main__ import main
from dsh_contract_tests.verify_profile import (
    ModelNeed,
    ProfileError,
    VerifyProfile,
    load_profile,
    substitute,
)
from pydantic import JsonValue

_ROOT = Path(__file__).resolve().parents[2]
_KIT_README = _ROOT / "contract-tests" / "README.md"


def _readme_profile() -> str:
    text = _KIT_README.read_text(encoding="utf-8")
    found = re.search(r"<!-- ci: verify-profile -->\n```toml\n(.*?)```", text, re.DOTALL)
    assert found is not None, "no toml block marked <!-- ci: verify-profile --> in the README"
    return found.group(1)


def test_the_readme_reference_profile_is_what_the_kit_reads(tmp_path: Path) -> None:
    path = tmp_path / "verify.toml"
    path.write_text(_readme_profile(), encoding="utf-8")
    profile = load_profile(path)
    assert profile.model == ModelNeed(wire="chat-completions")
    assert profile.config == {"model_url": "{model_url}", "model_key": "fake-key"}
    assert profile.env == {"ACME_TRACE": "off"}
    assert (profile.hold_timeout, profile.settle_timeout) == (90.0, 90.0)


@pytest.mark.parametrize(
    "name", ["codex.verify.toml", "claude-code.verify.toml"], ids=["codex", "claude-code"]
)
def test_the_product_profiles_name_their_home_and_wire(name: str) -> None:
    profile = load_profile(_ROOT / "e2e" / "contract" / name)
    assert profile.model is not None
    assert (profile.model.home, profile.model.wire) == {
        "codex.verify.toml": ("codex", "responses"),
        "claude-code.verify.toml": ("claude-code", "messages"),
    }[name]
    unattended = {"permission_mode": "bypassPermissions"} if name.startswith("claude") else {}
    # Claude Code runs its Bash unattended for the confinement rules' attempts (as the
    # in-repo contract module does); Codex's never mode already runs the commands.
    assert profile.config == {"dispose_grace": 2.0, "continuation": True, **unattended}
    assert profile.env == ({"IS_SANDBOX": "1"} if unattended else {})


def test_json_is_read_too_and_the_defaults_ask_for_nothing(tmp_path: Path) -> None:
    path = tmp_path / "verify.json"
    path.write_text('{"config": {"command": ["/bin/true"]}}', encoding="utf-8")
    profile = load_profile(path)
    assert profile.config == {"command": ["/bin/true"]}
    assert (profile.model, profile.env, profile.settle_timeout) == (None, {}, None)
    assert VerifyProfile().hold_timeout == 60.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[model]\nwire = 'grpc'\n", "model.wire: Input should be 'responses', 'messages'"),
        ("[model]\nwire = 'messages'\nhome = 'codex'\n", "model: Value error, home 'codex'"),
        ("[modle]\nwire = 'messages'\n", "modle: Extra inputs are not permitted"),
        ("hold_timeout = 1e9\n", "hold_timeout: Input should be less than or equal to 120"),
        ("settle_timeout = 0\n", "settle_timeout: Input should be greater than 0"),
        ("[config]\nenv = {A = '1'}\n", ": config.env: set by the kit in every rule (its"),
        ("[env]\nURL = '{model_url}'\n", ": {model_url} is used, but there is no [model]"),
        ("[env]\nN = 3\n", "env.N: Input should be a valid string"),
        ("[model\n", "not valid TOML"),
    ],
    ids=["wire", "home-wire", "unknown", "hold", "settle", "env-owned", "url", "env-str", "toml"],
)
def test_a_wrong_profile_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "verify.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert str(raised.value).startswith(f"--config {path}: "), raised.value
    assert message in str(raised.value), raised.value


def test_the_command_refuses_a_wrong_profile_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "verify.toml"
    path.write_text("[model]\nwire = 'responses'\nhome = 'claude-code'\n", encoding="utf-8")
    report = tmp_path / "report.json"
    status = main(["verify", "no-such-provider", "--config", str(path), "--report", str(report)])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""
    assert err.splitlines() == [
        f"dsh_contract_tests verify: --config {path}: model: Value error, home 'claude-code' "
        "talks to the 'messages' wire, not 'responses'"
    ]
    assert not report.exists()


def test_a_missing_profile_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["verify", "acme-agent", "--config", str(tmp_path / "absent.toml")])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.splitlines()) == 1
    assert err.startswith(f"dsh_contract_tests verify: --config {tmp_path / 'absent.toml'}: ")


def test_model_url_is_replaced_in_every_string_it_holds() -> None:
    value: JsonValue = {"url": "{model_url}/x", "list": ["{model_url}", 3], "n": None}
    assert substitute(value, "http://127.0.0.1:1/v1") == {
        "url": "http://127.0.0.1:1/v1/x",
        "list": ["http://127.0.0.1:1/v1", 3],
        "n": None,
    }
