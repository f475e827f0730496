"""Ctrl-C of the real ``dsh run`` while an ACP agent's model request is held (keyless).

The figure docs/agents.md gives per agent is what a user sees: the real ``dsh`` executable
runs a Loader profile of the agent (its shipped profile's command, arguments, settings
and default graces, keyless against the loopback model fixture of its wire, every state
directory under the test's root); once the fixture holds the model request, SIGINT goes
to ``dsh``'s process group as a terminal's Ctrl-C does, and the time runs until ``dsh``
has exited (status 130) and the last process of its tree (guard server, guards, agent
and the agent's children) is gone. Three runs per agent; the median and every run, each
with the 1-minute load average at the moment of the SIGINT, are printed for the
evidence table. No upper bound is asserted (the host is shared and loaded); what is
asserted is that ``dsh`` exits 130 and nothing of its tree survives.

codex-acp is measured here too (its keyless wiring is a ``config.toml`` under
``CODEX_HOME``); the other agents come from ``KEYLESS_AGENTS``.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest
from acp_agent import agent_or_skip
from acp_keyless import KEYLESS_AGENTS, ModelFixture, agent_config, hold
from dsh_contract_tests.fixtures import responses
from dsh_subagent_acp import AcpConfig, agent_profile
from dsh_subagent_acp.config import DEFAULT_DISPOSE_EOF_GRACE, DEFAULT_DISPOSE_GRACE
from dsh_subprocess.testing import alive, wait_gone

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
TASK = "Run the tool, then answer."
DEADLINE = 120.0  # a failure bound for a loaded 2-core runner, never a timing
RUNS = 3
CODEX_MODEL = "gpt-5.4-mini"  # a slug codex-acp knows (an unknown one adds a warning)
# The graces are the provider's defaults (a user's profile that sets none): the figure is
# what such a profile gives.


def _toml(value: Any) -> str:
    """A TOML value: JSON's strings, numbers, booleans and arrays are TOML's too."""
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(value)


def _profile(path: Path, config: AcpConfig) -> Path:
    fields = config.model_dump(mode="json", exclude_none=True)
    name = fields["provider_name"]
    lines = ["[[providers]]", 'type = "acp"', f"provider_name = {_toml(name)}"]
    lines.append("[providers.config]")
    lines += [f"{key} = {_toml(value)}" for key, value in fields.items() if key != "provider_name"]
    lines += ["", "[[tools]]", 'name = "subagent_agent"', f"provider = {_toml(name)}"]
    lines.append('background_mode = "disabled"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class _Held:
    """The loopback model of the agent's wire, holding every request."""

    def __init__(self, agent: str) -> None:
        self.codex = agent == "codex-acp"
        wire = agent_profile(agent).keyless.wire
        self._responses = responses.ResponsesFixture(route=lambda _r: responses.Hold())
        self._model = None if self.codex else ModelFixture(wire, route=lambda _r: hold(wire))

    def __enter__(self) -> _Held:
        if self._model is None:
            self._responses.start()
        else:
            self._model.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._model is None:
            self._responses.close()
        else:
            self._model.__exit__(*exc)

    def config(self, agent: str, entry: str, root: Path) -> AcpConfig:
        if self._model is not None:
            return agent_config(
                agent,
                entry,
                root,
                self._model,
                dispose_eof_grace=DEFAULT_DISPOSE_EOF_GRACE,
                dispose_grace=DEFAULT_DISPOSE_GRACE,
            )
        env = responses.codex_keyless_env(root)
        responses.write_codex_config(env["CODEX_HOME"], self._responses.base_url, model=CODEX_MODEL)
        return agent_profile(agent).config(
            entry,
            env=env,
            dispose_eof_grace=DEFAULT_DISPOSE_EOF_GRACE,
            dispose_grace=DEFAULT_DISPOSE_GRACE,
        )

    def wait_for_hold(self) -> None:
        if self._model is None:
            self._responses.wait_for_hold(DEADLINE)
        else:
            self._model.wait_for_hold(DEADLINE)


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    for name in ("HOME", "TMPDIR"):
        (root / f"dsh-{name.lower()}").mkdir(parents=True)
        env[name] = str(root / f"dsh-{name.lower()}")
    return env


def _one_ctrl_c(agent: str, entry: str, root: Path) -> tuple[float, float]:
    """One run: seconds from SIGINT to dsh exited and its tree gone, and the load then."""
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    with _Held(agent) as model:
        profile = _profile(root / "profile.toml", model.config(agent, entry, root / "state"))
        argv = [str(DSH), "run", str(profile), "subagent_agent", TASK, "--cwd", str(workspace)]
        with (root / "dsh.out").open("w") as out, (root / "dsh.err").open("w") as err:
            # The user's terminal: dsh leads its own process group and gets Ctrl-C there.
            dsh = subprocess.Popen(  # noqa: TID251 - the dsh executable, not a product
                argv,
                env=_env(root),
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        try:
            model.wait_for_hold()
            tree = psutil.Process(dsh.pid).children(recursive=True)
            assert tree, "no process under dsh while the model holds the request"
            load = os.getloadavg()[0]
            began = time.monotonic()
            os.killpg(dsh.pid, signal.SIGINT)
            status = dsh.wait(DEADLINE)
            left = wait_gone(tree, DEADLINE)
            took = time.monotonic() - began
        finally:
            if dsh.poll() is None:
                dsh.kill()
                dsh.wait()
    stderr = (root / "dsh.err").read_text(encoding="utf-8")
    assert status == 130, stderr
    assert "Traceback" not in stderr
    assert left == [], [f"{p.pid} {p.name()}" for p in alive(left)]
    return took, load


@pytest.mark.parametrize("agent", ["codex-acp", *KEYLESS_AGENTS])
def test_ctrl_c_of_dsh_run_ends_dsh_and_the_agents_tree(agent: str, tmp_path: Path) -> None:
    entry = agent_or_skip(agent)
    runs = [_one_ctrl_c(agent, entry, tmp_path / f"run-{n}") for n in range(RUNS)]
    median = statistics.median(took for took, _load in runs)
    each = ", ".join(f"{took:.2f} s (load {load:.1f})" for took, load in runs)
    # The evidence figure: printed, never bounded (asserted: exit 130, no survivor).
    print(f"\n{agent}: Ctrl-C of dsh run -> dsh and tree gone, median {median:.2f} s; {each}")
