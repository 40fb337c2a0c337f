"""Pure text rendering for ``supervisorctl``: status table, events, start history. ``now`` is passed in."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from supervisor.core import loadtime
from supervisor.core.clock import format_duration
from supervisor.core.vllm.memory import as_usage, usage_text

STATUS_COLUMNS = (
    "NAME",
    "STATE",
    "SINCE",
    "CONTAINER",
    "UPTIME",
    "LAST PROBE",
    "RESTARTS",
    "BREAKER",
    "KV POOL (THIS/MEDIAN)",
    "LOAD",
    "AUTH",
    "NEXT MAINT",
)
HISTORY_COLUMNS = (
    "WHEN",
    "OUTCOME",
    "KV TOKENS",
    "KV GIB",
    "MAX CONC",
    "MODEL GIB",
    "LOAD TIME",
    "GMU",
    "MEMAVAIL BEFORE",
    "IMAGE",
    "FINGERPRINT",
    "ACTUAL USAGE",
    "DECODE TOK/S",  # the sentinel's median canary of the start (docs/sentinel.md)
    "DIAGNOSIS",  # last: the long column
)
#: Image ids are shown like ``docker images`` does: 12 hex digits without ``sha256:``.
IMAGE_ID_WIDTH = 12
#: The diagnosis column is cut to this width in the table (``--json`` has it whole).
DIAGNOSIS_WIDTH = 60
DASH = "-"


def to_epoch(value: Any) -> float | None:
    """An epoch number or an ISO 8601 string as epoch seconds; None if absent or unreadable."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def relative(ts: Any, now: float) -> str:
    """'5 min ago' or 'in 2 d 3 h' for a timestamp; '-' when unknown."""
    epoch = to_epoch(ts)
    if epoch is None:
        return DASH
    delta = now - epoch
    return f"{format_duration(delta)} ago" if delta >= 0 else f"in {format_duration(-delta)}"


def clock_time(ts: Any) -> str:
    """Local 'YYYY-MM-DD HH:MM:SS' for a timestamp; '-' when unknown."""
    epoch = to_epoch(ts)
    if epoch is None:
        return DASH
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def weekday_time(ts: Any, now: float) -> str:
    """Local 'Sun 06-09 04:00 (in 2d03h)' for a future (or past) timestamp; '-' when unknown."""
    epoch = to_epoch(ts)
    if epoch is None:
        return DASH
    return f"{time.strftime('%a %m-%d %H:%M', time.localtime(epoch))} ({relative(epoch, now)})"


def thousands(value: Any) -> str:
    """1069759 -> '1,069,759'; '-' for non-numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DASH
    return f"{int(value):,}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    return "\n".join(lines)


def _probe(p: Mapping[str, Any], now: float) -> str:
    probe = p.get("last_probe")
    if not isinstance(probe, Mapping) or probe.get("ok") is None:
        return DASH
    word = "ok" if probe.get("ok") else "FAIL"
    latency = probe.get("latency_ms")
    parts = [word]
    if isinstance(latency, int | float):
        parts.append(f"{latency:.0f}ms")
    if to_epoch(probe.get("at")) is not None:
        parts.append(relative(probe.get("at"), now))
    return " ".join(parts)


def _breaker(p: Mapping[str, Any]) -> str:
    b = p.get("breaker")
    if not isinstance(b, Mapping):
        return DASH
    state = str(b.get("state") or "?")
    emergencies = b.get("emergencies")
    count = len(emergencies) if isinstance(emergencies, list) else emergencies
    word = "OPEN" if state == "open" else state
    if isinstance(count, int) and isinstance(b.get("limit"), int):
        return f"{word} {count}/{b['limit']}"
    return word


def _kv(p: Mapping[str, Any]) -> str:
    kv = p.get("kv_pool")
    if not isinstance(kv, Mapping):
        return DASH
    tokens, median = kv.get("tokens"), kv.get("baseline_tokens")
    if not isinstance(tokens, int | float) or isinstance(tokens, bool):
        return f"- / {thousands(median)}" if isinstance(median, int | float) else DASH
    if not isinstance(median, int | float) or isinstance(median, bool) or median <= 0:
        return thousands(tokens)
    change = (tokens - median) / median * 100
    return f"{thousands(tokens)} / {thousands(median)} ({change:+.0f}%)"


def _load(p: Mapping[str, Any]) -> str:
    lp = p.get("load_progress")
    if not isinstance(lp, Mapping):
        return DASH
    pct, phase = lp.get("pct"), lp.get("phase")
    text = f"{pct:.0f}%" if isinstance(pct, int | float) and not isinstance(pct, bool) else ""
    if isinstance(phase, str) and phase:
        text = f"{text} {phase}".strip()
    eta, median, starts = lp.get("eta_s"), lp.get("median_load_s"), lp.get("history_starts")
    if isinstance(eta, int | float) and isinstance(median, int | float) and isinstance(starts, int):
        text = f"{text} {loadtime.eta_text(eta, median, starts)}".strip()
    return text or DASH


def _next_maintenance(p: Mapping[str, Any], now: float) -> str:
    """'Sun 2026-12-06 04:00 CET (in 2d03h)': the schedule's local time with weekday, and how far."""
    rel = relative(p.get("next_maintenance"), now)
    text = p.get("next_maintenance_local")
    if isinstance(text, str) and text and rel != DASH:
        return f"{text} ({rel})"
    return weekday_time(p.get("next_maintenance"), now)  # an older daemon: only the timestamp


