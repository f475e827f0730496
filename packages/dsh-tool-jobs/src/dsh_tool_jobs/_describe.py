"""How an exception is spelled inside model-visible detail strings."""

from __future__ import annotations

__all__ = ["describe_error"]


def describe_error(exc: BaseException) -> str:
    """``"<TypeName>: <message>"``, the reference's ``String(err)`` shape (``Error: boom``)."""
    return f"{type(exc).__name__}: {exc}"
