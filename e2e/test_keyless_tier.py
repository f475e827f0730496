"""Keyless tier (seed 004): the CLI and the Loader drive both REAL products end to end.

The real Codex app-server and the real Claude Code CLI answer through the loopback model
fixtures (``dsh_contract_tests.fixtures``) with a fake, non-empty key, each in its own
temporary HOME / CODEX_HOME / CLAUDE_CONFIG_DIR / TMPDIR. Products are required: a
missing product fails these tests, it never skips them. Every test proves that the whole
product process tree is gone afterwards (and the root conftest fails any leftover).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest
from dsh_cli.cli import main
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_profiles.loader import load_profile
from dsh_profiles.runtime import open_runtime
from dsh_subagent import CancelController, ParentContext
from dsh_subagent.tool import ToolCallContext, run_tool_call
from dsh_subprocess.testing import ProcessWatch

pytestmark = pytest.mark.keyless

CODEX_ANSWER = "KEYLESS_CODEX_SENTINEL_0163"
CLAUDE_ANSWER = "KEYLESS_CLAUDE_CODE_SENTINEL_2_1"
TASK = "Reply with the sentinel and nothing else; this is a keyless end-to-end check."


@pytest.fixture
def products(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer=CLAUDE_ANSWER) as running:
        yield running


def _assert_codex_request(products: KeylessProducts) -> None:
    (request,) = products.codex_model.requests
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.bearer_token == products.codex_key
    assert TASK in request.input_texts()


def _assert_claude_request(products: KeylessProducts) -> None:
    (request,) = products.claude_model.message_requests()
    assert request.headers["x-api-key"] == products.claude_key
    assert messages.task_texts(request, TASK) == [TASK]


def test_cli_run_codex_foreground(
    products: KeylessProducts, capsys: pytest.CaptureFixture[str]
) -> None:
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    with ProcessWatch() as watch:
        code = main(
            ["run", str(products.profile), "subagent_codex", TASK, "--cwd", str(products.workspace)]
        )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == CODEX_ANSWER + "\n"
    _assert_codex_request(products)
    assert any(p.name == "codex" for p in watch.seen), watch.seen
    assert watch.alive() == []


def test_cli_run_claude_code_foreground(
    products: KeylessProducts, capsys: pytest.CaptureFixture[str]
) -> None:
    with ProcessWatch() as watch:
        code = main(
            [
                "run",
                str(products.profile),
                "subagent_claude_code",
                TASK,
                "--cwd",
                str(products.workspace),
            ]
        )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == CLAUDE_ANSWER + "\n"
    _assert_claude_request(products)
    assert any(p.name == "claude" for p in watch.seen)
    assert watch.alive() == []


def test_cli_run_reports_a_real_product_failure_with_its_exit_code(
    products: KeylessProducts, capsys: pytest.CaptureFixture[str]
) -> None:
    products.codex_model.enqueue(responses.HttpError(500))
    code = main(
        ["run", str(products.profile), "subagent_codex", TASK, "--cwd", str(products.workspace)]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert "(stop reason: error)" in captured.err
    assert "Diagnostic: Product subagent failure (product: Codex;" in captured.err


@pytest.mark.anyio
async def test_loader_tools_foreground_and_background_with_job_tools(
    products: KeylessProducts,
) -> None:
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    parent = ParentContext(session_id="keyless-e2e", cwd=str(products.workspace))
    composition = load_profile(products.profile)

    def context() -> ToolCallContext:
        return ToolCallContext(parent=parent, cancel=CancelController().signal)

    with ProcessWatch() as watch:
        async with open_runtime(composition) as runtime:
            tools = runtime.tools
            foreground = await run_tool_call(
                tools["subagent_codex"],
                {"description": "Codex sentinel", "prompt": TASK},
                context(),
            )
            assert (foreground.text, foreground.is_error) == (CODEX_ANSWER, False)

            started = await run_tool_call(
                tools["subagent_claude_code"],
                {"description": "Claude sentinel", "prompt": TASK, "run_in_background": True},
                context(),
            )
            assert started.text == "started background subagent job subagent-1"
            listed = await run_tool_call(tools["job_list"], {}, context())
            assert listed.text.startswith("subagent-1 [subagent] ")
            with anyio.fail_after(120):
                collected = await run_tool_call(
                    tools["job_output"], {"job_id": "subagent-1", "wait": True}, context()
                )
            assert collected.text == f"{CLAUDE_ANSWER}\n[status: completed]"

            products.codex_model.enqueue(responses.Hold())
            held = await run_tool_call(
                tools["subagent_codex"],
                {"description": "Codex held", "prompt": TASK, "run_in_background": True},
                context(),
            )
            assert held.text == "started background subagent job subagent-2"
            await anyio.to_thread.run_sync(products.codex_model.wait_for_hold)
            killed = await run_tool_call(tools["job_kill"], {"job_id": "subagent-2"}, context())
            assert killed.text == "requested cancellation of job subagent-2"
            with anyio.fail_after(60):
                final = await run_tool_call(
                    tools["job_output"], {"job_id": "subagent-2", "wait": True}, context()
                )
            assert final.text == "(no new output)\n[status: killed]"
    _assert_claude_request(products)
    assert len(products.codex_model.requests) == 2
    assert {"codex", "claude"} <= {p.name for p in watch.seen}
    assert watch.alive() == []


@pytest.mark.anyio
async def test_ctrl_c_on_dsh_run_cancels_and_leaves_no_process(products: KeylessProducts) -> None:
    products.codex_model.enqueue(responses.Hold())
    command = [
        sys.executable,
        "-m",
        "dsh_cli.cli",
        "run",
        str(products.profile),
        "subagent_codex",
        TASK,
        "--cwd",
        str(products.workspace),
    ]
    async with await anyio.open_process(command) as process:
        await anyio.to_thread.run_sync(products.codex_model.wait_for_hold)
        tree = psutil.Process(process.pid).children(recursive=True)
        assert any(p.name() == "codex" for p in tree)
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(60):
            code = await process.wait()
        assert process.stderr is not None
        err = (await process.stderr.receive()).decode()
    assert code == 130, err
    assert "SIGINT: cancelling the run" in err
    gone, alive = psutil.wait_procs(tree, timeout=5)
    assert alive == []
    assert len(gone) == len(tree)


def test_quickstart_demo_runs_both_real_products_and_cleans_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`./dev demo` (= `dsh demo`) is the README's first command; it must not rot."""
    import io

    from dsh_cli.demo import run_demo

    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert run_demo(out, err) == 0, out.getvalue() + err.getvalue()
    text = out.getvalue()
    assert "REAL products, EMBEDDED LOOPBACK MODEL" in text
    assert text.count("stop reason: completed") == 2
    assert "answer:      DSH-DEMO: the real Codex app-server answered" in text
    assert "answer:      DSH-DEMO: the real Claude Code CLI answered" in text
    assert "none is alive now" in text
    assert "removed: True" in text


def test_cli_run_background_collects_the_real_product_job(
    products: KeylessProducts, capsys: pytest.CaptureFixture[str]
) -> None:
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    argv = ["run", str(products.profile), "subagent_codex", TASK, "--cwd", str(products.workspace)]
    with ProcessWatch() as watch:
        code = main([*argv, "--background"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == CODEX_ANSWER + "\n"
    assert "started background subagent job subagent-1" in captured.err
    _assert_codex_request(products)
    assert watch.alive() == []
