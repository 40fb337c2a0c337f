"""The one table of bounds: the largest value of every number a config may hold, and what a name, a URL
and a string may be.

A number without a sane upper bound is accepted by ``check-config`` and then breaks the daemon in a way the
check cannot show (``stop.grace_s: 1e300`` wedges STOPPING; ``probes.interval_s: 1e300`` turns liveness
off after one round; ``stop_timeout: 1e23`` makes Docker refuse every create). Every ``Section.float_`` and
``Section.int_`` takes its upper bound from :func:`upper_bound` unless the call names a tighter one, and
the refusal says the limit. A key is looked up by its full path (list indexes dropped), then by its last
name, then by its suffix; a number no row names gets :data:`UNLISTED_MAX` (a test requires a row for each).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

from supervisor.core.host.paths import NAME_MAX_LEN, NAME_PATTERN

MINUTE: Final = 60
HOUR: Final = 3600
DAY: Final = 86400
#: The largest int Docker (Go's int64) takes: a ulimit, a size.
INT64_MAX: Final = (1 << 63) - 1
#: The largest shm_size: far above any box's memory, far below what overflows anything.
SHM_MAX_BYTES: Final = 1 << 46  # 64 TiB
#: A number whose key no row below names (a test lists every number the parser reads and requires a row).
UNLISTED_MAX: Final = 1e9

#: By the key's full path, list indexes dropped (``container.ulimits.soft``).
BY_PATH: Final[dict[str, float]] = {
    "stop.grace_s": HOUR,  # SIGTERM -> SIGKILL: longer is a wedged stop
    "stop.emergency_grace_s": HOUR,
    "stop.drain_timeout_s": DAY,
    "container.stop_timeout": HOUR,  # Docker's StopTimeout (int seconds); the default of stop.grace_s
    "container.ulimits.soft": INT64_MAX,
    "container.ulimits.hard": INT64_MAX,
    "container.device_requests.count": 1024,
    "host.memory_guard.sample_interval_s": MINUTE,
    "host.memory_guard.samples": 1000,
    "host.memory_guard.psi_full_avg10_max": 100.0,
    "host.drop_caches_level": 3,
    "host.contiguity_min_free_blocks": 1_000_000,  # 4 TiB in 4 MiB blocks: more than any box has
    "breaker.limit": 1000,
    "backoff.factor": 100.0,
    "probes.failure_threshold": 1000,
    "probes.max_tokens": 4096,
    "probes.cpu_busy_cores": 1024.0,
    "probes.step_factor": 1000.0,
    "probes.prefill_tokens_per_s": 1e7,
    "kv_pool.warn_below_tokens": 1e9,
    "kv_pool.min_tokens": 1e9,
    "companions.expect_status": 599,
    "smoke.gates.threshold": 1.0,
    "smoke.gates.min_tokens_per_s": 1e6,
}
#: By the key's last name.
BY_NAME: Final[dict[str, float]] = {
    "interval_s": DAY,  # a check rarer than daily is no check
    "timeout_s": HOUR,  # one request, one drain
    "busy_retry_s": DAY,
    "max_tokens": 4096,
}
#: By the key name's suffix (durations in seconds, memory in GiB, percentages).
BY_SUFFIX: Final[tuple[tuple[str, float], ...]] = (("_s", 7 * DAY), ("_gib", 4096.0), ("_pct", 100.0))


def _plain(path: str) -> str:
    return re.sub(r"\[\d+\]", "", path)


def listed(path: str) -> bool:
    """Whether a row of the table names the number at ``path`` (not the :data:`UNLISTED_MAX` fallback)."""
    return upper_bound(path) is not None


def upper_bound(path: str) -> float | None:
    """The largest value of the number at key path ``path`` (None: no row names it)."""
    plain = _plain(path)
    if plain in BY_PATH:
        return BY_PATH[plain]
    name = plain.rpartition(".")[2]
    if name in BY_NAME:
        return BY_NAME[name]
    for suffix, hi in BY_SUFFIX:
        if name.endswith(suffix):
            return hi
    return None


def describe(limit: float, path: str) -> str:
    """``3600 (1 h)`` for a duration, else the plain number."""
    text = f"{limit:g}" if isinstance(limit, float) and limit != int(limit) else f"{int(limit)}"
    if _plain(path).endswith("_s") or _plain(path).endswith("stop_timeout"):
        for unit, size in (("d", DAY), ("h", HOUR), ("min", MINUTE)):
            if limit >= size and limit % size == 0:
                return f"{text} ({int(limit // size)} {unit})"
    return text


NAME_RE: Final = re.compile(NAME_PATTERN)
#: How a name rule is said in a problem.
NAME_RULE: Final = f"names are [A-Za-z0-9][A-Za-z0-9_.-]*, at most {NAME_MAX_LEN} characters"


def name_ok(name: str) -> bool:
    """Whether ``name`` may become part of a file name (bounded length, no '/', no leading dot)."""
    return NAME_RE.fullmatch(name) is not None


#: Longer than any webhook or server URL (a Feishu/DingTalk webhook with its token is ~150).
URL_MAX_LEN: Final = 2048


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL the daemon can call (None when it is); never repeats the URL."""
    if len(url) > URL_MAX_LEN:
        return f"must be at most {URL_MAX_LEN} characters"
    if not url.startswith(("http://", "https://")):
        return "must be an http:// or https:// URL"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "must not contain spaces or control characters"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if not host:
        return "has no host"
    del port  # read for its range check only (0, "Docker picks", is the daemon config's to refuse)
    return None


#: The longest string a config value may be (a prompt, a command argument, an env value).
STRING_MAX_LEN: Final = 64 * 1024


def string_problem(text: str) -> str | None:
    """Why a YAML string cannot be a config value (None when it can): a NUL (no path, argument or env value
    holds one), a lone surrogate such as a ``"\\udcff"`` escape (not UTF-8: no fingerprint, history line or
    Docker request can encode it), or more than :data:`STRING_MAX_LEN` characters."""
    if len(text) > STRING_MAX_LEN:
        return f"is longer than {STRING_MAX_LEN} characters"
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate (an escape like \\udcff) at offset {exc.start}: not UTF-8"
    return None
