"""The base classes a provider author subclasses: one named test per manifest rule.

Usage, in the author's own test module::

    class TestMyProvider(ProviderContract):
        @pytest.fixture
        def provider_factory(self) -> ProviderFactory:
            return lambda setup: MyProvider(MyProvider.Config(env=dict(setup.env)))

Capabilities are read from the provider's own declaration. A single rule is opted out
only by overriding its test with ``@pytest.mark.xfail(strict=True, reason=...)`` and
calling ``super()`` from the override; the kit re-applies the test's own marks to the
override (see :mod:`dsh_contract_tests.guard`), and
:meth:`ProviderContract.test_no_silent_opt_out` fails for anything quieter.

The rules themselves live in :mod:`dsh_contract_tests.rules`, one module per requirement
area; each base class below binds them under their test names, area by area, so the
class body is the index of what a provider must pass.
"""

from __future__ import annotations

import contextvars
import inspect
import secrets as _secrets
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from _pytest.outcomes import OutcomeException
from dsh_subagent import SubagentProvider

from dsh_contract_tests import rules
from dsh_contract_tests.failures import ContractViolation, requirement
from dsh_contract_tests.guard import bind_overrides, check_no_silent_opt_out
from dsh_contract_tests.harness import ContractHarness, describe_ready_file, wait_ready_file
from dsh_contract_tests.manifest import REQUIREMENT_MARKER
from dsh_contract_tests.scenario import ChildSetup, ProviderFactory

__all__ = [
    "SETTLE_TIMEOUT_CAP",
    "ContractHarness",
    "CredentialedProviderContract",
    "ProviderContract",
    "check_no_silent_opt_out",
]


SETTLE_TIMEOUT_CAP = 120.0
"""The most seconds ``settle_timeout`` may be set to.

A provider call shielded from cancellation holds the run for a whole ``settle_timeout``
before ``lifecycle:calls-return`` fails it (the kit cannot end it sooner without
guessing): twice the 60 s default leaves room for a slow product start or teardown on a
loaded machine and keeps the worst case of a run bounded."""


