"""The per-test harness every rule of the kit shares: setups, requests, the service, processes.

One :class:`ContractHarness` is built per kit test (the ``contract`` fixture of
:class:`~dsh_contract_tests.ProviderContract`). It hands out fresh workspaces and
:class:`ChildSetup` directories, builds start requests carrying a behaviour directive,
drives the provider through a fresh service, bounds every wait (a wait that runs out says
what it waited for), and checks that no process of the run's tree is left.

It also decides who a breakage belongs to. A rule's test owns what its rule says; when
another test runs into the same breakage (a process left after dispose, a ``result()``
that raises, an env overlay that never reached the child) it calls :meth:`consequence`:
the owning rule's own scenario is run once per test class, and if it fails too, this
test ends as ``XFAIL`` "consequence of <id>" instead of a second failure; if it passes,
this test fails, naming the owning rule and the scenario it was seen in.
"""

from __future__ import annotations

import contextlib
import secrets as _secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

import anyio
import psutil
import pytest
from dsh_subagent import (
    CancelController,
    ParentContext,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
    TextBlock,
)

from dsh_contract_tests.driver import ServiceDriver, drive
from dsh_contract_tests.failures import (
    CALLS_RETURN,
    Consequence,
    ContractViolation,
    current_rule,
    render_error,
)
from dsh_contract_tests.manifest import REQUIREMENTS
from dsh_contract_tests.processes import ProcessFacts, ProcessWatch
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
from dsh_contract_tests.watchdog import Hang, pending

__all__ = [
    "HOLD_OWNER",
    "ContractHarness",
    "CredentialedTests",
    "ProviderTests",
    "describe_ready_file",
    "wait_ready_file",
]


class ProviderTests(Protocol):
    """The provider's test class as a rule reads it (``self`` of a rule): the class
    attributes and hook of :class:`~dsh_contract_tests.ProviderContract` a rule uses.

    The rules sit below the base classes that bind them, so they name this shape and
    never the base class itself. Read-only, so a subclass's narrower value fits
    (``entry_point_name = "acme"``).
    """

    @property
    def entry_point_name(self) -> str | None: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def secret_examples(self) -> int: ...
    def loader_config(self, setup: ChildSetup) -> dict[str, Any]: ...


class CredentialedTests(Protocol):
    """The credentialed test class as its rule reads it (see :class:`ProviderTests`)."""

    @property
    def settle_timeout(self) -> float: ...


_CHILD_PROTOCOL = (ENV_READY_DIR, ENV_ERROR_TEXT, ENV_STDERR_TEXT)
"""The overlay variables a child reads by name (the child protocol's)."""


def _overlay_credential_name() -> str:
    """A credential-shaped variable name of its own for each harness: a provider cannot
    pass this one through while dropping other explicitly layered credentials."""
    return f"K{_secrets.token_hex(6).upper()}_API_KEY"


def _failure_texts() -> tuple[str, str]:
    """A ``fail`` child's raw error and stderr line, new for each setup (no provider can
    recognise a kit run by them). The raw error is longer than the 4096-byte diagnostic
    bound and made of 3-byte characters, so a truncation that splits one shows."""
    cjk = "".join(chr(0x4E00 + _secrets.randbelow(0x5000)) for _ in range(1500))
    return f"raw error {_secrets.token_hex(6)} {cjk}", f"stderr line {_secrets.token_hex(6)}"


_EXEC_AGE = 0.1
"""Seconds after creation before a process's environment is read: by then it has exec'd
(between fork and exec a child still carries its parent's environment)."""

KNOWN_HANG_BOUND = 5.0
"""Seconds each wait on the provider may take once the test class is known to break
``lifecycle:calls-return`` (except in that rule's own test): the tests after that end
quickly as its consequences."""

_OVERLAY_SETTLE = 1.0
"""Seconds every root process of a run must lack the kit's overlay before the kit says the
overlay never reached the child (a stray process may appear before the child does)."""

HOLD_OWNER = "settlement:cancel-mid-run"
"""The rule a run that never reaches its hold point breaks: its scenario is exactly a
working run, cancelled. Every other test that waits for a hold point is its consequence."""

Probe = Callable[[str], Awaitable[bool]]
"""Runs the kit test of a requirement id once for this test class: ``True`` if it fails."""


def _one_line(text: str) -> str:
    return text.replace("\n", "\\n")


def _age(proc: psutil.Process) -> float:
    try:
        return time.time() - proc.create_time()
    except psutil.Error:
        return 0.0


def describe_ready_file(setup: ChildSetup, token: str) -> str:
    """What the default hold wait waits for, in words."""
    return (
        f"the ready file {setup.ready_path(token)}, which the child creates in the directory "
        f"{ENV_READY_DIR} names when it reaches its hold point"
    )


