"""Confinement on the command line: ``--confinement``, ``dsh check``'s policy lines, and the
one line shown when the kernel offers no Landlock (simulated here)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from dsh_cli.cli import main
from dsh_contract_tests.fixtures.responses import (
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_profiles import StaticDiscovery
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent_codex import CodexProvider
from dsh_subprocess import _landlock
from pydantic import BaseModel, ConfigDict

REFUSAL = (
    "dsh: error: confinement is required but this kernel offers no Landlock: nothing was "
    "started (set confinement mode 'auto' or 'off' to run unconfined)\n"
)
FALLBACK = (
    "dsh: this kernel offers no Landlock: providers with confinement 'auto' run unconfined "
    "(see docs/security.md)\n"
)


class PlainConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "plain"


class PlainProvider(ScriptedProvider):
    """A provider that does not spawn through dsh-subprocess (no confinement setting)."""

    Config: ClassVar[type[PlainConfig]] = PlainConfig

    def __init__(self, config: PlainConfig) -> None:
        super().__init__(config.provider_name, [Script()])


DISCOVERY = StaticDiscovery({"codex": [CodexProvider], "plain": [PlainProvider]})


def _profile(tmp_path: Path, base_url: str, mode: str | None = None, plain: bool = True) -> Path:
    env = codex_keyless_env(tmp_path / "keyless")
    write_codex_config(env["CODEX_HOME"], base_url)
    lines = ["[[providers]]", 'type = "codex"', "[providers.config.env]"]
    lines += [f'{name} = "{value}"' for name, value in env.items()]
    if mode is not None:
        lines += ["[providers.config.confinement]", f'mode = "{mode}"']
    if plain:
        lines += ["[[providers]]", 'type = "plain"']
    profile = tmp_path / "profile.toml"
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return profile


def _no_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_landlock, "abi", lambda: 0)


def test_check_prints_each_instances_effective_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    profile = _profile(tmp_path, "http://127.0.0.1:18123/v1")
    assert main(["check", str(profile)], discovery=DISCOVERY) == 0
    out = capsys.readouterr().out
    keyless = tmp_path / "keyless"
    assert (
        f"    confinement: auto, applied (Landlock ABI {_landlock.abi()}); for a run in {tmp_path}:"
        in out
    )
    [read] = [line for line in out.splitlines() if line.startswith("      read: /usr")]
    # never mode under Codex's default read-only sandbox: the cwd is read, not written.
    assert read.endswith(f"codex_cli_bin, {tmp_path}")
    [write] = [line for line in out.splitlines() if line.startswith("      write: ")]
    assert write == (
        f"      write: {keyless / 'home'}, {keyless / 'tmp'}, {keyless / 'xdg'}, "
        f"{keyless / 'codex-home'}"
    )
    assert "      tcp connect: ports 18123 (any host on them)" in out
    assert "      not enforced here: udp, pathname_unix_socket" in out
    assert (
        "    confinement: NOT confined: this provider does not spawn through dsh-subprocess, "
        "so dsh cannot confine its product"
    ) in out
    assert "product processes started: 0" in out


def test_check_warns_of_a_grant_that_holds_the_home_and_of_a_missing_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write grant of "/" (or of any directory above the home) gives the product ~/.ssh;
    # the profile is valid, so it is said rather than refused.
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    profile = _profile(tmp_path, "http://127.0.0.1:18123/v1", plain=False)
    with profile.open("a", encoding="utf-8") as file:
        file.write(
            "[providers.config.confinement]\n"
            f'write = ["{tmp_path / "home"}"]\nread = ["{tmp_path / "gone"}"]\n'
        )
    assert main(["check", str(profile)], discovery=DISCOVERY) == 0
    out = capsys.readouterr().out
    assert (
        f"      warning: write {tmp_path / 'home'} holds the home directory {home}: the "
        "product may write ~/.ssh, ~/.aws and every repository there"
    ) in out
    assert f"      skipped (does not exist now): {tmp_path / 'gone'}" in out


def test_check_warns_when_the_run_directory_is_the_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    profile = _profile(tmp_path, "http://127.0.0.1:18123/v1", plain=False)
    assert main(["check", str(profile)], discovery=DISCOVERY) == 0
    out = capsys.readouterr().out
    # never mode: the cwd is read only, so the warning is about reading.
    assert f"      warning: read {tmp_path} holds the home directory {tmp_path}" in out
    assert "skipped" not in out


def test_a_profile_mode_off_is_shown_as_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    profile = _profile(tmp_path, "http://127.0.0.1:18123/v1", "off")
    assert main(["check", str(profile)], discovery=DISCOVERY) == 0
    assert "confinement: off (the product runs with the host user's whole reach)" in (
        capsys.readouterr().out
    )


def test_required_on_a_provider_dsh_cannot_confine_is_a_profile_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _profile(tmp_path, "http://127.0.0.1:18123/v1")
    code = main(
        ["run", str(profile), "plain", "Do it.", "--instance", "--confinement", "required"],
        discovery=DISCOVERY,
    )
    assert code == 2
    assert capsys.readouterr().err == (
        f"dsh: error: {profile}: providers row 2 ('plain'): --confinement required: NOT "
        "confined: this provider does not spawn through dsh-subprocess, so dsh cannot "
        "confine its product\n"
    )


def test_required_without_landlock_refuses_with_one_line_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_landlock(monkeypatch)
    with ResponsesFixture() as fixture:
        profile = _profile(tmp_path, fixture.base_url, "required", plain=False)
        code = main(
            ["run", str(profile), "codex", "Do it.", "--instance", "--cwd", str(tmp_path)],
            discovery=DISCOVERY,
        )
        requests = fixture.requests
    assert code == 2
    assert capsys.readouterr().err == REFUSAL
    assert requests == ()


def test_the_flag_requires_it_over_the_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_landlock(monkeypatch)
    profile = _profile(tmp_path, "http://127.0.0.1:18123/v1", plain=False)
    args = ["run", str(profile), "codex", "Do it.", "--instance", "--confinement", "required"]
    assert main(args, discovery=DISCOVERY) == 2
    assert capsys.readouterr().err == REFUSAL


def test_auto_without_landlock_says_so_once_and_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_landlock(monkeypatch)
    with ResponsesFixture([PlainAnswer("unconfined answer")]) as fixture:
        profile = _profile(tmp_path, fixture.base_url)
        (tmp_path / "work").mkdir()
        code = main(
            ["run", str(profile), "codex", "Do it.", "--instance", "--cwd", str(tmp_path / "work")],
            discovery=DISCOVERY,
        )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == "unconfined answer\n"
    assert captured.err.count(FALLBACK.strip()) == 1
    assert captured.err.startswith(FALLBACK)
