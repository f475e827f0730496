"""The real ``dsh`` executable exports over OTLP/HTTP to a collector on loopback when the
standard variables say so (``dsh run``, ``dsh batch``, ``dsh mcp``), and imports no
OpenTelemetry package when they do not.

The product is the real Codex (keyless); its shell tool prints the exporter header
variable, proving the collector's credentials never reach the product.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_contract_tests.fixtures.responses import (
    Behaviour,
    FunctionCall,
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_profiles.telemetry import OTEL_MISSING
from dsh_subprocess.testing import ProcessWatch
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from otlp_receiver import Receiver, otlp_receiver, plain_values

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
TASK_SECRET = "CLI-TASK-SECRET-5e1d"
ANSWER_SECRET = "CLI-ANSWER-SECRET-c4a2"
HEADER_SECRET = "HEADER-SECRET-88f0"


def _profile(tmp_path: Path, fixture: ResponsesFixture) -> Path:
    env = codex_keyless_env(tmp_path / "codex-home")
    write_codex_config(env["CODEX_HOME"], fixture.base_url)
    lines = [
        "[[providers]]",
        'type = "codex"',
        'provider_name = "codex-keyless"',
        "[providers.config]",
        'permission_mode = "dangerously-bypass-approvals-and-sandbox"',
        "[providers.config.env]",
        *(f"{key} = {json.dumps(value)}" for key, value in env.items()),
    ]
    profile = tmp_path / "profile.toml"
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return profile


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTEST_"))}
    for name in ("HOME", "TMPDIR"):
        path = tmp_path / name.lower()
        path.mkdir(exist_ok=True)
        env[name] = str(path)
    env.update(extra)
    return env


def _workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


def test_dsh_run_exports_a_secret_free_trace_and_metrics(tmp_path: Path) -> None:
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": "printenv OTEL_EXPORTER_OTLP_HEADERS; echo"}),)),
        PlainAnswer(f"done {ANSWER_SECRET}"),
    ]
    with otlp_receiver() as collector, ResponsesFixture(script) as fixture:
        env = _env(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
            OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {HEADER_SECRET}",
            OTEL_SERVICE_NAME="harness-under-test",
        )
        with ProcessWatch() as watch:
            done = subprocess.run(
                [str(DSH), "run", str(_profile(tmp_path, fixture)), "codex-keyless",
                 f"Print it ({TASK_SECRET}).", "--cwd", str(_workspace(tmp_path))],
                env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert watch.alive() == []
        product_saw = fixture.requests[1].raw_body.decode()
    assert done.returncode == 0, done.stderr
    assert ANSWER_SECRET in done.stdout
    assert HEADER_SECRET not in product_saw  # scrubbed from the product's environment
    (span,) = [s for s in collector.spans() if s.name == "invoke_agent codex-keyless"]
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes["dsh.stop_reason"].string_value == "completed"
    assert attributes["gen_ai.provider.name"].string_value == "openai"
    assert {"dsh.start", "dsh.teardown"} <= {s.name for s in collector.spans()}
    assert {"dsh.delegations", "gen_ai.client.operation.duration"} <= collector.metric_names()
    assert all(
        r.headers.get("authorization") == f"Bearer {HEADER_SECRET}" for r in collector.requests
    )
    assert b"harness-under-test" in b"".join(r.body for r in collector.requests)
    for request in collector.requests:
        for secret in (TASK_SECRET, ANSWER_SECRET, HEADER_SECRET, str(tmp_path)):
            assert secret.encode() not in request.body


def _delegation_spans(collector: Receiver, name: str) -> list[dict[str, Any]]:
    """The attributes of every received ``name`` span, as plain values."""
    return [plain_values(span.attributes) for span in collector.spans() if span.name == name]


def _assert_secret_free(collector: Receiver, *secrets: str) -> None:
    assert collector.requests, "nothing was exported"
    for request in collector.requests:
        for secret in secrets:
            assert secret.encode() not in request.body


def test_dsh_batch_exports_one_span_per_task(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"id": f"t{n}", "task": f"Answer ({TASK_SECRET}-{n})."} for n in (1, 2)]
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    results = tmp_path / "results.jsonl"
    # Both tasks run at once; the answers are alike, so their order of arrival is moot.
    script: list[Behaviour] = [PlainAnswer(f"done {ANSWER_SECRET}")] * 2
    with otlp_receiver() as collector, ResponsesFixture(script) as fixture:
        env = _env(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
            OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {HEADER_SECRET}",
        )
        with ProcessWatch() as watch:
            done = subprocess.run(
                [str(DSH), "batch", str(_profile(tmp_path, fixture)), "codex-keyless",
                 str(tasks), "--out", str(results), "--concurrency", "2",
                 "--cwd", str(_workspace(tmp_path))],
                env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert watch.alive() == []
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    assert sorted((r["id"], r["stop_reason"]) for r in records) == [
        ("t1", "completed"),
        ("t2", "completed"),
    ]
    spans = _delegation_spans(collector, "invoke_agent codex-keyless")
    assert [span["dsh.stop_reason"] for span in spans] == ["completed", "completed"]
    assert len({span["dsh.run.id"] for span in spans}) == 2  # two runs, not one twice
    ((dimensions, count),) = collector.sum_points("dsh.delegations")
    assert (dimensions["dsh.stop_reason"], dimensions["dsh.provider"], count) == (
        "completed",
        "codex-keyless",
        2,
    )
    assert {"gen_ai.client.operation.duration"} <= collector.metric_names()
    _assert_secret_free(collector, TASK_SECRET, ANSWER_SECRET, HEADER_SECRET, str(tmp_path))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the official MCP client drives the server from asyncio


@pytest.mark.anyio
async def test_dsh_mcp_exports_the_delegation_of_a_tool_call(tmp_path: Path) -> None:
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": "printenv OTEL_EXPORTER_OTLP_HEADERS; echo"}),)),
        PlainAnswer(f"done {ANSWER_SECRET}"),
    ]
    with otlp_receiver() as collector, ResponsesFixture(script) as fixture:
        profile = _profile(tmp_path, fixture)
        with profile.open("a", encoding="utf-8") as tools:
            tools.write('[[tools]]\nname = "subagent_codex"\nprovider = "codex-keyless"\n[jobs]\n')
        server = StdioServerParameters(
            command=str(DSH),
            args=["mcp", str(profile), "--workspace", str(_workspace(tmp_path))],
            env=_env(
                tmp_path,
                OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
                OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {HEADER_SECRET}",
                OTEL_SERVICE_NAME="mcp-under-test",
            ),
            cwd=str(tmp_path),
        )
        arguments = {"description": "print it", "prompt": f"Print it ({TASK_SECRET})."}
        with ProcessWatch() as watch, (tmp_path / "server-stderr.txt").open("w") as errlog:
            with anyio.fail_after(300):
                async with (
                    stdio_client(server, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    result = await session.call_tool("subagent_codex", arguments)
            # The client closed the server's stdin and waited: the server flushed and exited.
            assert watch.alive() == []
        product_saw = fixture.requests[1].raw_body.decode()
    texts = [block.text for block in result.content if block.type == "text"]
    assert result.is_error is not True, texts
    assert any(ANSWER_SECRET in text for text in texts)
    assert HEADER_SECRET not in product_saw  # scrubbed from the product's environment
    (span,) = _delegation_spans(collector, "invoke_agent codex-keyless")
    assert (span["dsh.stop_reason"], span["gen_ai.provider.name"]) == ("completed", "openai")
    assert span["dsh.tools"] == 1
    ((dimensions, count),) = collector.sum_points("dsh.delegations")
    assert (dimensions["dsh.stop_reason"], count) == ("completed", 1)
    assert b"mcp-under-test" in b"".join(r.body for r in collector.requests)
    _assert_secret_free(collector, TASK_SECRET, ANSWER_SECRET, HEADER_SECRET, str(tmp_path))


IMPORTS = """
import sys
from dsh_cli.cli import main
code = main(sys.argv[1:])
print(sorted(m for m in sys.modules if m.split(".")[0] in {"opentelemetry", "dsh_otel"}))
sys.exit(code)
"""


@pytest.mark.parametrize(
    "variables",
    [{}, {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}],
)
def test_without_the_variables_no_opentelemetry_package_is_imported(
    tmp_path: Path, variables: dict[str, str]
) -> None:
    with ResponsesFixture([PlainAnswer("plain answer")]) as fixture:
        done = subprocess.run(
            [sys.executable, "-c", IMPORTS, "run", str(_profile(tmp_path, fixture)),
             "codex-keyless", "Answer.", "--cwd", str(_workspace(tmp_path))],
            env=_env(tmp_path, **variables), capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
    assert "plain answer" in done.stdout


MISSING = """
import sys
sys.modules["dsh_otel"] = None  # as if the otel extra were not installed
from dsh_cli.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_the_extra_one_warning_line_and_the_run_goes_on(tmp_path: Path) -> None:
    with otlp_receiver() as collector, ResponsesFixture([PlainAnswer("unexported")]) as fixture:
        done = subprocess.run(
            [sys.executable, "-c", MISSING, "run", str(_profile(tmp_path, fixture)),
             "codex-keyless", "Answer.", "--cwd", str(_workspace(tmp_path))],
            env=_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint),
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "unexported" in done.stdout
    assert done.stderr.splitlines()[0] == OTEL_MISSING
    assert done.stderr.count("dsh: warning") == 1
    assert collector.requests == []
