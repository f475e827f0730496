"""The bounded line reader: framing, its memory bound and the malformed-line policies."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from dsh_subagent import LineReader, LineTooLongError, MalformedLineError

pytestmark = pytest.mark.anyio


class Chunks(anyio.abc.ByteReceiveStream):
    """A stream that yields the given chunks, counting the bytes handed out."""

    def __init__(self, *chunks: bytes, endless: bytes | None = None) -> None:
        self._chunks = list(chunks)
        self._endless = endless
        self.delivered = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._chunks:
            chunk = self._chunks.pop(0)
        elif self._endless is not None:
            chunk = self._endless[:max_bytes]
        else:
            raise anyio.EndOfStream
        self.delivered += len(chunk)
        return chunk

    async def aclose(self) -> None:
        return None


async def test_lines_split_across_chunks_and_a_final_unterminated_line() -> None:
    reader = LineReader(Chunks(b'{"a":', b" 1}\r\nsec", b"ond\n\nlast"))
    assert [line async for line in reader] == [b'{"a": 1}', b"second", b"", b"last"]
    assert reader.eof


async def test_end_of_stream_is_raised_once_every_line_was_delivered() -> None:
    reader = LineReader(Chunks(b"one\n"))
    assert await reader.receive() == b"one"
    with pytest.raises(anyio.EndOfStream):
        await reader.receive()


async def test_a_newline_free_flood_fails_after_at_most_the_bound_plus_one_chunk() -> None:
    flood = Chunks(endless=b"x" * 65536)
    reader = LineReader(flood, max_line_bytes=1 << 20)
    with pytest.raises(LineTooLongError):
        await reader.receive()
    assert flood.delivered <= (1 << 20) + 65536


async def test_a_complete_line_over_the_bound_fails_too() -> None:
    reader = LineReader(Chunks(b"x" * 11 + b"\n"), max_line_bytes=10)
    with pytest.raises(LineTooLongError):
        await reader.receive()


async def test_a_line_of_exactly_the_bound_is_accepted() -> None:
    reader = LineReader(Chunks(b"x" * 10 + b"\n"), max_line_bytes=10)
    assert await reader.receive() == b"x" * 10


async def test_fail_policy_raises_on_a_line_that_is_not_json() -> None:
    reader = LineReader(Chunks(b"banner\n", b"{}\n"), malformed="fail")
    with pytest.raises(MalformedLineError):
        await reader.receive_json()


async def test_skip_policy_ignores_non_json_and_blank_lines() -> None:
    reader = LineReader(Chunks(b"banner\n", b"\n", b'{"ok": true}\n'), malformed="skip")
    assert await reader.receive_json() == {"ok": True}


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_line_bytes"):
        LineReader(Chunks(), max_line_bytes=0)


async def test_receive_nowait_hands_out_only_what_was_already_read() -> None:
    first = b'{"terminal": 1}\n{"request": 2}\nnot json\n{"par'
    stream = Chunks(first, b'tial": 3}\n')
    reader = LineReader(stream, malformed="skip")
    assert await reader.receive_json() == {"terminal": 1}
    assert reader.receive_json_nowait() == {"request": 2}
    with pytest.raises(anyio.WouldBlock):  # the skipped line is consumed, the partial one waits
        reader.receive_json_nowait()
    assert stream.delivered == len(first)  # nothing more was read from the stream
    assert await reader.receive_json() == {"partial": 3}


async def test_receive_nowait_returns_the_last_unterminated_line_then_end_of_stream() -> None:
    reader = LineReader(Chunks(b"one\nlast"))
    assert await reader.receive() == b"one"
    with pytest.raises(anyio.WouldBlock):  # EOF not seen yet: "last" may still grow
        reader.receive_nowait()
    assert await reader.receive() == b"last"
    with pytest.raises(anyio.EndOfStream):
        reader.receive_nowait()


async def test_receive_nowait_keeps_the_bound() -> None:
    reader = LineReader(Chunks(b"ok\n" + b"x" * 11 + b"\n"), max_line_bytes=10)
    assert await reader.receive() == b"ok"
    with pytest.raises(LineTooLongError):
        reader.receive_nowait()
