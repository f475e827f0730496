"""Configuration, packaging, entry point and the pinned binary's fixed argv."""

from __future__ import annotations

import importlib.metadata
import math
import os
from pathlib import Path

import pytest
from dsh_subagent import Launch, ProductConfig, SubagentCapabilities
from dsh_subagent_codex import PINNED_CODEX_VERSION, CodexConfig, CodexProvider
from dsh_subagent_codex.binary import APP_SERVER_ARGS, codex_app_server_argv, codex_package_dir
from dsh_subprocess import MAX_GRACE_SECONDS
from pydantic import ValidationError


def test_defaults() -> None:
    config = CodexConfig()
    assert config.provider_name == "codex"
    assert config.model is None
    assert config.env == {}
    assert config.permission_mode == "never"
    assert config.dispose_grace == 3.0
    assert config.cwd is None


def test_provider_surface_and_construction_starts_nothing() -> None:
    provider = CodexProvider(CodexConfig(provider_name="codex-safe"))
    assert CodexProvider.Config is CodexConfig
    assert issubclass(CodexConfig, ProductConfig)  # one env, cwd and grace vocabulary
    assert provider.name == "codex-safe"
    # The product enforces an output schema itself (output:flag-honest); nothing else.
    assert provider.capabilities == SubagentCapabilities(output_schema=True)
    assert provider.inherits_parent_context is False


def test_entry_point_advertises_the_provider() -> None:
    (entry,) = [
        e
        for e in importlib.metadata.entry_points(group="dsh.subagent.providers")
        if e.name == "codex"
    ]
    assert entry.value == "dsh_subagent_codex:CodexProvider"
    assert entry.load() is CodexProvider


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("provider_name", ""),
        ("model", ""),
        ("permission_mode", "on-request"),
        ("permission_mode", "untrusted"),
        ("permission_mode", "future-mode"),
        ("unknown_key", 1),
        ("env", {"A": 1}),
    ],
)
def test_invalid_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        CodexConfig.model_validate({field: value})
    assert caught.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize("name", ["", "A=B", "=A", "A\0B"])
