"""A first run on a fresh account, from outside: the real ``dsh`` under the default
confinement with the user's own ``HOME`` (no product home under it yet).

Confined, the user's home is not writable, so the product home a provider names
(``~/.claude``, ``~/.codex``) must exist before the product starts: without it Claude Code
completes but keeps no session (the handle it printed resumes nothing) and Codex cannot
make its state at all (``initialize`` exits 1). Real Claude Code against the loopback
Messages fixture; loopback only; the product trees are proved gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dsh_contract_tests.fixtures import messages
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES
from dsh_subprocess import landlock_abi
from dsh_subprocess.testing import ProcessWatch

pytestmark = [
    pytest.mark.keyless,
    pytest.mark.skipif(landlock_abi() == 0, reason="this kernel offers no Landlock"),
]

DSH = Path(sys.executable).with_name("dsh")
# The fixture's homes are left out: the product uses the account's own HOME.
_ACCOUNT_VARIABLES = {
    "HOME",
    "CLAUDE_CONFIG_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "TMPDIR",
    "CLAUDE_CODE_TMPDIR",
}


def test_claude_code_keeps_its_session_on_a_fresh_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    account = tmp_path / "account"
    account.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with messages.MessagesFixture(default=messages.TextAnswer("FRESH-ANSWER-5e1")) as model:
        fixture = messages.keyless_claude_home(tmp_path / "fixture", model.base_url)
        env = {
            key: value
            for key, value in fixture.env.items()
            if key not in _ACCOUNT_VARIABLES and value is not None
        }
        profile = tmp_path / "profile.toml"
        profile.write_text(
            '[[providers]]\ntype = "claude-code"\nprovider_name = "claude"\n'
            "[providers.config]\ncontinuation = true\n[providers.config.env]\n"
            + "".join(f"{key} = {json.dumps(value)}\n" for key, value in env.items()),
            encoding="utf-8",
        )
        host = {**os.environ, "HOME": str(account), "TMPDIR": str(tmp_path)}
        common = [str(DSH), "run", str(profile), "claude", "--instance", "--cwd", str(workspace)]
        with ProcessWatch() as watch:
            first = subprocess.run(
                [*common, "--json", "Say the word."],
                capture_output=True,
                text=True,
                env=host,
                timeout=180,
                check=False,
            )
            assert first.returncode == 0, first.stderr
            record = json.loads(first.stdout)
            assert record["answer"] == "FRESH-ANSWER-5e1"
            follow = subprocess.run(
                [*common, "--resume", record["continuation"], "And again."],
                capture_output=True,
                text=True,
                env=host,
                timeout=180,
                check=False,
            )
            alive = watch.alive()
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout == "FRESH-ANSWER-5e1\n"
    assert (account / ".claude").stat().st_mode & 0o777 == 0o700
    assert alive == []
