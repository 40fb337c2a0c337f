"""The ``/metrics`` endpoint's HTTP server: one thread, a bounded number of connections, a deadline each.

prometheus-client's own server starts a thread and holds a file descriptor per connection, with no timeout
and no cap: a local user opening a thousand idle connections exhausts the daemon's descriptors, its probes
fail, and a healthy model is emergency-stopped. This server cannot be used that way:

- one thread multiplexes every connection (``selectors``); no thread per client;
- at most ``max_connections`` are open; a new one beyond that closes an *idle* one (nothing received
  yet, checked with a last non-blocking read: a scraper whose request is already there is kept) open for
  over ``GRACE_S``, of the source holding the most connections first, oldest first; with none, the new
  one is let in up to twice the cap; there the server stops accepting until a connection ends or one
  ages past its grace: newcomers wait in the kernel's listen backlog. A connection is never closed for
  the cap within its grace (a scrape whose request comes a few milliseconds after its connect is kept:
  at twice the cap any idle one used to go, and a connect flood evicted scrapes 4 ms old). A local
  connect flood evicts its own idle connections, not a scrape being answered;
- a connection must deliver its whole request within ``request_deadline_s`` and read the whole answer
  within ``response_deadline_s``, else it is closed; a request over ``MAX_REQUEST_BYTES`` is refused;
- every answer ends the connection (``Connection: close``): no keep-alive to hold a slot.

When the port cannot be bound (squatted, busy), ``start`` raises and the owner decides; the metrics server
(:class:`supervisor.adapters.metrics.endpoint.MetricsServer`) retries in the background instead of failing
the daemon.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from supervisor.adapters.threads import Supervised, checkpoint, supervised

#: A scrape's request is a few hundred bytes; anything larger is not one.
MAX_REQUEST_BYTES = 8 * 1024
MAX_CONNECTIONS = 32
REQUEST_DEADLINE_S = 5.0
#: A new connection is not evicted for this long (while there is room up to twice the cap): time to send
#: its request, which a scraper does at once and a connect flood never does.
GRACE_S = 0.5
RESPONSE_DEADLINE_S = 10.0
#: How often the loop wakes to enforce deadlines when nothing happens.
_TICK_S = 0.5

Render = Callable[[str], tuple[int, str, bytes]]
"""path -> (status, content type, body)."""

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Too Large"}


@dataclass
class _Conn:
    sock: socket.socket
    opened: float
    source: str = ""
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytes = b""
    sent: int = 0
    answered_at: float | None = None


def response(status: int, ctype: str, body: bytes) -> bytes:
    """One complete HTTP/1.1 answer that closes the connection."""
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def parse_request_line(raw: bytes) -> tuple[str, str] | None:
    """(method, path without the query) of a complete request head, or None when it is malformed."""
    line = raw.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    return parts[0], parts[1].split("?", 1)[0]


class BoundedHTTPServer:
    """Serves ``render(path)`` for GET/HEAD on ``host:port`` from one daemon thread."""

    def __init__(
        self,
        host: str,
        port: int,
        render: Render,
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        response_deadline_s: float = RESPONSE_DEADLINE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self.port = port
        self.render = render
        self.max_connections = max_connections
        self.request_deadline_s = request_deadline_s
        self.response_deadline_s = response_deadline_s
        self._clock = clock
        self._listener: socket.socket | None = None
        self._conns: dict[int, _Conn] = {}
        self._selector: selectors.BaseSelector | None = None
        self._stop = threading.Event()
        self._thread: Supervised | None = None
        #: Connections closed for a deadline or for the cap (for tests and logs).
        self.dropped = 0
        #: The listener is out of the selector: twice the cap open, every one busy or in its grace.
        self._paused = False

    def start(self) -> None:
        """Bind, listen and serve on a thread; OSError when the address cannot be bound."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self.port = int(listener.getsockname()[1])
        self._listener = listener
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._stop.clear()
        self._thread = supervised("metrics-http", self._serve, self._stop, on_end=self._shutdown)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving and close every connection (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # ---- the loop (its own thread) -----------------------------------------------------------------

    def _serve(self) -> None:
        """The loop (supervised: a crash drops the connections in flight, keeps the listener, runs again)."""
        assert self._selector is not None
        try:
            while not self._stop.is_set():
                checkpoint("metrics-http")
                for key, mask in self._selector.select(_TICK_S):
                    if key.data is None:
                        self._accept()
                    elif mask & selectors.EVENT_READ:
                        self._read(key.data)
                    elif mask & selectors.EVENT_WRITE:
                        self._write(key.data)
                self._expire()
                self._resume()
        except Exception:
            for conn in list(self._conns.values()):
                self._close(conn)
            raise

    def _shutdown(self) -> None:
        """When the thread ends for good: every connection and the listener closed."""
        assert self._selector is not None
        for conn in list(self._conns.values()):
            self._close(conn)
        if self._listener is not None:
            with contextlib.suppress(KeyError):  # (out of the selector while paused)
                self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        self._selector.close()

    def _accept(self) -> None:
        assert self._listener is not None
        assert self._selector is not None
        for _ in range(64):  # bounded: a flood is accepted in batches between deadline checks
            if not self._room():
                # every slot is a request in progress or a newcomer in its grace: the next one waits in the
                # listen backlog until one ends or ages (the loop listens again after each select)
                self._selector.unregister(self._listener)
                self._paused = True
                return
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and friends: the cap below keeps us far from it; try again later
                return
            sock.setblocking(False)
            source = str(addr[0]) if isinstance(addr, tuple) else ""
            conn = _Conn(sock, self._clock(), source)
            self._conns[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _room(self) -> bool:
        """Whether a newcomer may come in: under the cap; over it, when an idle connection older than the
        grace made room, or while under twice the cap (young ones get GRACE_S to send their request)."""
        if len(self._conns) < self.max_connections or self._make_room(GRACE_S):
            return True
        return len(self._conns) < 2 * self.max_connections

    def _resume(self) -> None:
        """Listen again after a pause: by now a connection may have ended or aged past its grace."""
        if self._paused and self._listener is not None and self._selector is not None:
            self._selector.register(self._listener, selectors.EVENT_READ, None)
            self._paused = False

    def _make_room(self, older_than_s: float) -> bool:
        """Close one idle connection open for more than ``older_than_s`` (True), chosen from the source
        holding the most, oldest first; a candidate whose request has arrived meanwhile is read instead (it
        is a scraper, not idle)."""
        per_source: dict[str, int] = {}
        for c in self._conns.values():
            per_source[c.source] = per_source.get(c.source, 0) + 1
        now = self._clock()
        idle = [
            c
            for c in self._conns.values()
            if not c.inbox and c.answered_at is None and now - c.opened > older_than_s
        ]
        for conn in sorted(idle, key=lambda c: (-per_source[c.source], c.opened)):
            before = len(self._conns)
            self._read(conn)
            if len(self._conns) < before:  # it had hung up (or was answered at once): a slot is free
                return True
            if not conn.inbox and conn.answered_at is None:
                self.dropped += 1
                self._close(conn)
                return True
        return False

    def _read(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not chunk:
            self._close(conn)
            return
        conn.inbox += chunk
        if b"\r\n\r\n" in conn.inbox:
            self._answer(conn, parse_request_line(bytes(conn.inbox)))
        elif len(conn.inbox) > MAX_REQUEST_BYTES:
            self._reply(conn, response(413, "text/plain; charset=utf-8", b"request too large\n"))

    def _answer(self, conn: _Conn, request: tuple[str, str] | None) -> None:
        if request is None:
            self._reply(conn, response(400, "text/plain; charset=utf-8", b"bad request\n"))
            return
        method, path = request
        if method not in ("GET", "HEAD"):
            self._reply(conn, response(405, "text/plain; charset=utf-8", b"GET only\n"))
            return
        try:
            status, ctype, body = self.render(path)
        except Exception as exc:  # noqa: BLE001 - a rendering bug answers 500; the server lives on
            status, ctype, body = 500, "text/plain; charset=utf-8", f"error: {type(exc).__name__}\n".encode()
        whole = response(status, ctype, body)
        self._reply(conn, whole if method == "GET" else whole[: whole.index(b"\r\n\r\n") + 4])

    def _reply(self, conn: _Conn, data: bytes) -> None:
        assert self._selector is not None
        conn.outbox, conn.sent, conn.answered_at = data, 0, self._clock()
        self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        try:
            conn.sent += conn.sock.send(conn.outbox[conn.sent :])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if conn.sent >= len(conn.outbox):
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
            self._close(conn)

    def _expire(self) -> None:
        now = self._clock()
        for conn in list(self._conns.values()):
            late = (
                now - conn.opened > self.request_deadline_s
                if conn.answered_at is None
                else now - conn.answered_at > self.response_deadline_s
            )
            if late:
                self.dropped += 1
                self._close(conn)

    def _close(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if self._selector is not None and fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn.sock)
        self._conns.pop(fd, None)
        conn.sock.close()