async def wait_ready_file(setup: ChildSetup, token: str) -> None:
    """Return once the child wrote the ready file of ``token`` (the default hold signal)."""
    path = setup.ready_path(token)
    while not path.exists():  # noqa: ASYNC110 - the child signals through the file system
        await anyio.sleep(0.01)


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
        describe_hold: What ``wait_until_holding`` waits for, in words (the message of a
            hold wait that runs out).
        probe: Runs another rule's kit test for :meth:`consequence`; ``None`` when the
            harness cannot (then every breakage fails the test it is seen in).
        known_broken: Whether a rule's own test is already known to fail for this test
            class (then a wait on the provider is bounded by :data:`KNOWN_HANG_BOUND`
            once ``lifecycle:calls-return`` is among them).
        own_failure: Called with a rule's id when that rule's own test fails here.
        overlay_credential_name: The credential-shaped variable this harness layers
            through the overlay (``env:overlay-reaches-child``); random for each harness.
    """

    factory: ProviderFactory
    root: Path
    monkeypatch: pytest.MonkeyPatch
    hold_timeout: float
    settle_timeout: float
    wait_until_holding: Callable[[ChildSetup, str], Awaitable[None]]
    describe_hold: Callable[[ChildSetup, str], str] = describe_ready_file
    probe: Probe | None = None
    known_broken: Callable[[str], bool] = lambda rule_id: False
    own_failure: Callable[[str], None] = lambda rule_id: None
    watch: ProcessWatch = field(default_factory=ProcessWatch)
    overlay_credential_name: str = field(default_factory=_overlay_credential_name, init=False)

    def _dir(self, name: str) -> Path:
        # Random names: a fixed one ("setup", "workspace") in every HOME or cwd would
        # tell a kit run. ``name`` says what the directory is for, at the call site.
        del name
        path = self.root / _secrets.token_hex(6)
        path.mkdir(parents=True)
        return path

    def workspace(self, name: str = "workspace") -> Path:
        """A fresh parent-session workspace directory."""
        return self._dir(name)

    def setup(
        self,
        *,
        cwd_override: str | None = None,
        secrets: PlantedSecrets | None = None,
        kit_variables: bool = True,
    ) -> ChildSetup:
        """A fresh :class:`ChildSetup` with temporary homes and the kit's overlay.

        ``kit_variables=False``: the overlay holds only the temporary homes, nothing a
        provider could tell a kit run by (the ``complete`` scenarios need none of it).
        """
        base = self._dir("setup")
        home = ProductHome(base / "home", base / "codex-home", base / "claude", base / "tmp")
        for path in (home.home, home.codex_home, home.claude_config_dir, home.tmpdir):
            path.mkdir()
        # Inside the run's private HOME: a confined child (the default where the kernel
        # offers Landlock) reads and writes its HOME, and nothing else outside its cwd.
        # Names of their own: a fixed one in every HOME would tell a kit run.
        ready = home.home / _secrets.token_hex(6)
        ready.mkdir()
        scratch = home.home / _secrets.token_hex(6)
        scratch.mkdir()
        error_text, stderr_text = _failure_texts()
        if secrets is not None:
            error_text, stderr_text = secrets.raw_error, secrets.stderr
        env = home.env()
        if kit_variables:
            env |= {
                ENV_READY_DIR: str(ready),
                ENV_ERROR_TEXT: error_text,
                ENV_STDERR_TEXT: stderr_text,
                self.overlay_credential_name: "overlay-" + uuid.uuid4().hex,
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
        with pending("the provider factory", self.bound()):
            return self.factory(setup)

    def bound(self) -> float:
        """Seconds one wait on the provider may take (shorter once it is known to hang)."""
        current = current_rule()
        own = current is not None and current.id == CALLS_RETURN
        if not own and self.known_broken(CALLS_RETURN):
            return min(self.settle_timeout, KNOWN_HANG_BOUND)
        return self.settle_timeout

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
        """A fresh service with ``provider`` registered; its exit (which disposes every
        run still open) is bounded like any other wait on the provider.

        The bound is a deadline on a scope around the whole service (the service's own
        task group must not be exited inside a newer scope); a failure of the body is
        re-raised even if that deadline cancels the exit.
        """
        what = "the service's exit (it disposes the runs still open)"
        bound = self.bound()
        raised: BaseException | None = None
        exit_wait: contextlib.ExitStack | None = None
        with anyio.CancelScope() as scope:
            try:
                async with drive(provider) as driver:
                    try:
                        yield driver
                    except BaseException as exc:
                        raised = exc
                        raise
                    finally:
                        scope.deadline = anyio.current_time() + bound
                        exit_wait = contextlib.ExitStack()
                        exit_wait.enter_context(pending(what, bound))
            finally:
                if exit_wait is not None:
                    exit_wait.close()
        if raised is not None:
            raise raised
        if scope.cancelled_caught:
            await self.calls_return(what, bound)

    async def start(self, svc: ServiceDriver, request: SubagentStartRequest) -> SubagentRun:
        """``svc.start(request)``, bounded; a start that does not return in time is the
        ``lifecycle:calls-return`` rule's breakage."""
        bound = self.bound()
        with pending("start()", bound), anyio.move_on_after(bound):
            return await svc.start(request)
        await self.calls_return("start()", bound)

    async def result(self, run: SubagentRun) -> SubagentResult:
        """``run.result()``, bounded; a raise is the ``settlement:result-never-raises``
        rule's breakage, a result that never comes ``lifecycle:calls-return``'s."""
        raised: Exception | None = None
        bound = self.bound()
        with pending("result()", bound), anyio.move_on_after(bound):
            try:
                return await run.result()
            except Exception as exc:
                raised = exc
        if raised is None:
            await self.calls_return("result()", bound, " (the run never settled)")
        await self.consequence(
            "settlement:result-never-raises", f"result() raised {render_error(raised)}"
        )

    async def dispose(self, run: SubagentRun) -> None:
        """``run.dispose()``, bounded; a raise is the ``quiescence:dispose-idempotent``
        rule's breakage, a dispose that does not return ``lifecycle:calls-return``'s."""
        raised: Exception | None = None
        bound = self.bound()
        with pending("dispose()", bound), anyio.move_on_after(bound):
            try:
                await run.dispose()
                return
            except Exception as exc:
                raised = exc
        if raised is None:
            await self.calls_return("dispose()", bound)
        await self.consequence(
            "quiescence:dispose-idempotent", f"dispose() raised {render_error(raised)}"
        )

    def _left_alive(self) -> str:
        """Kill what is left of the run's tree; ``"; still alive: ..."`` for a message."""
        leftover = self.watch.kill_leftovers()
        if not leftover:
            return "; nothing of the run's tree was left alive"
        listed = "; ".join(_one_line(entry) for entry in leftover)
        return f"; still alive: {listed} (pid (name) argv); the kit killed it all"

    async def calls_return(self, what: str, bound: float, why: str = "") -> NoReturn:
        """End this test: ``what`` did not return within ``bound`` seconds."""
        await self.consequence(
            CALLS_RETURN,
            f"{what} did not return within {bound:g} s{why}; the kit cancelled it and moved "
            f"on{self._left_alive()}",
        )

    async def hung(self, hang: Hang) -> NoReturn:
        """End this test for a wait the watchdog abandoned (it ignored cancellation)."""
        await self.consequence(CALLS_RETURN, f"{hang}{self._left_alive()}")

    async def holding(
        self, setup: ChildSetup, directive: Directive, run: SubagentRun | None = None
    ) -> None:
        """Wait until the hold run reached its hold point, at most ``hold_timeout``.

        Gives up early, saying why, when ``run`` settles first or when the run's child
        process lacks the kit's overlay variables (the provider dropped its ``env``).
        """
        what = self.describe_hold(setup, directive.token)
        outcome: dict[str, Any] = {}
        with anyio.move_on_after(self.hold_timeout):
            async with anyio.create_task_group() as group:

                async def reached() -> None:
                    with pending(f"the hold wait for {what}", self.hold_timeout):
                        await self.wait_until_holding(setup, directive.token)
                    outcome.setdefault("reached", True)
                    group.cancel_scope.cancel()

                async def settled(run: SubagentRun) -> None:
                    try:
                        outcome.setdefault("settled", await run.result())
                    except Exception as exc:
                        outcome.setdefault("raised", exc)
                    group.cancel_scope.cancel()

                async def overlay() -> None:
                    outcome.setdefault("missing", await self._overlay_missing())
                    group.cancel_scope.cancel()

                group.start_soon(reached)
                group.start_soon(overlay)
                if run is not None:
                    group.start_soon(settled, run)
        if "reached" in outcome:
            return
        if "missing" in outcome:
            await self.consequence(
                "env:overlay-reaches-child",
                f"{outcome['missing']}: the configured env overlay never reached it (the kit "
                f"was waiting for {what})",
            )
        if "raised" in outcome:
            await self.consequence(
                "settlement:result-never-raises",
                f"result() raised {render_error(outcome['raised'])} while the kit waited for "
                f"the hold point",
            )
        if "settled" in outcome:
            result: SubagentResult = outcome["settled"]
            first = (result.diagnostic or "no diagnostic").split("\n", 1)[0]
            await self.consequence(
                HOLD_OWNER,
                f"the hold run settled {result.stop_reason} ({first}) before it reached its "
                f"hold point; the kit was waiting for {what}. A child told `hold` must keep "
                "working until it is cancelled (the kit README, 'The child protocol')",
            )
        await self.consequence(
            HOLD_OWNER,
            f"waited {self.hold_timeout:g} s for the hold run to reach its hold point: {what}",
        )

    async def tree_while_running(self, run: SubagentRun) -> list[ProcessFacts]:
        """What the run's tree holds once its child has started, for a run that may not
        signal a hold point (its overlay carries none of the kit's variables).

        Returns as soon as a root process of the run has lived :data:`_EXEC_AGE` seconds;
        empty if the run settles first or ``hold_timeout`` runs out.
        """
        found: list[ProcessFacts] = []
        with anyio.move_on_after(self.hold_timeout):
            async with anyio.create_task_group() as group:

                async def settled() -> None:
                    with contextlib.suppress(Exception):
                        await run.result()
                    group.cancel_scope.cancel()

                group.start_soon(settled)
                while True:
                    roots = self.watch.product_roots()
                    if any(_age(proc) >= _EXEC_AGE for proc in roots):
                        found = self.watch.facts()
                        group.cancel_scope.cancel()
                        break
                    await anyio.sleep(0.02)
        return found

    async def _overlay_missing(self) -> str:
        """Return once the run's root processes lack the kit's overlay variables.

        Only when none of them carries it, for :data:`_OVERLAY_SETTLE` seconds: a stray
        process the provider starts besides its child (a detached helper) lacks the
        overlay too, and is not the run's child. Once a root carries the overlay, the
        child got it and this never returns.
        """
        lacking: dict[tuple[int, float], str] = {}
        since: float | None = None
        while True:
            for proc in self.watch.product_roots():
                try:
                    key = (proc.pid, proc.create_time())
                    if key in lacking or time.time() - key[1] < _EXEC_AGE:
                        continue
                    environ = proc.environ()
                    argv = _one_line(" ".join(proc.cmdline()[:4]))
                except psutil.Error:
                    continue
                kit = (*_CHILD_PROTOCOL, self.overlay_credential_name)
                missing = [name for name in kit if name not in environ]
                if not missing:
                    await anyio.sleep_forever()  # the child got the overlay
                lacking[key] = (
                    f"the run's child process {proc.pid} ({argv}) has no "
                    f"{', '.join(missing)} in its environment"
                )
            if lacking and since is None:
                since = time.monotonic()
            if since is not None and time.monotonic() - since >= _OVERLAY_SETTLE:
                return "; ".join(lacking.values())
            await anyio.sleep(0.05)

    def seen_processes(self) -> str:
        """Every process of the run's tree seen so far, ``pid (name) argv``, for a message."""
        return "; ".join(_one_line(str(seen)) for seen in self.watch.seen) or "none"

    async def check_quiescent(self, when: str) -> None:
        """Kill and report any process of the run's tree still alive ``when``.

        A leftover is the ``quiescence:after-dispose`` rule's breakage; in another
        quiescence rule's test, that rule's own unless plain disposal leaks too.
        """
        leftover = self.watch.kill_leftovers()
        if not leftover:
            return
        listed = "; ".join(_one_line(entry) for entry in leftover)
        if len(leftover) == 1:
            observed = (
                f"1 process of the run's tree is still alive {when}: {listed} "
                "(pid (name) argv); the kit killed it"
            )
        else:
            observed = (
                f"{len(leftover)} processes of the run's tree are still alive {when}: {listed} "
                "(pid (name) argv each); the kit killed them"
            )
        current = current_rule()
        own = current.id if current is not None and current.id.startswith("quiescence:") else None
        await self.consequence("quiescence:after-dispose", observed, blame=own)

    async def consequence(
        self, rule_id: str, observed: str, *, blame: str | None = None
    ) -> NoReturn:
        """End this test for a breakage the rule ``rule_id`` owns.

        In that rule's own test: fail it. Elsewhere: if that rule's own scenario fails too
        (run once per test class), ``XFAIL`` as its consequence; otherwise fail, naming
        ``blame`` (default ``rule_id``) and the scenario the breakage was seen in.
        """
        owner = REQUIREMENTS[rule_id]
        current = current_rule()
        if current is None or current.id == rule_id:
            self.own_failure(rule_id)
            raise ContractViolation(owner, observed)
        if self.probe is not None and await self.probe(rule_id):
            raise Consequence(f"consequence of {rule_id} (its own test fails): {observed}")
        if blame is not None:
            raise ContractViolation(REQUIREMENTS[blame], observed)
        raise ContractViolation(owner, f"{observed} (seen while checking {current.id})")
