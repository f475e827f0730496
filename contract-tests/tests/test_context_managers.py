"""The kit's context managers let a body's exception reach the caller as itself."""

from __future__ import annotations

import anyio
import pytest
from dsh_contract_tests.driver import drive
from dsh_contract_tests.fixtures.messages import MessagesFixture
from dsh_contract_tests.fixtures.responses import ResponsesFixture
from dsh_subagent import ParentContext, ProductStartError, SubagentStartRequest, TextBlock
from dsh_subagent.testing import Script, ScriptedProvider


def _request() -> SubagentStartRequest:
    return SubagentStartRequest(prompt=(TextBlock(text="x"),), parent=ParentContext(session_id="s"))


@pytest.mark.anyio
async def test_drive_raises_a_start_error_from_its_body_unwrapped() -> None:
    line = "Product subagent failure (product: P; stage: spawn)"
    provider = ScriptedProvider("p", [Script(start_error=ProductStartError(line))])

    async def body() -> None:
        async with drive(provider) as driver:
            await driver.start(_request())

    with pytest.raises(ProductStartError, match=r"stage: spawn\)") as caught:
        await body()
    assert type(caught.value) is ProductStartError


@pytest.mark.anyio
async def test_drive_raises_a_plain_body_error_unwrapped_and_disposes_the_run() -> None:
    provider = ScriptedProvider("p", [Script(hold_result=anyio.Event())])
    error = ValueError("the body's own")

    async def body() -> None:
        async with drive(provider) as driver:
            await driver.start(_request())
            await provider.wait_attempts()
            raise error

    with pytest.raises(ValueError, match="the body's own") as caught:
        await body()
    assert caught.value is error
    assert provider.records[0].teardowns == 1


@pytest.mark.parametrize("fixture_type", [ResponsesFixture, MessagesFixture])
def test_the_loopback_fixtures_pass_a_body_error_through(
    fixture_type: type[ResponsesFixture] | type[MessagesFixture],
) -> None:
    error = ValueError("the body's own")
    with pytest.raises(ValueError, match="the body's own") as caught, fixture_type():
        raise error
    assert caught.value is error
