"""The kit's verify run against the real Codex and Claude Code providers, keyless.

The way a third-party author verifies a provider whose product talks to a model: the
installed provider by its entry-point name and its verify profile
(``codex.verify.toml``, ``claude-code.verify.toml`` next to this file), nothing else; the
command is the kit README's, as written there.
The kit starts the loopback Responses or Messages fixture and writes the product's
keyless home in each rule's process, as ``test_codex_contract.py`` and
``test_claude_code_contract.py`` do in their test classes; the pinned Codex app-server
and the bundled Claude Code CLI run against it. The verdict must be a pass, with a
report naming every rule id.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dsh_contract_tests.manifest import REQUIREMENTS
from fresh_venv import KIT_README, ROOT, readme_commands

_KIT_IDS = sorted(i for i, r in REQUIREMENTS.items() if r.tier != "credentialed")

# Both products declare every opt-in capability on this path (continuation, which the
# profiles turn on, output_schema and ready starts): no rule is skipped.


def _readme_command(provider: str) -> list[str]:
    """The kit README's verify command for ``provider``, split as bash would."""
    block = readme_commands(KIT_README.read_text("utf-8"), "verify-products")
    found = [shlex.split(line) for line in block.splitlines() if f" verify {provider} " in line]
    assert len(found) == 1, block
    assert found[0][0] == "python", found[0]
    return [sys.executable, *found[0][1:]]  # this venv's python: the provider is installed


def _verify(tmp_path: Path, provider: str) -> tuple[int, list[str], dict[str, Any]]:
    report = tmp_path / "verify-report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [*_readme_command(provider), "--report", str(report)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    lines = (done.stdout + done.stderr).splitlines()
    data: dict[str, Any] = json.loads(report.read_text("utf-8")) if report.exists() else {}
    return done.returncode, lines, data


@pytest.mark.timeout(3600)  # the whole kit against a real product, each rule on its own
@pytest.mark.parametrize(
    ("provider", "distribution"),
    [("codex", "dsh-subagent-codex"), ("claude-code", "dsh-subagent-claude-code")],
)
def test_the_verify_run_passes_a_real_product_behind_a_loopback_model(
    tmp_path: Path, provider: str, distribution: str
) -> None:
    status, lines, report = _verify(tmp_path, provider)
    out = "\n".join(lines)
    assert status == 0, out
    assert lines[-1] == (
        f"dsh-contract verify PASSED {provider} ({distribution} 0.1.0, "
        "dsh-contract-tests 0.1.0): all 39 rules ran"
    ), out
    assert sorted(r["id"] for r in report["rules"]) == _KIT_IDS
    outcomes = {r["id"]: r["outcome"] for r in report["rules"]}
    assert set(outcomes.values()) == {"passed"}, out
    assert report["profile"]["model"]["home"] == provider
