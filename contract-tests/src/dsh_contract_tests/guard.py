"""The opt-out guard (``kit:no-silent-opt-out``): a kit test is never removed or quietly replaced.

A provider author may opt out of one rule only by overriding its test with
``@pytest.mark.xfail(strict=True, reason=...)``; anything quieter is reported by
:func:`check_no_silent_opt_out`, which each base class runs as its own guard test.
"""

from __future__ import annotations

__all__ = ["check_no_silent_opt_out"]


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
