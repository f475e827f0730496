"""``dsh mcp --http``: loopback only, local Host and Origin, a bearer token.

A request with a wrong Host, a wrong Origin or no token is refused before the MCP
application sees it: no session is opened and nothing starts. The positive control (the
official streamable-HTTP client with the token) lists the tools and delegates.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import psutil
import pytest
from dsh_subprocess.testing import ProcessWatch, wait_gone
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_sandbox import DSH, Sandbox, complete, hold, is_guard

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
)


_Dsh = subprocess.Popen[str]  # noqa: TID251 - the dsh command itself, not a product


@dataclass
class HttpServer:
    process: _Dsh
    url: str
    port: int
    token: str


@pytest.fixture
def http_server(box: Sandbox) -> Iterator[HttpServer]:
    with _http_server(box, box.profile()) as server:
        yield server


@contextlib.contextmanager
def _http_server(box: Sandbox, profile: Path) -> Iterator[HttpServer]:
    process = subprocess.Popen(  # noqa: TID251 - the dsh command itself, not a product
        [str(DSH), "mcp", str(profile), "--http"],
        env=box.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    token = url = None
    for line in process.stderr:
        if found := re.search(r"bearer token \(generated; .*\): (\S+)$", line):
            token = found.group(1)
        if found := re.search(r"listening on (http://127\.0\.0\.1:(\d+)/mcp)$", line):
            url = found.group(1)
            break
    assert token, "the server never announced its token"
    assert url, "the server never announced its URL"
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        yield HttpServer(process, url, port, token)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "dsh mcp: SIGTERM: stopping" in err


def _post(server: HttpServer, **headers: str) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    sent = {
        "Host": f"127.0.0.1:{server.port}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {server.token}",
    }
    for name, value in headers.items():
        key = name.replace("_", "-")
        if value:
            sent[key] = value
        else:
            sent.pop(key, None)
    connection.putrequest("POST", "/mcp", skip_host=True, skip_accept_encoding=True)
    for key, value in sent.items():
        connection.putheader(key, value)
    body = INITIALIZE.encode()
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_wrong_host_wrong_origin_and_missing_token_are_refused_with_nothing_started(
    http_server: HttpServer,
) -> None:
    port = http_server.port
    with ProcessWatch() as watch:
        wrong_host = _post(http_server, Host=f"attacker.example:{port}")
        wrong_origin = _post(http_server, Origin="http://attacker.example")
        no_token = _post(http_server, Authorization="")
        wrong_token = _post(http_server, Authorization="Bearer not-the-token")
        other_port = _post(http_server, Origin=f"http://localhost:{port + 1}")
    assert wrong_host.status == 421
    assert wrong_origin.status == 403
    assert other_port.status == 403
    assert no_token.status == 401
    assert no_token.getheader("www-authenticate") == 'Bearer realm="dsh-mcp"'
    assert wrong_token.status == 401
    refused = (wrong_host, wrong_origin, no_token, wrong_token, other_port)
    assert all(r.getheader("mcp-session-id") is None for r in refused)  # no session opened
    assert watch.seen == ()  # and nothing started
    # The control: the same request with the right Host, a local Origin and the token.
    accepted = _post(http_server, Origin=f"http://localhost:{port}")
    assert accepted.status == 200
    assert accepted.getheader("mcp-session-id")


@pytest.mark.anyio
async def test_the_official_http_client_with_the_token_lists_and_delegates(
    box: Sandbox, http_server: HttpServer
) -> None:
    token = box.token()
    headers = {"Authorization": f"Bearer {http_server.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120)) as http,
        streamable_http_client(http_server.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        result = await session.call_tool("subagent_example", complete(token))
    assert listed.tools[0].name == "subagent_example"
    assert result.structured_content == {
        "text": token,
        "stop_reason": "completed",
        "usage": None,
        "changes": None,
    }
    running = []
    for proc in psutil.Process(http_server.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            running.append(proc.cmdline())
    assert [argv for argv in running if not is_guard(argv)] == []  # the product's tree is gone


def test_a_taken_port_and_a_port_without_http_are_one_line_each(box: Sandbox) -> None:
    profile = str(box.profile())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = subprocess.run(
            [str(DSH), "mcp", profile, "--http", "--port", port],
            env={**box.env, "DSH_MCP_TOKEN": "chosen"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert busy.returncode == 1
    assert busy.stderr.splitlines()[-1] == (
        f"dsh mcp: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert "bearer token" not in busy.stderr  # a token from DSH_MCP_TOKEN is never shown
    usage = subprocess.run(
        [str(DSH), "mcp", profile, "--port", port],
        env=box.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (usage.returncode, usage.stderr) == (2, "dsh mcp: error: --port needs --http\n")


HANG_GUARD_SECONDS = 60.0
"""Only a hang guard: the session's end cancels the job at once."""


def _products(server: HttpServer) -> list[psutil.Process]:
    found = []
    for proc in psutil.Process(server.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if not is_guard(proc.cmdline()):
                found.append(proc)
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("ending", ["delete", "transport-closed"])
async def test_a_sessions_end_kills_its_jobs_and_frees_their_slots(
    box: Sandbox, ending: str
) -> None:
    """A session ends when its client sends DELETE (the official client does as it
    leaves) or, since streamable HTTP has no connection per session, when a client that
    closed its transport without DELETE leaves it idle for ``session_idle_seconds``. Either
    way its background job is killed, its tree is gone and its slot serves another
    session."""
    mcp = 'workspace = "workspace"\nmax_concurrent_delegations = 1\nslot_wait_seconds = 60'
    if ending == "transport-closed":
        mcp += "\nsession_idle_seconds = 1"
    profile = box.profile(mcp=mcp)
    held, token = box.token(), box.token()
    with _http_server(box, profile) as server:
        headers = {"Authorization": f"Bearer {server.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120)) as http,
            # "transport-closed": no DELETE on the way out, as a client that dies.
            streamable_http_client(
                server.url, http_client=http, terminate_on_close=ending == "delete"
            ) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            started = await session.call_tool(
                "subagent_example", {**hold(held), "run_in_background": True}
            )
            assert started.structured_content == {
                "text": "started background subagent job subagent-1",
                "job_id": "subagent-1",
            }
            await anyio.to_thread.run_sync(box.wait_ready, held)
            products = _products(server)
            assert products, "the job's product should be running"
        # The session ended (DELETE, or idle for a second): the job is killed and its
        # whole tree exits.
        left = await anyio.to_thread.run_sync(wait_gone, products, HANG_GUARD_SECONDS)
        assert [p.pid for p in left] == []
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120)) as http,
            streamable_http_client(server.url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            # The only slot is free: without the session's end this call would wait 60 s
            # for it and fail "busy".
            answered = await session.call_tool("subagent_example", complete(token))
            listed = await session.call_tool("job_list", {})
        assert answered.structured_content == {
            "text": token,
            "stop_reason": "completed",
            "usage": None,
            "changes": None,
        }
        assert listed.content[0].type == "text"
        assert "subagent-1" not in listed.content[0].text
