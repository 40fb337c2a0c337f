"""The daily digest, pure: when it is due (``alerts.digest_at``, "HH:MM" local) and what it says.

Per profile: its state and uptime, the starts of the last 24 h from the start ledger (ready, failed,
runs that ended) with the KV pool each start drew, the circuit breaker. For the host: MemAvailable, the
next maintenance, the supervisor's own uptime. The fleet step says when (core/fleet/tick.py,
``SendDigest``); a pool job gathers the values off the loop (supervisor/daemon/executor/fleet_jobs.py)
and sends the result as a daemon-wide ``digest`` message.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime, time, timedelta, tzinfo
from typing import Any

from supervisor.core.actions import Alert
from supervisor.core.alerts.message import iso_local
from supervisor.core.clock import format_duration
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_STATES, SERVING_STATES, State
from supervisor.core.vocab import Intent, Outcome, is_failed

#: The digest looks back this far in the start ledger.
DAY_S = 86400.0
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_RUN_ENDS = frozenset({Outcome.DIED, Outcome.EMERGENCY})


def parse_hhmm(text: str) -> tuple[int, int] | None:
    """``"HH:MM"`` (24-hour, two digits each) as (hour, minute); None when malformed."""
    m = _HHMM.match(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def next_daily(now: float, at: tuple[int, int], tz: tzinfo) -> float:
    """The first local time ``at`` (hour, minute) in zone ``tz`` strictly after ``now`` (epoch s).

    A time a DST change skips fires at the shifted instant Python's zone rules give (an hour later).
    """
    local = datetime.fromtimestamp(now, tz)
    for days in (0, 1, 2):
        day = local.date() + timedelta(days=days)
        candidate = datetime.combine(day, time(at[0], at[1]), tzinfo=tz).timestamp()
        if candidate > now:
            return candidate
    raise AssertionError("unreachable: a local time recurs within two days")


def _number(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def ledger_line(rows: Sequence[Mapping[str, Any]], now: float) -> tuple[str, str]:
    """(restarts, KV pool per start) over the ledger rows of the last 24 h, e.g.
    ``("2 (1 ready, 1 failed); 1 run ended (died)", "312,448 · 298,112 tokens")``."""
    recent = [r for r in rows if (ts := _number(r, "ts")) is not None and now - DAY_S <= ts <= now]
    ends = [str(r.get("outcome")) for r in recent if r.get("outcome") in _RUN_ENDS]
    starts = [r for r in recent if r.get("outcome") not in _RUN_ENDS]
    ready = sum(1 for r in starts if r.get("outcome") == Outcome.READY)
    failed = sum(1 for r in starts if is_failed(str(r.get("outcome"))))
    other = len(starts) - ready - failed
    parts = [f"{ready} ready"] if ready else []
    parts += [f"{failed} failed"] if failed else []
    parts += [f"{other} stopped or redrawn"] if other else []
    text = f"{len(starts)}" + (f" ({', '.join(parts)})" if parts else "")
    if ends:
        text += f"; {len(ends)} run{'s' if len(ends) > 1 else ''} ended ({', '.join(sorted(set(ends)))})"
    pools = [int(t) for r in starts if (t := _number(r, "kv_tokens")) is not None]
    kv = " · ".join(f"{t:,}" for t in pools) + " tokens" if pools else "no start"
    return text, kv


def state_line(s: ProfileState, now: float) -> str:
    """A profile's state for the digest: uptime when serving, else since when it is in which state."""
    if s.state in SERVING_STATES:
        started = s.container_started_at
        up = (
            f", up {format_duration(now - started)}"
            if started is not None and s.state in CONTAINER_STATES
            else ""
        )
        return f"{s.state.value}{up}"
    if s.state == State.STOPPED and s.intent == Intent.STOP:
        return f"STOPPED on purpose since {iso_local(s.since)}"
    return f"{s.state.value} since {iso_local(s.since)}" + (f" ({s.last_reason})" if s.last_reason else "")


def perf_line(rows: Sequence[Mapping[str, Any]], now: float) -> str:
    """The sentinel's canaries of the last 24 h: median decode speed and TTFT, range, slow count."""
    recent = [r for r in rows if (_number(r, "ts") or 0.0) >= now - DAY_S]
    tps = [v for r in recent if (v := _number(r, "decode_tps")) is not None]
    if not tps:
        return "no canary"
    ttft = [v for r in recent if (v := _number(r, "ttft_ms")) is not None]
    slow = sum(1 for r in recent if r.get("slow"))
    med = statistics.median(tps)
    text = f"{med:.1f} tok/s ({min(tps):.1f}-{max(tps):.1f}, n {len(tps)}"
    text += f", {slow} slow)" if slow else ")"
    return text + (f", TTFT {statistics.median(ttft):.0f} ms" if ttft else "")


def digest_alert(
    states: Mapping[str, ProfileState],
    ledger: Mapping[str, Sequence[Mapping[str, Any]]],
    now: float,
    *,
    mem_available_gib: float | None,
    next_maintenance: str | None,
    uptime_s: float,
    perf: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> Alert:
    """The ``digest`` message: one line per profile, then the host's figures."""
    details: list[tuple[str, str]] = []
    serving = 0
    for name, s in states.items():
        restarts, kv = ledger_line(ledger.get(name, ()), now)
        serving += s.state in SERVING_STATES
        b = s.breaker
        details.append(
            (
                name,
                f"{state_line(s, now)} · restarts (24 h): {restarts} · KV pool per start: {kv} · "
                f"breaker {b.count(now)}/{b.limit}"
                + (" OPEN" if b.is_open(now) else "")
                + (f" · decode (24 h): {perf_line(perf.get(name, ()), now)}" if perf is not None else ""),
            )
        )
    mem = f"{mem_available_gib:.1f} GiB" if mem_available_gib is not None else "unknown"
    maintenance = next_maintenance or "none scheduled"
    details += [
        ("MemAvailable", mem),
        ("next maintenance", maintenance),
        ("supervisor up", format_duration(uptime_s)),
    ]
    summary = f"{serving} of {len(states)} serving"
    return Alert(
        "info",
        f"daily digest: {summary}",
        "-",
        "-",
        f"the last 24 h: {summary}; MemAvailable {mem}; next maintenance {maintenance}",
        details=tuple(details),
        kind="digest",
        params=(("summary", summary), ("mem_available", mem), ("next_maintenance", maintenance)),
    )
