"""Docker's streaming endpoints: a container's log (``logs``, followed or not) and its lifecycle events
(``events``), as :class:`StreamReads`, the part of :class:`~supervisor.adapters.docker.adapter.DockerAdapter`
that reads streams; the followed log's bytes (HTTP chunked encoding and Docker's frame headers undone on
the socket's bytes), the lines in them, and the closer that ends a stream when its reader is told to stop.

Streams use a second client without a read timeout, because an idle container or a quiet engine is
normal there; they end when the caller's ``stop`` event is set (a closer thread shuts the socket) or, for
logs, when the container exits."""

from __future__ import annotations

import codecs
import contextlib
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import docker
import structlog
from docker.types.daemon import CancellableStream

from supervisor.adapters.docker.errors import ERRORS, translate
from supervisor.adapters.docker.status import event_dict
from supervisor.core.log_events import LINE_MAX, cap_line

log = structlog.get_logger(__name__)


class Closer:
    """Closes a docker stream when ``stop`` is set (from a small watcher thread).

    ``stop.wait`` returns the moment ``stop`` is set, so the wait's timeout only bounds how long the
    thread outlives a stream that ended on its own (``finish``): ``DONE_POLL_S``, with one wake-up per
    period (it was 0.2 s: 5 wake-ups a second for each open stream, a tenth of the daemon's idle CPU)."""

    def __init__(self, stream: Any, stop: threading.Event) -> None:
        self._stream = stream
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, args=(stop,), name="docker-stream-closer", daemon=True
        )
        self._thread.start()

    def _watch(self, stop: threading.Event) -> None:
        while not self._done.is_set():
            if stop.wait(DONE_POLL_S):
                with contextlib.suppress(Exception):
                    self._stream.close()
                return

    def finish(self) -> None:
        """The stream ended (or its reader stopped): close it; the thread ends at its next wake-up."""
        self._done.set()
        with contextlib.suppress(Exception):
            self._stream.close()


#: How long a stream's closer thread may outlive the stream (module docstring of :class:`Closer`).
DONE_POLL_S = 2.0
#: The most one read takes from a followed stream.
READ_MAX = 65536
#: A follower reads at most once per this many seconds: a line after a quiet spell is read at once, the
#: lines of a busy spell in one wake-up each period. A serving vLLM logs every request, one read each, and a
#: wake-up is what costs: 200-220 us of thread CPU per line read one by one, 55 us at 0.5 s and 31 us at
#: 1 s (8 access-log lines a second, bench/bench_logfollow.py). The price: a line of a busy spell reaches
#: the machine up to this much later.
READ_EVERY_S = 0.5
#: Docker's multiplexed stream: each frame is an 8-byte header (stream, 3 zero bytes, big-endian length).
_FRAME_HEADER = struct.Struct(">BxxxL")


def log_payloads(response: Any, tty: bool, hurry: threading.Event | None = None) -> Iterator[bytes]:
    """The log bytes of a followed ``/containers/{id}/logs`` response, as they arrive.

    A serving vLLM logs a line for each request, so this is the daemon's busiest path, and what costs is
    the wake-up. docker-py reads each multiplexed frame with two reads through urllib3 and http.client's
    chunk state machine: 250 us of thread CPU per followed line at 20 lines a second, against 29 us here
    (bench/bench_logfollow.py), under the 36 us of one bare ``recv`` wake-up: reads are paced
    (:func:`paced_reads`, at most one per :data:`READ_EVERY_S` while lines keep coming), each takes what the
    socket has with one buffered ``read1``; :func:`dechunked` undoes HTTP's chunked encoding and
    :func:`frame_payloads` Docker's frame headers on those bytes. A TTY container's log is not
    multiplexed. Once ``hurry`` is set, reads are no longer paced (the container exited: its last lines
    are wanted at once)."""
    fp = response.raw._fp  # http.client's response: its headers are read, its body is not
    reader = fp.fp  # the buffered socket reader (it may already hold the first bytes of the body)
    body: Iterator[bytes] = dechunked(reader, hurry=hurry) if fp.chunked else paced_reads(reader, hurry=hurry)
    return body if tty else frame_payloads(body)


