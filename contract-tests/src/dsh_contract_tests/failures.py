"""How a kit failure reads: the rule's id and sentence first, then what was observed.

Every kit test is bound to its requirement by :func:`bind_rule`, through the decorator
:func:`requirement` that names its manifest id. Whatever ends a rule early — a failed check, a
wait that ran out, an exception the provider raised — leaves the test as one
:class:`ContractViolation` whose message is::

    <id> — <the rule sentence>
    Observed: <what the kit saw>
    Rule: docs/rules.md#<anchor>

A breakage that one rule owns is reported by that rule's test alone: another test that
runs into it calls :meth:`~dsh_contract_tests.ContractHarness.consequence`, which ends
that test as an expected failure (``XFAIL``) naming the owning rule once that rule's own
scenario is seen to fail too (see :mod:`dsh_contract_tests.harness`).

An opted-out test (``xfail(strict=True, ...)``) expects exactly a
:class:`ContractViolation`; :class:`SilentOptOut` is what the kit raises when the test
class itself breaks ``kit:no-silent-opt-out``, and no opt-out can expect it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Final, NoReturn, TypeVar

import anyio
import pytest
from _pytest.outcomes import Failed, OutcomeException, Skipped, XFailed

from dsh_contract_tests import ledger, verify_child
from dsh_contract_tests.manifest import REQUIREMENT_MARKER, REQUIREMENTS, Requirement
from dsh_contract_tests.watchdog import Hang, in_worker, run_isolated, run_isolated_sync

__all__ = [
    "CALLS_RETURN",
    "NO_PLUGIN",
    "Consequence",
    "ContractViolation",
    "KitSkipped",
    "KitTimeout",
    "RuleEntries",
    "SilentOptOut",
    "bind_rule",
    "current_rule",
    "kit_skip",
    "render_error",
    "requirement",
    "rule_entered",
    "verdict",
]

_F = TypeVar("_F", bound=Callable[..., Any])

_TRACE_LINES: Final = 40
"""Lines of an unexpected exception's traceback kept under a failure message."""

_CURRENT: contextvars.ContextVar[Requirement | None] = contextvars.ContextVar(
    "dsh_contract_rule", default=None
)
_ENTRIES: contextvars.ContextVar[list[tuple[str, object]] | None] = contextvars.ContextVar(
    "dsh_contract_rule_entries", default=None
)

NO_PLUGIN: Final = (
    "dsh-contract FAILED: a kit rule ran without the kit's pytest plugin, so no account of "
    "which rules ran would be kept; remove -p no:dsh_contract_tests (addopts or "
    "PYTEST_ADDOPTS), or load the plugin with -p dsh_contract_tests"
)
"""The one line that ends a run whose kit rules run without the plugin's accounting."""


def _message(requirement: Requirement, observed: str, detail: str | None) -> str:
    text = f"{requirement.id} — {requirement.rule}\nObserved: {observed}\nRule: {requirement.doc}"
    return f"{text}\n\n{detail}" if detail else text


class ContractViolation(Failed):
    """A provider broke the rule :attr:`requirement`; the test fails with that rule's name.

    Attributes:
        requirement: The rule that was broken (usually the test's own).
        observed: What the kit saw, in one or a few sentences.
    """

    def __init__(self, requirement: Requirement, observed: str, detail: str | None = None) -> None:
        self.requirement = requirement
        self.observed = observed
        super().__init__(_message(requirement, observed, detail), pytrace=False)


class SilentOptOut(Failed):
    """The test class broke ``kit:no-silent-opt-out``: never expected by an opt-out."""

    def __init__(self, requirement: Requirement, observed: str) -> None:
        self.requirement = requirement
        self.observed = observed
        super().__init__(_message(requirement, observed, None), pytrace=False)


ContractViolation.__module__ = "dsh_contract_tests"
SilentOptOut.__module__ = "dsh_contract_tests"


class KitSkipped(Skipped):
    """A skip the kit itself decided (a declared capability, a missing key): the rule ran."""


class Consequence(XFailed):
    """This test met a breakage another rule owns, and that rule's own test fails."""


def kit_skip(reason: str) -> NoReturn:
    """Skip the running kit test for a reason of the kit's own (shown with the skip).

    Only the kit's own modules skip as the kit: a call from anywhere else (a provider's
    factory reaching for this helper) is a plain skip, which the account reports as a
    rule that did not run.
    """
    caller = str(sys._getframe(1).f_globals.get("__name__", ""))
    if not caller.startswith("dsh_contract_tests."):
        raise Skipped(reason)
    raise KitSkipped(reason)


