"""HTTP probes of a vLLM server (``requests``): health, a tiny generation, metrics, auth enforcement.

A probe that was made and failed (connection refused, timeout, 5xx, no tokens) is a normal result with
``ok=False`` and a short ``error``; nothing here raises for that. API keys are sent, never logged or
put into results.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import requests
import structlog

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
        return "timeout"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "connection refused" if "refused" in str(exc).lower() else "connection error"
    return type(exc).__name__


def _request(
    method: str, url: str, timeout: float, **kwargs: Any
) -> tuple[requests.Response | None, float, str | None]:
    start = time.monotonic()
    try:
        with requests.Session() as session:
            session.trust_env = False  # never route probes through a proxy from the environment
            resp = session.request(method, url, timeout=timeout, **kwargs)
        return resp, (time.monotonic() - start) * 1000.0, None
    except requests.RequestException as exc:
        return None, (time.monotonic() - start) * 1000.0, _error_text(exc)


def check_url(url: str, timeout: float, expect_status: int = 200, *, redirects: bool = True) -> ProbeResult:
    """GET ``url`` (no key); ok when the (final, with ``redirects``) answer has ``expect_status``."""
    resp, ms, err = _request("GET", url, timeout, allow_redirects=redirects)
    if resp is None:
        return ProbeResult(False, None, ms, err)
    ok = resp.status_code == expect_status
    return ProbeResult(ok, resp.status_code, ms, None if ok else f"HTTP {resp.status_code}")


def check_health(base_url: str, timeout: float, path: str = "/health") -> ProbeResult:
    """GET ``path`` (no key needed); ok on HTTP 200."""
    return check_url(base_url.rstrip("/") + path, timeout)


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
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0}
    if kind == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt
    resp, ms, err = _request("POST", base_url.rstrip("/") + path, timeout, json=body, headers=headers)
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
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "temperature": 0, "stream": True}
    if kind == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt
    start = time.monotonic()

    def result(ok: bool, status: int | None, error: str | None) -> ProbeResult:
        ms = (time.monotonic() - start) * 1000.0
        return ProbeResult(ok, status, ms, error, completion_tokens=1 if ok else None)

    try:
        with requests.Session() as session:
            session.trust_env = False
            with session.post(
                base_url.rstrip("/") + path, json=body, headers=headers, timeout=timeout, stream=True
            ) as resp:
                if resp.status_code != 200:
                    return result(False, resp.status_code, f"HTTP {resp.status_code}")
                for line in resp.iter_lines(decode_unicode=False):
                    if time.monotonic() - start > timeout:
                        return result(False, 200, "timeout")
                    if not line.startswith(b"data: "):
                        continue
                    payload = line[6:].strip()
                    if payload == b"[DONE]":
                        return result(False, 200, "no token before [DONE]")
                    chunk = json.loads(payload)
                    if not isinstance(chunk, dict):
                        return result(False, 200, "answer is not the expected JSON")
                    if "error" in chunk:
                        return result(False, 200, f"error chunk: {str(chunk['error'])[:200]}")
                    if chunk.get("choices"):
                        return result(True, 200, None)
    except requests.RequestException as exc:
        return result(False, None, _error_text(exc))
    except ValueError:
        return result(False, 200, "answer is not the expected JSON")
    return result(False, 200, "stream ended without a token")


@dataclass(frozen=True)
class ChatAnswer:
    """One chat completion as a smoke gate sees it (``ok``: HTTP 200 with a parsable answer)."""

    ok: bool
    status: int | None
    latency_ms: float
    error: str | None = None
    text: str = ""
    tool_calls: tuple[str, ...] = ()  # the names of the functions called
    completion_tokens: int | None = None


@dataclass(frozen=True)
class StreamAnswer:
    """One streamed chat completion: its text, and what its LAST data chunk (before ``[DONE]``) said."""

    ok: bool
    status: int | None
    latency_ms: float
    error: str | None = None
    text: str = ""
    chunks: int = 0
    done: bool = False  # ``data: [DONE]`` arrived
    last_usage_tokens: int | None = None  # usage.completion_tokens of the last chunk (None: no usage there)


def _chat_body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


def chat(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    prompt: str,
    max_tokens: int,
    timeout: float,
    tool: str | None = None,
) -> ChatAnswer:
    """A chat completion; with ``tool``, the request offers that function and requires a tool call."""
    body = _chat_body(model, prompt, max_tokens)
    if tool is not None:
        params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        body["tools"] = [{"type": "function", "function": {"name": tool, "parameters": params}}]
        body["tool_choice"] = "required"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp, ms, err = _request(
        "POST", base_url.rstrip("/") + "/v1/chat/completions", timeout, json=body, headers=headers
    )
    if resp is None:
        return ChatAnswer(False, None, ms, err)
    if resp.status_code != 200:
        return ChatAnswer(False, resp.status_code, ms, f"HTTP {resp.status_code}")
    try:
        data = resp.json()
        message = data["choices"][0]["message"]
        calls = tuple(str(c["function"]["name"]) for c in message.get("tool_calls") or [])
        tokens = (data.get("usage") or {}).get("completion_tokens")
        text = message.get("content") or ""
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return ChatAnswer(False, 200, ms, "answer is not the expected JSON")
    return ChatAnswer(True, 200, ms, None, str(text), calls, int(tokens) if isinstance(tokens, int) else None)


def stream_chat(
    base_url: str, api_key: str | None, model: str, *, prompt: str, max_tokens: int, timeout: float
) -> StreamAnswer:
    """A streamed chat completion asking for ``stream_options.include_usage``; read until ``[DONE]`` or
    ``timeout`` (the whole stream, not one read)."""
    body = {
        **_chat_body(model, prompt, max_tokens),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    start = time.monotonic()
    text: list[str] = []
    chunks = 0
    last: dict[str, Any] = {}

    def answer(ok: bool, status: int | None, error: str | None, done: bool = False) -> StreamAnswer:
        usage = last.get("usage") if isinstance(last.get("usage"), dict) else None
        tokens = usage.get("completion_tokens") if usage is not None else None
        return StreamAnswer(
            ok,
            status,
            (time.monotonic() - start) * 1000.0,
            error,
            "".join(text),
            chunks,
            done,
            tokens if isinstance(tokens, int) else None,
        )

    url = base_url.rstrip("/") + "/v1/chat/completions"
    try:
        with requests.Session() as session:
            session.trust_env = False
            with session.post(url, json=body, headers=headers, timeout=timeout, stream=True) as resp:
                if resp.status_code != 200:
                    return answer(False, resp.status_code, f"HTTP {resp.status_code}")
                for line in resp.iter_lines(decode_unicode=False):
                    if time.monotonic() - start > timeout:
                        return answer(False, 200, "timeout (stream not finished)")
                    if not line.startswith(b"data: "):
                        continue
                    payload = line[6:].strip()
                    if payload == b"[DONE]":
                        return answer(True, 200, None, done=True)
                    chunk = json.loads(payload)
                    if not isinstance(chunk, dict):
                        raise TypeError("a chunk is not a JSON object")
                    last = chunk
                    chunks += 1
                    if "error" in last:
                        return answer(False, 200, f"error chunk: {str(last['error'])[:200]}")
                    for choice in last.get("choices") or []:
                        text.append(str((choice.get("delta") or {}).get("content") or ""))
    except requests.RequestException as exc:
        return answer(False, None, _error_text(exc))
    except (ValueError, TypeError, AttributeError):
        return answer(False, 200, "a chunk is not the expected JSON")
    return answer(False, 200, "stream ended without [DONE]")


def fetch_metrics(base_url: str, timeout: float) -> tuple[ProbeResult, str]:
    """GET ``/metrics`` (Prometheus text; no key needed). The text is empty on failure."""
    resp, ms, err = _request("GET", base_url.rstrip("/") + "/metrics", timeout)
    if resp is None:
        return ProbeResult(False, None, ms, err), ""
    if resp.status_code != 200:
        return ProbeResult(False, resp.status_code, ms, f"HTTP {resp.status_code}"), ""
    return ProbeResult(True, 200, ms), resp.text


def check_auth(base_url: str, timeout: float) -> AuthCheck:
    """GET ``/v1/models`` WITHOUT a key: 401 -> enforced, 200 -> open, anything else -> unknown."""
    resp, _ms, _err = _request("GET", base_url.rstrip("/") + "/v1/models", timeout)
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
