"""HTTP probes of a vLLM server (``requests``): health, a tiny generation, metrics, auth enforcement.

A probe that was made and failed (connection refused, timeout, 5xx, no tokens) is a normal result with
``ok=False`` and a short ``error``; nothing here raises for that. API keys are sent, never logged or
put into results.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal

import requests
import structlog

from supervisor.adapters.vllm import lighthttp
from supervisor.adapters.vllm.lighthttp import StreamFailed

log = structlog.get_logger(__name__)

AuthStatus = Literal["enforced", "open", "unknown"]


@dataclass(frozen=True)
class ProbeResult:
    """The outcome of one probe."""

    ok: bool
    status: int | None  # HTTP status, None when no response
    latency_ms: float
    error: str | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class AuthCheck:
    """Whether ``/v1/models`` without a key is refused (401 = enforced) or served (200 = open)."""

    status: AuthStatus
    http_status: int | None


def _error_text(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.exceptions.ConnectTimeout | requests.exceptions.ReadTimeout):
        return lighthttp.TIMEOUT
    if isinstance(exc, requests.exceptions.ConnectionError):
        return lighthttp.REFUSED if "refused" in str(exc).lower() else lighthttp.CONNECTION_ERROR
    return type(exc).__name__


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The bearer header of ``api_key`` (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def send(
    method: str, url: str, timeout: float, **kwargs: Any
) -> tuple[requests.Response | None, float, str | None]:
    """One request: (the answer or None, milliseconds taken, a short error when there is no answer)."""
    start = time.monotonic()
    try:
        with requests.Session() as session:
            session.trust_env = False  # never route probes through a proxy from the environment
            resp = session.request(method, url, timeout=timeout, **kwargs)
        return resp, (time.monotonic() - start) * 1000.0, None
    except requests.RequestException as exc:
        return None, (time.monotonic() - start) * 1000.0, _error_text(exc)


def get(url: str, timeout: float, *, redirects: bool = True) -> tuple[int | None, bytes, float, str | None]:
    """GET ``url`` (no key): (status or None, body, milliseconds, a short error when there is no answer).
    Plain HTTP takes the light path (supervisor/adapters/vllm/lighthttp.py); https, or a redirect to follow,
    goes through ``requests``."""
    start = time.monotonic()
    try:
        a = lighthttp.get(url, timeout)
        if not (redirects and a.location and 300 <= a.status < 400):
            return a.status, a.body, (time.monotonic() - start) * 1000.0, None
    except lighthttp.Unsupported:
        pass
    except (OSError, http.client.HTTPException) as exc:
        return None, b"", (time.monotonic() - start) * 1000.0, lighthttp.error_text(exc)
    resp, _ms, err = send("GET", url, timeout, allow_redirects=redirects)
    if resp is None:
        return None, b"", (time.monotonic() - start) * 1000.0, err
    return resp.status_code, resp.content, (time.monotonic() - start) * 1000.0, None


def check_url(url: str, timeout: float, expect_status: int = 200, *, redirects: bool = True) -> ProbeResult:
    """GET ``url`` (no key); ok when the (final, with ``redirects``) answer has ``expect_status``."""
    status, _body, ms, err = get(url, timeout, redirects=redirects)
    if status is None:
        return ProbeResult(False, None, ms, err)
    ok = status == expect_status
    return ProbeResult(ok, status, ms, None if ok else f"HTTP {status}")


def check_health(base_url: str, timeout: float, path: str = "/health") -> ProbeResult:
    """GET ``path`` (no key needed); ok on HTTP 200."""
    return check_url(base_url.rstrip("/") + path, timeout)


def _generation(
    base_url: str, model: str, kind: Literal["chat", "completion"], prompt: str, max_tokens: int
) -> tuple[str, dict[str, Any]]:
    """The URL and body of a greedy chat or completion request for ``prompt``."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return base_url.rstrip("/") + "/v1/chat/completions", body
    body["prompt"] = prompt
    return base_url.rstrip("/") + "/v1/completions", body


def generate(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    kind: Literal["chat", "completion"] = "chat",
    prompt: str = "Say hello.",
    max_tokens: int = 16,
    timeout: float = 30.0,
) -> ProbeResult:
    """A tiny generation; ok only if the answer reports ``usage.completion_tokens > 0``."""
    url, body = _generation(base_url, model, kind, prompt, max_tokens)
    resp, ms, err = send("POST", url, timeout, json=body, headers=auth_headers(api_key))
    if resp is None:
        return ProbeResult(False, None, ms, err)
    if resp.status_code != 200:
        return ProbeResult(False, resp.status_code, ms, f"HTTP {resp.status_code}")
    try:
        usage = resp.json().get("usage") or {}
        tokens = int(usage.get("completion_tokens") or 0)
    except (ValueError, TypeError, AttributeError):
        return ProbeResult(False, resp.status_code, ms, "answer is not the expected JSON")
    if tokens <= 0:
        return ProbeResult(False, resp.status_code, ms, "no completion tokens", completion_tokens=tokens)
    return ProbeResult(True, resp.status_code, ms, None, completion_tokens=tokens)


