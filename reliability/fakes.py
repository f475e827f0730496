"""Each provider pointed at a hostile fake product through its test-intended seam.

* Codex: a :class:`CodexProvider` subclass overriding ``launch`` (the seam the package's
  own tests use) to start the package's scripted ``fake_app_server.py``.
* Claude Code: the public ``cli_prefix`` constructor argument, starting the package's
  scripted ``claude_standin_cli.py`` (the SDK still builds and appends the real argv).
* ACP: plain configuration (``command`` + ``args``) starting the package's
  ``scripted_agent.py`` (the real ``acp`` library on the agent side).

Every product is started through :mod:`reliability.hostile`, which adds the process-level
faults (grandchildren, daemons, floods, ignored SIGTERM, crashes before the fake runs)
and then ``exec``s the unmodified fake, run by file path.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dsh_subagent import Launch, SubagentProvider
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider

from reliability.planted import ENV_NAME, Planted

__all__ = [
    "ACP_AGENT",
    "CLAUDE_STANDIN",
    "CODEX_FAKE",
    "HOSTILE",
    "ROOT",
    "FakeSetup",
]

ROOT: Final = Path(__file__).resolve().parent.parent
HOSTILE: Final = str(Path(__file__).resolve().with_name("hostile.py"))
CODEX_FAKE: Final = str(ROOT / "packages/dsh-subagent-codex/tests/fake_app_server.py")
CLAUDE_STANDIN: Final = str(ROOT / "packages/dsh-subagent-claude-code/tests/claude_standin_cli.py")
ACP_AGENT: Final = str(ROOT / "packages/dsh-subagent-acp/tests/scripted_agent.py")

GRACE: Final = 0.5
"""TERM→KILL grace of every fake product: short, so SIGTERM-ignoring cells stay fast."""


@dataclass
class FakeSetup:
    """Where one cell's fake product lives and what it was given.

    Attributes:
        root: The cell's private directory (scripts, markers, records).
        planted: The cell's secrets.
        prelude: Hostile actions run before the fake.
    """

    root: Path
    planted: Planted
    prelude: list[dict[str, Any]] = field(default_factory=list)

    @property
    def workspace(self) -> Path:
        """The workspace; its name carries the cwd secret."""
        path = self.root / f"ws-{self.planted.cwd}"
        path.mkdir(exist_ok=True)
        return path

    @property
    def started_marker(self) -> Path:
        """Written by the prelude when the product process starts."""
        return self.root / "started.pid"

    @property
    def ready_marker(self) -> Path:
        """Written by a fake when it reaches the point a cell waits for."""
        return self.root / "ready"

    def pidfile(self, name: str) -> Path:
        """Where the prelude writes the pid of a grandchild or daemon."""
        return self.root / f"{name}.pid"

    def _prefix(self) -> list[str]:
        actions = [
            {"do": "marker", "path": str(self.started_marker)},
            {"do": "stderr_secrets", "env": ENV_NAME, "extra": [self.planted.task]},
            *self.prelude,
        ]
        return [sys.executable, "-I", "-S", HOSTILE, json.dumps(actions)]

    def confinement(self) -> dict[str, Any]:
        """The fakes' own reach under the default confinement, as a user would grant it.

        The fakes are scripts of this checkout run by this interpreter, and they write
        their markers, logs and records under the cell's root: outside the workspace.
        """
        return {"read": [str(ROOT), sys.prefix, sys.base_prefix], "write": [str(self.root)]}

    def env(self) -> dict[str, str | None]:
        """The provider's env overlay: the env secret and nothing credential-shaped."""
        return {ENV_NAME: self.planted.env}

    # -- the three products ----------------------------------------------------------

    def codex(self, steps: Sequence[dict[str, Any]], **config: Any) -> CodexProvider:
        """A Codex provider whose app-server is the scripted fake."""
        script = self.root / "codex-script.json"
        script.write_text(json.dumps(list(steps)), encoding="utf-8")
        argv = (
            *self._prefix(),
            sys.executable,
            "-I",
            CODEX_FAKE,
            str(script),
            str(self.root / "codex.log"),
        )

        class HostileCodexProvider(CodexProvider):
            def launch(self, cwd: str) -> Launch:
                return Launch(argv=argv)

        config.setdefault("dispose_grace", GRACE)
        config.setdefault("env", self.env())
        config.setdefault("confinement", self.confinement())
        return HostileCodexProvider(CodexConfig(**config))

    def claude(self, steps: Sequence[dict[str, Any]], **config: Any) -> ClaudeCodeProvider:
        """A Claude Code provider whose CLI is the scripted stand-in."""
        env = self.env()
        env["STANDIN_SCENARIO"] = json.dumps(list(steps))
        record = self.root / "claude-record"
        record.mkdir(exist_ok=True)
        env["STANDIN_RECORD"] = str(record)
        prefix = (*self._prefix(), sys.executable, CLAUDE_STANDIN)

        def cli_prefix() -> Sequence[str]:
            return prefix

        config.setdefault("dispose_grace", GRACE)
        config.setdefault("confinement", self.confinement())
        return ClaudeCodeProvider(ClaudeCodeConfig(env=env, **config), cli_prefix=cli_prefix)

    def acp(self, script: dict[str, Any], **config: Any) -> AcpProvider:
        """An ACP provider whose agent is the scripted agent."""
        script = {"record": str(self.root / "acp-record.jsonl"), **script}
        path = self.root / "acp-script.json"
        path.write_text(json.dumps(script), encoding="utf-8")
        prefix = self._prefix()
        config.setdefault("dispose_grace", GRACE)
        config.setdefault("dispose_eof_grace", GRACE)
        config.setdefault("confinement", self.confinement())
        return AcpProvider(
            AcpConfig(
                command=prefix[0],
                args=(*prefix[1:], sys.executable, ACP_AGENT, str(path)),
                env={ENV_NAME: self.planted.env},
                **config,
            )
        )

    def acp_frames(self, method: str) -> bool:
        """Whether the scripted ACP agent has received a ``method`` frame."""
        record = self.root / "acp-record.jsonl"
        if not record.exists():
            return False
        for line in record.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            message = entry.get("message") or {}
            if entry.get("direction") == "incoming" and message.get("method") == method:
                return True
        return False


ProviderFactory = Callable[[FakeSetup], SubagentProvider]
