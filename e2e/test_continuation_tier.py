"""Follow-up delegations from outside: the real ``dsh`` executable and ``dsh mcp`` over
streamable HTTP with the official MCP client, against the REAL Codex app-server keeping
its threads in the keyless profile's CODEX_HOME (``continuation = true``).

Products are required (never skipped); loopback only; every test proves the product
trees are gone (and the root conftest fails any leftover).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from dsh_contract_tests.fixtures import responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_subagent import CONTINUATION_UNAVAILABLE_MESSAGE, CONTINUE_ID_REFUSED, ContinuationHandle
from dsh_subprocess.testing import ProcessWatch
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
FIRST_TASK = "Remember the word SHEARWATER-6d3c. Reply FIRST-ANSWER-a81f."
FIRST_ANSWER = "FIRST-ANSWER-a81f"
FOLLOW_UP = "Which word did I ask you to remember? FOLLOW-UP-47b2"
ID = re.compile(r"\[continuation id: (c-[0-9a-f]+) ")


@pytest.fixture
def continuing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer="unused", continuation=True) as running:
        running.codex_model.enqueue(
            responses.PlainAnswer(FIRST_ANSWER, "final_answer"),
            responses.PlainAnswer("SHEARWATER-6d3c", "final_answer"),
        )
        yield running


def _dsh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DSH), *argv], capture_output=True, text=True, timeout=180, check=False
    )


def _assert_follow_up_saw_the_first_turn(products: KeylessProducts) -> None:
    first, follow = products.codex_model.requests
    assert FOLLOW_UP not in first.input_texts()
    assert FIRST_TASK in follow.input_texts()
    assert FOLLOW_UP in follow.input_texts()
    assert FIRST_ANSWER in json.dumps(follow.body)


def test_dsh_run_json_prints_the_handle_and_resume_continues_the_session(
    continuing: KeylessProducts,
) -> None:
    common = (str(continuing.profile), "subagent_codex")
    where = ("--cwd", str(continuing.workspace))
    with ProcessWatch() as watch:
        first = _dsh("run", *common, FIRST_TASK, "--json", *where)
        assert first.returncode == 0, first.stderr
        record = json.loads(first.stdout)
        assert record["answer"] == FIRST_ANSWER
        handle = ContinuationHandle.loads(record["continuation"])
        assert (handle.provider, handle.product) == ("codex-keyless", "codex")
        assert watch.alive() == []  # the first delegation's tree exited with its dsh
        second = _dsh("run", *common, FOLLOW_UP, "--resume", record["continuation"], *where)
        assert second.returncode == 0, second.stderr
        assert second.stdout == "SHEARWATER-6d3c\n"
        assert f"--resume {record['continuation']}" in second.stderr
        stale = ContinuationHandle(
            provider="codex-keyless",
            product="codex",
            session="019a0000-0000-7000-8000-0000000000ff",
        ).dumps()
        refused = _dsh("run", *common, FOLLOW_UP, "--resume", stale, *where)
        alive = watch.alive()
    _assert_follow_up_saw_the_first_turn(continuing)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr == (
        f"dsh: codex-keyless: could not start: {CONTINUATION_UNAVAILABLE_MESSAGE}\n"
    )
    assert len(continuing.codex_model.requests) == 2
    assert alive == []


@contextlib.contextmanager
def _mcp_http(products: KeylessProducts, home: Path) -> Iterator[tuple[str, str, int]]:
    env = {
        **os.environ,
        "HOME": str(home),
        "TMPDIR": str(home),
        "NO_PROXY": "127.0.0.1,localhost",
        "HTTP_PROXY": "",
        "HTTPS_PROXY": "",
        "ALL_PROXY": "",
    }
    argv = [
        str(DSH),
        "mcp",
        str(products.profile),
        "--http",
        "--workspace",
        str(products.workspace),
    ]
    process = subprocess.Popen(  # noqa: TID251 - the dsh command itself, not a product
        argv, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    token = url = None
    try:
        for line in process.stderr:
            if found := re.search(r"bearer token \(generated; .*\): (\S+)$", line):
                token = found.group(1)
            if found := re.search(r"listening on (http://127\.0\.0\.1:\d+/mcp)$", line):
                url = found.group(1)
                break
        assert token, "the server never announced its token"
        assert url, "the server never announced its URL"
        yield url, token, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    assert process.returncode == 0


def _text(result: object) -> str:
    (block,) = result.content  # type: ignore[attr-defined]
    return str(block.text)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_continuation_ids_are_valid_only_in_the_client_session_that_got_them(
    continuing: KeylessProducts, tmp_path: Path
) -> None:
    home = tmp_path / "server-home"
    home.mkdir()
    with ProcessWatch() as watch:
        with _mcp_http(continuing, home) as (url, token, _pid):
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(180)) as http_a,
                streamable_http_client(url, http_client=http_a) as (read_a, write_a),
                ClientSession(read_a, write_a) as mine,
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(180)) as http_b,
                streamable_http_client(url, http_client=http_b) as (read_b, write_b),
                ClientSession(read_b, write_b) as other,
            ):
                await mine.initialize()
                await other.initialize()
                listed = await mine.list_tools()
                schema = next(t for t in listed.tools if t.name == "subagent_codex").input_schema
                assert "continue_id" in schema["properties"]
                with anyio.fail_after(180):
                    first = await mine.call_tool(
                        "subagent_codex", {"description": "d", "prompt": FIRST_TASK}
                    )
                    found = ID.search(_text(first))
                    assert found is not None, _text(first)
                    continued = {"description": "d", "prompt": FOLLOW_UP, "continue_id": found[1]}
                    refused = await other.call_tool("subagent_codex", continued)
                    follow = await mine.call_tool("subagent_codex", continued)
        alive = watch.alive()  # the server has stopped: nothing of it or its runs is left
    assert _text(first).startswith(FIRST_ANSWER + "\n\n[continuation id: ")
    assert refused.is_error
    assert _text(refused) == f"Error: {CONTINUE_ID_REFUSED}"
    assert _text(follow).startswith("SHEARWATER-6d3c\n\n[continuation id: ")
    _assert_follow_up_saw_the_first_turn(continuing)
    assert [p for p in alive if not any(a.endswith("_guard.py") for a in p.argv)] == []
