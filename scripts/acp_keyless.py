"""Keyless wiring of the known ACP agent profiles for the test tiers and benchmarks.

One :class:`ModelFixture` front over the kit's loopback model fixture an agent's profile
names (Messages, Chat Completions or Gemini), and :func:`agent_config`: the profile's
:class:`~dsh_subagent_acp.AcpConfig` with every state directory it names under one
temporary root and its keyless wiring pointed at the fixture. Agents come from
``scripts/install-acp-agent`` (:func:`acp_agent.agent_or_skip`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dsh_contract_tests import LoopbackDirectiveRoute, MessagesDirectiveRoute
from dsh_contract_tests.fixtures import chat_completions, gemini, loopback, messages
from dsh_subagent_acp import AcpConfig, AgentProfile, agent_profile

__all__ = [
    "FAIL_STATUS",
    "KEYLESS_AGENTS",
    "ModelFixture",
    "ShellThenAnswer",
    "agent_config",
    "directive_fixture",
    "found_at_rest",
    "hold",
    "shell_call",
    "text_answer",
]

KEYLESS_AGENTS = ("claude-agent-acp", "copilot", "gemini-cli", "opencode", "qwen-code")
"""The profiles this tier runs (codex-acp has its own, older, tier)."""

# Where each state variable points under the run's root.
_STATE_DIRS = {
    "HOME": "home",
    "TMPDIR": "tmp",
    "CLAUDE_CODE_TMPDIR": "tmp",
    "CLAUDE_CONFIG_DIR": "claude-config",
    "CODEX_HOME": "codex-home",
    "XDG_CONFIG_HOME": "xdg/config",
    "XDG_DATA_HOME": "xdg/data",
    "XDG_CACHE_HOME": "xdg/cache",
    "XDG_STATE_HOME": "xdg/state",
}

AnyRequest = messages.RecordedRequest | loopback.RecordedRequest


class ModelFixture:
    """The loopback model fixture of one wire, behind one small interface."""

    def __init__(self, wire: str, *, route: Callable[[Any], Any] | None = None) -> None:
        self.wire = wire
        self._inner: messages.MessagesFixture | loopback.LoopbackFixture
        if wire == "messages":
            self._inner = messages.MessagesFixture(route=route)
        elif wire == "chat-completions":
            self._inner = chat_completions.ChatCompletionsFixture(route=route)
        elif wire == "gemini":
            self._inner = gemini.GeminiFixture(route=route)
        else:
            raise ValueError(f"no loopback fixture for wire {wire!r}")

    def __enter__(self) -> ModelFixture:
        self._inner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()

    @property
    def base_url(self) -> str:
        if isinstance(self._inner, chat_completions.ChatCompletionsFixture | gemini.GeminiFixture):
            return self._inner.base_url
        assert isinstance(self._inner, messages.MessagesFixture)
        return self._inner.base_url

    def model_requests(self) -> list[AnyRequest]:
        if isinstance(self._inner, messages.MessagesFixture):
            return list(self._inner.message_requests())
        return list(self._inner.model_requests())

    @property
    def holding(self) -> int:
        return self._inner.holding

    def wait_for_hold(self, timeout: float) -> None:
        if isinstance(self._inner, messages.MessagesFixture):
            self._inner.wait_for_holds(1, timeout)
        else:
            self._inner.wait_for_hold(timeout)

    def enqueue(self, *behaviours: Any) -> None:
        self._inner.enqueue(*behaviours)

    def release(self) -> None:
        self._inner.release()

    def api_key(self, request: AnyRequest) -> str | None:
        """The key the agent authenticated this request with, per the wire's scheme."""
        if self.wire == "messages":
            return request.headers.get("x-api-key")
        if self.wire == "gemini":
            return request.headers.get("x-goog-api-key")
        assert isinstance(request, loopback.RecordedRequest)
        return request.bearer_token

    def carries(self, request: AnyRequest, text: str) -> bool:
        """``text`` is in the request's JSON body (as the agent encoded it, unescaped)."""
        return text in json.dumps(request.body, ensure_ascii=False)


# Agents that retry HTTP 500 with a long backoff and no setting to stop it are failed
# with a status they give up on at once (Gemini CLI: 10 attempts, > 2.5 min, on 500;
# Qwen Code: still retrying after 2 min).
FAIL_STATUS = {"gemini-cli": 400, "opencode": 400, "qwen-code": 400}


