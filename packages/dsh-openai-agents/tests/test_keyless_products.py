"""An Agents SDK agent delegates to the REAL Codex and Claude Code (keyless tier).

The SDK's ScriptedModel plays the calling agent; the tools come from a Loader profile
exactly as ``dsh tools`` prints them; both products answer through the loopback model
fixtures in isolated homes. Tracing is off (conftest). Never skipped: a missing product
fails. Each test proves with a :class:`ProcessWatch` that the product trees are gone.
"""

from __future__ import annotations

import json

import anyio
import pytest
from agents import Agent, FunctionTool, Runner
from dsh_cli.cli import main
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import KeylessProducts
from dsh_openai_agents import SubagentFunctionTools
from dsh_profiles import load_profile, open_runtime
from dsh_subagent import ParentContext
from dsh_subprocess.testing import ProcessWatch
from oai_model import CLAUDE_ANSWER, NO_TRACING, lead_model
from oai_readme import run_block

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

CODEX_ANSWER = "AGENTS_SDK_CODEX_SENTINEL"
TASK = "Reply with the sentinel and nothing else."


def parent(products: KeylessProducts) -> ParentContext:
    return ParentContext(session_id="agents-sdk-lead", cwd=str(products.workspace))


async def test_the_agent_sees_what_dsh_tools_prints(
    products: KeylessProducts, capsys: pytest.CaptureFixture[str]
) -> None:
    # `dsh tools` runs its own event loop: call it from a worker thread.
    assert await anyio.to_thread.run_sync(main, ["tools", str(products.profile)]) == 0
    printed = json.loads(capsys.readouterr().out)
    model = lead_model()
    async with open_runtime(load_profile(products.profile)) as runtime:
        tools = SubagentFunctionTools(runtime.tools.values())
        agent = Agent(name="lead", model=model, tools=list(tools.function_tools))
        await Runner.run(agent, "Which tools?", context=parent(products), run_config=NO_TRACING)
    (model_call,) = model.calls
    seen = [
        {"name": t.name, "description": t.description, "parameters": t.params_json_schema}
        for t in model_call.tools
        if isinstance(t, FunctionTool)
    ]
    assert seen == printed
    assert [tool["name"] for tool in printed] == [
        "subagent_codex",
        "subagent_claude_code",
        "job_output",
        "job_list",
        "job_kill",
    ]


async def test_the_agent_delegates_to_real_codex_and_claude_code(
    products: KeylessProducts,
) -> None:
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    model = lead_model(
        [
            ("subagent_codex", {"description": "Codex sentinel", "prompt": TASK}),
            ("subagent_claude_code", {"description": "Claude sentinel", "prompt": TASK}),
        ]
    )
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            tools = SubagentFunctionTools(runtime.tools.values())
            agent = Agent(name="lead", model=model, tools=list(tools.function_tools))
            with anyio.fail_after(180):
                result = await Runner.run(
                    agent, "Ask both products.", context=parent(products), run_config=NO_TRACING
                )
            alive_after_run = watch.alive()
    assert result.final_output == f"{CODEX_ANSWER}\n{CLAUDE_ANSWER}"
    (codex_request,) = products.codex_model.requests
    assert codex_request.bearer_token == products.codex_key
    assert TASK in codex_request.input_texts()
    (claude_request,) = products.claude_model.message_requests()
    assert messages.task_texts(claude_request, TASK) == [TASK]
    assert {"codex", "claude"} <= {seen.name for seen in watch.seen}
    assert alive_after_run == []


async def test_run_in_background_on_real_codex_and_job_output(products: KeylessProducts) -> None:
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    lead = parent(products)
    background = {"description": "Codex job", "prompt": TASK, "run_in_background": True}
    model = lead_model(
        [("subagent_codex", background)],
        [("job_output", {"job_id": "subagent-1", "wait": True, "timeout_ms": 120_000})],
    )
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            tools = SubagentFunctionTools(runtime.tools.values())
            agent = Agent(name="lead", model=model, tools=list(tools.function_tools))
            with anyio.fail_after(180):
                result = await Runner.run(agent, "Go.", context=lead, run_config=NO_TRACING)
            await runtime.jobs.dispose_owner(lead)
            alive_after_collect = watch.alive()
    assert result.final_output == (
        f"started background subagent job subagent-1\n{CODEX_ANSWER}\n[status: completed]"
    )
    assert any(seen.name == "codex" for seen in watch.seen)
    assert alive_after_collect == []


async def test_cancelling_the_run_task_leaves_no_claude_code_process(
    products: KeylessProducts,
) -> None:
    products.claude_model.enqueue(messages.Hold())
    model = lead_model([("subagent_claude_code", {"description": "Held", "prompt": TASK})])
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            tools = SubagentFunctionTools(runtime.tools.values())
            agent = Agent(name="lead", model=model, tools=list(tools.function_tools))
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        lambda: Runner.run(
                            agent, "Go.", context=parent(products), run_config=NO_TRACING
                        )
                    )
                    await anyio.to_thread.run_sync(products.claude_model.wait_for_holds, 1, 60.0)
                    assert any(p.name() == "claude" for p in watch.product_roots())
                    scope.cancel()
            await tools.wait_idle()
            alive_after_cancel = watch.alive()
    assert scope.cancelled_caught
    assert alive_after_cancel == []


async def test_the_sdks_own_cancel_of_a_streamed_run_leaves_no_codex_process(
    products: KeylessProducts,
) -> None:
    products.codex_model.enqueue(responses.Hold())
    model = lead_model([("subagent_codex", {"description": "Held", "prompt": TASK})])
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            tools = SubagentFunctionTools(runtime.tools.values())
            agent = Agent(name="lead", model=model, tools=list(tools.function_tools))
            streamed = Runner.run_streamed(
                agent, "Go.", context=parent(products), run_config=NO_TRACING
            )
            async with anyio.create_task_group() as group:

                async def cancel_once_codex_holds() -> None:
                    await anyio.to_thread.run_sync(products.codex_model.wait_for_hold)
                    assert any(p.name() == "codex" for p in watch.product_roots())
                    streamed.cancel()

                group.start_soon(cancel_once_codex_holds)
                async for _ in streamed.stream_events():
                    pass
            await tools.wait_idle()
            alive_after_cancel = watch.alive()
    assert alive_after_cancel == []
    assert len(products.codex_model.requests) == 1


async def test_the_readme_profile_example_runs_with_the_real_products(
    products: KeylessProducts,
) -> None:
    ask = run_block("With a Loader profile and the real products")["ask"]
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    model = lead_model(
        [("subagent_codex", {"description": "Codex sentinel", "prompt": TASK})],
        [("subagent_claude_code", {"description": "Claude sentinel", "prompt": TASK})],
    )
    with ProcessWatch() as watch:
        with anyio.fail_after(180):
            output = await ask(str(products.profile), str(products.workspace), model, TASK)
        alive_after = watch.alive()
    assert output == f"{CODEX_ANSWER}\n{CLAUDE_ANSWER}"
    assert alive_after == []
