"""The opt-out guard (``kit:no-silent-opt-out``): a kit test is never removed or quietly replaced.

A provider author opts out of one rule only by overriding its test with
``@pytest.mark.xfail(strict=True, reason=...)`` and running the kit's rule from the
override (``super()``). The kit holds an author to that in two places:

* :func:`bind_overrides` runs when the author's test class is defined. It re-applies the
  kit test's own marks (requirement, tier, ``anyio``, parametrization) to the override,
  so the override is selected by ``-m keyless`` and runs as the async test it is, and it
  narrows the author's xfail to :class:`~dsh_contract_tests.ContractViolation`: only a
  failure of a kit rule counts as the expected failure. An override that ends without
  having run the kit's rule fails with :class:`~dsh_contract_tests.SilentOptOut`, which
  no xfail expects. A rule the provider meets after all ends as a strict ``XPASS``,
  which fails.
* :func:`check_no_silent_opt_out`, run by each base class's guard test, reports a kit
  test that was removed, or overridden without a strict xfail and a reason.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from dsh_contract_tests.failures import (
    Consequence,
    ContractViolation,
    RuleEntries,
    SilentOptOut,
    render_error,
)
from dsh_contract_tests.manifest import REQUIREMENT_MARKER, REQUIREMENTS

__all__ = ["GUARD_TEST", "bind_overrides", "check_no_silent_opt_out"]

GUARD_TEST = "test_no_silent_opt_out"
"""The guard's own test: it cannot be overridden."""

_OVERRIDE = "__dsh_override__"
"""Attribute of a bound override naming the author's own function."""


def _kit_test_names(kit: type) -> list[str]:
    return sorted(n for n, v in vars(kit).items() if n.startswith("test_") and callable(v))


def _xfail_strict_with_reason(func: object) -> bool:
    for mark in getattr(func, "pytestmark", []):
        if mark.name == "xfail" and mark.kwargs.get("strict") is True:
            reason = mark.kwargs.get("reason") or (mark.args[1] if len(mark.args) > 1 else "")
            if isinstance(reason, str) and reason.strip():
                return True
    return False


def _requirement_id(func: object) -> str:
    for mark in getattr(func, "pytestmark", []):
        if mark.name == REQUIREMENT_MARKER:
            return str(mark.args[0])
    raise AssertionError(f"kit test {func!r} names no requirement")


def _accepted(func: Callable[..., Any]) -> set[str] | None:
    """The keyword arguments ``func`` takes besides ``self`` (``None``: any)."""
    params = list(inspect.signature(func).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _opt_out(name: str, base: Callable[..., Any], override: Callable[..., Any]) -> Any:
    """``override`` with ``base``'s signature and marks, checked to run ``base``'s rule."""
    req_id = _requirement_id(base)
    guard = REQUIREMENTS["kit:no-silent-opt-out"]
    accepted = _accepted(override)
    base_marks = list(getattr(base, "pytestmark", []))
    kept = {m.name for m in base_marks}
    marks = list(base_marks)
    for mark in getattr(override, "pytestmark", []):
        if mark.name == "xfail":
            expects = {**mark.kwargs, "raises": ContractViolation}
            mark = pytest.mark.xfail(*mark.args, **expects).mark
        elif mark.name in kept:
            continue  # the kit's own marks, repeated by the author
        marks.append(mark)

    def arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
        return kwargs if accepted is None else {k: v for k, v in kwargs.items() if k in accepted}

    strict = _xfail_strict_with_reason(override)

    def silent(
        entered: list[tuple[str, object]],
        kwargs: dict[str, Any],
        raised: BaseException | None = None,
    ) -> SilentOptOut | Consequence | None:
        # The rule must have run with the kit's own harness: run with anything else (None,
        # a stand-in) it fails on its own argument, not on the provider, and an xfail
        # would take that for the provider's breakage.
        harness = kwargs.get("contract")
        if any(i == req_id and (harness is None or h is harness) for i, h in entered):
            return None
        ended = "" if raised is None else f" (it ended with {render_error(raised)})"
        ran = any(i == req_id for i, _ in entered)
        how = " with the kit's own contract object" if ran else ""
        observed = (
            f"{name} is overridden, but the override never ran the kit's rule {req_id}"
            f"{how}{ended}: an opt-out calls super().{name}(contract) with the contract it "
            "was given, so that the rule still runs and a strict XPASS reports the day the "
            "provider meets it"
        )
        if not strict:
            # The guard test fails for this override already (no strict xfail with a
            # reason): one opt-out, one failure, this test its consequence.
            return Consequence(f"consequence of {guard.id} (its own test fails): {observed}")
        return SilentOptOut(guard, observed)

    if inspect.iscoroutinefunction(base):

        @functools.wraps(base)
        async def opted_out_async(self: object, **kwargs: Any) -> None:
            with RuleEntries() as entered:
                try:
                    result = override(self, **arguments(kwargs))
                    if inspect.isawaitable(result):
                        await result
                except BaseException as exc:
                    if (problem := silent(entered, kwargs, exc)) is not None:
                        raise problem from None
                    raise
            if (problem := silent(entered, kwargs)) is not None:
                raise problem

        bound: Any = opted_out_async
    else:

        @functools.wraps(base)
        def opted_out(self: object, **kwargs: Any) -> None:
            with RuleEntries() as entered:
                try:
                    override(self, **arguments(kwargs))
                except BaseException as exc:
                    if (problem := silent(entered, kwargs, exc)) is not None:
                        raise problem from None
                    raise
            if (problem := silent(entered, kwargs)) is not None:
                raise problem

        bound = opted_out
    bound.pytestmark = marks
    setattr(bound, _OVERRIDE, override)
    return bound


def bind_overrides(cls: type, kit: type) -> None:
    """Re-bind every kit test that ``cls`` overrides (see the module docstring).

    Raises:
        TypeError: ``cls`` overrides the guard test itself.
    """
    own = vars(cls)
    if GUARD_TEST in own and own[GUARD_TEST] is not vars(kit)[GUARD_TEST]:
        req = REQUIREMENTS["kit:no-silent-opt-out"]
        raise TypeError(
            f"{req.id} — {req.rule}\nObserved: {cls.__qualname__} overrides {GUARD_TEST}, "
            "the guard of every opt-out; it cannot be overridden"
        )
    for name in _kit_test_names(kit):
        override = own.get(name)
        if override is None or not callable(override) or hasattr(override, _OVERRIDE):
            continue
        base = next(vars(k)[name] for k in kit.__mro__ if name in vars(k))
        setattr(cls, name, _opt_out(name, base, override))


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