def _raised_by_kit(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by the kit's own code (its innermost frame is the kit's):
    a provider that raises the kit's skip or consequence itself is not the kit."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith("dsh_contract_tests.")


def _outcome(exc: BaseException) -> ledger.Outcome:
    if isinstance(exc, Consequence):
        return "consequence" if _raised_by_kit(exc) else "foreign-xfail"
    if isinstance(exc, XFailed):
        return "foreign-xfail"
    if isinstance(exc, KitSkipped):
        return "kit-skip" if _raised_by_kit(exc) else "foreign-skip"
    if isinstance(exc, Skipped):
        return "foreign-skip"
    if isinstance(exc, KeyboardInterrupt | SystemExit) or (
        isinstance(exc, OutcomeException) and not isinstance(exc, Failed)
    ):
        return "interrupted"
    return "failed"


class KitTimeout(Exception):
    """A bounded wait of the kit ran out; the message says what it waited for."""


def current_rule() -> Requirement | None:
    """The requirement whose kit test is running in this context, if any."""
    return _CURRENT.get()


def rule_entered(requirement: Requirement, harness: object = None) -> None:
    """Record that the kit's own rule ran, and with which harness (what an opted-out
    override must do, with the kit's own ``contract`` object)."""
    entries = _ENTRIES.get()
    if entries is not None:
        entries.append((requirement.id, harness))


class RuleEntries:
    """Collect ``(id, harness)`` of the kit rules entered in this context (nesting-safe)."""

    def __init__(self) -> None:
        self.entered: list[tuple[str, object]] = []
        self._token: contextvars.Token[list[tuple[str, object]] | None] | None = None

    def __enter__(self) -> list[tuple[str, object]]:
        self._outer = _ENTRIES.get()
        self._token = _ENTRIES.set(self.entered)
        return self.entered

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _ENTRIES.reset(self._token)
        if self._outer is not None:
            self._outer.extend(self.entered)


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def render_error(exc: BaseException) -> str:
    """``Type: message`` of an exception, for a failure's "Observed" line."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _trace(exc: BaseException) -> str:
    lines = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    if len(lines) > _TRACE_LINES:
        lines = ["  ...", *lines[-_TRACE_LINES:]]
    return "What was raised:\n" + "\n".join(lines)


def verdict(requirement: Requirement, exc: BaseException) -> BaseException:
    """The exception a rule that ended with ``exc`` leaves its test with."""
    leaves = list(_leaves(exc))
    for kind in (SilentOptOut, ContractViolation):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    for leaf in leaves:
        if isinstance(leaf, XFailed) or (
            isinstance(leaf, OutcomeException) and not isinstance(leaf, Failed)
        ):
            return leaf  # xfail (a consequence of another rule) / skip / exit
        if isinstance(leaf, KeyboardInterrupt | SystemExit):
            return leaf
    first = leaves[0]
    more = f" (and {len(leaves) - 1} more error(s) at the same time)" if len(leaves) > 1 else ""
    if isinstance(first, AssertionError | Failed | KitTimeout):
        # A kit check's own message; pytest's rewritten-assert explanation adds nothing.
        observed = str(first).split("\nassert ", 1)[0].strip() or "a check of the kit failed"
        return ContractViolation(requirement, observed + more)
    return ContractViolation(requirement, render_error(first) + more, _trace(first))


CALLS_RETURN: Final = "lifecycle:calls-return"
"""The rule a provider call that never returns breaks (what the watchdog reports)."""


def _harness(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The test's harness among a kit test's arguments (``None`` if it takes none)."""
    for value in (kwargs.get("contract"), *args):
        if value is not None and hasattr(value, "hung"):
            return value
    return None


