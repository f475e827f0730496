"""The first start per CODEX_HOME runs alone until its ``initialize`` succeeds (fake app-server).

Codex 0.163.0 loses a race on a fresh home's sqlite state when two app-servers start at
once (the keyless tier shows the real failure is gone); these tests pin the gate itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from codex_harness import (
    FakeCodex,
    Step,
    agent_message,
    answered,
    delegate,
    make_request,
    terminal,
    turn_start,
    wait_until,
)
from dsh_subagent import CancelController, ProductStartError, StartCancelledError, SubagentResult
from dsh_subagent_codex import CodexProvider
from dsh_subagent_codex.first_start import FIRST_STARTS, HomeKey, effective_codex_home

pytestmark = pytest.mark.anyio


def _held_initialize(ready: Path, go: Path, *then: Step) -> list[Step]:
    """Receive ``initialize``, mark ``ready``, wait for ``go``, then run ``then``."""
    return [
        {"op": "expect", "method": "initialize"},
        {"op": "ready", "path": str(ready)},
        {"op": "wait_file", "path": str(go)},
        *then,
    ]


def _after_initialize(text: str) -> list[Step]:
    return [
        {"op": "reply", "result": {"userAgent": "fake/0.163.0"}},
        {"op": "expect", "method": "initialized"},
        {"op": "expect", "method": "thread/start"},
        {"op": "reply", "result": {"thread": {"id": "thr-1", "ephemeral": True}}},
        *turn_start(),
        agent_message(text, "final_answer"),
        terminal(),
    ]


class _Home:
    def __init__(self, fake: FakeCodex, name: str = "codex-home") -> None:
        self.path = fake.root / name
        self.env = {"CODEX_HOME": str(self.path)}
        self.key: HomeKey = effective_codex_home(self.env, str(fake.workspace))


async def _collect(
    provider: CodexProvider,
    fake: FakeCodex,
    into: dict[str, Any],
    name: str,
    cancel: CancelController | None = None,
) -> None:
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            request = make_request(tg, str(fake.workspace), cancel=cancel)
            try:
                run = await provider.start(request)
            except ProductStartError as exc:
                into[name] = exc
                return
            try:
                into[name] = await run.result()
            finally:
                await run.dispose()


async def test_second_start_on_a_fresh_home_waits_for_the_first_initialize(
    fake: FakeCodex,
) -> None:
    home, other = _Home(fake), _Home(fake, "other-home")
    ready, go = fake.root / "first-ready", fake.root / "go"
    first = fake.provider(_held_initialize(ready, go, *_after_initialize("first")), env=home.env)
    second = fake.provider(answered(text="second"), env=home.env)
    elsewhere = fake.provider(answered(text="elsewhere"), env=other.env)
    results: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(_collect, first, fake, results, "first")
        await wait_until(ready.exists)
        assert FIRST_STARTS.state(home.key) == "starting"
        tg.start_soon(_collect, second, fake, results, "second")
        await wait_until(lambda: FIRST_STARTS.waiters(home.key) == 1)
        # Another home is not held up by this one.
        results["elsewhere"] = (await delegate(elsewhere, fake.workspace))[0]
        assert not fake.spawned(1), "the second start spawned before the first initialize"
        go.touch()
    assert [results[n].text for n in ("first", "second", "elsewhere")] == [
        "first",
        "second",
        "elsewhere",
    ]
    assert FIRST_STARTS.state(home.key) == "initialized"
    assert FIRST_STARTS.waiters(home.key) == 0


async def test_starts_on_an_initialized_home_run_concurrently(fake: FakeCodex) -> None:
    home = _Home(fake)
    assert (await delegate(fake.provider(answered(), env=home.env), fake.workspace))[0].text
    assert FIRST_STARTS.state(home.key) == "initialized"
    go = fake.root / "go"
    readies = [fake.root / f"ready-{i}" for i in range(2)]
    providers = [
        fake.provider(_held_initialize(r, go, *_after_initialize(f"run-{i}")), env=home.env)
        for i, r in enumerate(readies)
    ]
    results: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        for i, provider in enumerate(providers):
            tg.start_soon(_collect, provider, fake, results, f"run-{i}")
        # Both app-servers sit in initialize at the same time: nothing serialises them.
        await wait_until(lambda: all(r.exists() for r in readies))
        assert FIRST_STARTS.waiters(home.key) == 0
        go.touch()
    assert [results[f"run-{i}"].text for i in range(2)] == ["run-0", "run-1"]


@pytest.mark.parametrize("how", ["exit", "cancel"])
async def test_a_failed_first_start_releases_the_gate(fake: FakeCodex, how: str) -> None:
    home = _Home(fake)
    ready, go = fake.root / "first-ready", fake.root / "go"
    failing: list[Step] = [{"op": "exit", "code": 1}] if how == "exit" else [{"op": "hang"}]
    first = fake.provider(_held_initialize(ready, go, *failing), env=home.env)
    second = fake.provider(answered(text="second"), env=home.env)
    cancel = CancelController()
    results: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(_collect, first, fake, results, "first", cancel)
        await wait_until(ready.exists)
        tg.start_soon(_collect, second, fake, results, "second")
        await wait_until(lambda: FIRST_STARTS.waiters(home.key) == 1)
        assert not fake.spawned(1)
        if how == "exit":
            go.touch()
        else:
            cancel.cancel()
    failure = results["first"]
    assert isinstance(failure, ProductStartError)
    if how == "exit":
        assert str(failure) == (
            "subagent-codex: Product subagent failure "
            "(product: Codex; stage: initialize; category: process-exit; exit code: 1)"
        )
    else:
        assert isinstance(failure, StartCancelledError)
    second_result: SubagentResult = results["second"]
    assert (second_result.stop_reason, second_result.text) == ("completed", "second")
    assert FIRST_STARTS.state(home.key) == "initialized"


async def test_a_waiting_start_leaves_through_its_own_cancellation(fake: FakeCodex) -> None:
    home = _Home(fake)
    ready, go = fake.root / "first-ready", fake.root / "go"
    first = fake.provider(_held_initialize(ready, go, *_after_initialize("first")), env=home.env)
    waiting = fake.provider(answered(), env=home.env)
    cancel = CancelController()
    results: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(_collect, first, fake, results, "first")
        await wait_until(ready.exists)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as inner:
                request = make_request(inner, str(fake.workspace), cancel=cancel)

                async def start_waiting() -> None:
                    with pytest.raises(StartCancelledError) as caught:
                        await waiting.start(request)
                    results["waiting"] = caught.value

                inner.start_soon(start_waiting)
                await wait_until(lambda: FIRST_STARTS.waiters(home.key) == 1)
                cancel.cancel()
        assert str(results["waiting"]) == (
            "subagent-codex: the request was cancelled before the run was published"
        )
        assert FIRST_STARTS.waiters(home.key) == 0
        assert FIRST_STARTS.state(home.key) == "starting"  # the first start still holds it
        go.touch()
    assert not fake.spawned(1)
    assert results["first"].text == "first"


# -- which home -----------------------------------------------------------------------------


def test_the_overlay_wins_over_the_parent_environment(tmp_path: Path) -> None:
    parent = {"CODEX_HOME": str(tmp_path / "parent"), "HOME": str(tmp_path / "h")}
    key = effective_codex_home({"CODEX_HOME": str(tmp_path / "mine")}, "/", parent)
    assert key == os.path.realpath(tmp_path / "mine")


def test_the_parent_environment_is_used_without_an_overlay(tmp_path: Path) -> None:
    parent = {"CODEX_HOME": str(tmp_path / "parent"), "HOME": str(tmp_path / "h")}
    assert effective_codex_home({}, "/", parent) == os.path.realpath(tmp_path / "parent")


@pytest.mark.parametrize("codex_home", [None, ""])
def test_without_codex_home_the_child_home_dot_codex_is_used(
    tmp_path: Path, codex_home: str | None
) -> None:
    # A removed (None) or empty CODEX_HOME falls back to the child's own HOME.
    parent = {"CODEX_HOME": str(tmp_path / "parent"), "HOME": str(tmp_path / "parent-home")}
    overlay = {"CODEX_HOME": codex_home, "HOME": str(tmp_path / "child-home")}
    assert effective_codex_home(overlay, "/", parent) == os.path.realpath(
        tmp_path / "child-home" / ".codex"
    )


def test_relative_homes_resolve_against_the_cwd_and_symlinks_share_a_key(tmp_path: Path) -> None:
    real = tmp_path / "real-home"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    relative = effective_codex_home({"CODEX_HOME": "real-home"}, str(tmp_path), {})
    linked = effective_codex_home({"CODEX_HOME": str(tmp_path / "link")}, "/", {})
    assert relative == linked == os.path.realpath(real)
