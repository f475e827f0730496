"""Cancellation and lifetime: every way a call or the server ends leaves no process.

* ``notifications/cancelled`` for an in-flight call: the run settles ``aborted``, its tree
  is gone, the server goes on serving;
* the client closes stdin, or is SIGKILLed (its end of the pipe closes), or the server
  gets SIGTERM or SIGINT: every run ends and no process of the server's tree is left.
  The wait for the exit is a hang guard only (generous, so a loaded machine passes); how
  fast the tree goes is a bench figure, not a test assertion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from dsh_subprocess.testing import reap_adopted_zombies, wait_gone
from mcp.shared.exceptions import MCPError
from mcp_sandbox import (
    Client,
    Sandbox,
    complete,
    hold,
    is_guard,
    serve,
    server_params,
    server_process,
)
from mcp_types import CONNECTION_CLOSED

pytestmark = pytest.mark.anyio

LIFETIME_SECONDS = 60.0
"""Hang guard for the tree's exit after the client or a signal ends the server."""

KILL_CLIENT = Path(__file__).with_name("mcp_kill_client.py")


def _tree(root: psutil.Process) -> list[psutil.Process]:
    return [root, *root.children(recursive=True)]


def _products(root: psutil.Process) -> list[psutil.Process]:
    found = []
    for proc in root.children(recursive=True):
        try:
            if not is_guard(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _gone_within(procs: list[psutil.Process], seconds: float) -> tuple[list[str], float]:
    """Survivors after a bounded wait of ``seconds`` (described), and the time it took."""
    started = time.monotonic()
    left = wait_gone(procs, seconds)
    return [f"{p.pid} {p.name()}" for p in left if p.is_running()], time.monotonic() - started


async def _start_holding(
    client: Client, box: Sandbox, token: str, group: anyio.abc.TaskGroup, box_results: list[object]
) -> None:
    async def call() -> None:
        try:
            box_results.append(await client.session.call_tool("subagent_example", hold(token)))
        except MCPError as exc:
            box_results.append(exc)

    group.start_soon(call)
    await anyio.to_thread.run_sync(box.wait_ready, token)


async def test_a_cancelled_call_settles_aborted_and_its_tree_is_gone(box: Sandbox) -> None:
    token = box.token()
    async with serve(box, box.profile()) as client:
        server = server_process()
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def call() -> None:
                with scope:
                    await client.session.call_tool("subagent_example", hold(token))

            group.start_soon(call)
            await anyio.to_thread.run_sync(box.wait_ready, token)
            products = _products(server)
            assert products, "the held product's tree should be running"
            scope.cancel()  # the official client sends notifications/cancelled
        entry = await client.wait_log(lambda e: e.logger == "dsh.calls")
        # Sent only after the run settled and its tree exited: nothing may be left now.
        assert entry.data == (
            "subagent_example: call cancelled (cancelled by the MCP client); the run ended "
            "aborted and its process tree has exited"
        )
        assert wait_gone(products, 0) == []
        again = await client.session.call_tool("subagent_example", complete(token))
        assert again.structured_content == {
            "text": token,
            "stop_reason": "completed",
            "usage": None,
            "changes": None,
        }


async def test_closing_stdin_ends_the_running_call_and_the_server(box: Sandbox) -> None:
    token = box.token()
    results: list[object] = []
    async with anyio.create_task_group() as group:
        async with serve(box, box.profile()) as client:
            server = server_process()
            await _start_holding(client, box, token, group, results)
            tree = _tree(server)
            # Leaving the session and the stdio client closes the server's stdin.
        left, took = _gone_within(tree, LIFETIME_SECONDS)
    assert left == [], f"still running {took:.2f} s after stdin closed: {left}"
    assert "SIGTERM" not in box.server_stderr()  # it left on end of file, not on a signal
    reap_adopted_zombies()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_ends_every_call_answers_it_and_stops_the_server(
    box: Sandbox, signum: signal.Signals
) -> None:
    token = box.token()
    results: list[object] = []
    async with serve(box, box.profile()) as client:
        server = server_process()
        async with anyio.create_task_group() as group:
            await _start_holding(client, box, token, group, results)
            tree = _tree(server)
            os.kill(server.pid, signum)
            left, took = await anyio.to_thread.run_sync(_gone_within, tree, LIFETIME_SECONDS)
    assert left == [], f"still running {took:.2f} s after {signum.name}: {left}"
    (result,) = results
    # The SDK answers a request its server is shutting down under: the caller is not left
    # waiting, and it learns the call ended with the connection.
    assert isinstance(result, MCPError), result
    assert (result.error.code, result.error.message) == (CONNECTION_CLOSED, "Connection closed")
    assert f"dsh mcp: {signum.name}: stopping" in box.server_stderr()


def test_a_sigkilled_client_leaves_no_process(box: Sandbox) -> None:
    token = box.token()
    params = server_params(box, box.profile())
    errlog = (box.root / "client-stderr.txt").open("wb")
    client = subprocess.Popen(  # noqa: TID251 - the MCP client program, not a product
        [
            sys.executable,
            str(KILL_CLIENT),
            params.model_dump_json(),
            "subagent_example",
            json.dumps(hold(token)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=errlog,
    )
    try:
        box.wait_ready(token)
        tree = psutil.Process(client.pid).children(recursive=True)
        assert any(not is_guard(p.cmdline()) for p in tree[1:]), "no product is running"
        client.kill()
    finally:
        client.wait()
        errlog.close()
    left, took = _gone_within(tree, LIFETIME_SECONDS)
    assert left == [], f"still running {took:.2f} s after the client was killed: {left}"
    reap_adopted_zombies()


HANG_GUARD_SECONDS = 30.0
"""Only a hang guard: the server itself is gone at once and its guard reaps what it left."""


async def test_a_sigkilled_server_leaves_no_product_behind(box: Sandbox) -> None:
    token = box.token()
    results: list[object] = []
    async with serve(box, box.profile()) as client:
        server = server_process()
        async with anyio.create_task_group() as group:
            await _start_holding(client, box, token, group, results)
            products = _products(server)
            assert products
            server.kill()  # no handler runs: dsh-subprocess's guard sees its host die
            left = await anyio.to_thread.run_sync(wait_gone, products, HANG_GUARD_SECONDS)
    assert [p.pid for p in left] == []
    assert isinstance(results[0], MCPError)  # the client learns the connection is gone
    reap_adopted_zombies()