async def _hung(hang: Hang, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NoReturn:
    """End the test for ``hang`` under :data:`CALLS_RETURN` (or as its consequence)."""
    harness = _harness(args, kwargs)
    if harness is not None:
        await harness.hung(hang)
    raise ContractViolation(REQUIREMENTS[CALLS_RETURN], str(hang))


def _begin(requirement: Requirement, emit: Callable[[dict[str, Any]], None]) -> str:
    """The outermost rule of a test starts: its node id (the run ends if unaccounted)."""
    node = ledger.current_nodeid()
    if node is None:
        pytest.exit(NO_PLUGIN, returncode=1)
    emit({"event": "begin", "node": node, "id": requirement.id})
    return node


def _end(
    node: str | None,
    requirement: Requirement,
    outcome: ledger.Outcome,
    detail: str,
    emit: Callable[[dict[str, Any]], None],
    record: Callable[[str, ledger.Outcome, str], None],
) -> None:
    """The outermost rule of a test ended: tell the ledger and a verify run's channel."""
    record(requirement.id, outcome, detail)
    emit({"event": "end", "node": node, "id": requirement.id, "outcome": outcome, "detail": detail})


def bind_rule(requirement: Requirement, func: _F) -> _F:
    """Wrap a kit test so that however it ends early, the failure names ``requirement``.

    The outermost rule of a test runs in a thread of its own under the watchdog
    (:mod:`dsh_contract_tests.watchdog`): a provider call that never returns, even one
    shielded from cancellation, ends the test under :data:`CALLS_RETURN`. It also tells
    the run's ledger what it did (a rule run inside another, as a probe, does not), and a
    verify run's evidence channel (:mod:`dsh_contract_tests.verify_child`). Both writers
    are bound here, when the rules are defined, before any provider code is imported.
    """
    emit, record = verify_child.emit, ledger.record

    def begin(requirement: Requirement) -> str:
        return _begin(requirement, emit)

    def end(node: str | None, req: Requirement, outcome: ledger.Outcome, detail: str) -> None:
        _end(node, req, outcome, detail, emit, record)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def rule_async(*args: Any, **kwargs: Any) -> Any:
            rule_entered(requirement, _harness(args, kwargs))
            outermost = _CURRENT.get() is None
            node = begin(requirement) if outermost else None
            token = _CURRENT.set(requirement)
            try:
                if in_worker():
                    result = await func(*args, **kwargs)
                else:
                    try:
                        result = await run_isolated(func, *args, **kwargs)
                    except Hang as hang:
                        await _hung(hang, args, kwargs)
            except anyio.get_cancelled_exc_class():
                # The test itself is being cancelled (Ctrl-C, the session ending): no
                # rule failed, and a failure raised here would outlive the interrupt as
                # an unretrieved task exception.
                if outermost:
                    end(node, requirement, "interrupted", "cancelled")
                raise
            except BaseException as exc:
                ended = verdict(requirement, exc)
                if outermost:
                    end(node, requirement, _outcome(ended), str(ended))
                raise ended from None
            finally:
                _CURRENT.reset(token)
            if outermost:
                end(node, requirement, "passed", "")
            return result

        return rule_async  # type: ignore[return-value]

    @functools.wraps(func)
    def rule(*args: Any, **kwargs: Any) -> Any:
        rule_entered(requirement, _harness(args, kwargs))
        outermost = _CURRENT.get() is None
        node = begin(requirement) if outermost else None
        token = _CURRENT.set(requirement)
        try:
            if in_worker():
                result = func(*args, **kwargs)
            else:
                try:
                    result = run_isolated_sync(func, *args, **kwargs)
                except Hang as hang:
                    backend = str(kwargs.get("anyio_backend", "asyncio"))
                    anyio.run(_hung, hang, args, kwargs, backend=backend)
        except BaseException as exc:
            ended = verdict(requirement, exc)
            if outermost:
                end(node, requirement, _outcome(ended), str(ended))
            raise ended from None
        finally:
            _CURRENT.reset(token)
        if outermost:
            end(node, requirement, "passed", "")
        return result

    return rule  # type: ignore[return-value]


def requirement(req_id: str) -> Callable[[_F], _F]:
    """Tie a kit test to its manifest id (and to the id's tier marker).

    The test is wrapped so that however it fails, the failure starts with the id and the
    rule sentence (:class:`~dsh_contract_tests.ContractViolation`).

    Raises:
        KeyError: ``req_id`` is not in :data:`~dsh_contract_tests.REQUIREMENTS` (caught at
            import time).
    """
    req = REQUIREMENTS[req_id]

    def mark(func: _F) -> _F:
        marked = getattr(pytest.mark, REQUIREMENT_MARKER)(req.id)(bind_rule(req, func))
        return getattr(pytest.mark, req.tier)(marked)  # type: ignore[no-any-return]

    return mark
