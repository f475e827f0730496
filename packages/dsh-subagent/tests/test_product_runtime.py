"""The provider runtime against a real child process (``runtime_child.py``).

Each test drives one lifecycle path of :class:`ProductProvider` — start, every start
failure, settlement, cancellation in each phase, diagnostics and teardown — through a
provider that implements only the child's protocol, as a third-party author would.
The root conftest fails any test that leaves a process behind.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    CancelController,
    Launch,
    ProductChild,
    ProductFailureError,
    ProductStartError,
    StartCancelledError,
    SubagentError,
    SubagentErrorCode,
    SubagentService,
    TextBlock,
    add_run_observer,
    report_stage,
)
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver
from subagent_echo import EchoConfig, EchoProvider, SkippingEcho, assert_gone, request

pytestmark = pytest.mark.anyio


@pytest.fixture
async def service() -> AsyncIterator[SubagentService]:
    async with SubagentService() as subagents:
        yield subagents


async def test_a_completed_run_carries_the_answer(service: SubagentService, tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    run = await service.start("echo", request("answer forty-two", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert (result.stop_reason, result.text, result.diagnostic) == (COMPLETED, "forty-two", None)
    assert provider.interrupts == 0  # a run that finished is not interrupted
    assert_gone(provider)


async def test_product_stderr_is_logged_per_line_never_written_to_the_host(
    service: SubagentService,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    with caplog.at_level(logging.INFO, logger="dsh.product.echo"):
        run = await service.start("echo", request("stderr 100% product %s noise", str(tmp_path)))
        assert (await run.result()).text == "ok"
        await run.dispose()  # the drain has delivered every line once the tree is gone
    records = [r for r in caplog.records if r.name == "dsh.product.echo"]
    assert [r.getMessage() for r in records] == ["100% product %s noise"]
    assert (records[0].provider, records[0].run_id) == ("echo", run.id)  # type: ignore[attr-defined]
    assert "product" not in capfd.readouterr().err


async def test_a_request_aborted_before_start_spawns_nothing(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    cancel = CancelController()
    cancel.cancel("early")
    with pytest.raises(StartCancelledError) as caught:
        await service.start("echo", request("answer x", str(tmp_path), cancel))
    assert caught.value.code is SubagentErrorCode.START_CANCELLED
    assert provider.spawned == []


async def test_no_working_directory_is_loud_and_names_no_path(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    with pytest.raises(SubagentError) as no_cwd:
        await service.start("echo", request("answer x", None))
    missing = str(tmp_path / "does-not-exist")
    with pytest.raises(SubagentError) as bad_cwd:
        await service.start("echo", request("answer x", missing))
    assert no_cwd.value.code is bad_cwd.value.code is SubagentErrorCode.NO_WORKING_DIRECTORY
    assert missing not in bad_cwd.value.message
    assert provider.spawned == []


async def test_a_blank_task_is_refused_before_any_spawn(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    with pytest.raises(SubagentError) as caught:
        await service.start("echo", request("   ", str(tmp_path)))
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    assert provider.spawned == []


async def test_a_spawn_failure_names_the_spawn_stage(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig(argv0=str(tmp_path / "no-such-program")))
    service.register_provider(provider)
    with pytest.raises(ProductStartError) as caught:
        await service.start("echo", request("answer x", str(tmp_path)))
    assert caught.value.message == (
        "subagent-echo: Product subagent failure (product: Echo; stage: spawn; "
        "category: spawn-failed)"
    )
    assert str(tmp_path) not in caught.value.message


async def test_a_failed_handshake_rolls_back_and_raises_the_safe_line(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig(child_mode="bad-hello"))
    service.register_provider(provider)
    with pytest.raises(ProductStartError) as caught:
        await service.start("echo", request("answer x", str(tmp_path)))
    assert "stage: initialize; category: handshake" in caught.value.message
    assert not isinstance(caught.value, StartCancelledError)
    assert_gone(provider)


async def test_cancel_during_the_handshake_rolls_back_to_whole_tree_exit(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig(child_mode="silent-open"))
    service.register_provider(provider)
    cancel = CancelController()
    errors: list[BaseException] = []

    async def start() -> None:
        try:
            await service.start("echo", request("answer x", str(tmp_path), cancel))
        except BaseException as exc:
            errors.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(start)
        await provider.opening.wait()
        cancel.cancel("stop")
    assert len(errors) == 1
    assert isinstance(errors[0], StartCancelledError)
    assert_gone(provider)


async def test_the_product_exiting_mid_run_settles_error_with_its_exit_code(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    run = await service.start("echo", request("exit 3", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: process; category: process-exit; "
        "exit code: 3)"
    )


@pytest.mark.parametrize("code", [0, 1])
async def test_a_failure_the_product_reported_carries_no_exit_facts(
    service: SubagentService, tmp_path: Path, code: int
) -> None:
    # The product said what failed, then exited because the run was over: its exit is not
    # part of the failure ("error ...; exit code: 0" would read as a contradiction).
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    run = await service.start("echo", request(f"report quota-exceeded {code}", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: turn; category: quota-exceeded)"
    )


async def test_a_category_declared_as_the_products_exit_carries_its_exit_facts(
    service: SubagentService, tmp_path: Path
) -> None:
    class EndedEcho(EchoProvider):
        async def run(self, child: ProductChild) -> str:
            try:
                return await super().run(child)
            except ProductFailureError as exc:
                raise child.fail("stream-ended", exited=True) from exc

    service.register_provider(EndedEcho(EchoConfig()))
    run = await service.start("echo", request("report stream-ended 0", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: turn; category: stream-ended; "
        "exit code: 0)"
    )


async def test_the_runs_detail_joins_a_failure_that_names_none(
    service: SubagentService, tmp_path: Path
) -> None:
    class Detailed(EchoProvider):
        async def run(self, child: ProductChild) -> str:
            child.detail = "Echo decision (request: write): declined"
            return await super().run(child)

    service.register_provider(Detailed(EchoConfig()))
    run = await service.start("echo", request("exit 3", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: process; category: process-exit; "
        "exit code: 3)\nEcho decision (request: write): declined"
    )


async def test_a_line_over_the_bound_fails_the_run_with_a_fixed_category(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    run = await service.start("echo", request(f"long {4 * 1024 * 1024}", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: turn; category: line-too-long)"
    )
    assert_gone(provider)


@pytest.mark.parametrize(
    ("provider_type", "expected"),
    [
        (EchoProvider, (ERROR, "")),
        (SkippingEcho, (COMPLETED, "after garbage")),
    ],
)
async def test_the_malformed_line_policy_is_the_providers(
    service: SubagentService,
    tmp_path: Path,
    provider_type: type[EchoProvider],
    expected: tuple[str, str],
) -> None:
    service.register_provider(provider_type(EchoConfig()))
    run = await service.start("echo", request("garbage", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert (result.stop_reason, result.text) == expected
    if result.stop_reason == ERROR:
        assert result.diagnostic is not None
        assert "category: malformed-output" in result.diagnostic


async def test_cancel_mid_run_settles_aborted_with_partial_output_and_interrupts_once(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    cancel = CancelController()
    run = await service.start("echo", request("partial half an answer", str(tmp_path), cancel))
    await provider.in_turn.wait()
    cancel.cancel("user")
    result = await run.result()
    await run.dispose()
    await run.dispose()  # idempotent: one teardown
    assert (result.stop_reason, result.text, result.diagnostic) == (
        ABORTED,
        "half an answer",
        None,
    )
    assert provider.interrupts == 1
    assert_gone(provider)


async def test_dispose_of_an_unfinished_run_interrupts_once_then_ends_the_tree(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig())
    service.register_provider(provider)
    run = await service.start("echo", request("partial still working", str(tmp_path)))
    await provider.in_turn.wait()
    await run.dispose()
    result = await run.result()
    assert result.stop_reason == ABORTED
    assert provider.interrupts == 1
    assert_gone(provider)


async def test_the_configured_env_overlay_wins_over_the_launch_env(tmp_path: Path) -> None:
    seen: list[dict[str, str | None]] = []

    class Recording(EchoProvider):
        def launch(self, cwd: str) -> Launch:
            return Launch(argv=super().launch(cwd).argv, env={"A": "launch", "B": "launch"})

        async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
            seen.append(dict(spec.env))
            return await super().spawn(spec, stderr_observer)

    async with SubagentService() as service:
        service.register_provider(Recording(EchoConfig(env={"B": "config"})))
        run = await service.start("echo", request("answer x", str(tmp_path)))
        await run.result()
        await run.dispose()
    [env] = seen
    private = env.pop("TMPDIR")  # a confined run gets a private temporary directory
    assert env == {"A": "launch", "B": "config"}
    assert Path(str(private)).name.startswith("dsh-run-")


# -- the response bound ----------------------------------------------------------------------


class _BoundedHello(EchoProvider):
    """Echo whose hello is a direct response (bounded by the runtime)."""

    async def open(self, child: ProductChild) -> None:
        self.opening.set()
        await child.await_response(child.receive_json)


class _BoundedAnswer(EchoProvider):
    """Echo whose answer is a direct response (bounded once the child said hello)."""

    async def run(self, child: ProductChild) -> str:
        await child.send_json({"task": child.task})

        async def final() -> str:
            while True:
                message = await child.receive_json()
                assert isinstance(message, dict)
                if message["type"] == "partial":
                    child.output.append(TextBlock(text=message["text"]))
                elif message["type"] == "final":
                    return str(message["text"])

        return await child.await_response(final)


async def test_a_product_that_never_answers_its_handshake_fails_the_start(
    service: SubagentService, tmp_path: Path
) -> None:
    # The child reads stdin and never says hello: without the bound, start() waits forever.
    provider = _BoundedHello(EchoConfig(child_mode="silent-open", response_timeout_seconds=0.3))
    service.register_provider(provider)
    with pytest.raises(ProductStartError) as caught:
        await service.start("echo", request("answer x", str(tmp_path)))
    assert caught.value.message == (
        "subagent-echo: Product subagent failure (product: Echo; stage: initialize; "
        "category: response-timeout)"
    )
    assert_gone(provider)


async def test_a_request_never_answered_after_publication_settles_with_the_tree_gone(
    service: SubagentService, tmp_path: Path
) -> None:
    # The child sends a partial answer, then waits for EOF: the final one never comes.
    provider = _BoundedAnswer(EchoConfig(response_timeout_seconds=0.3))
    service.register_provider(provider)
    run = await service.start("echo", request("partial half", str(tmp_path)))
    result = await run.result()
    assert_gone(provider)  # before dispose: the runtime ended the tree at settlement
    await run.dispose()
    assert (result.stop_reason, result.text) == (ERROR, "half")
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: turn; category: response-timeout)"
    )


async def test_a_response_within_the_bound_is_not_affected(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = _BoundedAnswer(EchoConfig())
    service.register_provider(provider)
    run = await service.start("echo", request("answer in time", str(tmp_path)))
    result = await run.result()
    await run.dispose()
    assert (result.stop_reason, result.text) == (COMPLETED, "in time")


async def test_a_task_over_the_products_input_limit_is_refused_before_the_spawn(
    service: SubagentService, tmp_path: Path
) -> None:
    class Limited(EchoProvider):
        max_task_chars = 12

    provider = Limited(EchoConfig())
    service.register_provider(provider)
    with pytest.raises(SubagentError) as caught:
        await service.start("echo", request("answer thirteen", str(tmp_path)))
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    assert caught.value.message == (
        "subagent-echo: the task is 15 characters; Echo accepts at most 12 (its input limit): "
        "shorten it or pass the content as a file"
    )
    assert provider.spawned == []
    run = await service.start("echo", request("answer twelv", str(tmp_path)))  # at the limit
    assert (await run.result()).text == "twelv"
    await run.dispose()


class _StageLog:
    """An observer whose observations record the stages a start reports, then how it ended."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def start_requested(self, name: str, provider: object, request: object) -> _StageLog:
        return self

    def stage_entered(self, stage: str) -> None:
        self.events.append(stage)

    def start_failed(self, error: BaseException) -> None:
        self.events.append("start-failed")

    def started(self, run: object) -> None:
        self.events.append("started")

    def settled(self, result: object, error: object) -> None:
        self.events.append("settled")

    def teardown_started(self) -> None:
        pass

    def teardown_ended(self, error: object) -> None:
        pass


async def test_a_start_reports_its_stages_to_observers_before_it_is_published(
    service: SubagentService, tmp_path: Path
) -> None:
    log = _StageLog()
    remove = add_run_observer(log)
    try:
        service.register_provider(EchoProvider(EchoConfig()))
        run = await service.start("echo", request("answer x", str(tmp_path)))
        await run.result()
        await run.dispose()
        failing = EchoProvider(EchoConfig(argv0=str(tmp_path / "no-such-program")))
        failing_service = SubagentService()
        async with failing_service:
            failing_service.register_provider(failing)
            with pytest.raises(ProductStartError):
                await failing_service.start("echo", request("answer x", str(tmp_path)))
    finally:
        remove()
    assert log.events == [
        "launch", "spawn", "initialize", "started", "settled",
        "launch", "spawn", "start-failed",
    ]  # fmt: skip
    report_stage("outside-any-start")  # nothing observes it: no effect, no error
    assert log.events[-1] == "start-failed"
