"""The real ``dsh run`` on a Claude Code CLI that exits 0 without a result.

The real Claude Code CLI cannot be made to do this keylessly, so the provider is the real
``ClaudeCodeProvider`` with the scripted stand-in CLI as its command, advertised to
``dsh`` the way any provider is: an entry point of an installed distribution (a
``*.dist-info`` folder on ``PYTHONPATH``). The line a user reads must be the peer's,
``missing-result`` with no ``exit code: 0`` (``diagnostic:fixed-line``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from claude_harness import STANDIN

DSH = Path(sys.executable).with_name("dsh")
LINE = "Product subagent failure (product: Claude Code; stage: query-run; category: missing-result)"

# A provider class whose CLI is the stand-in; the rest is the real provider.
MODULE = f"""
import sys
from dsh_subagent_claude_code import ClaudeCodeProvider

class StandinClaudeCode(ClaudeCodeProvider):
    def __init__(self, config=None):
        super().__init__(config, cli_prefix=lambda: (sys.executable, {str(STANDIN)!r}))
"""


def _install_standin_provider(site: Path) -> None:
    site.mkdir()
    (site / "standin_claude_code.py").write_text(MODULE, encoding="utf-8")
    dist = site / "standin_claude_code-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: standin-claude-code\nVersion: 0\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        "[dsh.subagent.providers]\nclaude-code-standin = standin_claude_code:StandinClaudeCode\n",
        encoding="utf-8",
    )


def test_dsh_run_shows_missing_result_without_exit_code_0(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install_standin_provider(site)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    scenario = [{"op": "init"}, {"op": "assistant", "text": "partial"}, {"op": "exit", "code": 0}]
    profile = tmp_path / "profile.toml"
    profile.write_text(
        '[[providers]]\ntype = "claude-code-standin"\nprovider_name = "claude-code"\n'
        f"[providers.config]\nenv = {{ STANDIN_SCENARIO = {json.dumps(json.dumps(scenario))} }}\n"
        # The stand-in CLI is a script of this checkout: the instance grants it, as a user
        # grants a product installed outside the system directories.
        f"confinement = {{ read = [{json.dumps(str(STANDIN.parent))}] }}\n"
        '\n[[tools]]\nname = "subagent_claude"\nprovider = "claude-code"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    for name in ("HOME", "CLAUDE_CONFIG_DIR", "TMPDIR"):
        (tmp_path / name.lower()).mkdir()
        env[name] = str(tmp_path / name.lower())
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [str(DSH), "run", str(profile), "subagent_claude", "Do it.", "--cwd", str(workspace)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert f"Diagnostic: {LINE}" in done.stderr.splitlines(), done.stderr
    assert "exit code" not in done.stderr
    assert "Traceback" not in done.stderr
