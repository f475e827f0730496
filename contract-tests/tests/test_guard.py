"""The opt-out guard: removal or a quiet override of a kit test is reported."""

from __future__ import annotations

import pytest
from dsh_contract_tests import ContractViolation, ProviderContract, check_no_silent_opt_out


class Honest(ProviderContract):
    pass


class Removed(ProviderContract):
    test_cancel_mid_run = None  # type: ignore[assignment]


class QuietOverride(ProviderContract):
    async def test_cancel_mid_run(self) -> None:  # type: ignore[override]
        pass


class LooseXfail(ProviderContract):
    @pytest.mark.xfail(reason="not strict")
    async def test_cancel_mid_run(self) -> None:  # type: ignore[override]
        pass


class NoReason(ProviderContract):
    @pytest.mark.xfail(strict=True)
    async def test_cancel_mid_run(self) -> None:  # type: ignore[override]
        pass


class VisibleOptOut(ProviderContract):
    @pytest.mark.xfail(strict=True, reason="the product cannot be interrupted mid-turn")
    async def test_cancel_mid_run(self) -> None:  # type: ignore[override]
        raise AssertionError


def test_honest_subclass_passes() -> None:
    assert check_no_silent_opt_out(Honest, ProviderContract) == []


@pytest.mark.parametrize(
    ("cls", "problem"),
    [
        (Removed, "test_cancel_mid_run was removed"),
        (QuietOverride, "test_cancel_mid_run is overridden without"),
        (LooseXfail, "test_cancel_mid_run is overridden without"),
        (NoReason, "test_cancel_mid_run is overridden without"),
    ],
)
def test_quiet_opt_outs_are_reported(cls: type, problem: str) -> None:
    problems = check_no_silent_opt_out(cls, ProviderContract)
    assert len(problems) == 1
    assert problems[0].startswith(problem)


def test_strict_xfail_with_reason_is_the_visible_opt_out() -> None:
    assert check_no_silent_opt_out(VisibleOptOut, ProviderContract) == []


def test_an_override_keeps_the_kit_tests_marks_and_expects_only_a_rule_failure() -> None:
    marks = {m.name: m for m in getattr(VisibleOptOut.test_cancel_mid_run, "pytestmark", [])}
    kit = {m.name: m for m in getattr(ProviderContract.test_cancel_mid_run, "pytestmark", [])}
    # anyio's plugin adds usefixtures("anyio_backend") to async tests as it collects them.
    assert set(kit) - {"usefixtures"} <= set(marks)
    assert marks["dsh_requirement"].args == ("settlement:cancel-mid-run",)
    assert marks["xfail"].kwargs == {
        "strict": True,
        "reason": "the product cannot be interrupted mid-turn",
        "raises": ContractViolation,
    }


def test_a_parametrized_kit_test_keeps_its_parameters_when_overridden() -> None:
    class OptsOutOfOnePhase(ProviderContract):
        @pytest.mark.xfail(strict=True, reason="known leak")
        async def test_cancel_at_any_phase_leaves_no_process(
            self, contract: object, phase: str
        ) -> None:
            pass

    bound = OptsOutOfOnePhase.test_cancel_at_any_phase_leaves_no_process
    marks = [m.name for m in getattr(bound, "pytestmark", [])]
    assert marks.count("parametrize") == 1
    assert "anyio" in marks


def test_the_guard_itself_cannot_be_overridden() -> None:
    with pytest.raises(TypeError, match=r"(?s)^kit:no-silent-opt-out — .*overrides test_no_silent"):

        class SilencesTheGuard(ProviderContract):
            def test_no_silent_opt_out(self) -> None:
                pass
