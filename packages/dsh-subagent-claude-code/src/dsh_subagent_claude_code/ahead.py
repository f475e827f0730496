"""A ready CLI taken past the Agent SDK's handshake before its task arrives.

``query()`` sends the SDK's ``initialize`` control request, waits for the CLI's answer,
then writes the prompt: the handshake waits for the task. A ready product makes the
same handshake ahead through the SDK's streaming connect (``ClaudeSDKClient.connect``
with a prompt stream, public API): the SDK sends ``initialize`` and waits for the
answer; the stream then yields one user message when the task arrives, the very frame
``query()`` writes for a string prompt, and ends, after which the SDK closes the CLI's
stdin at the run's end exactly as ``query()`` does. So the CLI sees the same frames in
the same order, only the first ones earlier.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, Message
from dsh_subagent import ProductChild

from dsh_subagent_claude_code.transport import ManagedCLITransport

__all__ = ["Connected", "OnePrompt", "connect_ahead"]

RunT = TypeVar("RunT")


class OnePrompt:
    """The prompt stream of a connected CLI: one user message once :meth:`give` is
    called, then its end; nothing at all after :meth:`withdraw`."""

    def __init__(self) -> None:
        self._task: str | None = None
        self._decided = anyio.Event()
        self._finished = False

    def give(self, task: str) -> None:
        """The task arrived: the stream yields it."""
        if not self._decided.is_set():
            self._task = task
            self._decided.set()

    def withdraw(self) -> None:
        """No task will come: the stream ends without a message."""
        self._decided.set()

    def __aiter__(self) -> OnePrompt:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._finished:
            raise StopAsyncIteration
        await self._decided.wait()
        self._finished = True
        if self._task is None:
            raise StopAsyncIteration
        # query()'s own frame for a string prompt (the SDK stamps it the same way).
        return {
            "type": "user",
            "session_id": "",
            "message": {"role": "user", "content": self._task},
            "parent_tool_use_id": None,
        }


@dataclass
class Connected(Generic[RunT]):
    """What a ready CLI's ``child.state`` holds: the connected client, its prompt
    stream and the run facts its callbacks record into."""

    client: ClaudeSDKClient
    prompt: OnePrompt
    run: RunT

    def messages(self, task: str) -> AsyncGenerator[Message, None]:
        """Hand the CLI its task; the run's messages, as ``query()`` yields them."""
        self.prompt.give(task)
        return cast(AsyncGenerator[Message, None], self.client.receive_messages())

    async def close(self) -> None:
        """End the SDK's tasks and the prompt stream (idempotent, shielded)."""
        self.prompt.withdraw()
        with anyio.CancelScope(shield=True):
            await self.client.disconnect()


async def connect_ahead(
    child: ProductChild, options: Callable[[], ClaudeAgentOptions], run: RunT
) -> Connected[RunT]:
    """The SDK connected over ``child``'s stdio: ``initialize`` sent and answered, within
    the instance's ``response_timeout_seconds``.

    Raises:
        ProductFailureError: ``response-timeout`` when the CLI did not answer in time.
        Exception: what the SDK raised for a failed handshake (it disconnected itself).
    """
    prompt = OnePrompt()
    client = ClaudeSDKClient(options(), transport=ManagedCLITransport(child))
    try:
        await child.await_response(lambda: client.connect(prompt))
    except BaseException:
        prompt.withdraw()
        with anyio.CancelScope(shield=True):
            await client.disconnect()
        raise
    return Connected(client, prompt, run)
