"""A pydantic-ai agent delegates to the REAL Codex and Claude Code (keyless tier).

pydantic-ai's FunctionModel plays the calling agent; the tools come from a Loader
profile exactly as ``dsh tools`` prints them; both products answer through the loopback
model fixtures in isolated homes. Never skipped: a missing product fails. Each test
proves with a :class:`ProcessWatch` that the product trees are gone when the agent run
(or its cancellation) has returned.
"""

from __future__ import annotations

import json

import anyio
import pytest
from dsh_cli.cli import main
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import KeylessProducts
from dsh_profiles import load_profile, open_runtime
from dsh_pydantic_ai import SubagentToolset
from dsh_subagent import ParentContext
from dsh_subprocess.testing import ProcessWatch
from pai_model import CLAUDE_ANSWER, Steps, call, tool_returns
from pai_readme import run_block
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.exceptions import RunCancelled

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

CODEX_ANSWER = "PYDANTIC_AI_CODEX_SENTINEL"
TASK = "Reply with the sentinel and nothing else."


def parent(products: KeylessProducts) -> ParentContext:
    return ParentContext(session_id="pydantic-ai-lead", cwd=str(products.workspace))


async def test_the_agent_sees_what_dsh_tools_prints(
    products: KeylessProducts, capsys: pytest.CaptureFixture[str]
) -> None:
    # `dsh tools` runs its own event loop: call it from a worker thread.
    assert await anyio.to_thread.run_sync(main, ["tools", str(products.profile)]) == 0
    printed = json.loads(capsys.readouterr().out)
    steps = Steps()
    async with open_runtime(load_profile(products.profile)) as runtime:
        agent = Agent(steps.model(), toolsets=[SubagentToolset(runtime.tools.values())])
        await agent.run("Which tools do you have?", deps=parent(products))
    seen = [
        {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
        for t in steps.infos[0].function_tools
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
    steps = Steps(
        [
            call("subagent_codex", description="Codex sentinel", prompt=TASK),
            call("subagent_claude_code", description="Claude sentinel", prompt=TASK),
        ]
    )
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            agent = Agent(steps.model(), toolsets=[SubagentToolset(runtime.tools.values())])
            with anyio.fail_after(180):
                result = await agent.run("Ask both products.", deps=parent(products))
            alive_after_run = watch.alive()
    returned = {part.tool_name: part for part in tool_returns(result.all_messages())}
    assert returned["subagent_codex"].content == CODEX_ANSWER
    assert returned["subagent_claude_code"].content == CLAUDE_ANSWER
    assert result.output == f"{CODEX_ANSWER}\n{CLAUDE_ANSWER}"
    (codex_request,) = products.codex_model.requests
    assert codex_request.bearer_token == products.codex_key
    assert TASK in codex_request.input_texts()
    (claude_request,) = products.claude_model.message_requests()
    assert messages.task_texts(claude_request, TASK) == [TASK]
    assert {"codex", "claude"} <= {seen.name for seen in watch.seen}
    assert alive_after_run == []


async def test_run_in_background_on_real_claude_code_and_job_output(
    products: KeylessProducts,
) -> None:
    lead = parent(products)
    steps = Steps(
        [
            call(
                "subagent_claude_code",
                description="Claude job",
                prompt=TASK,
                run_in_background=True,
            )
        ],
        [call("job_output", job_id="subagent-1", wait=True, timeout_ms=120_000)],
    )
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            agent = Agent(steps.model(), toolsets=[SubagentToolset(runtime.tools.values())])
            with anyio.fail_after(180):
                result = await agent.run("Delegate in the background.", deps=lead)
            await runtime.jobs.dispose_owner(lead)
            alive_after_collect = watch.alive()
    started, collected = tool_returns(result.all_messages())
    assert started.content == "started background subagent job subagent-1"
    assert collected.content == f"{CLAUDE_ANSWER}\n[status: completed]"
    assert any(seen.name == "claude" for seen in watch.seen)
    assert alive_after_collect == []


async def test_cancelling_the_run_task_leaves_no_codex_process(products: KeylessProducts) -> None:
    products.codex_model.enqueue(responses.Hold())
    steps = Steps([call("subagent_codex", description="Held", prompt=TASK)])
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            toolset = SubagentToolset(runtime.tools.values())
            agent = Agent(steps.model(), toolsets=[toolset])
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(lambda: agent.run("Go.", deps=parent(products)))
                    await anyio.to_thread.run_sync(products.codex_model.wait_for_hold)
                    assert any(p.name() == "codex" for p in watch.product_roots())
                    scope.cancel()
            # No grace period: the cancelled run returned only after the tree was gone.
            alive_after_cancel = watch.alive()
            in_flight_after_cancel = toolset.in_flight
    assert scope.cancelled_caught
    assert alive_after_cancel == []
    assert in_flight_after_cancel == 0


async def test_pydantic_ais_own_cancel_leaves_no_claude_code_process(
    products: KeylessProducts,
) -> None:
    products.claude_model.enqueue(messages.Hold())
    steps = Steps([call("subagent_claude_code", description="Held", prompt=TASK)])
    token = CancellationToken()
    cancelled: list[RunCancelled] = []
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            agent = Agent(steps.model(), toolsets=[SubagentToolset(runtime.tools.values())])

            async def run() -> None:
                try:
                    await agent.run("Go.", deps=parent(products), cancellation_token=token)
                except RunCancelled as exc:
                    cancelled.append(exc)

            async with anyio.create_task_group() as group:
                group.start_soon(run)
                await anyio.to_thread.run_sync(products.claude_model.wait_for_holds, 1, 60.0)
                assert any(p.name() == "claude" for p in watch.product_roots())
                token.cancel()
            alive_after_cancel = watch.alive()
    assert len(cancelled) == 1
    assert alive_after_cancel == []


async def test_the_readme_profile_example_runs_with_the_real_products(
    products: KeylessProducts,
) -> None:
    ask = run_block("With a Loader profile and the real products")["ask"]
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    steps = Steps(
        [call("subagent_codex", description="Codex sentinel", prompt=TASK)],
        [call("subagent_claude_code", description="Claude sentinel", prompt=TASK)],
    )
    with ProcessWatch() as watch:
        with anyio.fail_after(180):
            output = await ask(str(products.profile), str(products.workspace), steps.model(), TASK)
        alive_after = watch.alive()
    assert output == f"{CODEX_ANSWER}\n{CLAUDE_ANSWER}"
    assert alive_after == []
