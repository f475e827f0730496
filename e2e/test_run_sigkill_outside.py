"""``kill -9`` of the real ``dsh run`` mid-turn, from outside, with the real Codex under the
default confinement against the scripted loopback model (a held request).

The host-death guard ends the product tree; what no guard knows is the run's private
``TMPDIR`` (``dsh-run-*``, made because the instance's ``env`` names none): the next
confined start in the same temporary directory removes it, and that start works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from dsh_contract_tests.fixtures import responses
from dsh_contract_tests.fixtures.scripted import ScriptedModels, Served, parse_script
from dsh_subprocess import landlock_abi
from dsh_subprocess.testing import alive, wait_gone

pytestmark = [
    pytest.mark.keyless,
    pytest.mark.skipif(landlock_abi() == 0, reason="this kernel offers no Landlock"),
]

DSH = Path(sys.executable).with_name("dsh")
SCRIPT = parse_script(
    {
        "rules": [
            {"task_contains": "hold", "steps": [{"hold": True}]},
            {"steps": [{"answer": "AFTER-THE-KILL-2c7"}]},
        ]
    }
)
GONE_WITHIN = 60.0  # seconds: a generous wait for the guard, not a bound under test


def _profile(root: Path, base_url: str) -> Path:
    env = responses.codex_keyless_env(root / "codex")
    responses.write_codex_config(env["CODEX_HOME"], base_url)
    del env["TMPDIR"]  # the run gets a private TMPDIR of its own: dsh-run-*
    lines = "".join(f'{key} = "{value}"\n' for key, value in env.items())
    profile = root / "profile.toml"
    profile.write_text(
        '[[providers]]\ntype = "codex"\n[providers.config]\n'
        'permission_mode = "dangerously-bypass-approvals-and-sandbox"\n'
        f"[providers.config.env]\n{lines}",
        encoding="utf-8",
    )
    return profile


def test_a_sigkilled_dsh_run_leaves_no_product_and_its_scratch_goes_with_the_next_run(
    tmp_path: Path,
) -> None:
    held = threading.Event()

    def served(event: Served) -> None:
        if event.kind == "hold":
            held.set()

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    host = {**os.environ, "TMPDIR": str(tmp), "HOME": str(tmp_path)}
    with ScriptedModels(SCRIPT, on_served=served) as models:
        profile = _profile(tmp_path, models.responses.base_url)
        argv = [str(DSH), "run", str(profile), "codex", "--instance", "--cwd", str(workspace)]
        dsh = subprocess.Popen(  # noqa: TID251 - the dsh executable, as a terminal starts it
            [*argv, "please hold"],
            env=host,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            assert held.wait(120), "the held request never arrived"
            tree = psutil.Process(dsh.pid).children(recursive=True)
            assert any(proc.name() == "codex" for proc in tree)
            scratch = [path.name for path in tmp.iterdir() if path.name.startswith("dsh-run-")]
            assert len(scratch) == 1
            dsh.send_signal(signal.SIGKILL)
            dsh.wait()
        finally:
            if dsh.poll() is None:
                dsh.kill()
                dsh.wait()
        survivors = wait_gone(tree, GONE_WITHIN)
        assert [f"{p.pid} {p.name()}" for p in alive(survivors)] == []
        assert (tmp / scratch[0]).is_dir()  # nobody could remove it yet
        after = subprocess.run(
            [*argv, "Answer now."],
            env=host,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert (after.returncode, after.stdout) == (0, "AFTER-THE-KILL-2c7\n"), after.stderr
    assert [path.name for path in tmp.iterdir() if path.name.startswith("dsh-run-")] == []
