"""The real ``dsh`` executable exports over OTLP/HTTP to a collector on loopback when the
standard variables say so, and imports no OpenTelemetry package when they do not.

The product is the real Codex (keyless); its shell tool prints the exporter header
variable, proving the collector's credentials never reach the product.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dsh_cli.telemetry import OTEL_MISSING
from dsh_contract_tests.fixtures.responses import (
    Behaviour,
    FunctionCall,
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subprocess.testing import ProcessWatch
from otlp_receiver import otlp_receiver

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
