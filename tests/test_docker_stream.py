"""The followed log's byte parsing (supervisor/adapters/docker/stream.py) on plain bytes cut anywhere.

The daemon reads Docker's log stream off the socket itself: HTTP/1.1 chunked encoding, then Docker's
multiplexed frames (an 8-byte header: stream, 3 zero bytes, big-endian length). A socket hands over
whatever has arrived, so a chunk's size line, its data, a frame's header or its payload can each be cut
between two reads; the payloads must come out whole and in order, whatever the cuts. The reader here is
the standard library's ``io.BufferedReader`` over a raw stream that delivers the bytes in the given pieces
(as a socket does); the real Docker engine is read in tests/test_docker_adapter.py.
"""

from __future__ import annotations

import io
import itertools
import struct
import threading
import time
from typing import Any

from hypothesis import given, settings, strategies as st

from supervisor.adapters.docker.stream import dechunked, frame_payloads, paced_reads


class _Pieces(io.RawIOBase):
    """A raw stream that returns the data in the given pieces, one per read (a socket's recv)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = list(pieces)

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self._pieces:
            return 0
        piece = self._pieces.pop(0)
        n = min(len(b), len(piece))
        b[:n] = piece[:n]
        if n < len(piece):
            self._pieces.insert(0, piece[n:])
        return n


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def _frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, at, i = b"", 0, 0
    while at < len(body):
        n = max(1, sizes[i % len(sizes)] if sizes else len(body))
        part = body[at : at + n]
        ext = b";ext=1" if i % 3 == 2 else b""  # chunk extensions are allowed (and ignored)
        out += f"{len(part):x}".encode() + ext + b"\r\n" + part + b"\r\n"
        at, i = at + n, i + 1
    return out + b"0\r\n\r\n"


_LINES = st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    payloads=_LINES,
    streams=st.lists(st.sampled_from([1, 2]), min_size=1, max_size=12),
    chunk_sizes=st.lists(st.integers(1, 700), min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 10_000), max_size=40),
)
def test_payloads_come_out_whole_and_in_order_whatever_the_cuts(
    payloads: list[bytes], streams: list[int], chunk_sizes: list[int], cuts: list[int]
) -> None:
    body = b"".join(_frame(streams[i % len(streams)], p) for i, p in enumerate(payloads))
    wire = _chunked(body, chunk_sizes)
    reader = io.BufferedReader(_Pieces(_cut(wire, cuts)))
    out = b"".join(frame_payloads(dechunked(reader, 0.0)))
    assert out == b"".join(payloads)


def test_the_last_chunk_ends_the_stream_and_what_follows_is_not_read() -> None:
    wire = _chunked(_frame(1, b"one\n"), [64]) + b"garbage that is never a chunk"
    reader = io.BufferedReader(_Pieces([wire]))
    assert b"".join(frame_payloads(dechunked(reader, 0.0))) == b"one\n"


def test_a_size_line_that_is_not_hex_ends_the_stream_after_the_good_chunks() -> None:
    """Not chunked HTTP: the stream ends (the follower attaches again) instead of raising."""
    good = _chunked(_frame(1, b"kept\n"), [64])[: -len(b"0\r\n\r\n")]
    reader = io.BufferedReader(_Pieces([good + b"zz\r\nnope\r\n"]))
    assert b"".join(frame_payloads(dechunked(reader, 0.0))) == b"kept\n"


def test_a_connection_closed_mid_frame_keeps_the_complete_frames() -> None:
    wire = _chunked(_frame(1, b"whole\n") + _frame(2, b"cut short\n"), [14, 1000])[:-20]
    reader = io.BufferedReader(_Pieces(_cut(wire, [5, 17, 30])))
    assert b"".join(frame_payloads(dechunked(reader, 0.0))) == b"whole\n"


class _Stamped(io.RawIOBase):
    """A socket whose pieces are all there at once; the times ``readinto`` was called."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces: list[bytes] = list(pieces)
        self.at: list[float] = []

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        self.at.append(time.monotonic())
        if not self.pieces:
            return 0
        piece = self.pieces.pop(0)
        b[: len(piece)] = piece
        return len(piece)


def test_a_busy_stream_is_read_once_per_period_and_a_quiet_one_at_once() -> None:
    raw = _Stamped([b"a", b"b", b"c"])
    start = time.monotonic()
    assert list(paced_reads(io.BufferedReader(raw), 0.2)) == [b"a", b"b", b"c"]
    assert raw.at[0] - start < 0.2  # the first read waits for nothing
    assert all(b - a >= 0.2 for a, b in itertools.pairwise(raw.at))  # then one read per period


def test_a_full_read_is_followed_at_once() -> None:
    """A backlog (a read that filled the buffer) is drained at full speed: no pause after it."""
    raw = _Stamped([b"x" * 65536, b"tail"])
    got = list(itertools.islice(paced_reads(io.BufferedReader(raw), 30.0), 2))  # a pause: 30 s
    assert got == [b"x" * 65536, b"tail"]


def test_once_hurried_the_reads_are_no_longer_paced() -> None:
    """At a container's exit the watch sets ``hurry``: the last lines are read at once."""
    hurry = threading.Event()
    reads = paced_reads(io.BufferedReader(_Stamped([b"first", b"last words"])), 30.0, hurry)
    assert next(reads) == b"first"
    hurry.set()
    assert next(reads) == b"last words"  # a pause: 30 s
