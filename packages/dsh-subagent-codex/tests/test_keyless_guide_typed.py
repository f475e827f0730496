"""The guide's typed-results example (docs/harness.md, "Typed results") runs as written,
against the real Codex app-server and the loopback Responses fixture.

One line is adapted, the one every user adapts to their machine: the provider's
configuration gets the keyless test environment (temporary homes, the fixture's fake key).
``cwd="."`` is the test's workspace (the test changes into it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dsh_contract_tests.fixtures.responses import (
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subprocess.testing import host_descendants

pytestmark = pytest.mark.keyless

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "harness.md"
PROVIDER_LINE = "CodexProvider(CodexConfig())"


def _example() -> str:
    section = GUIDE.read_text(encoding="utf-8").split("## Typed results", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    code = match.group(1)
    assert code.count(PROVIDER_LINE) == 1
    return code.replace(PROVIDER_LINE, "CodexProvider(CodexConfig(env=KEYLESS_ENV))")


def _run(tmp_path: Path, answer: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    code = _example()
    with ResponsesFixture([PlainAnswer(answer, phase="final_answer")]) as fixture:
        root = tmp_path / "keyless"
        workspace = root / "workspace"
        workspace.mkdir(parents=True)
        env = codex_keyless_env(root)
        write_codex_config(env["CODEX_HOME"], fixture.base_url)
        monkeypatch.chdir(workspace)
        printed: list[str] = []
        namespace = {"__name__": "guide_example", "KEYLESS_ENV": env, "print": printed.append}
        # dont_inherit: the example runs as a user runs it, without this module's __future__.
        exec(compile(code, str(GUIDE), "exec", dont_inherit=True), namespace)
    assert not host_descendants(), "a process of the run survived"
    return printed


def test_the_review_prints_each_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    findings = {
        "findings": [
            {"path": "app.py", "line": 12, "severity": "high", "message": "SQL built by hand"},
            {"path": "util.py", "line": 3, "severity": "low", "message": "unused import"},
        ]
    }
    printed = _run(tmp_path, json.dumps(findings), monkeypatch)
    assert printed == [
        "app.py:12 [high] SQL built by hand",
        "util.py:3 [low] unused import",
    ]


def test_a_misshapen_review_prints_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = json.dumps({"findings": [{"path": "a.py", "line": "twelve", "message": "m"}]})
    (line,) = _run(tmp_path, answer, monkeypatch)
    assert line == (
        "review failed (error): Structured output failure (category: output-invalid)\n"
        "$.findings[0]: missing field 'severity'\n"
        "$.findings[0].line: wrong type (expected integer)"
    )
