"""The base classes a provider author subclasses: one named test per manifest rule.

Usage, in the author's own test module::

    class TestMyProvider(ProviderContract):
        @pytest.fixture
        def provider_factory(self) -> ProviderFactory:
            return lambda setup: MyProvider(MyProvider.Config(env=dict(setup.env)))

Capabilities are read from the provider's own declaration. A single rule is opted out
only by overriding its test with ``@pytest.mark.xfail(strict=True, reason=...)``;
:meth:`ProviderContract.test_no_silent_opt_out` fails for anything quieter.
"""

from __future__ import annotations

import inspect
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    MAX_SUBAGENT_DIAGNOSTIC_BYTES,
    NO_START_CAPABILITIES,
    AgentOptions,
    CancelController,
    ParentContext,
    SubagentError,
    SubagentErrorCode,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dsh_contract_tests.driver import ServiceDriver, drive
from dsh_contract_tests.manifest import requirement
from dsh_contract_tests.processes import ProcessWatch
from dsh_contract_tests.scenario import (
    ENV_ERROR_TEXT,
    ENV_READY_DIR,
    ENV_STDERR_TEXT,
    Behaviour,
    ChildSetup,
    Directive,
    PlantedSecrets,
    ProductHome,
    ProviderFactory,
    new_token,
)

__all__ = [
    "ContractHarness",
    "CredentialedProviderContract",
    "ProviderContract",
    "check_no_silent_opt_out",
]

PLANTED_CREDENTIAL_NAME = "CONTRACT_PLANTED_API_KEY"
"""Credential-shaped parent variable the env rule plants (must be scrubbed)."""
OVERLAY_CREDENTIAL_NAME = "CONTRACT_OVERLAY_API_KEY"
"""Credential-shaped variable the kit layers explicitly (must reach the child)."""
PLANTED_VALUE_NAME = "CONTRACT_PLANTED_VALUE"
"""Plain parent variable carrying the secret rule's env value (may reach the child)."""

_PRODUCT_LINE = re.compile(
    r"Product subagent failure \(product: [^;()\n]+; stage: [^;()\n]+"
    r"(; category: [^;()\n]+)?(; HTTP status: \d+)?(; exit code: -?\d+)?(; signal: [A-Z0-9]+)?\)"
)

# One value per gated request field, each present (not merely truthy: max_depth=0 counts).
_GATED_FIELDS: dict[str, tuple[str, Any]] = {
    "agent_options": ("agent_options", AgentOptions(model="contract-model")),
    "output_schema": ("output_schema", {"type": "object"}),
    "depth_limit": ("max_depth", 0),
    "tool_filter": ("tool_filter", ToolFilter(allow=("read",))),
    "persona": ("persona", "contract persona"),
}

_SECRET_TAIL = st.text(
    alphabet=st.sampled_from(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_é中🙂"
    ),
    min_size=4,
    max_size=24,
)


