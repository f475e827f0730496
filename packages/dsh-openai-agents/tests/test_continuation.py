"""An Agents SDK parent continues a REAL Codex subagent session (keyless tier).

The SDK's ScriptedModel plays the parent: it delegates, reads the continuation id the
tool result names and delegates a follow-up with ``continue_id``; Codex's second model
request contains the first task and answer. Another parent session trying the same id
gets the fixed refusal and starts nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, Runner, Tool
from agents.testing import (
    ModelCall,
    ModelStep,
    ScriptedModel,
    assistant_message,
    function_call,
)
from dsh_contract_tests.fixtures import responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_openai_agents import SubagentFunctionTools
from dsh_profiles import load_profile, open_runtime
from dsh_subagent import CONTINUE_ID_REFUSED, ParentContext
from dsh_subprocess.testing import ProcessWatch
from oai_model import CLAUDE_ANSWER, NO_TRACING, tool_outputs

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

FIRST_TASK = "Remember the word GANNET-8a0e. Reply FIRST-ANSWER-2b6f."
FIRST_ANSWER = "FIRST-ANSWER-2b6f"
FOLLOW_UP = "Which word did I ask you to remember? FOLLOW-UP-c19d"
ID = re.compile(r"\[continuation id: (c-[0-9a-f]+) ")


@pytest.fixture
def continuing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer=CLAUDE_ANSWER, continuation=True) as running:
        yield running


def _outputs(call: ModelCall) -> list[str]:
    return (
        [output for _, output in tool_outputs(call.input)] if isinstance(call.input, list) else []
    )


def _follow_up(continue_id: str | None) -> Any:
    def respond(call: ModelCall) -> list[Any]:
        if continue_id is not None:
            chosen = continue_id
        else:
            found = ID.search(_outputs(call)[-1])
            chosen = found.group(1) if found else "none"
        arguments = {"description": "d", "prompt": FOLLOW_UP, "continue_id": chosen}
        return [function_call("subagent_codex", arguments, call_id=f"follow-{chosen}")]

    return ModelStep.respond(respond)


def _report() -> Any:
    return ModelStep.respond(lambda call: [assistant_message("\n---\n".join(_outputs(call)))])


async def test_the_parent_continues_its_subagent_and_another_session_is_refused(
    continuing: KeylessProducts,
) -> None:
    continuing.codex_model.enqueue(
        responses.PlainAnswer(FIRST_ANSWER, "final_answer"),
        responses.PlainAnswer("GANNET-8a0e", "final_answer"),
    )
    lead = ParentContext(session_id="agents-sdk-lead", cwd=str(continuing.workspace))
    other = ParentContext(session_id="agents-sdk-other", cwd=str(continuing.workspace))
    first_call = function_call(
        "subagent_codex", {"description": "d", "prompt": FIRST_TASK}, call_id="first"
    )
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(continuing.profile)) as runtime:
            tools: list[Tool] = list(SubagentFunctionTools(runtime.tools.values()).function_tools)
            model = ScriptedModel([[first_call], _follow_up(None), _report()])
            with anyio.fail_after(180):
                result = await Runner.run(
                    Agent(name="lead", model=model, tools=tools),
                    "Go.",
                    context=lead,
                    run_config=NO_TRACING,
                )
            first, follow = str(result.final_output).split("\n---\n")
            found = ID.search(first)
            assert found is not None, first
            intruder = ScriptedModel([_follow_up(found.group(1)), _report()])
            with anyio.fail_after(60):
                refused = await Runner.run(
                    Agent(name="other", model=intruder, tools=tools),
                    "Go.",
                    context=other,
                    run_config=NO_TRACING,
                )
            alive = watch.alive()
    assert first.startswith(FIRST_ANSWER + "\n\n[continuation id: c-")
    assert follow.startswith("GANNET-8a0e\n\n[continuation id: c-")
    assert str(refused.final_output) == f"Error: {CONTINUE_ID_REFUSED}"
    assert len(continuing.codex_model.requests) == 2  # the refused id reached no model
    follow_texts = continuing.codex_model.requests[1].input_texts()
    assert FIRST_TASK in follow_texts
    assert FOLLOW_UP in follow_texts
    assert FIRST_ANSWER in str(continuing.codex_model.requests[1].body)
    assert alive == []
