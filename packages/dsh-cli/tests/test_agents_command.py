"""``dsh agents``: the real dsh executable lists the shipped ACP agent profiles."""

from __future__ import annotations

import json
from pathlib import Path

from cli_sandbox import make_sandbox, run
from dsh_subagent_acp import agent_profile, known_agents


def _install(prefix: Path, name: str, version: str | None = None) -> Path:
    """A fake npm install of profile ``name`` (its pinned version unless given)."""
    profile = agent_profile(name)
    manifest = prefix / "node_modules" / profile.package / "package.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"version": version or profile.version}), encoding="utf-8")
    entry = prefix / profile.entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text("", encoding="utf-8")
    return entry


def test_lists_every_profile_and_where_the_pinned_package_is(tmp_path: Path) -> None:
    (tmp_path / "box").mkdir()
    box = make_sandbox(tmp_path / "box")
    npm_prefix = tmp_path / "npm"
    gemini = _install(npm_prefix, "gemini-cli")
    _install(npm_prefix, "opencode", version="0.0.1")  # not the pinned version
    cache = tmp_path / "cache"  # the layout scripts/install-acp-agent makes
    qwen = _install(cache / f"qwen-code-{agent_profile('qwen-code').version}", "qwen-code")
    status, out, err = run(box, "agents", "--prefix", str(npm_prefix), "--prefix", str(cache))
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["AGENT", "PACKAGE", "KEYLESS", "WIRE", "INSTALLED"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert sorted(rows) == [profile.name for profile in known_agents()]
    profile = agent_profile("gemini-cli")
    assert rows["gemini-cli"] == [
        "gemini-cli",
        f"{profile.package}@{profile.version}",
        "gemini",
        str(gemini),
    ]
    assert rows["qwen-code"][-1] == str(qwen)
    assert rows["opencode"][-2:] == ["not", "installed"]
    assert rows["copilot"][-2:] == ["not", "installed"]


def test_a_prefix_that_is_not_a_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "box").mkdir()
    box = make_sandbox(tmp_path / "box")
    status, out, err = run(box, "agents", "--prefix", str(tmp_path / "missing"))
    assert (status, out) == (2, "")
    assert err == f"dsh: error: --prefix {str(tmp_path / 'missing')!r} is not a directory\n"
