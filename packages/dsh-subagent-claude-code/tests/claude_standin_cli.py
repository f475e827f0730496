"""A scripted stand-in for the Claude Code CLI speaking the SDK's stream-json protocol.

Started by the provider in place of the bundled binary (``python standin_cli.py <argv
the SDK built>``). It answers the SDK's ``initialize`` control request, reads the user
message, then plays the steps of the JSON list in ``STANDIN_SCENARIO``, and finally
exits 0 on stdin EOF like the real CLI. ``STANDIN_RECORD`` names a directory where it
writes ``argv.json``, ``env.json``, ``prompt.json``, ``initialize.json`` and one
``response-<n>.json`` per control response it received. With
``STANDIN_REFUSE_INITIALIZE_ONCE`` naming a file that does not exist yet, it creates the
file, refuses ``initialize`` with an error response and exits at stdin EOF (the next
stand-in answers).

Steps (``op`` and its fields):

* ``init`` / ``assistant`` (``text``) / ``permission_denied``: emit that message;
* ``result``: emit a result message; other fields override the success defaults;
* ``emit`` (``message``) / ``raw`` (``line``): emit any frame / any stdout line;
* ``emit_env`` (``message``, ``var``): emit the frame with ``@ENV@`` in every string
  replaced by that variable's value (a product echoing its environment);
* ``pad_frame`` (``bytes``, ``newline``): one padding frame of exactly that many bytes;
  with ``newline`` false it stays unterminated and the stand-in then hangs;
* ``can_use_tool`` (``tool_name``, ``input``): ask the SDK for permission, record the answer;
* ``elicitation``: call the SDK's registered ``Elicitation`` hook, record the answer;
* ``touch`` (``path``): create a file (tests poll for it instead of sleeping);
* ``spawn_session_child`` (``pidfile``): fork a ``sleep`` in its own session;
* ``hang``: block until killed; ``exit`` (``code``): exit now; ``kill`` (``signal``): die by it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

_record = Path(os.environ["STANDIN_RECORD"]) if os.environ.get("STANDIN_RECORD") else None
_responses = 0


def _save(name: str, value: Any) -> None:
    if _record is not None:
        (_record / name).write_text(json.dumps(value), encoding="utf-8")


def _send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def _read() -> dict[str, Any] | None:
    while True:
        line = sys.stdin.readline()
        if not line:
            return None
        if line.strip():
            frame: dict[str, Any] = json.loads(line)
            return frame


def _await_response(request_id: str) -> dict[str, Any]:
    global _responses
    while True:
        frame = _read()
        if frame is None:
            raise SystemExit(3)
        if frame.get("type") == "control_response":
            response: dict[str, Any] = frame["response"]
            if response.get("request_id") == request_id:
                _responses += 1
                _save(f"response-{_responses}.json", response)
                return response


def _substitute(value: Any, text: str) -> Any:
    if isinstance(value, str):
        return value.replace("@ENV@", text)
    if isinstance(value, list):
        return [_substitute(item, text) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, text) for key, item in value.items()}
    return value


def _result(step: dict[str, Any]) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "result",
        "subtype": "success",
        "duration_ms": 1,
        "duration_api_ms": 1,
        "is_error": False,
        "num_turns": 1,
        "session_id": "standin-session",
        "result": "standin answer",
    }
    frame.update({key: value for key, value in step.items() if key != "op"})
    return frame


def _pad_frame(size: int, *, newline: bool) -> None:
    # Written in pieces: a frame too long for an environment variable or one write.
    head, tail = b'{"type": "system", "subtype": "padding", "pad": "', b'"}'
    out = sys.stdout.buffer
    sys.stdout.flush()
    out.write(head)
    remaining = size - len(head) - len(tail)
    piece = b"x" * 65536
    while remaining > 0:
        out.write(piece[: min(remaining, len(piece))])
        remaining -= len(piece)
    out.write(tail + (b"\n" if newline else b""))
    out.flush()
    while not newline:
        time.sleep(60)


def main() -> None:
    _save("argv.json", sys.argv[1:])
    _save("env.json", dict(os.environ))
    scenario: Any = json.loads(os.environ.get("STANDIN_SCENARIO", "[]"))
    init = _read()
    if init is None or init.get("request", {}).get("subtype") != "initialize":
        raise SystemExit(2)
    _save("initialize.json", init["request"])
    refuse = os.environ.get("STANDIN_REFUSE_INITIALIZE_ONCE")
    if refuse and not os.path.exists(refuse):
        Path(refuse).touch()  # the next stand-in answers
        _send(
            {
                "type": "control_response",
                "response": {
                    "subtype": "error",
                    "request_id": init["request_id"],
                    "error": "initialize refused by the stand-in",
                },
            }
        )
        while _read() is not None:
            pass
        return
    _send(
        {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": init["request_id"], "response": {}},
        }
    )
    hooks = init["request"].get("hooks") or {}
    prompt = _read()
    _save("prompt.json", prompt)
    steps: list[dict[str, Any]]
    # A dict scenario picks its steps by the task text, so runs of one instance can differ.
    if isinstance(scenario, dict):
        task = (prompt or {}).get("message", {}).get("content", "")
        chosen: list[dict[str, Any]] = scenario[task] if task in scenario else scenario.get("*", [])
        steps = list(chosen)
    else:
        steps = list(scenario)
    counter = 0
    for step in steps:
        op = step["op"]
        if op == "init":
            _send({"type": "system", "subtype": "init", "session_id": "standin-session"})
        elif op == "assistant":
            _send(
                {
                    "type": "assistant",
                    "message": {
                        "role": "assistant",
                        "model": "standin",
                        "content": [{"type": "text", "text": step["text"]}],
                    },
                    "parent_tool_use_id": None,
                    "session_id": "standin-session",
                }
            )
        elif op == "permission_denied":
            _send(
                {
                    "type": "system",
                    "subtype": "permission_denied",
                    "tool_name": "Write",
                    "tool_use_id": "toolu_standin",
                    "message": step.get("message", "denied in dontAsk mode"),
                }
            )
        elif op == "result":
            _send(_result(step))
        elif op == "emit":
            _send(step["message"])
        elif op == "emit_env":
            _send(_substitute(step["message"], os.environ.get(step["var"], "")))
        elif op == "raw":
            sys.stdout.write(step["line"] + "\n")
            sys.stdout.flush()
        elif op == "pad_frame":
            _pad_frame(int(step["bytes"]), newline=step.get("newline", True))
        elif op == "can_use_tool":
            counter += 1
            request_id = f"standin-{counter}"
            _send(
                {
                    "type": "control_request",
                    "request_id": request_id,
                    "request": {
                        "subtype": "can_use_tool",
                        "tool_name": step["tool_name"],
                        "input": step["input"],
                        "permission_suggestions": [],
                    },
                }
            )
            _await_response(request_id)
        elif op == "elicitation":
            counter += 1
            request_id = f"standin-{counter}"
            callback_id = hooks["Elicitation"][0]["hookCallbackIds"][0]
            _send(
                {
                    "type": "control_request",
                    "request_id": request_id,
                    "request": {
                        "subtype": "hook_callback",
                        "callback_id": callback_id,
                        "input": {"hook_event_name": "Elicitation", "mcp_server_name": "x"},
                        "tool_use_id": None,
                    },
                }
            )
            _await_response(request_id)
        elif op == "touch":
            Path(step["path"]).touch()
        elif op == "spawn_session_child":
            pid = os.fork()
            if pid == 0:
                os.setsid()
                os.execvp("sleep", ["sleep", "300"])
            Path(step["pidfile"]).write_text(str(pid), encoding="utf-8")
        elif op == "hang":
            while True:
                time.sleep(60)
        elif op == "exit":
            sys.stdout.flush()
            os._exit(int(step["code"]))
        elif op == "kill":
            sys.stdout.flush()
            os.kill(os.getpid(), getattr(signal, step["signal"]))
            time.sleep(60)
        else:
            raise SystemExit(f"unknown op {op}")
    while _read() is not None:
        pass


if __name__ == "__main__":
    main()
