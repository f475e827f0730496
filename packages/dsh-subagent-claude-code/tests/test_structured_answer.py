"""How a structured run's result message becomes the answer or the fixed failure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from claude_agent_sdk import ResultMessage
from dsh_subagent import OUTPUT_INVALID, ProductFailure
from dsh_subagent_claude_code.structured import COULD_NOT_COMPLY, structured_answer


def _result(subtype: str, *, is_error: bool = False, structured: Any = None) -> ResultMessage:
    return ResultMessage(
        subtype=subtype,
        duration_ms=1,
        duration_api_ms=1,
        is_error=is_error,
        num_turns=1,
        session_id="s",
        result="",
        structured_output=structured,
    )


def test_structured_output_is_the_answer_even_with_a_blank_result_text() -> None:
    answer, failure = structured_answer(_result("success", structured={"a": [1, "é"]}))
    assert failure is None
    assert answer is not None
    assert json.loads(answer) == {"a": [1, "é"]}


@pytest.mark.parametrize(
    "message",
    [
        _result(COULD_NOT_COMPLY, is_error=True),  # the product says it could not comply
        _result("success"),  # a success without the structured answer
    ],
)
def test_no_structured_answer_is_the_fixed_category(message: ResultMessage) -> None:
    answer, failure = structured_answer(message)
    assert answer is None
    assert failure == ProductFailure("Claude Code", "query-run", OUTPUT_INVALID)


def test_other_failures_keep_their_own_category() -> None:
    answer, failure = structured_answer(_result("error_max_turns", is_error=True))
    assert answer is None
    assert failure is not None
    assert failure.category == "error_max_turns"
