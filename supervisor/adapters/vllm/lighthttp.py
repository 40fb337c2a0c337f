"""The probes' hot path over ``http.client``: one plain-HTTP request on a fresh connection, closed after.

The liveness round (``/health`` and ``/metrics`` every interval) and the canary run all day for every
profile; through ``requests`` each call prepares, merges settings and builds adapters, which the daemon's
fixed, keyless-or-bearer GETs and its one streamed POST do not need (the thread-CPU figures:
bench/results/README.md). The rules of ``requests`` here: a new connection per request (no kept connection
can reach a dying container), no proxy from the environment, the same short error words
(:func:`error_text`). Anything else (https, a redirect to follow) stays on ``requests``
(supervisor/adapters/vllm/probes.py ``send``).
"""

from __future__ import annotations

import enum
import http.client
import json
import socket
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

#: A line of a streamed answer longer than this is cut (bounded memory; a chunk of vLLM's stream is small).
LINE_MAX = 1 << 20


@dataclass(frozen=True)
class Answer:
    """A whole answer: status, headers that matter, body."""

    status: int
    body: bytes
    location: str | None = None  # a redirect's target


class Unsupported(Exception):
    """Not a plain-HTTP URL: the caller uses ``requests``."""


#: The probes' short words for a request that got no answer (both paths: supervisor/adapters/vllm/probes.py).
TIMEOUT, REFUSED, CONNECTION_ERROR = "timeout", "connection refused", "connection error"


def error_text(exc: BaseException) -> str:
    """The short word for ``exc`` (``OSError`` or ``http.client.HTTPException``)."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return TIMEOUT
    if isinstance(exc, ConnectionRefusedError):
        return REFUSED
    return CONNECTION_ERROR


def _parts(url: str) -> tuple[str, int, str] | None:
    """(host, port, target) of a plain-HTTP URL with a host and a numeric port (or none); else None."""
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:
        return None
    if parts.scheme != "http" or not parts.hostname:
        return None
    return parts.hostname, port, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def supports(url: str) -> bool:
    """Whether this path takes ``url`` (plain HTTP with a host and a numeric port, or none)."""
    return _parts(url) is not None


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = _parts(url)
    if parts is None:
        raise Unsupported(url)
    host, port, target = parts
    return http.client.HTTPConnection(host, port, timeout=timeout), target


def get(url: str, timeout: float) -> Answer:
    """One GET and its whole answer. Raises :class:`Unsupported` for a URL this path does not take,
    ``OSError`` or ``http.client.HTTPException`` when there is no answer."""
    conn, target = _connection(url, timeout)
    try:
        conn.request("GET", target, headers={"Connection": "close"})
        resp = conn.getresponse()
        return Answer(resp.status, resp.read(), resp.getheader("Location"))
    finally:
        conn.close()


class StreamFailed(Exception):
    """A streamed request that got no usable stream: its HTTP status (None: no answer) and why."""

    def __init__(self, status: int | None, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


class _Skip(enum.Enum):
    SKIP = "skip"


#: :func:`sse_line`'s answer for a line that carries no chunk (a comment, a blank line, another field).
SKIP = _Skip.SKIP


def sse_line(line: bytes) -> dict[str, Any] | Literal[_Skip.SKIP] | None:
    """One line of a server-sent-events answer (both paths): its ``data:`` chunk as a JSON object, None for
    ``[DONE]``, :data:`SKIP` for any other line. Raises :class:`StreamFailed` for a chunk that is not a
    JSON object."""
    if not line.startswith(b"data: "):
        return SKIP
    data = line[6:].strip()
    if data == b"[DONE]":
        return None
    try:
        chunk = json.loads(data)
    except ValueError as exc:
        raise StreamFailed(200, "answer is not the expected JSON") from exc
    if not isinstance(chunk, dict):
        raise StreamFailed(200, "answer is not the expected JSON")
    return chunk


def sse(
    url: str, payload: dict[str, Any], headers: dict[str, str], timeout: float, start: float
) -> Generator[dict[str, Any] | None, None, None]:
    """POST ``payload`` as JSON and yield each ``data:`` chunk of the answer as a JSON object, None for
    ``[DONE]`` (then stop). ``timeout`` bounds each read and the whole stream from ``start``. Raises
    :class:`StreamFailed` (no answer, a non-200 answer, a timeout, a chunk that is not a JSON object) or
    :class:`Unsupported` (see :func:`supports`)."""
    conn, target = _connection(url, timeout)
    body = json.dumps(payload).encode()
    try:
        try:
            hdrs = {"Connection": "close", "Content-Type": "application/json", **headers}
            conn.request("POST", target, body=body, headers=hdrs)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise StreamFailed(None, error_text(exc)) from exc
        if resp.status != 200:
            raise StreamFailed(resp.status, f"HTTP {resp.status}")
        while True:
            if time.monotonic() - start > timeout:
                raise StreamFailed(200, "timeout (stream not finished)")
            try:
                line = resp.readline(LINE_MAX)
            except (OSError, http.client.HTTPException) as exc:
                raise StreamFailed(None, error_text(exc)) from exc
            if not line:
                return
            chunk = sse_line(line)
            if chunk is SKIP:
                continue
            yield chunk
            if chunk is None:
                return
    finally:
        conn.close()