def _check_settle_timeout(cls: type, value: object) -> None:
    """Refuse a ``settle_timeout`` above the cap (or not a positive number), naming it."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= SETTLE_TIMEOUT_CAP
    ):
        raise TypeError(
            f"{cls.__qualname__}.settle_timeout = {value!r}: the kit accepts a number of "
            f"seconds above 0 and at most {SETTLE_TIMEOUT_CAP:g} (a larger bound lets a call "
            "that never returns hold the run that long)"
        )


class ProviderContract:
    """The keyless and loader tiers of the contract, for any provider.

    Override :meth:`provider_factory` (required), and where needed
    :meth:`wait_until_holding` with :meth:`describe_hold` (product providers: poll the
    loopback model fixture for the held request) and :meth:`loader_config`. Set
    :attr:`entry_point_name` to the provider's name in the ``dsh.subagent.providers``
    entry-point group.
    """

    entry_point_name: ClassVar[str | None] = None
    hold_timeout: ClassVar[float] = 60.0
    settle_timeout: ClassVar[float] = 60.0
    concurrency: ClassVar[int] = 3
    secret_examples: ClassVar[int] = 4

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_settle_timeout(cls, getattr(cls, "settle_timeout", None))
        bind_overrides(cls, ProviderContract)

    @pytest.fixture
    def provider_factory(self) -> ProviderFactory:
        """The author's factory: :class:`ChildSetup` in, provider instance out."""
        raise NotImplementedError("override the provider_factory fixture in your test class")

    async def wait_until_holding(self, setup: ChildSetup, token: str) -> None:
        """Return once the ``hold`` run with ``token`` is working (default: ready file).

        The kit bounds the wait by :attr:`hold_timeout` and gives up early when the run
        settles first. Override it together with :meth:`describe_hold`.
        """
        await wait_ready_file(setup, token)

    def describe_hold(self, setup: ChildSetup, token: str) -> str:
        """What :meth:`wait_until_holding` waits for, in words (for a wait that runs out)."""
        return describe_ready_file(setup, token)

    def loader_config(self, setup: ChildSetup) -> dict[str, Any]:
        """Configuration the loader rule validates with the provider's ``Config``."""
        return {"env": dict(setup.env)}

    @pytest.fixture
    def contract(
        self,
        provider_factory: ProviderFactory,
        tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch,
    ) -> Iterator[ContractHarness]:
        """The per-test harness."""
        # A root of random name, not the test's own tmp_path: that path names the test
        # (and a probe's would name its rule), which a provider could tell the rule by.
        tmp_path = tmp_path_factory.mktemp(_secrets.token_hex(6), numbered=False)
        _check_settle_timeout(type(self), self.settle_timeout)  # a property, an instance value

        def harness(root: Path, patch: pytest.MonkeyPatch) -> ContractHarness:
            built = ContractHarness(
                factory=provider_factory,
                root=root,
                monkeypatch=patch,
                hold_timeout=self.hold_timeout,
                settle_timeout=self.settle_timeout,
                wait_until_holding=self.wait_until_holding,
                describe_hold=self.describe_hold,
                probe=lambda rule_id: _probe(self, rule_id, harness, tmp_path),
                known_broken=lambda rule_id: _VERDICTS.get(type(self), {}).get(rule_id, False),
                own_failure=lambda rule_id: _broken(type(self), rule_id),
            )
            built.root.mkdir()
            return built

        made = harness(tmp_path / _secrets.token_hex(6), monkeypatch)
        yield made
        made.watch.kill_leftovers()

    # -- guard -------------------------------------------------------------------------

    @requirement("kit:no-silent-opt-out")
    def test_no_silent_opt_out(self) -> None:
        """Every kit test is present; an override carries a strict xfail with a reason."""
        problems = check_no_silent_opt_out(type(self), ProviderContract)
        assert not problems, "; ".join(problems)

    # -- capability --------------------------------------------------------------------

    test_unsupported_capability_refused_before_start = (
        rules.capability.test_unsupported_capability_refused_before_start
    )
    test_out_of_process_declares_no_capability = (
        rules.capability.test_out_of_process_declares_no_capability
    )

    # -- continuation (opt-in) ----------------------------------------------------------

    test_continuation_flag_is_honest = rules.continuation.test_continuation_flag_is_honest
    test_continued_run_sees_the_earlier_turn = (
        rules.continuation.test_continued_run_sees_the_earlier_turn
    )
    test_foreign_or_stale_handle_is_refused = (
        rules.continuation.test_foreign_or_stale_handle_is_refused
    )

    # -- output (typed results; opt-in) --------------------------------------------------

    test_output_schema_refused_before_start = rules.output.test_output_schema_refused_before_start
    test_output_flag_is_honest = rules.output.test_output_flag_is_honest
    test_conforming_answer_yields_the_object = rules.output.test_conforming_answer_yields_the_object
    test_nonconforming_answer_fails_with_the_fixed_category = (
        rules.output.test_nonconforming_answer_fails_with_the_fixed_category
    )

    # -- ready products (opt-in) ---------------------------------------------------------

    test_a_ready_product_serves_one_delegation = (
        rules.ready.test_a_ready_product_serves_one_delegation
    )
    test_a_ready_delegation_is_indistinguishable_from_a_cold_one = (
        rules.ready.test_a_ready_delegation_is_indistinguishable_from_a_cold_one
    )
    test_a_ready_product_dead_while_idle_never_fails_a_delegation = (
        rules.ready.test_a_ready_product_dead_while_idle_never_fails_a_delegation
    )
    test_closing_the_service_leaves_no_ready_product = (
        rules.ready.test_closing_the_service_leaves_no_ready_product
    )

    # -- cwd ---------------------------------------------------------------------------

    test_child_runs_in_parent_session_cwd = rules.cwd.test_child_runs_in_parent_session_cwd
    test_configured_cwd_override_wins = rules.cwd.test_configured_cwd_override_wins
    test_missing_cwd_fails_loudly = rules.cwd.test_missing_cwd_fails_loudly

    # -- env ---------------------------------------------------------------------------

    test_parent_credential_does_not_reach_child = (
        rules.env.test_parent_credential_does_not_reach_child
    )
    test_explicit_overlay_reaches_child = rules.env.test_explicit_overlay_reaches_child

    # -- settlement --------------------------------------------------------------------

    test_completed_run_carries_answer_and_no_diagnostic = (
        rules.settlement.test_completed_run_carries_answer_and_no_diagnostic
    )
    test_failing_child_settles_as_a_result = rules.settlement.test_failing_child_settles_as_a_result
    test_cancel_before_start = rules.settlement.test_cancel_before_start
    test_cancel_during_start = rules.settlement.test_cancel_during_start
    test_cancel_mid_run = rules.settlement.test_cancel_mid_run
    test_cancel_after_completion = rules.settlement.test_cancel_after_completion

    # -- diagnostic --------------------------------------------------------------------

    test_failure_diagnostic_is_the_fixed_line = (
        rules.diagnostic.test_failure_diagnostic_is_the_fixed_line
    )
    test_diagnostic_is_bounded = rules.diagnostic.test_diagnostic_is_bounded
    test_no_planted_secret_leaks = rules.diagnostic.test_no_planted_secret_leaks

    # -- quiescence --------------------------------------------------------------------

    test_dispose_leaves_no_process = rules.quiescence.test_dispose_leaves_no_process
    test_cancel_at_any_phase_leaves_no_process = (
        rules.quiescence.test_cancel_at_any_phase_leaves_no_process
    )
    test_concurrent_and_repeated_dispose = rules.quiescence.test_concurrent_and_repeated_dispose

    # -- lifecycle ---------------------------------------------------------------------

    test_lifecycle_events_are_paired = rules.lifecycle.test_lifecycle_events_are_paired
    test_every_call_returns_in_time = rules.lifecycle.test_every_call_returns_in_time

    # -- concurrency -------------------------------------------------------------------

    test_parallel_runs_settle_independently = (
        rules.concurrency.test_parallel_runs_settle_independently
    )

    # -- confinement -------------------------------------------------------------------

    test_runs_are_confined = rules.confinement.test_runs_are_confined
    test_read_beyond_its_reach_is_refused = rules.confinement.test_read_beyond_its_reach_is_refused
    test_write_beyond_its_reach_is_refused = (
        rules.confinement.test_write_beyond_its_reach_is_refused
    )
    test_reach_beyond_its_ports_is_refused = (
        rules.confinement.test_reach_beyond_its_ports_is_refused
    )

    # -- loader ------------------------------------------------------------------------

    test_entry_point_loads_without_starting = rules.loader.test_entry_point_loads_without_starting