@dataclass
class ContractHarness:
    """Per-test helper the kit's tests share: setups, requests, the service, processes.

    Attributes:
        factory: The author's provider factory.
        root: A private temporary directory for this test.
        monkeypatch: Used to plant parent environment variables and move the host cwd.
        hold_timeout: Seconds a holding child may take to reach its hold point.
        settle_timeout: Seconds any single start, result or dispose may take.
        wait_until_holding: How the kit learns a hold run is working (see
            :meth:`ProviderContract.wait_until_holding`).
    """

    factory: ProviderFactory
    root: Path
    monkeypatch: pytest.MonkeyPatch
    hold_timeout: float
    settle_timeout: float
    wait_until_holding: Callable[[ChildSetup, str], Awaitable[None]]
    watch: ProcessWatch = field(default_factory=ProcessWatch)
    _count: int = 0

    def _dir(self, name: str) -> Path:
        self._count += 1
        path = self.root / f"{self._count:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def workspace(self, name: str = "workspace") -> Path:
        """A fresh parent-session workspace directory."""
        return self._dir(name)

    def setup(
        self, *, cwd_override: str | None = None, secrets: PlantedSecrets | None = None
    ) -> ChildSetup:
        """A fresh :class:`ChildSetup` with temporary homes and the kit's overlay."""
        base = self._dir("setup")
        home = ProductHome(base / "home", base / "codex-home", base / "claude", base / "tmp")
        for path in (home.home, home.codex_home, home.claude_config_dir, home.tmpdir):
            path.mkdir()
        ready = base / "ready"
        ready.mkdir()
        scratch = base / "scratch"
        scratch.mkdir()
        error_text = secrets.raw_error if secrets else "contract raw error " + "中" * 1500
        stderr_text = secrets.stderr if secrets else "contract stderr line"
        env = {
            **home.env(),
            ENV_READY_DIR: str(ready),
            ENV_ERROR_TEXT: error_text,
            ENV_STDERR_TEXT: stderr_text,
            OVERLAY_CREDENTIAL_NAME: "overlay-" + uuid.uuid4().hex,
        }
        return ChildSetup(
            env=env,
            cwd_override=cwd_override,
            home=home,
            ready_dir=ready,
            scratch=scratch,
            error_text=error_text,
            stderr_text=stderr_text,
            secrets=secrets,
        )

    def provider(self, setup: ChildSetup) -> SubagentProvider:
        """Build the provider under test through the author's factory."""
        return self.factory(setup)

    def request(
        self,
        behaviour: Behaviour,
        *,
        cwd: Path | None,
        cancel: CancelController | None = None,
        task_text: str = "",
        **fields: Any,
    ) -> tuple[SubagentStartRequest, Directive, CancelController]:
        """A start request whose task carries the behaviour directive."""
        directive = Directive(behaviour, new_token())
        controller = cancel or CancelController()
        text = f"{directive.line}\nContract task. {task_text}".rstrip()
        request = SubagentStartRequest(
            prompt=(TextBlock(text=text),),
            parent=ParentContext(
                session_id="contract-" + uuid.uuid4().hex[:8],
                cwd=None if cwd is None else str(cwd),
            ),
            cancel=controller.signal,
            label="contract",
            **fields,
        )
        return request, directive, controller

    @asynccontextmanager
    async def service(self, provider: SubagentProvider) -> AsyncIterator[ServiceDriver]:
        """A fresh service with ``provider`` registered."""
        async with drive(provider) as driver:
            yield driver

    async def result(self, run: SubagentRun) -> SubagentResult:
        """``run.result()`` bounded by the settle timeout."""
        with anyio.fail_after(self.settle_timeout):
            return await run.result()

    async def dispose(self, run: SubagentRun) -> None:
        """``run.dispose()`` bounded by the settle timeout."""
        with anyio.fail_after(self.settle_timeout):
            await run.dispose()

    async def holding(self, setup: ChildSetup, directive: Directive) -> None:
        """Wait until the hold run reached its hold point."""
        with anyio.fail_after(self.hold_timeout):
            await self.wait_until_holding(setup, directive.token)

    def assert_quiescent(self, when: str) -> None:
        """Fail (after killing them) if any process of the run's tree is alive."""
        leftover = self.watch.kill_leftovers()
        assert not leftover, f"processes of the run's tree alive {when}: {'; '.join(leftover)}"


async def _wait_ready_file(setup: ChildSetup, token: str) -> None:
    path = setup.ready_path(token)
    while not path.exists():  # noqa: ASYNC110 - the child signals through the file system
        await anyio.sleep(0.01)


def _kit_test_names(kit: type) -> list[str]:
    return sorted(n for n, v in vars(kit).items() if n.startswith("test_") and callable(v))


def _xfail_strict_with_reason(func: object) -> bool:
    for mark in getattr(func, "pytestmark", []):
        if mark.name == "xfail" and mark.kwargs.get("strict") is True:
            reason = mark.kwargs.get("reason") or (mark.args[1] if len(mark.args) > 1 else "")
            if isinstance(reason, str) and reason.strip():
                return True
    return False


def check_no_silent_opt_out(cls: type, kit: type) -> list[str]:
    """Problems with ``cls``'s use of the kit base ``kit`` (empty when it is honest)."""
    problems: list[str] = []
    for name in _kit_test_names(kit):
        own = getattr(cls, name, None)
        if own is None or not callable(own):
            problems.append(f"{name} was removed")
            continue
        if own is not vars(kit)[name] and not _xfail_strict_with_reason(own):
            problems.append(
                f"{name} is overridden without @pytest.mark.xfail(strict=True, reason=...)"
            )
    return problems