def directive_fixture(profile: AgentProfile) -> tuple[ModelFixture, Any]:
    """A fixture answering by the kit directive, and its route (set ``error_text`` on it)."""
    route: MessagesDirectiveRoute | LoopbackDirectiveRoute
    if profile.keyless.wire == "messages":
        route = MessagesDirectiveRoute()
    else:
        route = LoopbackDirectiveRoute(FAIL_STATUS.get(profile.name, 500))
    return ModelFixture(profile.keyless.wire, route=route), route


def text_answer(wire: str, text: str) -> Any:
    """A plain answer behaviour of ``wire``."""
    return messages.TextAnswer(text) if wire == "messages" else loopback.TextAnswer(text)


def hold(wire: str) -> Any:
    """A hold behaviour of ``wire``."""
    return messages.Hold() if wire == "messages" else loopback.Hold()


def shell_call(wire: str, command: str, usage: Any = None) -> Any:
    """A call of the agent's shell tool (whichever name it advertises) running ``command``."""
    if wire == "messages":
        return messages.ToolUse("Bash", {"command": command, "description": "run it"}, usage=usage)
    return loopback.ToolCall(
        (
            ("run_shell_command", {"command": command, "description": "run it"}),
            ("bash", {"command": command, "description": "run it"}),
            ("shell", {"command": command}),
        ),
        usage=usage,
    )


def agent_config(
    name: str,
    entry: str,
    root: Path,
    fixture: ModelFixture,
    *,
    api_key: str = "sk-loopback-fixture",
    env: Mapping[str, str | None] = {},
    **overrides: Any,
) -> AcpConfig:
    """Profile ``name`` from ``entry``, state under ``root``, keyless against ``fixture``."""
    profile = agent_profile(name)
    layered: dict[str, str | None] = {}
    for variable in {"HOME", "TMPDIR", *profile.state_env}:
        folder = root / _STATE_DIRS[variable]
        folder.mkdir(parents=True, exist_ok=True)
        layered[variable] = str(folder)
    layered.update(profile.keyless_env(fixture.base_url, api_key))
    layered.update(env)
    values: dict[str, Any] = {"dispose_eof_grace": 0.2, "dispose_grace": 2.0, **overrides}
    return profile.config(entry, env=layered, **values)


_SHELL_TOOLS = ("run_shell_command", "bash", "shell", "Bash")


def _advertised(wire: str, body: Any) -> set[str]:
    tools = body.get("tools") if isinstance(body, dict) else None
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if wire == "messages":
            names.add(str(tool.get("name")))
        elif wire == "gemini":
            for declaration in tool.get("functionDeclarations") or []:
                names.add(str(declaration.get("name")))
        else:
            names.add(str((tool.get("function") or {}).get("name")))
    return names


def _has_tool_result(wire: str, body: Any) -> bool:
    text = json.dumps(body)
    if wire == "messages":
        return '"tool_result"' in text
    if wire == "gemini":
        return '"functionResponse"' in text
    return '"role": "tool"' in text


class ShellThenAnswer:
    """Route: a model request offering a shell tool gets ``command`` run; then ``answer``.

    Requests that already carry a tool result, or offer no shell tool (an agent's side
    requests: titles, memory, routing), get ``answer`` with ``usage`` directly.
    """

    def __init__(self, wire: str, command: str, answer: str, usage: Any = None) -> None:
        self.wire, self.command, self.answer, self.usage = wire, command, answer, usage

    def __call__(self, request: Any) -> Any:
        body = request.body
        if not _has_tool_result(self.wire, body) and _advertised(self.wire, body) & set(
            _SHELL_TOOLS
        ):
            return shell_call(self.wire, self.command, self.usage)
        if self.wire == "messages":
            return messages.TextAnswer(self.answer, usage=self.usage)
        return loopback.TextAnswer(self.answer, usage=self.usage)


def found_at_rest(root: Path, needles: Mapping[str, str]) -> list[str]:
    """``"<relative path>: <which>"`` for every file or name under ``root`` holding a needle.

    Regular files are read whole; symlinks, sockets and FIFOs are named, never opened; a
    file that vanishes while the walk runs is skipped.
    """
    import os
    import stat

    encoded = {which: value.encode() for which, value in needles.items()}
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(directory, name)
            relative = str(path.relative_to(root))
            data = relative.encode()
            try:
                if stat.S_ISREG(path.lstat().st_mode):
                    data += b"\0" + path.read_bytes()
            except FileNotFoundError:
                continue
            found += [f"{relative}: {which}" for which, n in encoded.items() if n in data]
    return sorted(found)