def _uptime(p: Mapping[str, Any], now: float) -> str:
    up = p.get("uptime_s")
    if isinstance(up, int | float) and not isinstance(up, bool):
        return format_duration(up)
    started = to_epoch(p.get("started_at"))
    return format_duration(now - started) if started is not None else DASH


def status_row(p: Mapping[str, Any], now: float) -> list[str]:
    """One table row for one profile of the status JSON."""
    restarts = p.get("restarts")
    return [
        str(p.get("name") or "?"),
        str(p.get("state") or "?")
        + ("?" if p.get("observed") is False and p.get("state") != "READING" else "")
        + (" DRIFT" if p.get("drift") else "")
        + (" LKG" if p.get("running_spec") == "last_known_good" else "")
        + (" PIN" if _pin(p).get("running") else "")
        + (" SLOW" if (p.get("sentinel") or {}).get("slow") else ""),
        relative(p.get("since"), now),
        str(p.get("container") or DASH),
        _uptime(p, now),
        _probe(p, now),
        str(restarts) if isinstance(restarts, int) else DASH,
        _breaker(p),
        _kv(p),
        _load(p),
        str(p.get("auth") or ("unknown" if "auth" in p else DASH)),
        _next_maintenance(p, now),
    ]


def _pin(p: Mapping[str, Any]) -> Mapping[str, Any]:
    """The status ``kv_pool.pin`` of a profile ({} when absent)."""
    kv = p.get("kv_pool")
    pin = kv.get("pin") if isinstance(kv, Mapping) else None
    return pin if isinstance(pin, Mapping) else {}


def render_status(data: Mapping[str, Any], now: float) -> str:
    """The daemon line and the profile table."""
    daemon = data.get("daemon") if isinstance(data.get("daemon"), Mapping) else {}
    assert isinstance(daemon, Mapping)
    uptime = daemon.get("uptime_s")
    up = format_duration(uptime) if isinstance(uptime, int | float) else "?"
    head = f"daemon pid {daemon.get('pid', '?')}  version {daemon.get('version', '?')}  up {up}"
    slot = daemon.get("load_slot")
    if "load_slot" in daemon:
        head += f"  load slot: {slot if isinstance(slot, str) and slot else 'free'}"
    docker = daemon.get("docker")
    if isinstance(docker, Mapping) and docker.get("state") == "not answering":
        since = docker.get("since_local") or relative(docker.get("since"), now)
        head += f"\ndocker: not answering since {since} ({docker.get('error') or 'no reply'})"
    profiles = [p for p in data.get("profiles") or [] if isinstance(p, Mapping)]
    if any(p.get("observed") is False and p.get("state") != "READING" for p in profiles):
        head += "\n(STATE? = as last recorded; the container has not been looked at yet)"
    if any(p.get("state") == "READING" for p in profiles):
        head += "\n(READING = the daemon has just started and is reading this profile's record)"
    if any(p.get("drift") for p in profiles):
        head += (
            "\n(DRIFT = the container differs from its edited profile; `supervisorctl diff NAME` shows how)"
        )
    if any(p.get("running_spec") == "last_known_good" for p in profiles):
        head += "\n(LKG = serving the last known good spec: its changed config failed to start)"
    for p in profiles:
        if _pin(p).get("bytes") is not None:
            head += (
                f"\nconfig change: {p.get('name')} starts with --kv-cache-memory-bytes {_pin(p)['bytes']} "
                f"(kv_pool.pin apply; {'running' if _pin(p).get('running') else 'from the next start'})"
            )
    head += _seats(profiles)
    for gone in daemon.get("removed_profiles") or []:
        if isinstance(gone, Mapping):
            head += (
                f"\nremoved from the config: {gone.get('name')} (container {gone.get('container')} "
                "left running, no longer supervised)"
            )
    if not profiles:
        return head + "\n(no profiles)"
    tail = "".join(liveness_line(p) for p in profiles)
    return head + "\n" + table(STATUS_COLUMNS, [status_row(p, now) for p in profiles]) + tail


