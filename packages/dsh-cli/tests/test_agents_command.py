"""``dsh agents``: the real dsh executable lists the shipped ACP agent profiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_sandbox import REPO, Sandbox, make_sandbox, run
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


INSTALLER = REPO / "scripts" / "install-acp-agent"

# Stands in for npm on PATH: records its argv, and for `install` lays the pinned package
# out under --prefix as npm would (the manifest and the entry file only).
FAKE_NPM = """#!{python}
import json, os, sys
from pathlib import Path
with open(os.environ["FAKE_NPM_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "install":
    prefix = Path(sys.argv[sys.argv.index("--prefix") + 1])
    for relative, text in json.loads(os.environ["FAKE_NPM_LAYOUT"]).items():
        (prefix / relative).parent.mkdir(parents=True, exist_ok=True)
        (prefix / relative).write_text(text)
"""


def _user_box(tmp_path: Path) -> Sandbox:
    (tmp_path / "box").mkdir()
    box = make_sandbox(tmp_path / "box")
    for name in ("XDG_DATA_HOME", "DSH_ACP_AGENTS_DIR"):
        box.env.pop(name, None)
    return box


def test_without_prefix_it_finds_what_the_installer_put_in_the_users_data_dir(
    tmp_path: Path,
) -> None:
    box = _user_box(tmp_path)
    home = Path(box.env["HOME"])
    profile = agent_profile("codex-acp")
    npm_bin = tmp_path / "npm-bin"
    npm_bin.mkdir()
    (npm_bin / "npm").write_text(FAKE_NPM.format(python=sys.executable), encoding="utf-8")
    (npm_bin / "npm").chmod(0o755)
    layout = {
        f"node_modules/{profile.package}/package.json": json.dumps({"version": profile.version}),
        profile.entry: "",
    }
    env = {
        **box.env,
        "PATH": f"{npm_bin}{os.pathsep}{box.env['PATH']}",
        "FAKE_NPM_LOG": str(tmp_path / "npm.log"),
        "FAKE_NPM_LAYOUT": json.dumps(layout),
    }
    installed = subprocess.run(
        [str(INSTALLER), "codex-acp"],
        env=env,
        cwd=box.root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    agents = home / ".local" / "share" / "dsh" / "acp-agents"
    entry = agents / f"codex-acp-{profile.version}" / profile.entry
    assert installed.stdout == f"{entry}\n"
    # npm's cache goes with the install, never to ~/.npm: HOME holds the data dir only.
    (npm_argv,) = [json.loads(line) for line in (tmp_path / "npm.log").read_text().splitlines()]
    assert npm_argv[npm_argv.index("--cache") + 1] == str(agents / ".npm-cache")
    assert [p.name for p in home.iterdir()] == [".local"]

    status, out, err = run(box, "agents")  # no --prefix
    assert (status, err) == (0, "")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["codex-acp"][-1] == str(entry)
    assert rows["gemini-cli"][-2:] == ["not", "installed"]

    # XDG_DATA_HOME moves both; DSH_ACP_AGENTS_DIR overrides both.
    moved = tmp_path / "data"
    moved.mkdir()
    status, out, _ = run(box, "agents", XDG_DATA_HOME=str(moved))
    assert status == 0
    assert "codex-acp" in out
    assert str(entry) not in out
    status, out, _ = run(box, "agents", DSH_ACP_AGENTS_DIR=str(agents))
    assert (status, out.count(str(entry))) == (0, 1)


def test_a_dsh_acp_agents_dir_that_is_not_a_directory_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    box = _user_box(tmp_path)
    missing = str(tmp_path / "missing")
    status, out, err = run(box, "agents", DSH_ACP_AGENTS_DIR=missing)
    assert (status, out) == (2, "")
    assert err == f"dsh: error: DSH_ACP_AGENTS_DIR {missing!r} is not a directory\n"


def test_the_commands_docs_agents_md_shows_run_as_written(tmp_path: Path) -> None:
    box = _user_box(tmp_path)
    page = (REPO / "docs" / "agents.md").read_text(encoding="utf-8")
    block = page.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]
    assert commands == [["dsh", "agents"], ["dsh", "agents", "--prefix", "/opt/acp"]]
    opt_acp = tmp_path / "opt-acp"  # the page's /opt/acp, which this host does not have
    opt_acp.mkdir()
    for command in commands:
        argv = [str(opt_acp) if arg == "/opt/acp" else arg for arg in command[1:]]
        status, out, err = run(box, *argv)
        assert (status, err) == (0, ""), command
        assert out.split()[:4] == ["AGENT", "PACKAGE", "KEYLESS", "WIRE"]
