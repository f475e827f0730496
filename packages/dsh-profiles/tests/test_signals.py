"""``cancellation``: the call's own controller, following the caller's signal."""

from __future__ import annotations

import os
import signal

import pytest
from dsh_profiles.signals import cancellation
from dsh_subagent import CancelController

pytestmark = pytest.mark.anyio


def _unexpected(text: str) -> None:
    raise AssertionError(f"no signal was sent, yet: {text}")


def _first(name: str) -> str:
    return f"{name}: cancelling"


async def test_the_callers_cancel_reaches_the_block_and_its_listener_goes_with_it() -> None:
    caller = CancelController()
    async with cancellation(
        caller.signal, handle_signals=False, notify=_unexpected, first=_first, again="again"
    ) as controller:
        assert not controller.signal.aborted
        assert len(caller.signal._listeners) == 1
        caller.cancel("the host said stop")
        assert controller.signal.reason == "the host said stop"
    later = CancelController()
    async with cancellation(
        later.signal, handle_signals=False, notify=_unexpected, first=_first, again="again"
    ) as controller:
        pass
    assert later.signal._listeners == []  # nothing of the block stays on the caller's signal
    assert not controller.signal.aborted


async def test_a_caller_cancelled_before_the_block_starts_it_cancelled() -> None:
    caller = CancelController()
    caller.cancel("too late")
    async with cancellation(
        caller.signal, handle_signals=False, notify=_unexpected, first=_first, again="again"
    ) as controller:
        assert controller.signal.reason == "too late"


async def test_the_callers_signal_is_never_cancelled_by_the_blocks_own() -> None:
    caller = CancelController()
    notices: list[str] = []
    async with cancellation(
        caller.signal, handle_signals=True, notify=notices.append, first=_first, again="again"
    ) as controller:
        os.kill(os.getpid(), signal.SIGINT)
        reason = await controller.signal.wait()
    assert reason == "interrupted (SIGINT)"
    assert notices == ["SIGINT: cancelling"]
    assert not caller.signal.aborted  # the block's controller is its own
