"""Refusal of text a product cannot read: every string that reaches a product is UTF-8.

Every product wire (JSON-RPC lines, the Claude Code SDK's stream) carries UTF-8. A
Python ``str`` can hold what UTF-8 cannot encode: a lone surrogate, which is what an
undecodable byte becomes on the command line (``surrogateescape``) or in a file read
with ``errors="surrogateescape"``. Sent on, it is a frame the product cannot parse; a
product may then never answer the request at all. So such text is refused where it
enters, before anything is spawned, the same for every provider:

* a start request (:func:`check_request_text`, called by
  :meth:`~dsh_subagent.SubagentService.start`): ``INVALID_REQUEST`` naming the field;
* a provider configuration (:class:`~dsh_subagent.ProductConfig`): a validation error
  naming the field, at load.

The refusal names the field and never repeats the text.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from pydantic import BaseModel

from dsh_subagent.errors import SubagentError, SubagentErrorCode

__all__ = ["NOT_UTF8", "check_request_text", "first_non_utf8", "is_utf8_text"]

NOT_UTF8: Final = "is not valid UTF-8 text (it holds a lone surrogate, e.g. an undecodable byte)"
"""The end of every refusal: what is wrong, never the text itself."""

# Request fields that carry no text (the cancel signal, the host-only budget).
_NO_TEXT: Final = frozenset({"cancel", "budget"})


def is_utf8_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (holds no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _strings(value: object, path: str) -> Iterator[tuple[str, str]]:
    """Every string in ``value`` (keys included) with the dotted path that holds it."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _strings(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            key_path = f"{path}.<key>" if path else "<key>"
            yield from _strings(key, key_path)
            name = key if isinstance(key, str) and is_utf8_text(key) else "<key>"
            yield from _strings(item, f"{path}.{name}" if path else name)
    elif isinstance(value, list | tuple | frozenset | set):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def first_non_utf8(value: object, path: str = "") -> str | None:
    """The dotted path of the first string in ``value`` UTF-8 cannot encode, else ``None``.

    Walks strings, pydantic models (by field), mappings (keys and values) and sequences.
    """
    for where, text in _strings(value, path):
        if not is_utf8_text(text):
            return where
    return None


def _field_name(where: str) -> str:
    # prompt[0].text is the task: name the request field, not the block internals.
    return "prompt" if where.startswith("prompt[") else where


def check_request_text(request: BaseModel) -> None:
    """Refuse a start request holding a string UTF-8 cannot encode.

    Raises:
        SubagentError: ``INVALID_REQUEST``, ``subagent request field "<field>" is not
            valid UTF-8 text (...)``; the message never contains the text.
    """
    for name in type(request).model_fields:
        if name in _NO_TEXT:
            continue
        where = first_non_utf8(getattr(request, name), name)
        if where is not None:
            raise SubagentError(
                SubagentErrorCode.INVALID_REQUEST,
                f'subagent request field "{_field_name(where)}" {NOT_UTF8}; nothing was started',
            )