def canary(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    kind: Literal["chat", "completion"] = "chat",
    prompt: str = "ping",
    timeout: float = 30.0,
) -> ProbeResult:
    """The liveness canary: a streamed request for ONE token, ok at its first data chunk carrying a token
    (vLLM sends nothing before the engine has produced one). ``latency_ms`` is the time to that chunk;
    the stream is closed at once. ``timeout`` bounds the whole call."""
    url, body = _generation(base_url, model, kind, prompt, 1)
    body["stream"] = True
    start = time.monotonic()

    def result(ok: bool, status: int | None, error: str | None) -> ProbeResult:
        ms = (time.monotonic() - start) * 1000.0
        return ProbeResult(ok, status, ms, error, completion_tokens=1 if ok else None)

    try:
        with closing(sse_chunks(url, body, api_key, timeout, start)) as chunks:
            for chunk in chunks:
                if chunk is None:
                    return result(False, 200, "no token before [DONE]")
                if "error" in chunk:
                    return result(False, 200, f"error chunk: {str(chunk['error'])[:200]}")
                if chunk.get("choices"):
                    return result(True, 200, None)
    except StreamFailed as exc:
        return result(False, exc.status, exc.error)
    return result(False, 200, "stream ended without a token")


def sse_chunks(
    url: str, body: dict[str, Any], api_key: str | None, timeout: float, start: float
) -> Generator[dict[str, Any] | None, None, None]:
    """POST ``body`` streamed; yield each ``data:`` chunk as a JSON object, and None for ``[DONE]`` (then
    stop). ``timeout`` bounds the whole stream from ``start``, not one read. Raises :class:`StreamFailed`
    for a refused request, a non-200 answer, a timeout or a chunk that is not a JSON object. Plain HTTP
    takes the light path (supervisor/adapters/vllm/lighthttp.py), https goes through ``requests``."""
    if lighthttp.supports(url):
        yield from lighthttp.sse(url, body, auth_headers(api_key), timeout, start)
        return
    try:
        with requests.Session() as session:
            session.trust_env = False  # never route probes through a proxy from the environment
            with session.post(
                url, json=body, headers=auth_headers(api_key), timeout=timeout, stream=True
            ) as resp:
                if resp.status_code != 200:
                    raise StreamFailed(resp.status_code, f"HTTP {resp.status_code}")
                for line in resp.iter_lines(decode_unicode=False):
                    if time.monotonic() - start > timeout:
                        raise StreamFailed(200, "timeout (stream not finished)")
                    chunk = lighthttp.sse_line(line)
                    if chunk is lighthttp.SKIP:
                        continue
                    yield chunk
                    if chunk is None:
                        return
    except requests.RequestException as exc:
        raise StreamFailed(None, _error_text(exc)) from exc


def fetch_metrics(base_url: str, timeout: float) -> tuple[ProbeResult, str]:
    """GET ``/metrics`` (Prometheus text; no key needed). The text is empty on failure."""
    status, body, ms, err = get(base_url.rstrip("/") + "/metrics", timeout)
    if status is None:
        return ProbeResult(False, None, ms, err), ""
    if status != 200:
        return ProbeResult(False, status, ms, f"HTTP {status}"), ""
    return ProbeResult(True, 200, ms), body.decode("utf-8", "replace")


def check_auth(base_url: str, timeout: float) -> AuthCheck:
    """GET ``/v1/models`` WITHOUT a key: 401 -> enforced, 200 -> open, anything else -> unknown."""
    resp, _ms, _err = send("GET", base_url.rstrip("/") + "/v1/models", timeout)
    if resp is None:
        return AuthCheck("unknown", None)
    if resp.status_code == 401:
        return AuthCheck("enforced", 401)
    if resp.status_code == 200:
        return AuthCheck("open", 200)
    return AuthCheck("unknown", resp.status_code)


def wait_until_healthy(
    base_url: str,
    deadline_s: float,
    *,
    interval_s: float = 0.5,
    probe_timeout_s: float = 2.0,
    path: str = "/health",
    alive: Callable[[], bool] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProbeResult:
    """Probe ``path`` until 200 or ``deadline_s`` elapses (or ``alive()`` says the server is gone).

    Returns the last result (``ok`` tells which). Bounded in time and in count.
    """
    start = monotonic()
    max_tries = int(deadline_s / max(interval_s, 0.01)) + 2
    result = ProbeResult(False, None, 0.0, "not probed")
    for _ in range(max_tries):
        remaining = deadline_s - (monotonic() - start)
        if remaining <= 0:
            break
        result = check_health(base_url, min(probe_timeout_s, max(remaining, 0.1)), path)
        if result.ok:
            log.info("probe.healthy", url=base_url, after_s=round(monotonic() - start, 2))
            return result
        if alive is not None and not alive():
            return ProbeResult(False, result.status, result.latency_ms, "server exited while waiting")
        sleep(min(interval_s, max(0.0, deadline_s - (monotonic() - start))))
    return ProbeResult(False, result.status, result.latency_ms, result.error or "not healthy before deadline")
