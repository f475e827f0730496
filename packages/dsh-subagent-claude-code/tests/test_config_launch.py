"""Configuration, registration, the pinned product and what each run hands the SDK/CLI."""

from __future__ import annotations

import dataclasses
import math
import os
import stat
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from claude_agent_sdk.types import HookContext, HookInput, HookJSONOutput
from claude_harness import SeamProvider
from dsh_subagent import SubagentCapabilities, SubagentError, SubagentErrorCode
from dsh_subagent_claude_code import (
    PINNED_CLI_VERSION,
    PINNED_SDK_VERSION,
    ClaudeCodeConfig,
    ClaudeCodeProvider,
)
from dsh_subagent_claude_code.config import PERMISSION_MODES
from dsh_subagent_claude_code.launch import (
    build_cli_argv,
    build_env_overlay,
    build_sdk_options,
)
from dsh_subagent_claude_code.product import BundledCliError, bundled_cli_path
from dsh_subprocess import MAX_GRACE_SECONDS
from pydantic import ValidationError


async def _hook(hook_input: HookInput, tool_use_id: str | None, ctx: HookContext) -> HookJSONOutput:
    return {}


async def _deny(*_: Any) -> Any:
    raise AssertionError("not called")


def _argv(mode: Any = "dontAsk", model: str | None = None) -> list[str]:
    options = build_sdk_options(
        cwd="/w",
        permission_mode=mode,
        model=model,
        env={},
        can_use_tool=None if mode == "bypassPermissions" else _deny,
        elicitation_hook=_hook,
    )
    return build_cli_argv(options, ("/bundled/claude",))


def test_defaults() -> None:
    config = ClaudeCodeConfig()
    assert config.provider_name == "claude-code"
    assert config.permission_mode == "dontAsk"
    assert config.model is None
    assert config.env == {}
    assert config.dispose_grace == 3.0
    assert config.cwd is None
    assert config.max_budget_usd is None
    assert (config.deadline_seconds, config.idle_timeout_seconds) == (None, None)


@pytest.mark.parametrize("mode", PERMISSION_MODES)
def test_five_native_modes_are_accepted(mode: str) -> None:
    assert ClaudeCodeConfig.model_validate({"permission_mode": mode}).permission_mode == mode


@pytest.mark.parametrize("mode", ["default", "manual", "interactive", "future-mode", ""])
def test_other_modes_are_rejected(mode: str) -> None:
    with pytest.raises(ValidationError):
        ClaudeCodeConfig.model_validate({"permission_mode": mode})