def liveness_line(p: Mapping[str, Any]) -> str:
    """``liveness NAME: busy (generation_tokens+cpu), prefill 1750 tokens/s`` for a serving profile."""
    live = p.get("liveness")
    if not isinstance(live, Mapping) or p.get("state") not in ("RUNNING", "DEGRADED"):
        return ""
    verdict = live.get("verdict")
    if not isinstance(verdict, str) or verdict == "unknown":
        return ""
    line = f"\nliveness {p.get('name')}: {verdict.upper() if verdict == 'stuck' else verdict}"
    if live.get("signal"):
        line += f" ({live['signal']})"
    rate = live.get("prefill_rate")
    if isinstance(rate, int | float):
        line += f", prefill {rate:.0f} tokens/s"
    return line


def _seats(profiles: Sequence[Mapping[str, Any]]) -> str:
    """``seat gpu0: a, b (b waits for a)`` per seat shared by profiles (one port, one GPU)."""
    seats: dict[str, list[str]] = {}
    waits: list[str] = []
    for p in profiles:
        seat = p.get("seat") if isinstance(p.get("seat"), Mapping) else {}
        assert isinstance(seat, Mapping)
        if isinstance(seat.get("name"), str):
            seats.setdefault(seat["name"], []).append(str(p.get("name")))
            if seat.get("waiting_for"):
                waits.append(f"{p.get('name')} waits for {', '.join(map(str, seat['waiting_for']))}")
    lines = [f"\nseat {s}: {', '.join(names)}" for s, names in seats.items()]
    return "".join(lines) + (f" ({'; '.join(waits)})" if waits else "")


def _fields(fields: Any) -> str:
    if not isinstance(fields, Mapping):
        return "" if fields is None else json.dumps(fields, default=str)
    parts = []
    for key, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
        if isinstance(value, str) and (not value or any(c.isspace() for c in value) or '"' in value):
            text = json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def render_events(records: Sequence[Mapping[str, Any]]) -> str:
    """One line per event: time, profile, dotted name, key=value fields."""
    if not records:
        return "(no events)"
    rows = [
        [
            clock_time(r.get("ts")),
            str(r.get("profile") or DASH),
            str(r.get("name") or "?"),
            _fields(r.get("fields")),
        ]
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join([*(row[i].ljust(widths[i]) for i in range(3)), row[3]]).rstrip() for row in rows
    )


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _fmt(value: Any, pattern: str) -> str:
    num = _num(value)
    return pattern.format(num) if num is not None else DASH


def _short_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        return DASH
    return value.removeprefix("sha256:")[:IMAGE_ID_WIDTH]


def kv_trend(records: Sequence[Mapping[str, Any]]) -> str:
    """The sparkline line above the history: one block per start (``·`` = no pool), then min/max/last."""
    values = [int(v) if (v := _num(r.get("kv_tokens"))) is not None else None for r in records]
    known = [v for v in values if v is not None]
    from supervisor.core.vllm.kv_pool import sparkline  # history only: status starts without it

    line = f"KV pool  {sparkline(values)}"
    if known:
        line += f"  min {min(known):,}  max {max(known):,}  last {thousands(values[-1])}"
    return line


def render_history(records: Sequence[Mapping[str, Any]]) -> str:
    """A KV pool sparkline, then one row per start: outcome, KV pool, memory, load, gmu, image, config.

    Keys an older ledger row lacks render as ``-``.
    """
    if not records:
        return "(no starts recorded)"
    rows = []
    for r in records:
        load = _num(r.get("load_s"))
        rows.append(
            [
                clock_time(r.get("ts")),
                str(r.get("outcome") or "?"),
                thousands(r.get("kv_tokens")),
                _fmt(r.get("kv_gib"), "{:.1f}"),
                _fmt(r.get("max_concurrency"), "{:.2f}x"),
                _fmt(r.get("model_gib"), "{:.1f}"),
                format_duration(load) if load is not None else DASH,
                _fmt(r.get("gmu"), "{:.2f}"),
                _fmt(r.get("mem_available_gib_before", r.get("mem_available_gib")), "{:.1f} GiB"),
                _short_id(r.get("image_id")),
                str(r.get("fingerprint") or DASH),
                usage_text(as_usage(r.get("usage"))),
                _fmt(r.get("decode_tps"), "{:.1f}"),
                _cut(str(r.get("diagnosis") or DASH), DIAGNOSIS_WIDTH),
            ]
        )
    return kv_trend(records) + "\n" + table(HISTORY_COLUMNS, rows)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
