"""Credentialed tier (seed 004): production providers and real products against DeepSeek.

* Claude Code talks to DeepSeek's Anthropic-compatible endpoint directly, with the
  documented model variables; the key exists only in the provider's in-memory env as
  ``ANTHROPIC_AUTH_TOKEN``.
* Codex speaks only the Responses wire, so it talks to a loopback, test-private
  Responses → Chat Completions bridge that forwards the bearer key it received to the
  fixed official endpoint and wraps the real text in a minimal Responses SSE stream.
  The bridge is neither a production proxy nor evidence that Codex speaks Chat natively.

Each run asks for a random nonce, compares the trimmed answer byte for byte, checks that
no file under the run's root holds the key, and proves whole-tree exit. Without
``DEEPSEEK_API_KEY`` the real runs skip with a visible reason (trusted CI sets
``DSH_REQUIRE_CREDENTIALED=1`` so a missing key fails instead). The same code path runs
on every test run against a loopback stand-in of both DeepSeek endpoints, so it cannot
rot; the real endpoint is never contacted unless a key is given.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

import pytest
from dsh_contract_tests.fixtures import responses
from dsh_profiles.loader import compose
from dsh_profiles.profile import Profile, ProviderRow
from dsh_profiles.runtime import delegate, open_runtime
from dsh_subagent import COMPLETED, CancelController, ParentContext, SubagentResult
from dsh_subagent_claude_code import deepseek_env
from dsh_subprocess.testing import ProcessWatch

DEEPSEEK_BASE_URL: Final = "https://api.deepseek.com"
CHAT_MODEL: Final = "deepseek-v4-flash"
_NONCE = re.compile(r"DSH_(?:CODEX|CLAUDE)_DEEPSEEK_[0-9a-f]{32}")
_MAX_BODY: Final = 1 << 20


@pytest.fixture
def anyio_backend() -> str:
    # One backend only: each real run spends external quota; the trio path of the same
    # providers is covered by the keyless tier.
    return "asyncio"


def _official_base() -> str:
    configured = os.environ.get("DEEPSEEK_BASE_URL", DEEPSEEK_BASE_URL).rstrip("/")
    if configured != DEEPSEEK_BASE_URL:
        raise AssertionError(f"DEEPSEEK_BASE_URL must be {DEEPSEEK_BASE_URL} (got another URL)")
    return DEEPSEEK_BASE_URL


def _real_key() -> str:
    key = os.environ.get("DEEPSEEK_API_KEY", "")
    if not key:
        reason = (
            "DEEPSEEK_API_KEY is not set: the credentialed DeepSeek tier needs a real key "
            "(the nightly CI job provides one); its code path ran against the loopback stand-in"
        )
        if os.environ.get("DSH_REQUIRE_CREDENTIALED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return key


def _nonce(product: str) -> str:
    return f"DSH_{product}_DEEPSEEK_{uuid.uuid4().hex}"


def _prompt(nonce: str) -> str:
    return f"Reply with exactly {nonce} and nothing else. Do not use tools."


# -- the test-private Responses → Chat Completions bridge -------------------------------


def _response_object(text: str, status: str) -> dict[str, Any]:
    message = {
        "id": "msg_deepseek_e2e",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
    }
    return {
        "id": "resp_deepseek_e2e",
        "object": "response",
        "created_at": 1,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": CHAT_MODEL,
        "output": [message] if status == "completed" else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 11,
        },
    }


def _responses_sse(text: str) -> bytes:
    item = _response_object(text, "completed")["output"][0]
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    ids = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response_object(text, "in_progress")},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **ids, "part": {**part, "text": ""}},
        {"type": "response.output_text.delta", **ids, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **ids, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **ids, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": _response_object(text, "completed")},
    ]
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


@dataclass
class _BridgeState:
    upstream: str
    nonce: str
    requests: int = 0
    completed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _BridgeHandler(BaseHTTPRequestHandler):
    server: _BridgeServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the test asserts counts
        pass

    def _fail(self, status: int, message: str) -> None:
        body = json.dumps({"error": {"message": message}}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._fail(404, "not found")

    def do_POST(self) -> None:
        state = self.server.state
        if self.path.split("?")[0] != "/v1/responses":
            self._fail(404, "not found")
            return
        with state.lock:
            state.requests += 1
            first = state.requests == 1
        if not first:
            self._fail(409, "the bridge serves exactly one request")
            return
        length = int(self.headers.get("content-length") or 0)
        authorization = self.headers.get("authorization", "")
        scheme, _, token = authorization.partition(" ")
        if length > _MAX_BODY or scheme.lower() != "bearer" or not token:
            self._fail(502, "DeepSeek bridge request failed")
            return
        try:
            body = json.loads(self.rfile.read(length))
            texts = [
                part["text"]
                for item in body.get("input") or []
                for part in (item.get("content") or [] if isinstance(item, dict) else [])
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            ]
            task = "\n".join(texts) or str(body.get("instructions") or "")
            if state.nonce not in task:
                raise ValueError("task without the nonce")
            answer = self._chat(state.upstream, authorization, task)
        except Exception:  # every failure is one fixed line: no payload, no key
            self._fail(502, "DeepSeek bridge request failed")
            return
        stream = _responses_sse(answer)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("x-request-id", "req_deepseek_e2e")
        self.send_header("content-length", str(len(stream)))
        self.end_headers()
        self.wfile.write(stream)
        with state.lock:
            state.completed += 1

    @staticmethod
    def _chat(upstream: str, authorization: str, task: str) -> str:
        payload = {
            "model": CHAT_MODEL,
            "messages": [
                {
                    "role": "system",
                    "content": "Follow the user instruction and return only the requested nonce.",
                },
                {"role": "user", "content": task},
            ],
            "temperature": 0,
            "max_tokens": 64,
            "stream": False,
        }
        request = urllib.request.Request(
            f"{upstream}/chat/completions",
            data=json.dumps(payload).encode(),
            headers={"authorization": authorization, "content-type": "application/json"},
            method="POST",
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=120) as reply:
            data = json.loads(reply.read())
        content = data["choices"][0]["message"]["content"]
        if not isinstance(content, str) or not content.strip():
            raise ValueError("blank completion")
        return content


class _BridgeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: _BridgeState) -> None:
        super().__init__(("127.0.0.1", 0), _BridgeHandler)
        self.state = state


@dataclass
class Bridge:
    """A running bridge: ``base_url`` for Codex, counts for the test."""

    server: _BridgeServer

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def state(self) -> _BridgeState:
        return self.server.state


def _serve(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


# -- the loopback stand-in of both DeepSeek endpoints -----------------------------------


@dataclass
class _StandInState:
    key: str
    seen: list[tuple[str, str]] = field(default_factory=list)
    """(path, model) of every accepted request."""


class _StandInHandler(BaseHTTPRequestHandler):
    server: _StandInServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._reply(404, "application/json", b"{}")

    def do_POST(self) -> None:
        state = self.server.state
        path = self.path.split("?")[0]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        if self.headers.get("authorization") != f"Bearer {state.key}":
            self._reply(401, "application/json", b'{"error":{"message":"bad key"}}')
            return
        body = json.loads(raw)
        match = _NONCE.search(raw)
        nonce = match.group(0) if match else "NO_NONCE_IN_REQUEST"
        state.seen.append((path, str(body.get("model"))))
        if path == "/chat/completions":
            answer = {"choices": [{"message": {"role": "assistant", "content": nonce}}]}
            self._reply(200, "application/json", json.dumps(answer).encode())
        elif path == "/anthropic/v1/messages":
            self._reply(200, "text/event-stream", _anthropic_sse(nonce, str(body.get("model"))))
        else:
            self._reply(404, "application/json", b"{}")


def _anthropic_sse(text: str, model: str) -> bytes:
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "message": {
                    "id": "msg_stand_in",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 7, "output_tokens": 0},
                }
            },
        ),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {}),
    ]
    return b"".join(
        f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
        for name, data in events
    )


class _StandInServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: _StandInState) -> None:
        super().__init__(("127.0.0.1", 0), _StandInHandler)
        self.state = state


@pytest.fixture
def stand_in() -> Iterator[_StandInServer]:
    server = _StandInServer(_StandInState(key=f"sk-stand-in-{uuid.uuid4().hex}"))
    thread = _serve(server)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- the shared code path ---------------------------------------------------------------


def _assert_no_file_holds(root: Path, secret: str) -> None:
    needle = secret.encode()
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert needle not in path.read_bytes(), f"credential stored in {path.name}"


async def _delegate_once(
    product_type: str, env: dict[str, str | None], workspace: Path, nonce: str
) -> SubagentResult:
    profile = Profile(providers=(ProviderRow(type=product_type, config={"env": env}),))
    composition = compose(profile, source=f"<credentialed {product_type}>")
    parent = ParentContext(session_id="credentialed-e2e", cwd=str(workspace))
    async with open_runtime(composition) as runtime:
        return await delegate(
            runtime,
            composition.providers[0].name,
            _prompt(nonce),
            parent=parent,
            cancel=CancelController().signal,
        )


async def codex_via_bridge(root: Path, api_key: str, upstream: str) -> Bridge:
    """One Codex nonce round trip through the bridge; returns the bridge for its counts."""
    nonce = _nonce("CODEX")
    bridge = Bridge(_BridgeServer(_BridgeState(upstream=upstream, nonce=nonce)))
    thread = _serve(bridge.server)
    workspace = root / "workspace"
    workspace.mkdir()
    try:
        env = responses.codex_keyless_env(
            root / "codex", api_key=api_key, env_key="DEEPSEEK_API_KEY"
        )
        responses.write_codex_config(
            env["CODEX_HOME"], bridge.base_url, model=CHAT_MODEL, env_key="DEEPSEEK_API_KEY"
        )
        with ProcessWatch() as watch:
            result = await _delegate_once("codex", dict(env), workspace, nonce)
    finally:
        bridge.server.shutdown()
        bridge.server.server_close()
        thread.join()
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert result.text.strip() == nonce
    assert (bridge.state.requests, bridge.state.completed) == (1, 1)
    assert any(p.name == "codex" for p in watch.seen)
    assert watch.alive() == []
    _assert_no_file_holds(root, api_key)
    return bridge


async def claude_direct(root: Path, api_key: str, anthropic_base_url: str) -> None:
    """One Claude Code nonce round trip against an Anthropic-compatible DeepSeek endpoint."""
    nonce = _nonce("CLAUDE")
    workspace = root / "workspace"
    workspace.mkdir()
    env = deepseek_env(api_key, root / "claude", base_url=anthropic_base_url)
    with ProcessWatch() as watch:
        result = await _delegate_once("claude-code", env, workspace, nonce)
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert result.text.strip() == nonce
    assert any(p.name == "claude" for p in watch.seen)
    assert watch.alive() == []
    _assert_no_file_holds(root, api_key)


# -- the real tier ----------------------------------------------------------------------


@pytest.mark.credentialed
@pytest.mark.anyio
async def test_codex_answers_a_deepseek_nonce_through_the_bridge(tmp_path: Path) -> None:
    key = _real_key()
    await codex_via_bridge(tmp_path, key, _official_base())


@pytest.mark.credentialed
@pytest.mark.anyio
async def test_claude_code_answers_a_deepseek_nonce_directly(tmp_path: Path) -> None:
    key = _real_key()
    await claude_direct(tmp_path, key, f"{_official_base()}/anthropic")


# -- the same code path against the loopback stand-in (always runs) ---------------------


@pytest.mark.keyless
@pytest.mark.anyio
async def test_codex_bridge_path_against_the_stand_in(
    tmp_path: Path, stand_in: _StandInServer
) -> None:
    upstream = f"http://127.0.0.1:{stand_in.server_address[1]}"
    await codex_via_bridge(tmp_path, stand_in.state.key, upstream)
    assert stand_in.state.seen == [("/chat/completions", CHAT_MODEL)]


@pytest.mark.keyless
@pytest.mark.anyio
async def test_claude_code_path_against_the_stand_in(
    tmp_path: Path, stand_in: _StandInServer
) -> None:
    base = f"http://127.0.0.1:{stand_in.server_address[1]}/anthropic"
    await claude_direct(tmp_path, stand_in.state.key, base)
    # Claude Code strips the ``[1m]`` context-window suffix of ANTHROPIC_MODEL on the wire.
    assert stand_in.state.seen == [("/anthropic/v1/messages", "deepseek-v4-pro")]


def test_a_different_deepseek_base_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_BASE_URL", "https://api.deepseek.com/")
    assert _official_base() == DEEPSEEK_BASE_URL
    monkeypatch.setenv("DEEPSEEK_BASE_URL", "https://example.invalid")
    with pytest.raises(AssertionError, match="DEEPSEEK_BASE_URL must be"):
        _official_base()


def test_missing_key_skips_visibly_or_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.delenv("DSH_REQUIRE_CREDENTIALED", raising=False)
    with pytest.raises(pytest.skip.Exception, match="DEEPSEEK_API_KEY is not set"):
        _real_key()
    monkeypatch.setenv("DSH_REQUIRE_CREDENTIALED", "1")
    with pytest.raises(pytest.fail.Exception, match="DEEPSEEK_API_KEY is not set"):
        _real_key()


@pytest.mark.keyless
def test_demo_deepseek_variant_against_the_stand_in(
    stand_in: _StandInServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dsh demo --deepseek`: Claude Code on the (stand-in) DeepSeek endpoint, Codex keyless."""
    import io

    from dsh_cli.demo import run_demo

    monkeypatch.setenv("DEEPSEEK_API_KEY", stand_in.state.key)
    base = f"http://127.0.0.1:{stand_in.server_address[1]}/anthropic"
    out = io.StringIO()
    assert run_demo(out, io.StringIO(), deepseek=True, deepseek_base_url=base) == 0, out.getvalue()
    assert out.getvalue().count("stop reason: completed") == 2
    assert stand_in.state.seen == [("/anthropic/v1/messages", "deepseek-v4-pro")]
