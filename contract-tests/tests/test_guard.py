"""The opt-out guard: removal or a quiet override of a kit test is reported."""

from __future__ import annotations

import pytest
from dsh_contract_tests import ProviderContract, check_no_silent_opt_out


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
