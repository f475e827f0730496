"""``dsh run`` as people and scripts see it, against the REAL products (keyless tier).

The real ``dsh`` executable runs the real Codex app-server, the real Claude Code CLI and
the real codex-acp, each answering through a loopback model fixture that reports exact
usage. On a pseudo-terminal (as stderr; stdout stays a pipe, as for a script reading the
answer) the live display shows the instance, elapsed time, activity and the tokens the
product reported; ``--json`` prints one record with that usage. Assertions are on the
frames' content, never on timing; every product process is gone when ``dsh`` returns.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from acp_agent import codex_acp_or_skip
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_subprocess.testing import ProcessWatch

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
CODEX_ANSWER = "DISPLAY_CODEX_SENTINEL"
CLAUDE_ANSWER = "DISPLAY_CLAUDE_CODE_SENTINEL"
TASK = "Reply with the sentinel and nothing else."
ELAPSED = r"(\d+\.\ds|\d+m \d\ds)"
TOKENS = "1,234 tokens (1,200 in, 34 out)"
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def products(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer=CLAUDE_ANSWER) as running:
        yield running


def _dsh_env(root: Path) -> dict[str, str]:
    """dsh's own environment: temporary HOME and TMPDIR (the products get theirs from the
    profile)."""
    env = dict(os.environ)
    for name in ("HOME", "TMPDIR"):
        path = root / f"dsh-{name.lower()}"
        path.mkdir(exist_ok=True)
        env[name] = str(path)
    return env


@dataclass
class Shown:
    code: int
    out: str
    screen: str  # everything written to the terminal, escape sequences removed

    @property
    def frames(self) -> list[str]:
        """Each redraw of the status line, and every other line, in order."""
        return [part.strip() for part in re.split(r"[\r\n]+", self.screen) if part.strip()]


def _on_a_terminal(root: Path, *argv: str) -> Shown:
    """Run the real ``dsh`` with a 100-column pseudo-terminal as stderr, to its end."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {**_dsh_env(root), "TERM": "xterm-256color", "COLUMNS": "100"}
    with os.fdopen(slave, "w", closefd=True) as terminal:
        proc = subprocess.Popen(  # noqa: TID251 - the dsh executable, not a product
            [str(DSH), *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            start_new_session=True,
        )
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    out, _ = proc.communicate(timeout=120)
    screen = _CSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
    return Shown(proc.returncode, out, screen)


def _json_run(root: Path, *argv: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [str(DSH), *argv, "--json"],
        env=_dsh_env(root),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    record: dict[str, Any] = json.loads(line)
    return record, done.stderr


def _argv(products: KeylessProducts, tool: str) -> tuple[str, ...]:
    return ("run", str(products.profile), tool, TASK, "--cwd", str(products.workspace))


def _assert_final_frames(shown: Shown, instance: str, tokens: str, answer: str) -> None:
    assert shown.code == 0, shown.screen
    assert shown.out == answer + "\n"  # the answer alone on stdout
    assert answer not in shown.screen  # and never on the terminal
    frames = shown.frames
    # Live redraws (a spinner character first) follow what the product said.
    for activity in ("starting", "writing"):
        live = rf"\S {instance}  {ELAPSED}  {activity}  · .+"
        assert any(re.fullmatch(live, frame) for frame in frames), (activity, frames)
    assert re.fullmatch(rf"{instance}  {ELAPSED}  completed  · {tokens}", frames[-2]), frames
    assert frames[-1] == f"dsh: {instance}: completed"
    assert "Traceback" not in shown.screen


def test_a_terminal_shows_the_real_codex_run_and_the_tokens_it_reported(
    products: KeylessProducts, tmp_path: Path
) -> None:
    usage = responses.ResponseUsage(1200, 34)
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer", usage))
    with ProcessWatch() as watch:
        shown = _on_a_terminal(tmp_path, *_argv(products, "subagent_codex"))
        alive = watch.alive()
    _assert_final_frames(shown, "codex-keyless", re.escape(TOKENS), CODEX_ANSWER)
    assert any(p.name == "codex" for p in watch.seen), watch.seen
    assert alive == []


def test_a_terminal_shows_the_real_claude_code_run_with_its_tokens_and_cost(
    products: KeylessProducts, tmp_path: Path
) -> None:
    usage = messages.TokenUsage(input_tokens=1200, output_tokens=34)
    products.claude_model.enqueue(messages.TextAnswer(CLAUDE_ANSWER, usage))
    with ProcessWatch() as watch:
        shown = _on_a_terminal(tmp_path, *_argv(products, "subagent_claude_code"))
        alive = watch.alive()
    # Claude Code prices the tokens itself; the display shows its figure.
    _assert_final_frames(
        shown, "claude-keyless", re.escape(TOKENS) + r", \$\d+\.\d{4}", CLAUDE_ANSWER
    )
    assert alive == []


def test_json_carries_the_usage_the_real_codex_reported(
    products: KeylessProducts, tmp_path: Path
) -> None:
    usage = responses.ResponseUsage(1200, 34, cached_tokens=1000, reasoning_tokens=30)
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer", usage))
    with ProcessWatch() as watch:
        record, err = _json_run(tmp_path, *_argv(products, "subagent_codex"))
        alive = watch.alive()
    assert (record["answer"], record["stop_reason"], record["diagnostic"]) == (
        CODEX_ANSWER,
        "completed",
        None,
    )
    assert record["usage"] == {
        "input_tokens": 1200,
        "cached_input_tokens": 1000,
        "output_tokens": 34,
        "reasoning_tokens": 30,
        "cost_usd": None,
    }
    assert record["elapsed_seconds"] > 0
    assert err.splitlines()[-1] == "dsh: codex-keyless: completed"
    assert alive == []


def test_json_carries_the_usage_and_cost_the_real_claude_code_reported(
    products: KeylessProducts, tmp_path: Path
) -> None:
    usage = messages.TokenUsage(input_tokens=1200, output_tokens=34, cache_read_input_tokens=500)
    products.claude_model.enqueue(messages.TextAnswer(CLAUDE_ANSWER, usage))
    with ProcessWatch() as watch:
        record, _ = _json_run(tmp_path, *_argv(products, "subagent_claude_code"))
        alive = watch.alive()
    assert (record["answer"], record["stop_reason"]) == (CLAUDE_ANSWER, "completed")
    reported = record["usage"]
    assert (reported["input_tokens"], reported["cached_input_tokens"]) == (1700, 500)
    assert reported["output_tokens"] == 34
    assert isinstance(reported["cost_usd"], float)
    assert reported["cost_usd"] > 0
    assert alive == []


@pytest.fixture(scope="module")
def codex_acp() -> str:
    """The native codex-acp binary, installed on demand by the project's script."""
    return codex_acp_or_skip()


def test_the_real_codex_acp_on_a_terminal_and_as_json(tmp_path: Path, codex_acp: str) -> None:
    """codex-acp 0.16.0 reports no token usage: the display says so, the record has none."""
    with responses.ResponsesFixture() as model:
        env = responses.codex_keyless_env(tmp_path / "acp")
        responses.write_codex_config(env["CODEX_HOME"], model.base_url, model="gpt-5.4-mini")
        profile = tmp_path / "profile.toml"
        table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in env.items())
        profile.write_text(
            f'[[providers]]\ntype = "acp"\nprovider_name = "codex-acp"\n'
            f"[providers.config]\ncommand = {json.dumps(codex_acp)}\ndispose_eof_grace = 0.2\n"
            f"[providers.config.env]\n{table}\n\n"
            '[[tools]]\nname = "subagent_acp"\nprovider = "codex-acp"\n'
            'background_mode = "disabled"\n',
            encoding="utf-8",
        )
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        argv = ("run", str(profile), "subagent_acp", TASK, "--cwd", str(workspace))
        model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
        model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
        with ProcessWatch() as watch:
            shown = _on_a_terminal(tmp_path, *argv)
            record, _ = _json_run(tmp_path, *argv)
            alive = watch.alive()
    _assert_final_frames(shown, "codex-acp", "no token count yet", CODEX_ANSWER)
    assert (record["answer"], record["stop_reason"], record["usage"]) == (
        CODEX_ANSWER,
        "completed",
        None,
    )
    assert alive == []