class ProviderContract:
    """The keyless and loader tiers of the contract, for any provider.

    Override :meth:`provider_factory` (required), and where needed
    :meth:`wait_until_holding` (product providers: poll the loopback model fixture for
    the held request) and :meth:`loader_config`. Set :attr:`entry_point_name` to the
    provider's name in the ``dsh.subagent.providers`` entry-point group.
    """

    entry_point_name: ClassVar[str | None] = None
    hold_timeout: ClassVar[float] = 60.0
    settle_timeout: ClassVar[float] = 60.0
    concurrency: ClassVar[int] = 3
    secret_examples: ClassVar[int] = 4

    @pytest.fixture
    def provider_factory(self) -> ProviderFactory:
        """The author's factory: :class:`ChildSetup` in, provider instance out."""
        raise NotImplementedError("override the provider_factory fixture in your test class")

    async def wait_until_holding(self, setup: ChildSetup, token: str) -> None:
        """Return once the ``hold`` run with ``token`` is working (default: ready file)."""
        await _wait_ready_file(setup, token)

    def loader_config(self, setup: ChildSetup) -> dict[str, Any]:
        """Configuration the loader rule validates with the provider's ``Config``."""
        return {"env": dict(setup.env)}

    @pytest.fixture
    def contract(
        self,
        provider_factory: ProviderFactory,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> Iterator[ContractHarness]:
        """The per-test harness."""
        harness = ContractHarness(
            factory=provider_factory,
            root=tmp_path / "contract",
            monkeypatch=monkeypatch,
            hold_timeout=self.hold_timeout,
            settle_timeout=self.settle_timeout,
            wait_until_holding=self.wait_until_holding,
        )
        harness.root.mkdir()
        yield harness
        harness.watch.kill_leftovers()

    # -- guard -------------------------------------------------------------------------

    @requirement("kit:no-silent-opt-out")
    def test_no_silent_opt_out(self) -> None:
        """Every kit test is present; an override carries a strict xfail with a reason."""
        problems = check_no_silent_opt_out(type(self), ProviderContract)
        assert not problems, "; ".join(problems)

    # -- capability --------------------------------------------------------------------

    @requirement("capability:refused-before-start")
    @pytest.mark.parametrize("flag", sorted(_GATED_FIELDS))
    @pytest.mark.anyio
    async def test_unsupported_capability_refused_before_start(
        self, contract: ContractHarness, flag: str
    ) -> None:
        """A request needing an undeclared capability never reaches ``start()``."""
        setup = contract.setup()
        provider = contract.provider(setup)
        if getattr(provider.capabilities, flag):
            pytest.skip(f"the provider declares the {flag!r} capability")
        field_name, value = _GATED_FIELDS[flag]
        request, _, _ = contract.request(
            "complete", cwd=contract.workspace(), **{field_name: value}
        )
        async with contract.service(provider) as svc:
            with pytest.raises(SubagentError) as caught:
                await svc.start(request)
            assert caught.value.code == SubagentErrorCode.UNSUPPORTED_CAPABILITY
            assert flag in caught.value.message or field_name in caught.value.message
            assert svc.spy.start_calls == 0, "provider.start() ran for a refused request"
            assert svc.events == [], "a refused request emitted lifecycle events"
        assert contract.watch.ever_seen == 0
        assert not contract.watch.alive()

    @requirement("capability:out-of-process-declares-none")
    @pytest.mark.anyio
    async def test_out_of_process_declares_no_capability(self, contract: ContractHarness) -> None:
        """A provider whose runs live in another process promises nothing it cannot keep."""
        setup = contract.setup()
        provider = contract.provider(setup)
        request, _, _ = contract.request("complete", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                await contract.result(run)
            finally:
                await contract.dispose(run)
        if run.local_agent is not None:
            pytest.skip("in-process provider: its runs have a local agent")
        assert provider.capabilities == NO_START_CAPABILITIES, (
            f"out-of-process provider declares {provider.capabilities}; a child in another "
            "process cannot honour parent-enforced start features"
        )
        assert provider.inherits_parent_context is False

    # -- cwd ---------------------------------------------------------------------------

    async def _root_cwds(self, contract: ContractHarness, setup: ChildSetup, cwd: Path) -> set[str]:
        decoy = contract.workspace("host-cwd-decoy")
        contract.monkeypatch.chdir(decoy)
        provider = contract.provider(setup)
        request, directive, _ = contract.request("hold", cwd=cwd)
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                await contract.holding(setup, directive)
                roots = contract.watch.roots()
            finally:
                await contract.dispose(run)
        assert roots, "no child process of the run was observed"
        return {r.cwd for r in roots if r.cwd is not None}

    @requirement("cwd:parent-session")
    @pytest.mark.anyio
    async def test_child_runs_in_parent_session_cwd(self, contract: ContractHarness) -> None:
        """The child's working directory is the parent session's, not the host's."""
        workspace = contract.workspace()
        cwds = await self._root_cwds(contract, contract.setup(), workspace)
        assert cwds == {str(await anyio.Path(workspace).resolve())}
        contract.assert_quiescent("after dispose")

    @requirement("cwd:override-wins")
    @pytest.mark.anyio
    async def test_configured_cwd_override_wins(self, contract: ContractHarness) -> None:
        """A configured override beats the parent cwd; without one the key is refused."""
        setup = contract.setup(cwd_override=str(contract.workspace("override")))
        provider_cls = type(contract.provider(contract.setup()))
        config_cls = getattr(provider_cls, "Config", None)
        assert config_cls is not None, "a provider plugin carries its pydantic Config class"
        if "cwd" not in config_cls.model_fields:
            # No override: the key must be refused at load, never accepted and ignored.
            with pytest.raises(ValueError, match="cwd"):
                config_cls.model_validate({**self.loader_config(setup), "cwd": "/"})
            return
        assert setup.cwd_override is not None
        cwds = await self._root_cwds(contract, setup, contract.workspace())
        assert cwds == {str(await anyio.Path(setup.cwd_override).resolve())}
        contract.assert_quiescent("after dispose")

    @requirement("cwd:missing-is-loud")
    @pytest.mark.anyio
    async def test_missing_cwd_fails_loudly(self, contract: ContractHarness) -> None:
        """No override and no parent cwd: a loud failure, never the host cwd."""
        contract.monkeypatch.chdir(contract.workspace("host-cwd-decoy"))
        provider = contract.provider(contract.setup())
        request, _, _ = contract.request("complete", cwd=None)
        async with contract.service(provider) as svc:
            with pytest.raises(SubagentError) as caught:
                await svc.start(request)
            assert svc.events == []
        assert caught.value.code == SubagentErrorCode.NO_WORKING_DIRECTORY or (
            "no working directory" in caught.value.message
        )
        assert contract.watch.ever_seen == 0
        assert not contract.watch.alive()

    # -- env ---------------------------------------------------------------------------

    async def _root_envs(
        self, contract: ContractHarness, setup: ChildSetup
    ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        provider = contract.provider(setup)
        request, directive, _ = contract.request("hold", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                await contract.holding(setup, directive)
                facts = contract.watch.facts()
                roots = contract.watch.roots()
            finally:
                await contract.dispose(run)
        contract.assert_quiescent("after dispose")
        root_envs = [r.environ for r in roots if r.environ is not None]
        assert root_envs, "no readable environment of a child process of the run"
        return root_envs, [f.environ for f in facts if f.environ is not None]

    @requirement("env:credential-scrubbed")
    @pytest.mark.anyio
    async def test_parent_credential_does_not_reach_child(self, contract: ContractHarness) -> None:
        """A credential in the parent environment reaches no process of the run's tree."""
        planted = "planted-" + uuid.uuid4().hex
        contract.monkeypatch.setenv(PLANTED_CREDENTIAL_NAME, planted)
        _, envs = await self._root_envs(contract, contract.setup())
        for env in envs:
            assert PLANTED_CREDENTIAL_NAME not in env
            assert planted not in env.values()

    @requirement("env:overlay-reaches-child")
    @pytest.mark.anyio
    async def test_explicit_overlay_reaches_child(self, contract: ContractHarness) -> None:
        """A credential layered explicitly through the provider's env reaches the child."""
        setup = contract.setup()
        roots, _ = await self._root_envs(contract, setup)
        for env in roots:
            assert env.get(OVERLAY_CREDENTIAL_NAME) == setup.env[OVERLAY_CREDENTIAL_NAME]

    # -- settlement --------------------------------------------------------------------

    @requirement("settlement:completed")
    @pytest.mark.anyio
    async def test_completed_run_carries_answer_and_no_diagnostic(
        self, contract: ContractHarness
    ) -> None:
        """A child that answers settles completed with exactly that answer."""
        provider = contract.provider(contract.setup())
        request, directive, _ = contract.request("complete", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                result = await contract.result(run)
            finally:
                await contract.dispose(run)
        assert result.stop_reason == COMPLETED, result
        assert result.text.strip() == directive.token
        assert result.diagnostic is None
        contract.assert_quiescent("after dispose")

    @requirement("settlement:result-never-raises")
    @pytest.mark.anyio
    async def test_failing_child_settles_as_a_result(self, contract: ContractHarness) -> None:
        """A published run's failure arrives as an ``error`` result, never an exception."""
        provider = contract.provider(contract.setup())
        request, _, _ = contract.request("fail", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                first = await contract.result(run)
                again = await contract.result(run)
            finally:
                await contract.dispose(run)
        assert first.stop_reason == ERROR, first
        assert again == first
        contract.assert_quiescent("after dispose")

    @requirement("settlement:cancel-before-start")
    @pytest.mark.anyio
    async def test_cancel_before_start(self, contract: ContractHarness) -> None:
        """An already-aborted request publishes nothing and leaves nothing running."""
        provider = contract.provider(contract.setup())
        request, _, controller = contract.request("complete", cwd=contract.workspace())
        controller.cancel()
        async with contract.service(provider) as svc:
            with pytest.raises(Exception):  # noqa: B017, PT011 - any rollback error is fine
                await svc.start(request)
            assert svc.events == []
        contract.assert_quiescent("after a start cancelled before it began")

    async def _cancel_during_start(
        self, contract: ContractHarness
    ) -> tuple[SubagentRun | None, SubagentResult | None, ServiceDriver]:
        provider = contract.provider(contract.setup())
        request, _, controller = contract.request("hold", cwd=contract.workspace())
        box: dict[str, Any] = {}
        result: SubagentResult | None = None
        async with contract.service(provider) as svc:

            async def starter() -> None:
                try:
                    box["run"] = await svc.start(request)
                except Exception as exc:
                    box["error"] = exc

            async with anyio.create_task_group() as tg:
                tg.start_soon(starter)
                with anyio.fail_after(contract.settle_timeout):
                    while not box and not contract.watch.alive():  # noqa: ASYNC110
                        await anyio.sleep(0.002)  # polling: processes cannot signal us
                controller.cancel()
            run: SubagentRun | None = box.get("run")
            if run is not None:
                try:
                    result = await contract.result(run)
                finally:
                    await contract.dispose(run)
        return run, result, svc

    @requirement("settlement:cancel-during-start")
    @pytest.mark.anyio
    async def test_cancel_during_start(self, contract: ContractHarness) -> None:
        """Cancelling while start() works: rollback without events, or ``aborted``."""
        run, result, svc = await self._cancel_during_start(contract)
        if run is None:
            assert svc.events == [], "a rolled-back start emitted lifecycle events"
        else:
            assert result is not None
            assert result.stop_reason == ABORTED, result
            assert result.diagnostic is None
        contract.assert_quiescent("after a cancellation during start")

    async def _cancel_mid_run(self, contract: ContractHarness) -> SubagentResult:
        setup = contract.setup()
        provider = contract.provider(setup)
        request, directive, controller = contract.request("hold", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                await contract.holding(setup, directive)
                controller.cancel()
                return await contract.result(run)
            finally:
                await contract.dispose(run)

    @requirement("settlement:cancel-mid-run")
    @pytest.mark.anyio
    async def test_cancel_mid_run(self, contract: ContractHarness) -> None:
        """Cancelling a working run settles ``aborted`` with no diagnostic."""
        result = await self._cancel_mid_run(contract)
        assert result.stop_reason == ABORTED, result
        assert result.diagnostic is None
        contract.assert_quiescent("after a mid-run cancellation")

    async def _cancel_after_completion(
        self, contract: ContractHarness
    ) -> tuple[SubagentResult, SubagentResult, Directive]:
        provider = contract.provider(contract.setup())
        request, directive, controller = contract.request("complete", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                before = await contract.result(run)
                controller.cancel()
                after = await contract.result(run)
            finally:
                await contract.dispose(run)
        return before, after, directive

    @requirement("settlement:cancel-after-completion")
    @pytest.mark.anyio
    async def test_cancel_after_completion(self, contract: ContractHarness) -> None:
        """A late cancellation does not rewrite a settled result."""
        before, after, directive = await self._cancel_after_completion(contract)
        assert before.stop_reason == COMPLETED
        assert after == before
        assert after.text.strip() == directive.token
        contract.assert_quiescent("after a cancellation after completion")

    # -- diagnostic --------------------------------------------------------------------

    async def _failed(self, contract: ContractHarness) -> SubagentResult:
        provider = contract.provider(contract.setup())
        request, _, _ = contract.request("fail", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                return await contract.result(run)
            finally:
                await contract.dispose(run)

    @requirement("diagnostic:fixed-line")
    @pytest.mark.anyio
    async def test_failure_diagnostic_is_the_fixed_line(self, contract: ContractHarness) -> None:
        """The diagnostic starts with the fixed product failure line, fields in order."""
        result = await self._failed(contract)
        assert result.stop_reason == ERROR
        assert result.diagnostic is not None, "a failed product run carries a diagnostic"
        first = result.diagnostic.split("\n", 1)[0]
        assert _PRODUCT_LINE.fullmatch(first), f"not the fixed failure line: {first!r}"
        contract.assert_quiescent("after dispose")

    @requirement("diagnostic:bounded")
    @pytest.mark.anyio
    async def test_diagnostic_is_bounded(self, contract: ContractHarness) -> None:
        """At most 4096 UTF-8 bytes, even when the raw product error is far longer."""
        result = await self._failed(contract)
        assert result.diagnostic is not None
        encoded = result.diagnostic.encode("utf-8")
        assert len(encoded) <= MAX_SUBAGENT_DIAGNOSTIC_BYTES
        assert "\ufffd" not in result.diagnostic, "truncation split a UTF-8 sequence"
        contract.assert_quiescent("after dispose")

    @requirement("diagnostic:no-planted-secret")
    def test_no_planted_secret_leaks(self, contract: ContractHarness, anyio_backend: str) -> None:
        """Planted secrets never reach the diagnostic, the output or an event."""

        @settings(
            max_examples=self.secret_examples,
            deadline=None,
            database=None,
            # Each example starts a real child; shrinking a leak would cost minutes and the
            # first leaking example already names the channel.
            phases=[Phase.explicit, Phase.generate],
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.tuples(*[_SECRET_TAIL] * 5))
        def check(tails: tuple[str, str, str, str, str]) -> None:
            planted = PlantedSecrets(*(f"S3CR3T{i}{t}" for i, t in enumerate(tails)))
            anyio.run(self._one_secret_run, contract, planted, backend=anyio_backend)

        check()

    async def _one_secret_run(self, contract: ContractHarness, planted: PlantedSecrets) -> None:
        setup = contract.setup(secrets=planted)
        workspace = contract.workspace() / planted.path
        workspace.mkdir()
        with contract.monkeypatch.context() as mp:
            mp.setenv(PLANTED_VALUE_NAME, planted.env_value)
            provider = contract.provider(setup)
            request, _, _ = contract.request("fail", cwd=workspace, task_text=planted.task)
            async with contract.service(provider) as svc:
                run = await svc.start(request)
                try:
                    result = await contract.result(run)
                finally:
                    await contract.dispose(run)
        seen = {
            "diagnostic": result.diagnostic or "",
            "output": result.text,
            "events": repr(svc.events),
        }
        for channel, secret in planted.all().items():
            for where, text in seen.items():
                assert secret not in text, f"planted {channel} secret leaked into the {where}"
        contract.assert_quiescent("after dispose")

    # -- quiescence --------------------------------------------------------------------

    @requirement("quiescence:after-dispose")
    @pytest.mark.anyio
    async def test_dispose_leaves_no_process(self, contract: ContractHarness) -> None:
        """When dispose() returns, the whole tree has exited."""
        setup = contract.setup()
        provider = contract.provider(setup)
        request, directive, _ = contract.request("hold", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                await contract.holding(setup, directive)
                assert contract.watch.alive(), "a working run has no live process"
            finally:
                await contract.dispose(run)
            contract.assert_quiescent("when dispose() returned")

    @requirement("quiescence:after-cancel-any-phase")
    @pytest.mark.parametrize(
        "phase", ["before-start", "during-start", "mid-run", "after-completion"]
    )
    @pytest.mark.anyio
    async def test_cancel_at_any_phase_leaves_no_process(
        self, contract: ContractHarness, phase: str
    ) -> None:
        """Cancellation at every phase, then dispose: nothing of the tree survives."""
        if phase == "before-start":
            provider = contract.provider(contract.setup())
            request, _, controller = contract.request("hold", cwd=contract.workspace())
            controller.cancel()
            async with contract.service(provider) as svc:
                with pytest.raises(Exception):  # noqa: B017, PT011 - any rollback error
                    await svc.start(request)
        elif phase == "during-start":
            await self._cancel_during_start(contract)
        elif phase == "mid-run":
            await self._cancel_mid_run(contract)
        else:
            await self._cancel_after_completion(contract)
        contract.assert_quiescent(f"after cancellation {phase} and dispose")

    @requirement("quiescence:dispose-idempotent")
    @pytest.mark.anyio
    async def test_concurrent_and_repeated_dispose(self, contract: ContractHarness) -> None:
        """Concurrent disposes share one teardown; a later dispose is a no-op."""
        setup = contract.setup()
        provider = contract.provider(setup)
        request, directive, _ = contract.request("hold", cwd=contract.workspace())
        async with contract.service(provider) as svc:
            run = await svc.start(request)
            try:
                await contract.holding(setup, directive)
            finally:
                returned: list[bool] = []

                async def dispose_and_check() -> None:
                    await contract.dispose(run)
                    returned.append(not contract.watch.alive())

                async with anyio.create_task_group() as tg:
                    for _ in range(3):
                        tg.start_soon(dispose_and_check)
            assert returned == [True, True, True], "a dispose returned before whole-tree exit"
            await contract.dispose(run)
            result = await contract.result(run)
        assert result.stop_reason == ABORTED
        contract.assert_quiescent("after repeated dispose")

    # -- lifecycle ---------------------------------------------------------------------

    @requirement("lifecycle:paired")
    @pytest.mark.anyio
    async def test_lifecycle_events_are_paired(self, contract: ContractHarness) -> None:
        """One start and one end per published run, same run id; none for a refusal."""
        provider = contract.provider(contract.setup())
        ok, _, _ = contract.request("complete", cwd=contract.workspace())
        bad, _, _ = contract.request("fail", cwd=contract.workspace())
        results: list[SubagentResult] = []
        async with contract.service(provider) as svc:
            for request in (ok, bad):
                run = await svc.start(request)
                try:
                    results.append(await contract.result(run))
                finally:
                    await contract.dispose(run)
            with pytest.raises(SubagentError):
                await svc.start(contract.request("complete", cwd=None)[0])
            events = list(svc.events)
        starts = [e for e in events if e.kind == "start"]
        ends = [e for e in events if e.kind == "end"]
        assert len(starts) == 2, events
        assert len(ends) == 2, events
        assert len({e.run_id for e in starts}) == 2
        for start in starts:
            (end,) = [e for e in ends if e.run_id == start.run_id]
            assert events.index(start) < events.index(end)
            assert (end.id, end.provider) == (start.id, start.provider)
        assert [e.stop_reason for e in ends] == [r.stop_reason for r in results]

    # -- concurrency -------------------------------------------------------------------

    @requirement("concurrency:independent-runs")
    @pytest.mark.anyio
    async def test_parallel_runs_settle_independently(
        self, contract: ContractHarness, pytestconfig: pytest.Config
    ) -> None:
        """Parallel runs on one instance: each gets its own answer; a cancel hits one."""
        setup = contract.setup()
        provider = contract.provider(setup)
        n = max(2, pytestconfig.getoption("--dsh-concurrency") or self.concurrency)
        held, held_directive, held_cancel = contract.request("hold", cwd=contract.workspace())
        others = [contract.request("complete", cwd=contract.workspace()) for _ in range(n - 1)]
        results: dict[str, SubagentResult] = {}
        async with contract.service(provider) as svc:

            async def one(request: SubagentStartRequest, token: str) -> None:
                run = await svc.start(request)
                try:
                    if token == held_directive.token:
                        await contract.holding(setup, held_directive)
                        held_cancel.cancel()
                    results[token] = await contract.result(run)
                finally:
                    await contract.dispose(run)

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, held, held_directive.token)
                for request, directive, _ in others:
                    tg.start_soon(one, request, directive.token)
        assert results[held_directive.token].stop_reason == ABORTED
        for _, directive, _ in others:
            got = results[directive.token]
            assert got.stop_reason == COMPLETED, got
            assert got.text.strip() == directive.token
        contract.assert_quiescent("after every parallel run was disposed")

    # -- loader ------------------------------------------------------------------------

    @requirement("loader:entry-point-starts-nothing")
    def test_entry_point_loads_without_starting(self, contract: ContractHarness) -> None:
        """The entry point resolves, the Config validates, construction starts nothing."""
        from importlib.metadata import entry_points

        name = self.entry_point_name
        assert name, "set entry_point_name to the provider's dsh.subagent.providers name"
        (entry,) = [e for e in entry_points(group="dsh.subagent.providers") if e.name == name]
        contract.monkeypatch.setenv("PATH", "")
        loaded = entry.load()
        assert inspect.isclass(loaded)
        assert SubagentProvider in inspect.getmro(loaded)
        provider_cls: Any = loaded
        config_cls = provider_cls.Config
        assert config_cls.model_config.get("frozen") is True
        assert config_cls.model_config.get("extra") == "forbid"
        config = config_cls.model_validate(self.loader_config(contract.setup()))
        provider = provider_cls(config)
        assert provider.name == name
        assert contract.watch.ever_seen == 0, "loading the provider started a process"
        assert not contract.watch.alive(), "constructing the provider started a process"


class CredentialedProviderContract:
    """The credentialed tier: the real product against the real DeepSeek service.

    Override :meth:`credentialed_factory`; it receives the key and a :class:`ChildSetup`.
    The test self-skips, visibly, when ``DEEPSEEK_API_KEY`` is absent.
    """

    settle_timeout: ClassVar[float] = 300.0

    @pytest.fixture
    def credentialed_factory(self) -> Callable[[str, ChildSetup], SubagentProvider]:
        """The author's factory for a provider configured against DeepSeek."""
        raise NotImplementedError("override the credentialed_factory fixture")

    @requirement("kit:no-silent-opt-out")
    def test_no_silent_opt_out(self) -> None:
        """Every credentialed kit test is present and not silently overridden."""
        problems = check_no_silent_opt_out(type(self), CredentialedProviderContract)
        assert not problems, "; ".join(problems)

    @requirement("credentialed:unique-answer")
    @pytest.mark.anyio
    async def test_real_service_returns_unique_answer(
        self,
        credentialed_factory: Callable[[str, ChildSetup], SubagentProvider],
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A random nonce comes back as the complete answer; nothing is left running."""
        key = os.environ.get("DEEPSEEK_API_KEY")
        if not key:
            pytest.skip("DEEPSEEK_API_KEY is not set: the credentialed tier needs a real key")
        harness = ContractHarness(
            factory=lambda setup: credentialed_factory(key, setup),
            root=tmp_path / "contract",
            monkeypatch=monkeypatch,
            hold_timeout=self.settle_timeout,
            settle_timeout=self.settle_timeout,
            wait_until_holding=_wait_ready_file,
        )
        harness.root.mkdir()
        monkeypatch.delenv("DEEPSEEK_API_KEY")  # only the explicit configuration carries it
        nonce = uuid.uuid4().hex
        provider = harness.provider(harness.setup())
        request = SubagentStartRequest(
            prompt=(TextBlock(text=f"Reply with exactly this string and nothing else: {nonce}"),),
            parent=ParentContext(session_id="contract-credentialed", cwd=str(harness.workspace())),
        )
        async with harness.service(provider) as svc:
            run = await svc.start(request)
            try:
                result = await harness.result(run)
            finally:
                await harness.dispose(run)
        assert result.stop_reason == COMPLETED, result
        assert result.text.strip() == nonce
        harness.assert_quiescent("after dispose")
