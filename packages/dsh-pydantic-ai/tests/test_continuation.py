"""A pydantic-ai parent continues a REAL Codex subagent session (keyless tier).

The scripted parent model delegates, reads the continuation id the tool result names,
and delegates a follow-up with ``continue_id``; the second model request Codex makes
contains the first task and answer. A second parent session trying the same id gets
the fixed refusal and starts nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from dsh_contract_tests.fixtures import responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_profiles import load_profile, open_runtime
from dsh_pydantic_ai import SubagentToolset
from dsh_subagent import CONTINUE_ID_REFUSED, ParentContext
from dsh_subprocess.testing import ProcessWatch
from pai_model import CLAUDE_ANSWER, tool_returns
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

FIRST_TASK = "Remember the word CORMORANT-13f8. Reply FIRST-ANSWER-0c4d."
FIRST_ANSWER = "FIRST-ANSWER-0c4d"
FOLLOW_UP = "Which word did I ask you to remember? FOLLOW-UP-5e7a"
ID = re.compile(r"\[continuation id: (c-[0-9a-f]+) ")


@pytest.fixture
def continuing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer=CLAUDE_ANSWER, continuation=True) as running:
        yield running


def _lead(first: str | None) -> FunctionModel:
    """Delegate ``FIRST_TASK`` (or continue ``first`` right away), then follow up with
    the id the first result named; finally report every tool result."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        returned = [str(part.content) for part in tool_returns(messages)]
        if not returned and first is None:
            return ModelResponse(
                parts=[ToolCallPart("subagent_codex", {"description": "d", "prompt": FIRST_TASK})]
            )
        if len(returned) == (0 if first is not None else 1):
            found = ID.search(returned[0]) if returned else None
            continue_id = first if first is not None else (found.group(1) if found else "none")
            arguments = {"description": "d", "prompt": FOLLOW_UP, "continue_id": continue_id}
            return ModelResponse(parts=[ToolCallPart("subagent_codex", arguments)])
        return ModelResponse(parts=[TextPart("\n---\n".join(returned))])

    return FunctionModel(respond)


async def test_the_parent_continues_its_subagent_and_another_session_is_refused(
    continuing: KeylessProducts,
) -> None:
    continuing.codex_model.enqueue(
        responses.PlainAnswer(FIRST_ANSWER, "final_answer"),
        responses.PlainAnswer("CORMORANT-13f8", "final_answer"),
    )
    lead = ParentContext(session_id="pydantic-ai-lead", cwd=str(continuing.workspace))
    other = ParentContext(session_id="pydantic-ai-other", cwd=str(continuing.workspace))
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(continuing.profile)) as runtime:
            toolset = SubagentToolset(runtime.tools.values())
            with anyio.fail_after(180):
                result = await Agent(_lead(None), toolsets=[toolset]).run("Go.", deps=lead)
            first, follow = result.output.split("\n---\n")
            found = ID.search(first)
            assert found is not None, first
            with anyio.fail_after(60):
                refused = await Agent(_lead(found.group(1)), toolsets=[toolset]).run(
                    "Go.", deps=other
                )
            alive = watch.alive()
    assert first.startswith(FIRST_ANSWER + "\n\n[continuation id: c-")
    assert follow.startswith("CORMORANT-13f8\n\n[continuation id: c-")
    assert refused.output == f"Error: {CONTINUE_ID_REFUSED}"
    assert len(continuing.codex_model.requests) == 2  # the refused id reached no model
    follow_texts = continuing.codex_model.requests[1].input_texts()
    assert FIRST_TASK in follow_texts
    assert FOLLOW_UP in follow_texts
    assert FIRST_ANSWER in str(continuing.codex_model.requests[1].body)
    assert alive == []
