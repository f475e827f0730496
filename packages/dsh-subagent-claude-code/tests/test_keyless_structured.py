"""Keyless real-product tier: typed results through the bundled Claude Code CLI.

With an ``output_schema`` the CLI is started with ``--json-schema`` and offers the model
its ``StructuredOutput`` tool (input schema = the requested schema); the loopback
Messages fixture answers in that form, or does not. Whatever the product did, the host
validates: the object, or ``error`` with category ``output-invalid`` whose diagnostic
never repeats the answer. The root conftest fails a test that leaves a process behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_contract_tests.fixtures.messages import (
    MessagesFixture,
    TextAnswer,
    ToolUse,
    keyless_claude_home,
)
from dsh_subagent import COMPLETED, ERROR, OUTPUT_INVALID, SubagentResult, delegate
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subprocess.testing import host_descendants
from pydantic import BaseModel, field_validator

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

SECRET = "STRUCTURED-ANSWER-SECRET-9c1e"
TOOL = "StructuredOutput"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Finding(BaseModel):
    path: str
    line: int
    message: str


class Review(BaseModel):
    findings: list[Finding]


class ShoutedReview(Review):
    """A model check the JSON schema cannot say: only the host can enforce it."""

    @field_validator("findings")
    @classmethod
    def _not_empty(cls, value: list[Finding]) -> list[Finding]:
        if not value:
            raise ValueError("no findings")
        return value


GOOD: dict[str, Any] = {"findings": [{"path": "app.py", "line": 12, "message": "unused import"}]}


async def _delegate(
    tmp_path: Path,
    script: list[Any],
    default: Any,
    schema: type[BaseModel] = Review,
) -> tuple[SubagentResult, list[dict[str, Any]]]:
    with MessagesFixture(script, default=default) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        provider = ClaudeCodeProvider(ClaudeCodeConfig(env=dict(home.env)))
        with anyio.fail_after(120):
            result = await delegate(
                provider, "review app.py", cwd=home.workspace, output_schema=schema
            )
        bodies = [request.body for request in fixture.message_requests()]
    assert not host_descendants(), "a process of the run survived"
    return result, bodies


def _schema_tool(body: dict[str, Any]) -> dict[str, Any]:
    tools = {tool.get("name"): tool for tool in body.get("tools", [])}
    assert TOOL in tools, f"the CLI offered no {TOOL} tool: {sorted(tools)}"
    tool: dict[str, Any] = tools[TOOL]
    return tool


async def test_conforming_tool_answer_yields_the_model_instance(tmp_path: Path) -> None:
    result, bodies = await _delegate(
        tmp_path, [ToolUse(TOOL, GOOD), TextAnswer("Done.")], TextAnswer("Done.")
    )
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert isinstance(result.structured, Review)
    assert result.structured == Review.model_validate(GOOD)
    assert json.loads(result.text) == GOOD  # the final text stays available
    # What the real product put on the wire: the requested schema as the tool's input schema.
    assert _schema_tool(bodies[0])["input_schema"]["required"] == ["findings"]


def _assert_fixed_failure(result: SubagentResult) -> str:
    assert result.stop_reason == ERROR
    assert result.structured is None
    assert result.diagnostic is not None
    assert f"category: {OUTPUT_INVALID}" in result.diagnostic
    assert SECRET not in result.diagnostic
    return result.diagnostic


PRODUCT_REPORTED = (
    "Product subagent failure (product: Claude Code; stage: query-run; category: output-invalid)"
)


async def test_wrong_type_in_the_tool_answer_fails_with_the_fixed_category(
    tmp_path: Path,
) -> None:
    bad = {"findings": [{"path": "app.py", "line": SECRET, "message": "m"}]}
    result, bodies = await _delegate(tmp_path, [], ToolUse(TOOL, bad))
    # The product refused the tool input itself, asked again, then reported it could not
    # comply (error_max_structured_output_retries).
    assert _assert_fixed_failure(result) == PRODUCT_REPORTED
    assert len(bodies) >= 2


async def test_missing_field_in_the_tool_answer_fails_with_the_fixed_category(
    tmp_path: Path,
) -> None:
    bad = {"findings": [{"path": SECRET, "message": "m"}]}
    result, bodies = await _delegate(tmp_path, [], ToolUse(TOOL, bad))
    assert _assert_fixed_failure(result) == PRODUCT_REPORTED
    assert len(bodies) >= 2


async def test_a_plain_text_answer_is_not_accepted(tmp_path: Path) -> None:
    # The model never calls the tool: the CLI nudges it, then reports it could not comply.
    result, bodies = await _delegate(tmp_path, [], TextAnswer(f"not JSON {SECRET}"))
    assert _assert_fixed_failure(result) == PRODUCT_REPORTED
    assert len(bodies) >= 2, "the CLI did not ask the model again"


async def test_a_model_check_the_product_cannot_see_is_enforced_by_the_host(
    tmp_path: Path,
) -> None:
    empty: dict[str, Any] = {"findings": []}
    result, _ = await _delegate(
        tmp_path, [ToolUse(TOOL, empty), TextAnswer("Done.")], TextAnswer("Done."), ShoutedReview
    )
    diagnostic = _assert_fixed_failure(result)
    assert diagnostic.splitlines()[1:] == ["$.findings: fails value_error"]