@pytest.mark.parametrize(
    "field", [{"provider_name": ""}, {"model": ""}, {"unknown": 1}, {"env": {"A=B": "x"}}]
)
def test_invalid_fields_are_rejected(field: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ClaudeCodeConfig.model_validate(field)


@pytest.mark.parametrize("grace", [0, -1, math.nan, math.inf, True, "3", MAX_GRACE_SECONDS * 2])
def test_dispose_grace_must_be_positive_finite_and_bounded(grace: Any) -> None:
    with pytest.raises(ValidationError, match="dispose_grace"):
        ClaudeCodeConfig.model_validate({"dispose_grace": grace})


def test_grace_bound_is_the_subprocess_seams() -> None:
    assert ClaudeCodeConfig(dispose_grace=MAX_GRACE_SECONDS).dispose_grace == MAX_GRACE_SECONDS


def test_config_is_frozen() -> None:
    config = ClaudeCodeConfig()
    with pytest.raises(ValidationError):
        config.model = "x"  # type: ignore[misc]


def test_cwd_override_is_validated_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ClaudeCodeConfig(cwd=str(tmp_path)).cwd == str(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert ClaudeCodeConfig(cwd="sub").cwd == str(tmp_path / "sub")
    with pytest.raises(ValidationError, match="must not be empty"):
        ClaudeCodeConfig(cwd="")
    with pytest.raises(ValidationError, match="not an accessible directory"):
        ClaudeCodeConfig(cwd=str(tmp_path / "missing"))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(ValidationError, match="not an accessible directory"):
        ClaudeCodeConfig(cwd=str(locked))


def test_provider_from_mapping_and_invalid_mapping() -> None:
    provider = ClaudeCodeProvider({"provider_name": "claude-safe", "model": "m"})
    assert provider.name == "claude-safe"
    assert provider.config.model == "m"
    # The product enforces an output schema itself (output:flag-honest); nothing else.
    assert provider.capabilities == SubagentCapabilities(output_schema=True)
    assert provider.inherits_parent_context is False
    with pytest.raises(SubagentError) as caught:
        ClaudeCodeProvider({"permission_mode": "default"})
    assert caught.value.code == SubagentErrorCode.INVALID_CONFIG


def test_construction_starts_nothing() -> None:
    calls: list[object] = []

    async def spawner(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise AssertionError("spawned at construction")

    def prefix() -> list[str]:
        calls.append("prefix")
        return ["x"]

    SeamProvider(ClaudeCodeConfig(), spawner=spawner, cli_prefix=prefix)
    assert calls == []


def test_entry_point_names_the_provider_class() -> None:
    [entry] = [e for e in entry_points(group="dsh.subagent.providers") if e.name == "claude-code"]
    cls = entry.load()
    assert cls is ClaudeCodeProvider
    assert cls.Config is ClaudeCodeConfig


def test_pinned_sdk_and_bundled_cli() -> None:
    assert claude_agent_sdk.__version__ == PINNED_SDK_VERSION
    path = Path(bundled_cli_path())
    assert path.is_absolute()
    assert path.parent == Path(claude_agent_sdk.__file__).resolve().parent / "_bundled"
    assert (
        path.parent / "claude.version"
    ).read_text().strip() == f"{PINNED_CLI_VERSION} (Claude Code)"


def test_bundled_cli_ignores_a_host_claude_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert bundled_cli_path() != str(fake)


def test_unpinned_sdk_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claude_agent_sdk, "__version__", "9.9.9")
    with pytest.raises(BundledCliError, match="pinned"):
        bundled_cli_path()


def test_argv_is_the_sdks_own_for_the_default_mode() -> None:
    assert _argv() == [
        "/bundled/claude",
        "--output-format",
        "stream-json",
        "--verbose",
        "--system-prompt",
        "",
        "--disallowedTools",
        "AskUserQuestion",
        "--permission-prompt-tool",
        "stdio",
        "--permission-mode",
        "dontAsk",
        "--no-session-persistence",
        "--input-format",
        "stream-json",
    ]


def test_argv_matches_the_installed_sdk_builder() -> None:
    options = build_sdk_options(
        cwd="/w",
        permission_mode="acceptEdits",
        model="m",
        env={},
        can_use_tool=_deny,
        elicitation_hook=_hook,
    )
    expected = SubprocessCLITransport(
        prompt="",
        options=dataclasses.replace(
            options, cli_path="/bundled/claude", permission_prompt_tool_name="stdio"
        ),
    )._build_command()
    assert build_cli_argv(options, ("/bundled/claude",)) == expected


def test_model_only_when_configured() -> None:
    assert "--model" not in _argv()
    argv = _argv(model="opaque/model-name[1m]")
    assert argv[argv.index("--model") + 1] == "opaque/model-name[1m]"


def test_plan_mode_also_disallows_exit_plan_mode() -> None:
    argv = _argv("plan")
    assert argv[argv.index("--disallowedTools") + 1] == "AskUserQuestion,ExitPlanMode"


@pytest.mark.parametrize("mode", PERMISSION_MODES)
def test_only_bypass_gets_the_dangerous_confirmation(mode: str) -> None:
    argv = _argv(mode)
    assert argv[argv.index("--permission-mode") + 1] == mode
    bypass = mode == "bypassPermissions"
    assert ("--allow-dangerously-skip-permissions" in argv) is bypass
    # bypass has no permission callback; every other mode answers prompts over stdio
    assert ("--permission-prompt-tool" in argv) is not bypass


def test_settings_sources_and_limits_are_left_to_the_sdk_default() -> None:
    argv = _argv()
    assert not any(arg.startswith("--setting-sources") for arg in argv)
    assert "--max-turns" not in argv
    assert "--max-budget-usd" not in argv
    assert "--no-session-persistence" in argv


def test_env_overlay_mirrors_the_sdk_additions() -> None:
    overlay = build_env_overlay({"ANTHROPIC_API_KEY": "k", "GONE": None}, "/w")
    assert overlay["ANTHROPIC_API_KEY"] == "k"
    assert overlay["GONE"] is None
    assert overlay["CLAUDECODE"] is None
    assert overlay["CLAUDE_CODE_ENTRYPOINT"] == "sdk-py"
    assert overlay["CLAUDE_AGENT_SDK_VERSION"] == claude_agent_sdk.__version__
    assert overlay["CLAUDE_CODE_SDK_READS_SESSION_STATE"] == "1"
    assert overlay["PWD"] == "/w"
    assert build_env_overlay({"CLAUDE_CODE_ENTRYPOINT": "mine"}, "/w")[
        "CLAUDE_CODE_ENTRYPOINT"
    ] == ("mine")


def test_launch_is_the_sdk_argv_and_env_additions_for_the_configured_run() -> None:
    provider = ClaudeCodeProvider(
        ClaudeCodeConfig(model="m", env={"ANTHROPIC_API_KEY": "k"}),
        cli_prefix=lambda: ("/bundled/claude",),
    )
    launch = provider.launch("/w")
    assert list(launch.argv) == _argv(model="m")
    # The runtime layers the configured env over these, so the user's explicit value wins.
    assert launch.env == build_env_overlay({"ANTHROPIC_API_KEY": "k"}, "/w")


def test_options_hook_reaches_the_argv() -> None:
    provider = ClaudeCodeProvider(
        ClaudeCodeConfig(),
        cli_prefix=lambda: ("/bundled/claude",),
        options_hook=lambda options: dataclasses.replace(options, max_turns=1),
    )
    argv = list(provider.launch("/w").argv)
    assert argv[argv.index("--max-turns") + 1] == "1"


def test_max_budget_usd_reaches_the_cli_argv_through_the_sdk_builder() -> None:
    provider = ClaudeCodeProvider(
        ClaudeCodeConfig(max_budget_usd=0.25), cli_prefix=lambda: ("/bundled/claude",)
    )
    argv = list(provider.launch("/w").argv)
    assert argv[argv.index("--max-budget-usd") + 1] == "0.25"
    options = dataclasses.replace(
        build_sdk_options(
            cwd="/w",
            permission_mode="dontAsk",
            model=None,
            env={},
            can_use_tool=_deny,
            elicitation_hook=_hook,
            max_budget_usd=0.25,
        ),
        cli_path="/bundled/claude",
        permission_prompt_tool_name="stdio",
    )
    assert argv == SubprocessCLITransport(prompt="", options=options)._build_command()


@pytest.mark.parametrize("amount", [0, -0.5, math.nan, math.inf, True, "0.5"])
def test_max_budget_usd_must_be_a_positive_finite_number(amount: Any) -> None:
    with pytest.raises(ValidationError, match="max_budget_usd"):
        ClaudeCodeConfig.model_validate({"max_budget_usd": amount})