def test_invalid_env_names_are_refused_at_load_naming_the_field(name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CodexConfig.model_validate({"env": {name: "value"}})
    (error,) = caught.value.errors()
    assert error["loc"] == ("env",)
    assert "env names must be non-empty without '=' or NUL" in error["msg"]


def test_unusual_but_valid_env_names_and_removals_are_kept() -> None:
    env = {"lower_case": "x", "WITH SPACE": "", "DSH_X": None}
    assert CodexConfig(env=env).env == env


_NOT_POSITIVE = (0, -1, math.nan, math.inf, -math.inf)


@pytest.mark.parametrize(
    ("grace", "message"),
    [
        *((value, "must be a positive finite number of seconds") for value in _NOT_POSITIVE),
        (True, "must be a number of seconds"),  # a bool is an int to Python, not a grace
        ("3", "must be a number of seconds"),
    ],
)
def test_dispose_grace_must_be_positive_finite(grace: object, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CodexConfig.model_validate({"dispose_grace": grace})
    (error,) = caught.value.errors()
    assert error["loc"] == ("dispose_grace",)
    assert message in error["msg"]


def test_dispose_grace_is_bounded_by_the_subprocess_maximum() -> None:
    assert CodexConfig(dispose_grace=MAX_GRACE_SECONDS).dispose_grace == MAX_GRACE_SECONDS
    with pytest.raises(ValidationError, match=f"no greater than {MAX_GRACE_SECONDS}"):
        CodexConfig(dispose_grace=MAX_GRACE_SECONDS * 2)


def test_cwd_is_validated_and_resolved_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    assert CodexConfig(cwd="sub").cwd == str(tmp_path / "sub")
    with pytest.raises(ValidationError, match="config cwd must not be empty"):
        CodexConfig(cwd="")
    with pytest.raises(ValidationError, match="not an accessible directory"):
        CodexConfig(cwd=str(tmp_path / "missing"))


def test_named_instances_keep_their_own_values() -> None:
    first = CodexProvider(CodexConfig(provider_name="a", model="m1", env={"K": "1"}))
    second = CodexProvider(
        CodexConfig(
            provider_name="b",
            model="m2",
            permission_mode="dangerously-bypass-approvals-and-sandbox",
            dispose_grace=0.5,
        )
    )
    assert (first.config.model, second.config.model) == ("m1", "m2")
    assert first.config.permission_mode == "never"
    assert first.config.env == {"K": "1"}
    assert second.config.env == {}
    with pytest.raises(ValidationError):
        first.config.model = "changed"  # type: ignore[misc]


def test_argv_is_the_pinned_native_binary_with_the_stdio_listener(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    host_bin = tmp_path / "bin"
    host_bin.mkdir()
    (host_bin / "codex").write_text("#!/bin/sh\n")
    (host_bin / "codex").chmod(0o755)
    monkeypatch.setenv("PATH", str(host_bin))
    argv = codex_app_server_argv()
    assert argv[1:] == APP_SERVER_ARGS
    assert APP_SERVER_ARGS[:3] == ("app-server", "--listen", "stdio://")
    binary = Path(argv[0])
    assert binary.is_absolute()
    assert binary.parent.parent.name == "codex_cli_bin"
    assert not binary.is_relative_to(host_bin)
    assert os.access(binary, os.X_OK)
    with binary.open("rb") as handle:
        assert handle.read(4) == b"\x7fELF"  # the native binary, not a Node shim


def test_the_argv_turns_shell_snapshots_off_even_against_config_toml(tmp_path: Path) -> None:
    """A shell snapshot persists the app-server's environment, the layered key included.

    Codex ignores an unknown ``-c features.<name>`` silently, so the pinned binary itself
    must report both features off under the argv's overrides, over a ``config.toml``
    that turns them on.
    """
    import subprocess

    overrides = APP_SERVER_ARGS[3:]
    assert overrides == (
        "-c",
        "features.shell_snapshot=false",
        "-c",
        "features.shell_snapshot_v2=false",
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        "[features]\nshell_snapshot = true\nshell_snapshot_v2 = true\n"
    )
    env = {"PATH": os.defpath, "HOME": str(home), "CODEX_HOME": str(home), "TMPDIR": str(tmp_path)}

    def features(*extra: str) -> dict[str, str]:
        done = subprocess.run(
            [codex_app_server_argv()[0], *extra, "features", "list"],
            check=True,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        rows = (line.split() for line in done.stdout.splitlines())
        return {row[0]: row[-1] for row in rows if row and row[0].startswith("shell_snapshot")}

    assert features() == {"shell_snapshot": "true", "shell_snapshot_v2": "true"}
    assert features(*overrides) == {"shell_snapshot": "false", "shell_snapshot_v2": "false"}


def test_the_pinned_distribution_is_installed() -> None:
    assert importlib.metadata.version("openai-codex-cli-bin") == PINNED_CODEX_VERSION
    requirement = [
        r
        for r in importlib.metadata.requires("dsh-subagent-codex") or []
        if r.startswith("openai-codex-cli-bin")
    ]
    assert requirement == [f"openai-codex-cli-bin=={PINNED_CODEX_VERSION}"]


def test_the_confined_reach_reads_the_whole_codex_package(tmp_path: Path) -> None:
    # The binary reads codex-package.json beside its bin/ and runs the bundled
    # codex-path/rg: the reach names the package (a directory grants all beneath it).
    binary = codex_app_server_argv()[0]
    package = Path(binary).resolve().parent.parent
    assert codex_package_dir(binary) == str(package)
    assert (package / "codex-package.json").is_file()
    assert (package / "codex-path" / "rg").is_file()
    env = {"CODEX_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)}
    reach = CodexProvider(CodexConfig()).confinement_reach(
        Launch(argv=codex_app_server_argv()), env, str(tmp_path)
    )
    assert reach.read == (str(package),)


def test_a_binary_outside_a_codex_package_gets_no_package(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "codex").write_text("#!/bin/sh\n")
    assert codex_package_dir(str(tmp_path / "bin" / "codex")) is None
    (tmp_path / "codex-package.json").write_text("{}")
    assert codex_package_dir(str(tmp_path / "bin" / "codex")) == str(tmp_path.resolve())