def paced_reads(
    reader: Any, every_s: float = READ_EVERY_S, hurry: threading.Event | None = None
) -> Iterator[bytes]:
    """``reader.read1`` until the connection closes, at most once per ``every_s`` unless a read filled
    its buffer (then at once: a backlog is drained at full speed) or ``hurry`` is set."""
    last = -every_s
    while True:
        wait = last + every_s - time.monotonic()
        if wait > 0:
            if hurry is None:
                time.sleep(wait)
            else:
                hurry.wait(wait)
        data = reader.read1(READ_MAX)
        if not data:
            return
        last = time.monotonic() if len(data) < READ_MAX else -every_s
        yield data


def frame_payloads(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Docker's multiplexed stream (8-byte header: stream, 3 zero bytes, big-endian length) cut anywhere
    into ``pieces``: per piece, the payloads of every frame it completes (a frame cut across pieces
    waits for its rest)."""
    buf = bytearray()
    for piece in pieces:
        buf += piece
        out: list[bytes] = []
        at = 0
        while len(buf) - at >= _FRAME_HEADER.size:
            _, length = _FRAME_HEADER.unpack_from(buf, at)
            end = at + _FRAME_HEADER.size + length
            if end > len(buf):
                break
            out.append(bytes(buf[at + _FRAME_HEADER.size : end]))
            at = end
        del buf[:at]
        if out:
            yield b"".join(out)


def dechunked(
    reader: Any, every_s: float = READ_EVERY_S, hurry: threading.Event | None = None
) -> Iterator[bytes]:
    """HTTP/1.1 chunked transfer encoding undone over ``reader.read1``: per read, the data of every
    complete chunk in it; ends at the last chunk (size 0), at a size line that is not hex, or when the
    connection closes."""
    buf = bytearray()
    for data in paced_reads(reader, every_s, hurry):
        buf += data
        out: list[bytes] = []
        at = 0
        while True:
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                break
            try:
                size = int(bytes(buf[at:eol]).split(b";", 1)[0], 16)
            except ValueError:
                if out:
                    yield b"".join(out)
                return  # not chunked HTTP: end the stream (the follower attaches again)
            if size == 0:
                if out:
                    yield b"".join(out)
                return
            end = eol + 2 + size + 2  # the data, then its CRLF
            if end > len(buf):
                break
            out.append(bytes(buf[eol + 2 : eol + 2 + size]))
            at = end
        del buf[:at]
        if out:
            yield b"".join(out)


def split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Decode byte chunks into lines: split on ``\\n``; a ``\\r`` (progress bars) also ends a line. Every
    line is cut to :data:`LINE_MAX` characters before anyone parses or masks it, and a line with no end yet
    is not buffered past that: the rest of it is counted and dropped."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buf = ""
    dropped = 0  # characters of the line being read already dropped (it is longer than LINE_MAX)
    for chunk in chunks:
        buf += decoder.decode(chunk)
        *complete, buf = buf.split("\n")
        for line in complete:
            yield from _pieces(line, dropped)
            dropped = 0
        if len(buf) > LINE_MAX:
            head, sep, buf = buf.rpartition("\r")
            if sep:
                yield from _pieces(head, dropped)
                dropped = 0
            if len(buf) > LINE_MAX:
                dropped += len(buf) - LINE_MAX
                buf = buf[:LINE_MAX]
    buf += decoder.decode(b"", final=True)
    yield from _pieces(buf, dropped)


def _pieces(line: str, dropped: int) -> Iterator[str]:
    """The ``\\r``-separated pieces of a line, each capped (``dropped`` characters belong to the first)."""
    for i, seg in enumerate(line.split("\r")):
        if seg:
            yield cap_line(seg, LINE_MAX, dropped if i == 0 else 0)


#: The events stream's own actions (StreamReads.events): Docker stopped answering / answers again.
ENGINE_LOST = "engine.lost"
ENGINE_BACK = "engine.back"


def _link_event(action: str, name: str) -> dict[str, Any]:
    return {"action": action, "id": "", "name": name, "exit_code": None, "signal": None, "time": time.time()}


class StreamReads:
    """The streams of :class:`~supervisor.adapters.docker.adapter.DockerAdapter` (module docstring); the
    adapter provides the two clients."""

    @property
    def _api(self) -> docker.APIClient:
        raise NotImplementedError

    @property
    def _stream_api(self) -> docker.APIClient:
        raise NotImplementedError

    def logs(
        self,
        ref: str,
        since: float | None = None,
        follow: bool = False,
        stop: threading.Event | None = None,
        *,
        tail: int | None = None,
        timestamps: bool = False,
        hurry: threading.Event | None = None,
    ) -> Iterator[str]:
        """Lines of stdout+stderr (since ``since`` epoch seconds, the last ``tail`` only, each prefixed
        with Docker's RFC 3339 time when ``timestamps``); with ``follow`` until exit or ``stop``, read at
        most once per :data:`READ_EVERY_S` until ``hurry`` is set (:func:`log_payloads`)."""
        try:
            # bounded check first: the stream client has no timeout
            info = self._api.inspect_container(ref)
            if follow:
                tty = bool((info.get("Config") or {}).get("Tty"))
                stream: Any = self._follow_logs(ref, since, tail, timestamps, tty, hurry)
            else:
                stream = self._api.logs(
                    ref,
                    stdout=True,
                    stderr=True,
                    stream=True,
                    follow=False,
                    since=since if since else None,
                    tail="all" if tail is None else tail,
                    timestamps=timestamps,
                )
        except ERRORS as exc:
            translate(exc, f"logs of container {ref}")
        closer = Closer(stream, stop) if stop is not None else None
        try:
            yield from split_lines(stream)
        except ERRORS as exc:
            if not (stop is not None and stop.is_set()):
                translate(exc, f"logs of container {ref}")
        except (OSError, ValueError, AttributeError):
            if not (stop is not None and stop.is_set()):
                raise
        finally:
            if closer is not None:
                closer.finish()
            else:
                with contextlib.suppress(Exception):
                    stream.close()

    def _follow_logs(
        self,
        ref: str,
        since: float | None,
        tail: int | None,
        timestamps: bool,
        tty: bool,
        hurry: threading.Event | None,
    ) -> CancellableStream[bytes]:
        """The followed log stream, read by :func:`log_payloads` (docker-py's parameters, its
        ``CancellableStream``: a closed or broken connection ends the iteration)."""
        api: Any = self._stream_api  # docker-py's own request helpers (not in its type stubs)
        params: dict[str, Any] = {
            "stdout": 1,
            "stderr": 1,
            "follow": 1,
            "timestamps": int(timestamps),
            "tail": "all" if tail is None else tail,
        }
        if since:
            params["since"] = since
        response = api._get(api._url("/containers/{0}/logs", ref), params=params, stream=True)
        api._raise_for_status(response)
        return CancellableStream(log_payloads(response, tty, hurry), response)

    def events(
        self, name: str, stop: threading.Event, since: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Lifecycle events of the container ``name`` until ``stop`` is set; reconnects if the stream drops.

        Each event: ``{"action", "id", "name", "exit_code" (int|None), "signal", "time" (epoch s)}``.
        Two actions are the link's own, never Docker's (whose actions have no dot): :data:`ENGINE_LOST` when
        the stream cannot be opened again (Docker refuses it: dockerd going down or crashed; a hung dockerd
        accepts and never answers, so it is not seen here),
        :data:`ENGINE_BACK` when it opens again after that (the events of the outage, asked for with
        ``since``, follow it). Returns within ~0.2 s of ``stop`` being set.
        """
        last = since if since is not None else time.time()
        seen: set[tuple[int, str, str]] = set()
        failures = 0
        lost = False
        while not stop.is_set():
            try:
                stream = self._stream_api.events(
                    since=int(last), filters={"type": "container", "container": name}, decode=True
                )
            except ERRORS as exc:
                failures += 1
                log.warning(
                    "docker.events.reconnect", container=name, error=type(exc).__name__, attempt=failures
                )
                if not lost:
                    lost = True
                    yield _link_event(ENGINE_LOST, name)
                stop.wait(min(5.0, 0.2 * 2**failures))
                continue
            if lost:
                lost = False
                yield _link_event(ENGINE_BACK, name)
            closer = Closer(stream, stop)
            try:
                for raw in stream:
                    failures = 0
                    event = event_dict(raw)
                    if event is None:
                        continue
                    key = (int(raw.get("timeNano") or 0), event["action"], event["id"])
                    if key in seen:
                        continue
                    seen.add(key)
                    if len(seen) > 1000:
                        seen.clear()
                        seen.add(key)
                    last = max(last, event["time"])
                    yield event
            except (*ERRORS, OSError, ValueError, AttributeError) as exc:
                if not stop.is_set():
                    failures += 1
                    log.warning("docker.events.dropped", container=name, error=type(exc).__name__)
                    stop.wait(min(5.0, 0.2 * 2**failures))
            finally:
                closer.finish()
            if not stop.is_set():
                stop.wait(0.2)  # the engine closed the stream: reconnect (with ``since``), but never spin
