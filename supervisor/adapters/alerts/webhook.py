"""The one HTTP wrapper every alert and heartbeat request goes through (``requests``).

:func:`attempt` makes one request and classifies it: ok, transient (connection error, timeout, 429, 5xx,
a platform's rate-limit code in a 200) or permanent (other 4xx, a platform error code in a 200).
:func:`deliver` retries the transient ones with capped backoff. Details never carry a URL, token or
secret: ``requests``' exception messages contain the URL and are not used, and a platform's error
message is scrubbed of the URL, its path segments, query values and the signing secret.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import requests
import urllib3

from supervisor.core.log_events import cap_line
from supervisor.core.spec.secrets import Redactor

# Codes a platform returns in a 200 body when it only asks us to slow down (retry later).
_RATE_LIMIT_CODES = {"feishu": {11232}, "dingtalk": {130101}, "wecom": {45009}}
_DETAIL_MAX = 160
#: Pieces of a channel's URL this long or longer are masked in a platform's error message.
_SCRUB_MIN_LEN = 4


@dataclass(frozen=True)
class Outcome:
    """One delivery (after retries): ok, whether the last failure was transient, a safe detail."""

    ok: bool
    transient: bool
    detail: str
    status: int | None = None
    attempts: int = 1
    retry_after: float | None = None


def _scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` (one line, bounded) with every secret-bearing string (4 characters or more: URL path
    segments) and every secret shape masked by the one rule."""
    known = frozenset(s for s in secrets if s)
    return Redactor(known, min_len=_SCRUB_MIN_LEN).text(" ".join(text.split()))[:_DETAIL_MAX]


def _secret_parts(url: str, secret: str | None) -> list[str | None]:
    """The URL and every piece of it that may be a token (path segments, query values), the secret."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # a url_file's content no parser checked: the whole of it is the secret
        return [url, secret]
    values = [v for _k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
    segments = [seg for seg in parts.path.split("/") if seg]
    # longest first, so that a URL is replaced as a whole before its pieces
    return sorted([url, secret, parts.path, parts.query, *segments, *values], key=lambda s: -len(s or ""))


def _error_kind(exc: requests.RequestException) -> str:
    """A fixed description of a requests exception (its message contains the URL: never used)."""
    if isinstance(exc, requests.exceptions.Timeout):
        return "timeout"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "connection error"
    return type(exc).__name__


#: The most of a webhook's answer read (a platform's error is a small JSON object): the rest is never read.
MAX_ANSWER_BYTES = 64 * 1024
#: The longest platform message kept in a detail (it is masked, shown and stored).
MAX_DETAIL_CHARS = 500


def _platform_error(kind: str, resp: requests.Response) -> tuple[str, bool] | None:
    """(detail, transient) when a 2xx body carries the platform's own error code, else None. At most
    :data:`MAX_ANSWER_BYTES` of the answer are read; the detail is cut to :data:`MAX_DETAIL_CHARS`."""
    if kind not in ("feishu", "dingtalk", "wecom", "telegram"):
        return None
    try:
        body = resp.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True)
    except (OSError, requests.RequestException, urllib3.exceptions.HTTPError):
        return None
    if len(body) > MAX_ANSWER_BYTES:  # a platform answers a few hundred bytes: this is no platform answer
        return f"{kind}: an answer larger than {MAX_ANSWER_BYTES // 1024} KiB (not read)", False
    try:
        data: Any = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if kind == "telegram":
        if data.get("ok") is False:
            code = data.get("error_code")
            return f"telegram error {code}: {data.get('description', '')}", code == 429
        return None
    raw_code = data.get("code", data.get("StatusCode")) if kind == "feishu" else data.get("errcode")
    message = data.get("msg", data.get("StatusMessage")) if kind == "feishu" else data.get("errmsg")
    if raw_code in (None, 0, "0"):
        return None
    try:
        code = int(raw_code)
    except (TypeError, ValueError):
        return f"{kind} error {raw_code!s}", False
    return f"{kind} error {code}: {message or ''}", code in _RATE_LIMIT_CODES.get(kind, set())


def _retry_after(resp: requests.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def attempt(
    method: str,
    url: str,
    *,
    kind: str,
    timeout: float,
    secret: str | None = None,
    json_body: dict[str, Any] | None = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    proxy: str | None = None,
) -> Outcome:
    """One HTTP request, classified: ok / transient / permanent, with a detail free of secrets.

    Redirects are never followed (a 307 would re-POST the alert, key and all, wherever it points) and the
    environment's proxies and ``~/.netrc`` are never read: only an explicitly configured ``proxy``."""
    secrets = _secret_parts(url, secret)
    with requests.Session() as session:  # open until the answer is read (stream=True)
        session.trust_env = False
        try:
            resp = session.request(
                method,
                url,
                json=json_body,
                data=data,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
                stream=True,  # the answer is read bounded (_platform_error), never whole
                proxies={"http": proxy, "https": proxy} if proxy else None,
            )
        except requests.RequestException as exc:
            return Outcome(False, True, _error_kind(exc))
        with resp:
            return _classify(kind, resp, secrets)


def _classify(kind: str, resp: requests.Response, secrets: list[str | None]) -> Outcome:
    status = resp.status_code
    if 300 <= status < 400:
        return Outcome(False, False, f"HTTP {status}: redirect not followed (update the URL)", status)
    if status == 429 or status >= 500:
        return Outcome(False, True, f"HTTP {status}", status, retry_after=_retry_after(resp))
    if not 200 <= status < 300:
        return Outcome(False, False, f"HTTP {status}", status)
    err = _platform_error(kind, resp)
    if err is not None:
        detail, transient = err
        detail = cap_line(detail, MAX_DETAIL_CHARS)
        return Outcome(False, transient, _scrub(f"HTTP {status}, {detail}", secrets), status)
    return Outcome(True, False, f"HTTP {status}", status)


def deliver(
    make_request: Callable[[], tuple[str, dict[str, Any]]],
    *,
    kind: str,
    secret: str | None,
    timeout: float,
    tries: int = 3,
    backoff_s: tuple[float, ...] = (1.0, 4.0),
    max_backoff_s: float = 30.0,
    sleep: Callable[[float], object],
    on_retry: Callable[[Outcome, int, float], None] | None = None,
    proxy: str | None = None,
) -> Outcome:
    """POST ``make_request()`` (rebuilt per try: signatures carry a timestamp), retrying transient
    failures up to ``tries`` times in all with capped backoff (a 429's Retry-After is honoured up to
    ``max_backoff_s``)."""
    outcome = Outcome(False, True, "not attempted", attempts=0)
    for n in range(1, max(1, tries) + 1):
        url, body = make_request()
        outcome = attempt("POST", url, kind=kind, timeout=timeout, secret=secret, json_body=body, proxy=proxy)
        outcome = Outcome(
            outcome.ok, outcome.transient, outcome.detail, outcome.status, n, outcome.retry_after
        )
        if outcome.ok or not outcome.transient or n >= tries:
            return outcome
        delay = backoff_s[min(n - 1, len(backoff_s) - 1)] if backoff_s else 0.0
        if outcome.retry_after is not None:
            delay = max(delay, outcome.retry_after)
        delay = min(delay, max_backoff_s)
        if on_retry is not None:
            on_retry(outcome, n, delay)
        sleep(delay)
    return outcome
