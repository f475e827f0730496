"""Loader tier (seed 004): the example profiles compose through the real entry points.

Each profile names two instances of a product plus job controls. Loading, `dsh check`
and registering every instance in a running service happen with an empty ``PATH`` and a
forbidding spawn counter: any attempt to start a process fails the test, and the
counter must read zero.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from dsh_cli.cli import main
from dsh_profiles import Composition, load_profile
from dsh_profiles.runtime import open_runtime
from dsh_profiles.spawnguard import SpawnCounter
from dsh_subagent import NO_START_CAPABILITIES
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess.testing import ProcessWatch

pytestmark = pytest.mark.loader

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
JOB_TOOLS = ("job_output", "job_list", "job_kill")


@pytest.fixture(autouse=True)
def empty_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # A product resolved from PATH would be a bug; with PATH empty it cannot even be found.
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def _load(name: str) -> tuple[Composition, int]:
    watch = ProcessWatch()
    with SpawnCounter(forbid=True) as counter:
        composition = load_profile(EXAMPLES / name)
    assert watch.alive() == []
    return composition, counter.count


def test_codex_profile_loads_two_named_instances_and_the_default() -> None:
    comp, spawned = _load("codex.toml")
    assert spawned == 0
    assert [(p.name, p.type) for p in comp.providers] == [
        ("codex-primary", "codex"),
        ("codex-secondary", "codex"),
        ("codex", "codex"),
    ]
    configs = [p.config for p in comp.providers]
    assert all(isinstance(c, CodexConfig) for c in configs)
    assert [(c.model, c.permission_mode) for c in configs if isinstance(c, CodexConfig)] == [
        ("gpt-5.4-mini", "never"),
        ("gpt-5.4", "dangerously-bypass-approvals-and-sandbox"),
        (None, "never"),
    ]
    assert all(isinstance(p.provider, CodexProvider) for p in comp.providers)
    assert comp.tool_names == (
        "subagent_codex_primary",
        "subagent_codex_secondary",
        "subagent_codex",
        *JOB_TOOLS,
    )
    assert comp.jobs_config.max_concurrent_jobs_per_owner == 4


def test_claude_code_profile_loads_default_codex_and_two_named_claude_instances() -> None:
    comp, spawned = _load("claude-code.toml")
    assert spawned == 0
    assert [p.name for p in comp.providers] == [
        "codex",
        "claude-primary",
        "claude-secondary",
        "claude-code",
    ]
    claude = [p for p in comp.providers if p.type == "claude-code"]
    assert all(isinstance(p.provider, ClaudeCodeProvider) for p in claude)
    modes = [p.config.permission_mode for p in claude if isinstance(p.config, ClaudeCodeConfig)]
    assert modes == ["dontAsk", "bypassPermissions", "dontAsk"]
    assert comp.tool_names == (
        "subagent_codex",
        "subagent_claude_primary",
        "subagent_claude_secondary",
        "subagent_claude_code",
        *JOB_TOOLS,
    )


@pytest.mark.parametrize("name", ["codex.toml", "claude-code.toml"])
def test_every_instance_is_out_of_process_with_no_start_capabilities(name: str) -> None:
    comp, _ = _load(name)
    for loaded in comp.providers:
        # Typed results are the one start capability both products enforce (docs/harness.md,
        # "Typed results"); every other stays off for an out-of-process product.
        expected = dataclasses.replace(NO_START_CAPABILITIES, output_schema=True)
        assert loaded.provider.capabilities == expected
        assert loaded.provider.inherits_parent_context is False


def test_pass_env_copies_the_key_without_the_profile_holding_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loader-tier-fake")
    comp, _ = _load("codex.toml")
    for loaded in comp.providers:
        assert isinstance(loaded.config, CodexConfig)
        assert loaded.config.env == {"OPENAI_API_KEY": "sk-loader-tier-fake"}
    assert "sk-loader-tier-fake" not in (EXAMPLES / "codex.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["codex.toml", "claude-code.toml"])
def test_dsh_check_starts_nothing(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with SpawnCounter(forbid=True) as counter:
        assert main(["check", str(EXAMPLES / name)]) == 0
    assert counter.count == 0
    assert "product processes started: 0" in capsys.readouterr().out


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["codex.toml", "claude-code.toml"])
async def test_registering_every_instance_in_a_running_service_starts_nothing(name: str) -> None:
    comp, _ = _load(name)
    with SpawnCounter(forbid=True) as counter:
        async with open_runtime(comp) as runtime:
            assert runtime.service.list() == tuple(p.name for p in comp.providers)
    assert counter.count == 0


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["codex.toml", "claude-code.toml"])
async def test_model_visible_schemas_match_the_snapshot(name: str) -> None:
    """Any change to a model-visible name, description or parameter shows up as a diff.

    Regenerate deliberately with ``DSH_UPDATE_SNAPSHOTS=1`` and review the diff.
    """
    comp, _ = _load(name)
    with SpawnCounter(forbid=True) as counter:
        async with open_runtime(comp) as runtime:
            schemas = runtime.schemas()
    assert counter.count == 0
    snapshot = SNAPSHOTS / name.replace(".toml", ".tools.json")
    rendered = json.dumps(schemas, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("DSH_UPDATE_SNAPSHOTS") == "1":
        snapshot.parent.mkdir(exist_ok=True)
        snapshot.write_text(rendered, encoding="utf-8")
    assert rendered == snapshot.read_text(encoding="utf-8")
    for schema in schemas:
        parameters = schema["parameters"]
        assert isinstance(parameters, dict)
        properties = parameters["properties"]
        assert isinstance(properties, dict)
        if str(schema["name"]).startswith("subagent_"):
            # No provider selector and no permission parameter ever reaches the model.
            assert set(properties) <= {"description", "prompt", "run_in_background"}
            assert parameters["required"] == ["description", "prompt"]
