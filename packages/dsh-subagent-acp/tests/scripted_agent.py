"""A scripted ACP agent: the real ``acp`` library on the agent side, driven by a JSON script.

Run as ``python scripted_agent.py <script.json>``. Every frame it sends or receives is
appended to the script's ``record`` file (JSON lines) together with its pid, cwd and
environment, so tests assert on what the agent actually saw.

Script keys (all optional except where a test needs them):

* ``record``: path of the JSON-lines record file.
* ``on_eof``: ``"exit"`` (default, exit 0 when stdin ends) or ``"ignore"`` (keep running,
  as codex-acp and claude-agent-acp do).
* ``trap_term``: ignore SIGTERM (only SIGKILL ends it).
* ``record_term``: record a ``sigterm`` event when SIGTERM arrives; then die of it, or
  keep running with ``trap_term``. Lets a test see the signal order of a teardown.
* ``grandchild``: start ``sleep 300`` in its own session (``setsid``) at startup, the way
  claude-agent-acp's Bash tool escapes the process group; ``"keeps-stdout"`` also lets
  it inherit the agent's stdout, so no EOF follows the agent's death.
* ``initialize`` / ``session_new``: an action, ``{"do": ...}`` with ``ok`` (default),
  ``exit`` (+``code``), ``signal`` (+``signal``), ``error`` (+``message``), ``malformed``,
  ``long_line`` (+``bytes``), ``hang``, ``no_session_id`` (session_new only),
  ``protocol_version`` (+``value``, initialize only).
* ``contract``: follow the dsh contract kit's directive in the task text instead of
  ``prompt`` (``complete`` answers the token, ``fail`` writes the planted stderr line and
  answers a JSON-RPC error with the planted raw text, ``hold`` creates the ready file and
  waits for ``session/cancel``, ``reach`` runs the task's command with ``sh -c`` and
  answers the token and what it printed).
* ``prompt``: a list of steps run in order, then ``{"stop": "end_turn"}`` by default:
  ``chunk``, ``thought``, ``image_chunk``, ``foreign_chunk`` (text for another session),
  ``permission`` (list of options; a ``cancelled`` answer ends the turn ``cancelled``),
  ``request`` (+``params``: any client method, result or error recorded),
  ``wait_cancel`` (wait for ``session/cancel``, then end ``cancelled``; with
  ``"then": "hang"`` keep hanging), ``hang``, ``exit``, ``signal``, ``malformed``,
  ``error`` (JSON-RPC error with the given text), ``long_line`` (that many bytes on
  stdout with no newline, then hang), ``stderr`` (one line on stderr), ``stop`` (the
  stop reason), ``update`` (any ``session/update`` payload, e.g.
  ``{"sessionUpdate": "tool_call", ...}``, sent for this session), ``sleep`` (seconds of
  silence).
* ``usage``: the ``usage`` object of the ``session/prompt`` answer (camelCase keys).
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - the acp library's agent side is asyncio-only
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import acp
from acp import RequestError
from acp.connection import StreamEvent
from acp.schema import (
    AgentCapabilities,
    ImageContentBlock,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionNotification,
    ToolCallUpdate,
    Usage,
)
from dsh_contract_tests.reach import find_command, relayed_answer

SCRIPT: dict[str, Any] = {}


def record(event: str, **fields: Any) -> None:
    path = SCRIPT.get("record")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"event": event, **fields}) + "\n")


def observe(event: StreamEvent) -> None:
    record("frame", direction=event.direction.value, message=event.message)


def die(action: dict[str, Any]) -> None:
    """Carry out a terminal action (exit, signal, malformed output); may not return."""
    sys.stdout.flush()
    kind = action.get("do") or next(iter(action))
    if kind == "exit":
        os._exit(int(action.get("code", action.get("exit", 0))))
    if kind == "signal":
        name = str(action.get("signal", "SIGKILL"))
        os.kill(os.getpid(), getattr(signal, name))
    if kind == "malformed":
        os.write(1, str(action.get("malformed", "this is not a JSON-RPC frame")).encode() + b"\n")
    if kind == "long_line":
        write_long_line(int(action.get("bytes", action.get("long_line", 0))))


def write_long_line(size: int) -> None:
    """``size`` bytes of stdout without a newline, written a MiB at a time.

    Blocking on purpose: a bounded reader stops reading, and the write then blocks until
    the agent is terminated.
    """
    os.set_blocking(1, True)
    chunk = memoryview(b"x" * (1 << 20))
    left = size
    while left > 0:
        left -= os.write(1, chunk[: min(left, len(chunk))])


class ScriptedAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.cancelled = asyncio.Event()

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def _startup_action(self, key: str) -> None:
        action: dict[str, Any] = SCRIPT.get(key) or {"do": "ok"}
        kind = action.get("do", "ok")
        if kind in ("exit", "signal", "malformed", "long_line"):
            die(action)
            if kind in ("malformed", "long_line"):
                await asyncio.Event().wait()
        if kind == "hang":
            await asyncio.Event().wait()
        if kind == "error":
            raise RequestError(
                -32603, str(action.get("message", "boom")), {"details": action.get("message")}
            )

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        await self._startup_action("initialize")
        action = SCRIPT.get("initialize") or {}
        version = (
            int(action.get("value", acp.PROTOCOL_VERSION))
            if action.get("do") == "protocol_version"
            else acp.PROTOCOL_VERSION
        )
        return InitializeResponse(protocol_version=version, agent_capabilities=AgentCapabilities())

    async def new_session(self, cwd: str, **kwargs: Any) -> Any:
        await self._startup_action("session_new")
        if (SCRIPT.get("session_new") or {}).get("do") == "no_session_id":
            return {"sessionIdentifier": "nope"}
        return NewSessionResponse(session_id=f"scripted-session-{os.getpid()}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        if SCRIPT.get("contract"):
            return await self.contract_turn(prompt, session_id)
        stop = "end_turn"
        for step in SCRIPT.get("prompt", []):
            if "chunk" in step:
                await self.conn.session_update(
                    session_id, acp.update_agent_message_text(step["chunk"])
                )
            elif "thought" in step:
                await self.conn.session_update(
                    session_id, acp.update_agent_thought_text(step["thought"])
                )
            elif "image_chunk" in step:
                block = ImageContentBlock(type="image", data="AAAA", mime_type="image/png")
                await self.conn.session_update(session_id, acp.update_agent_message(block))
            elif "foreign_chunk" in step:
                update = acp.update_agent_message_text(step["foreign_chunk"])
                await self.conn.session_update("some-other-session", update)
            elif "permission" in step:
                options = [
                    PermissionOption.model_validate({"name": o["optionId"], **o})
                    for o in step["permission"]
                ]
                tool_call = ToolCallUpdate(
                    tool_call_id="call_1", title="rm -rf /tmp/x", kind="execute"
                )
                response = await self.conn.request_permission(
                    session_id=session_id, tool_call=tool_call, options=options
                )
                outcome = response.outcome.model_dump(by_alias=True, exclude_none=True)
                record("permission_outcome", outcome=outcome)
                if outcome["outcome"] == "cancelled":
                    return PromptResponse(stop_reason="cancelled")
            elif "request" in step:
                try:
                    result = await self.conn._conn.send_request(
                        step["request"], step.get("params", {})
                    )
                    record("request_result", method=step["request"], result=result)
                except RequestError as exc:
                    record("request_error", method=step["request"], code=exc.code)
            elif "wait_cancel" in step:
                await self.cancelled.wait()
                record("cancel_seen")
                if step.get("then") == "hang":
                    await asyncio.Event().wait()
                return PromptResponse(stop_reason="cancelled")
            elif "hang" in step:
                await asyncio.Event().wait()
            elif "error" in step:
                raise RequestError(-32603, str(step["error"]), {"details": step["error"]})
            elif "exit" in step or "signal" in step:
                die(step)
            elif "malformed" in step or "long_line" in step:
                die(step)
                await asyncio.Event().wait()
            elif "stderr" in step:
                sys.stderr.write(str(step["stderr"]) + "\n")
                sys.stderr.flush()
            elif "stop" in step:
                stop = step["stop"]
            elif "update" in step:
                notification = SessionNotification.model_validate(
                    {"sessionId": session_id, "update": step["update"]}
                )
                await self.conn.session_update(session_id, notification.update)
            elif "sleep" in step:
                await asyncio.sleep(float(step["sleep"]))
        usage = SCRIPT.get("usage")
        return PromptResponse(
            stop_reason=stop, usage=None if usage is None else Usage.model_validate(usage)
        )

    async def contract_turn(self, prompt: list[Any], session_id: str) -> PromptResponse:
        """Follow the contract kit's directive line found in the task text."""
        text = "\n".join(getattr(block, "text", "") for block in prompt)
        match = re.search(r"dsh-contract/1 (complete|fail|hold|reach) (T-[0-9a-f]{6,32})", text)
        if match is None:
            raise RequestError(-32602, "no contract directive")
        behaviour, token = match.groups()
        if behaviour == "reach":  # as a shell tool would: sh -c, stdout and stderr together
            shell = await asyncio.create_subprocess_exec(
                "sh",
                "-c",
                find_command(text) or "true",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            printed, _ = await shell.communicate()
            answer = relayed_answer(token, printed.decode("utf-8", "replace"))
            await self.conn.session_update(session_id, acp.update_agent_message_text(answer))
            return PromptResponse(stop_reason="end_turn")
        if behaviour == "complete":
            await self.conn.session_update(session_id, acp.update_agent_message_text(token))
            return PromptResponse(stop_reason="end_turn")
        if behaviour == "fail":
            sys.stderr.write(os.environ.get("DSH_CONTRACT_STDERR_TEXT", "") + "\n")
            sys.stderr.flush()
            raw = os.environ.get("DSH_CONTRACT_ERROR_TEXT", "contract failure")
            raise RequestError(-32603, raw, {"details": raw})
        ready = Path(os.environ["DSH_CONTRACT_READY_DIR"]) / token
        ready.touch()
        await self.cancelled.wait()
        return PromptResponse(stop_reason="cancelled")


def start_grandchild(*, keep_stdout: bool) -> int:
    # Simulates a tool shell that calls setsid and so escapes the agent's process group;
    # with keep_stdout it also inherits the agent's stdout, so the pipe outlives the agent.
    child = subprocess.Popen(  # noqa: TID251 - the test agent is not dsh code
        ["sleep", "300"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=None if keep_stdout else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return child.pid


async def main() -> None:
    grandchild = None
    if SCRIPT.get("grandchild"):
        grandchild = start_grandchild(keep_stdout=SCRIPT["grandchild"] == "keeps-stdout")
    record("started", pid=os.getpid(), cwd=os.getcwd(), env=dict(os.environ), grandchild=grandchild)
    if SCRIPT.get("record_term"):
        loop = asyncio.get_running_loop()

        def on_term() -> None:
            record("sigterm")
            if not SCRIPT.get("trap_term"):
                loop.remove_signal_handler(signal.SIGTERM)  # back to the default action
                os.kill(os.getpid(), signal.SIGTERM)

        loop.add_signal_handler(signal.SIGTERM, on_term)
    elif SCRIPT.get("trap_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Duck-typed: the Agent protocol lists every optional method; unlisted ones are refused.
    await acp.run_agent(cast(acp.Agent, ScriptedAgent()), observers=[observe])
    record("stdin_eof")
    if SCRIPT.get("on_eof") == "ignore":
        await asyncio.Event().wait()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as script_file:
        SCRIPT.update(json.load(script_file))
    asyncio.run(main())
