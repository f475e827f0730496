"""The README's "Run the kit against your provider" commands really work, from wheels.

This runs the very script CI runs: wheels of the dsh libraries, the kit and the example
provider (the dsh ones shared with the scaffold's fresh-venv test), a fresh venv holding
only those wheels and their PyPI dependencies, one pytest command that must run the
whole kit green outside the workspace, and the kit's verify run, whose verdict must be a
pass with a report naming every rule. Nothing may be installed editable.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dsh_contract_tests.manifest import REQUIREMENTS
from fresh_venv import ROOT, install_problems, run_bash

_SCRIPT = ROOT / "e2e" / "example-provider" / "scripts" / "run-kit-in-fresh-venv"
_README = ROOT / "e2e" / "example-provider" / "README.md"
_FROM_WHEELS = {"dsh-subprocess", "dsh-subagent", "dsh-contract-tests", "dsh-example-provider"}


@pytest.mark.timeout(1800)  # the kit twice: in one pytest run, then each rule on its own
def test_kit_runs_green_in_a_fresh_venv_from_wheels(tmp_path: Path, kit_wheels: Path) -> None:
    work = tmp_path / "kit"
    done = run_bash(f'"{_SCRIPT}" "{work}"', cwd=ROOT, env={"WHEELS": str(kit_wheels)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    # Skips are only the kit's opt-in rules (this provider declares none of them).
    summaries = [ln for ln in lines if re.fullmatch(r"\d+ passed(, \d+ skipped)? in .*", ln)]
    assert len(summaries) == 1, done.stdout
    assert lines[-1] == (
        "dsh-contract verify PASSED example (dsh-example-provider 0.1.0, "
        "dsh-contract-tests 0.1.0): all 39 rules ran, 9 skipped by the kit"
    ), done.stdout
    report = json.loads((work / "verify-report.json").read_text("utf-8"))
    kit_ids = sorted(i for i, r in REQUIREMENTS.items() if r.tier != "credentialed")
    assert sorted(r["id"] for r in report["rules"]) == kit_ids
    assert {r["outcome"] for r in report["rules"]} == {"passed", "skipped"}
    assert install_problems(work / "venv" / "bin" / "python", _FROM_WHEELS) == []


def test_readme_shows_exactly_the_script_ci_runs() -> None:
    readme = _README.read_text(encoding="utf-8")
    assert "## Run the kit against your provider" in readme
    script = _SCRIPT.read_text(encoding="utf-8")
    assert script in readme, "README must show run-kit-in-fresh-venv verbatim"
