"""What ``kill -9`` of ``dsh demo`` and of ``dsh model serve`` (no ``--dir``) leaves in the
temporary directory, from outside: the real ``dsh``.

Each makes a private directory there (``dsh-demo-*``, ``dsh-model-*``: the products'
homes, sessions and fake keys) and removes it when it ends; killed outright it cannot,
so the directory is marked with its host (``dsh_subprocess.make_owned_dir``, through the
kit's ``serve_keyless_profile``) and the next demo or server removes it, as the next
start removes a confined run's scratch (``dsh-run-*``) and a local Ray cluster's
directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DSH = Path(sys.executable).with_name("dsh")
SCRIPT = '[[rules]]\nsteps = [{ answer = "ok" }]\n'


def _ours(tmp: Path, prefix: str) -> list[Path]:
    return sorted(path for path in tmp.iterdir() if path.name.startswith(prefix))


def _killed_while_its_directory_exists(
    argv: list[str], env: dict[str, str], tmp: Path, prefix: str, ready: str
) -> Path:
    proc = subprocess.Popen(  # noqa: TID251 - the dsh executable, as a terminal starts it
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while not [d for d in _ours(tmp, prefix) if (d / ready).exists()]:
            assert proc.poll() is None, f"{argv[1]} exited {proc.returncode} first"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    (left,) = _ours(tmp, prefix)
    return left


def test_a_killed_model_servers_directory_is_collected_by_the_next_server(
    tmp_path: Path,
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "model.toml"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(tmp), "HOME": str(tmp_path)}
    argv = [str(DSH), "model", "serve", str(script)]
    left = _killed_while_its_directory_exists(argv, env, tmp, "dsh-model-", "profile.toml")
    assert left.is_dir()
    # The next server, stopped the way the docs stop it (Ctrl-C).
    second = subprocess.Popen(  # noqa: TID251 - the dsh executable, as a terminal starts it
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        while not [d for d in _ours(tmp, "dsh-model-") if (d / "profile.toml").exists()
                   and d != left]:  # fmt: skip
            assert second.poll() is None
            time.sleep(0.05)
        second.send_signal(signal.SIGINT)
        assert second.wait(120) == 0
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    assert _ours(tmp, "dsh-model-") == []


@pytest.mark.keyless
def test_a_killed_demos_directory_is_collected_by_the_next_demo(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "HOME": str(tmp_path)}
    left = _killed_while_its_directory_exists([str(DSH), "demo"], env, tmp, "dsh-demo-", "")
    assert left.is_dir()
    again = subprocess.run(
        [str(DSH), "demo"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert again.returncode == 0, again.stderr
    assert _ours(tmp, "dsh-demo-") == []
