"""``dsh run P T -``: the task read from stdin, bounded."""

from __future__ import annotations

import io
import sys

import pytest
from dsh_cli import run_command
from dsh_profiles.errors import UsageError


class _Bytes:
    """A stdin whose ``buffer`` yields ``size`` bytes of ``y\\n`` (``yes | dsh run ... -``)."""

    def __init__(self, size: int) -> None:
        self.buffer = io.BytesIO(b"y\n" * (size // 2))


def test_a_task_on_stdin_past_the_bound_is_refused_unread_past_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stdin = _Bytes(64)
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(UsageError, match=r"^the task on stdin is longer than 16 bytes"):
        run_command._read_stdin_text(limit=16)
    assert stdin.buffer.tell() == 17  # the bound and one byte more, nothing past it
    monkeypatch.setattr(sys, "stdin", _Bytes(16))
    assert run_command._read_stdin_text(limit=16) == "y\n" * 8
