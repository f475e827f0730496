"""Result mapping through the real SDK and a scripted stand-in CLI (``diagnostic:*``)."""

from __future__ import annotations

import pytest
from claude_harness import Standin, run_once
from dsh_subagent import ABORTED, COMPLETED, ERROR, TextBlock

pytestmark = pytest.mark.anyio

LINE = "Product subagent failure (product: Claude Code; stage: {stage}; category: {category}"


async def test_strict_success_completes_with_the_exact_answer(standin: Standin) -> None:
    provider = standin.provider(
        [{"op": "init"}, {"op": "assistant", "text": "x"}, {"op": "result", "result": " exact\n"}]
    )
    result = await run_once(provider, standin.workspace, ("one", "two"))
    assert result.stop_reason == COMPLETED
    assert result.output == (TextBlock(text=" exact\n"),)
    assert result.diagnostic is None
    prompt = standin.recorded("prompt.json")
    # Text blocks are concatenated with no separator.
    assert prompt["message"] == {"role": "user", "content": "onetwo"}


@pytest.mark.parametrize(
    "subtype",
    [
        "error_during_execution",
        "error_max_turns",
        "error_max_budget_usd",
        "error_max_structured_output_retries",
    ],
)
async def test_each_sdk_error_subtype_is_preserved_exactly(standin: Standin, subtype: str) -> None:
    secret = "sk-ant-planted-secret-in-errors"
    provider = standin.provider(
        [
            {
                "op": "result",
                "subtype": subtype,
                "is_error": True,
                "result": None,
                "errors": [f"boom {secret} /home/user/path"],
            },
            {"op": "exit", "code": 1},
        ]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.output == ()
    # The CLI reported the failure, then exited (1) because the run was over: that exit
    # is not part of the failure, so the line carries no exit facts.
    assert result.diagnostic == LINE.format(stage="query-run", category=subtype) + ")"
    assert secret not in result.diagnostic


async def test_error_marked_success_is_invalid_success_with_http_status(standin: Standin) -> None:
    provider = standin.provider(
        [
            {
                "op": "result",
                "is_error": True,
                "result": "API Error: 500 sk-ant-secret http://127.0.0.1:1",
                "api_error_status": 500,
            },
            {"op": "exit", "code": 1},
        ]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        LINE.format(stage="query-run", category="invalid-success") + "; HTTP status: 500)"
    )


@pytest.mark.parametrize("blank", ["", "  \n\t", None])
async def test_blank_success_is_invalid_success(standin: Standin, blank: str | None) -> None:
    provider = standin.provider([{"op": "result", "result": blank}])
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format(stage="query-run", category="invalid-success") + ")"


async def test_non_numeric_http_status_is_dropped(standin: Standin) -> None:
    provider = standin.provider([{"op": "result", "is_error": True, "api_error_status": "503"}])
    result = await run_once(provider, standin.workspace)
    assert result.diagnostic is not None
    assert "HTTP status" not in result.diagnostic


async def test_unknown_subtype_is_unknown_and_not_copied(standin: Standin) -> None:
    provider = standin.provider(
        [{"op": "result", "subtype": "error_brand_new_thing", "is_error": True}]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format(stage="query-run", category="unknown") + ")"
    assert "brand_new" not in result.diagnostic


async def test_no_result_is_missing_result_without_the_clean_exit(standin: Standin) -> None:
    # The CLI ends cleanly (exit 0) without ever sending a result: the missing result is
    # the failure, not the exit, so the line is the peer's, with no "exit code: 0"
    # (diagnostic:fixed-line); a failed exit status is process-exit, with its code.
    provider = standin.provider(
        [{"op": "init"}, {"op": "assistant", "text": "partial"}, {"op": "exit", "code": 0}]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.output == ()
    assert result.diagnostic == LINE.format(stage="query-run", category="missing-result") + ")"


async def test_latest_result_wins(standin: Standin) -> None:
    provider = standin.provider(
        [
            {"op": "result", "subtype": "error_max_turns", "is_error": True},
            {"op": "result", "result": "second"},
        ]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == COMPLETED
    assert result.text == "second"


async def test_failure_after_success_wins(standin: Standin) -> None:
    provider = standin.provider(
        [{"op": "result", "result": "first"}, {"op": "result", "result": "   "}]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR


async def test_exit_code_before_result_is_process_exit(standin: Standin) -> None:
    provider = standin.provider([{"op": "init"}, {"op": "exit", "code": 17}])
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        LINE.format(stage="process", category="process-exit") + "; exit code: 17)"
    )


async def test_signal_before_result_is_process_exit_with_signal_only(standin: Standin) -> None:
    provider = standin.provider([{"op": "init"}, {"op": "kill", "signal": "SIGKILL"}])
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        LINE.format(stage="process", category="process-exit") + "; signal: SIGKILL)"
    )


async def test_iterator_failure_after_a_success_is_unknown_with_exit_code(
    standin: Standin,
) -> None:
    provider = standin.provider([{"op": "result", "result": "ok"}, {"op": "exit", "code": 31}])
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format(stage="query-run", category="unknown") + (
        "; exit code: 31)"
    )


async def test_corrupt_stdout_frame_is_unknown_without_its_text(standin: Standin) -> None:
    provider = standin.provider(
        [{"op": "raw", "line": '{"secret": sk-ant-corrupt'}, {"op": "hang"}]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(LINE.format(stage="query-run", category="unknown"))
    assert "corrupt" not in result.diagnostic


async def test_non_json_stdout_lines_are_skipped(standin: Standin) -> None:
    provider = standin.provider(
        [{"op": "raw", "line": "[SandboxDebug] noise"}, {"op": "result", "result": "fine"}]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == COMPLETED
    assert result.text == "fine"


async def test_aborted_is_never_reported_for_a_plain_success(standin: Standin) -> None:
    provider = standin.provider([{"op": "result", "result": "fine"}])
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason != ABORTED


async def test_a_cli_that_never_starts_its_stream_settles_at_the_response_bound(
    standin: Standin,
) -> None:
    # The stand-in answers initialize, reads the prompt and then writes nothing: the first
    # message (the CLI's system init) is a direct response, bounded by
    # response_timeout_seconds; without the bound the run waits forever.
    provider = standin.provider([{"op": "hang"}], response_timeout_seconds=0.5)
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format(stage="query-run", category="response-timeout") + ")"