class CredentialedProviderContract:
    """The credentialed tier: the real product against the real DeepSeek service.

    Override :meth:`credentialed_factory`; it receives the key and a :class:`ChildSetup`.
    The test self-skips, visibly, when ``DEEPSEEK_API_KEY`` is absent.
    """

    settle_timeout: ClassVar[float] = 300.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        bind_overrides(cls, CredentialedProviderContract)

    @pytest.fixture
    def credentialed_factory(self) -> Callable[[str, ChildSetup], SubagentProvider]:
        """The author's factory for a provider configured against DeepSeek."""
        raise NotImplementedError("override the credentialed_factory fixture")

    @requirement("kit:no-silent-opt-out")
    def test_no_silent_opt_out(self) -> None:
        """Every credentialed kit test is present and not silently overridden."""
        problems = check_no_silent_opt_out(type(self), CredentialedProviderContract)
        assert not problems, "; ".join(problems)

    test_real_service_returns_unique_answer = (
        rules.credentialed.test_real_service_returns_unique_answer
    )


# -- consequences: run another rule's test once per test class ----------------------------

_VERDICTS: weakref.WeakKeyDictionary[type, dict[str, bool]] = weakref.WeakKeyDictionary()
_IN_PROBE: contextvars.ContextVar[bool] = contextvars.ContextVar("dsh_in_probe", default=False)


def _broken(cls: type, rule_id: str) -> None:
    """Remember that the own test of ``rule_id`` failed for ``cls`` (no probe needed)."""
    _VERDICTS.setdefault(cls, {})[rule_id] = True


def _kit_rule(rule_id: str) -> Callable[..., Any] | None:
    """The kit test of ``rule_id`` if it takes just the harness (a probe can run it)."""
    for name, func in vars(ProviderContract).items():
        if not name.startswith("test_") or not inspect.iscoroutinefunction(func):
            continue
        marks = getattr(func, "pytestmark", [])
        if any(m.name == REQUIREMENT_MARKER and m.args[0] == rule_id for m in marks):
            params = list(inspect.signature(func).parameters)
            return func if params == ["self", "contract"] else None
    return None


async def _probe(
    test: ProviderContract,
    rule_id: str,
    harness: Callable[[Path, pytest.MonkeyPatch], ContractHarness],
    tmp_path: Path,
) -> bool:
    """Whether the kit test of ``rule_id`` fails for this test class (run once, remembered).

    A probe never starts another probe: a breakage met inside one is not proof.
    """
    if _IN_PROBE.get():
        return False
    verdicts = _VERDICTS.setdefault(type(test), {})
    if rule_id in verdicts:
        return verdicts[rule_id]
    rule = _kit_rule(rule_id)
    if rule is None:
        return False
    failed = False
    token = _IN_PROBE.set(True)
    try:
        with pytest.MonkeyPatch.context() as patch:
            probe = harness(tmp_path / _secrets.token_hex(6), patch)
            try:
                await rule(test, probe)
            except ContractViolation as violation:
                failed = violation.requirement.id == rule_id
            except (Exception, OutcomeException):
                failed = False
            finally:
                probe.watch.kill_leftovers()
    finally:
        _IN_PROBE.reset(token)
    verdicts[rule_id] = failed
    return failed
