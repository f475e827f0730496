"""What runs inside one child process of a verify run (``python -m dsh_contract_tests verify``).

The verify parent (:mod:`dsh_contract_tests.verify`) starts one pytest process per rule,
with only the kit's plugin loaded, and hands it the write end of a pipe as an inherited
file descriptor named by the ``--dsh-verify-channel`` option. The plugin opens the
channel in ``pytest_configure``, before any provider code is imported (the generated test
module imports the provider lazily, inside its factory): the descriptor is moved to a
new, non-inheritable number and the original is closed. From then on the kit's rule
wrapper (:func:`dsh_contract_tests.failures.bind_rule`) writes what each outermost rule
did straight to it, one JSON line per event; it never goes through pytest's reports,
the ledger or the exit status, which code in the same process can rewrite.

The writer is captured when the rules are defined, so rebinding this module's names
later changes nothing (the generated test module builds the provider with
:mod:`dsh_contract_tests.verify_setup`). Code that sets out to forge the kit's own records
from inside the process can still do so; the parent therefore trusts no single claim (see
:mod:`dsh_contract_tests.verify`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, Final

__all__ = ["CHANNEL_OPTION", "DETAIL_CHARS", "emit", "open_channel"]

CHANNEL_OPTION: Final = "--dsh-verify-channel"  # plugin.VERIFY_CHANNEL_OPTION
"""The option naming the inherited descriptor of a verify child's evidence channel."""

DETAIL_CHARS: Final = 1500
"""Characters of a rule's failure message kept in one record: one pipe write stays
atomic (below PIPE_BUF) and the parent's buffer stays bounded."""

_SINK: Final[list[int]] = []


def open_channel(fd: int) -> None:
    """Take over the inherited descriptor ``fd`` as this process's evidence channel."""
    if _SINK:
        return
    moved = os.dup(fd)  # new descriptors are not inherited by the provider's children
    os.close(fd)
    _SINK.append(moved)


def _writer(sink: list[int]) -> Callable[[dict[str, Any]], None]:
    def write(record: dict[str, Any]) -> None:
        if not sink:
            return
        detail = str(record.get("detail", ""))
        if len(detail) > DETAIL_CHARS:
            record = {**record, "detail": detail[:DETAIL_CHARS] + "…"}
        line = json.dumps(record, ensure_ascii=True) + "\n"
        os.write(sink[0], line.encode("ascii"))

    return write


emit: Final = _writer(_SINK)
"""Write one record to the channel (nothing outside a verify child)."""
