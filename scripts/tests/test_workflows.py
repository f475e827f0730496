"""The CI workflow can run where it is published: actionlint, as ``./dev lint`` runs it.

actionlint comes from the locked dev group as a wheel carrying its binary (nothing is
downloaded when it runs). It knows which runtime each popular action's major version
uses, so an action pinned to a runtime GitHub retires (node20: ``actions/checkout@v4``)
fails the lint before the workflow fails on GitHub.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
DEV = ROOT / "dev"


def _actionlint() -> str:
    found = Path(sys.executable).with_name("actionlint")
    assert found.is_file(), "actionlint is not installed in the dev group (uv sync --all-groups)"
    return str(found)


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    # The flags ./dev lint passes: shell and Python checks off (they depend on PATH).
    return subprocess.run(
        [_actionlint(), "-shellcheck=", "-pyflakes=", "-no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_dev_lint_runs_actionlint_over_the_workflows() -> None:
    lint = DEV.read_text(encoding="utf-8")
    assert '"$UV" run --locked actionlint -shellcheck= -pyflakes= .github/workflows/*.yml' in lint


def test_the_ci_workflow_passes_actionlint() -> None:
    done = _lint(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_action_on_a_retired_runtime_fails_the_lint(tmp_path: Path) -> None:
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    old = workflows / "ci.yml"
    shutil.copy(WORKFLOW, old)
    text = re.sub(r"actions/checkout@v\d+", "actions/checkout@v4", old.read_text("utf-8"))
    old.write_text(text, encoding="utf-8")
    done = _lint(old)
    assert done.returncode == 1
    assert 'runtime "node20" is deprecated' in done.stdout
    assert '"actions/checkout@v4"' in done.stdout


def test_the_acp_agents_node_is_a_supported_lts() -> None:
    versions = re.findall(r'node-version: "(\d+)"', WORKFLOW.read_text(encoding="utf-8"))
    assert versions, "no job installs Node"
    for version in versions:  # the main job and the known-agents job
        assert int(version) in {22, 24}  # Maintenance and Active LTS lines (20 reached its end)
