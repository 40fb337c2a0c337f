"""The daily digest, pure: the HH:MM format, the next fire time in a zone (DST included), the ledger
summary of the last 24 h and the message text (plain values, a fixed clock)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from supervisor.core.alerts.catalog import MESSAGES
from supervisor.core.breaker import Breaker
from supervisor.core.fleet.digest import digest_alert, ledger_line, next_daily, parse_hhmm, state_line
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.core.vocab import Intent

NOW = datetime(2026, 9, 21, 9, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("09:00", (9, 0)),
        ("00:00", (0, 0)),
        ("23:59", (23, 59)),
        ("9:00", None),
        ("24:00", None),
        ("12:60", None),
        ("12:5", None),
        ("noon", None),
        (" 09:00", None),
        ("09:00:00", None),
    ],
)
def test_hhmm(text: str, want: tuple[int, int] | None) -> None:
    assert parse_hhmm(text) == want


def test_next_daily_is_strictly_after_now_in_the_zone() -> None:
    utc = ZoneInfo("UTC")
    assert next_daily(NOW, (9, 0), utc) == NOW + 86400  # exactly now: tomorrow
    assert next_daily(NOW, (9, 1), utc) == NOW + 60
    assert next_daily(NOW, (8, 59), utc) == NOW + 86400 - 60
    berlin = ZoneInfo("Europe/Berlin")  # CEST, UTC+2 in September
    assert next_daily(NOW, (11, 30), berlin) == NOW + 30 * 60


def test_next_daily_across_a_dst_change() -> None:
    """The night clocks go back (Berlin, 2026-10-25): 09:00 local comes 25 h after the previous one."""
    berlin = ZoneInfo("Europe/Berlin")
    first = datetime(2026, 10, 24, 9, 0, tzinfo=berlin).timestamp()
    assert next_daily(first, (9, 0), berlin) - first == 25 * 3600
    # a time the spring change skips (02:30 on 2026-03-29) still fires once that day
    before = datetime(2026, 3, 29, 1, 0, tzinfo=berlin).timestamp()
    fire = next_daily(before, (2, 30), berlin)
    assert 0 < fire - before < 3 * 3600


def _row(ts: float, outcome: str, kv: int | None = None) -> dict[str, Any]:
    return {"ts": ts, "profile": "p", "outcome": outcome, "kv_tokens": kv}


def test_ledger_line_counts_the_last_24_h_only() -> None:
    rows = [
        _row(NOW - 90000, "ready", 1),  # older than 24 h
        _row(NOW - 80000, "failed_oom"),
        _row(NOW - 70000, "ready", 312448),
        _row(NOW - 3000, "died"),
        _row(NOW - 2000, "ready", 298112),
        {"ts": "garbage", "outcome": "ready"},
    ]
    assert ledger_line(rows, NOW) == (
        "3 (2 ready, 1 failed); 1 run ended (died)",
        "312,448 · 298,112 tokens",
    )
    assert ledger_line([], NOW) == ("0", "no start")


def test_state_line() -> None:
    base = ProfileState.initial("p", NOW - 600)
    running = dataclasses.replace(base, state=State.RUNNING, container_started_at=NOW - 90000)
    assert state_line(running, NOW) == "RUNNING, up 1 d 1 h"
    stopped = dataclasses.replace(base, state=State.STOPPED, intent=Intent.STOP)
    assert state_line(stopped, NOW).startswith("STOPPED on purpose since ")


def test_digest_text() -> None:
    base = ProfileState.initial("qwen", NOW - 600)
    qwen = dataclasses.replace(base, state=State.RUNNING, container_started_at=NOW - 7200)
    bad = dataclasses.replace(
        ProfileState.initial("bad", NOW - 600),
        state=State.FATAL,
        breaker=Breaker(3, 7200, (NOW - 30, NOW - 20, NOW - 10), NOW - 10),
    )
    alert = digest_alert(
        {"qwen": qwen, "bad": bad},
        {"qwen": [_row(NOW - 7300, "ready", 312448)]},
        NOW,
        mem_available_gib=54.25,
        next_maintenance="Sun 2026-09-27 04:00 CEST",
        uptime_s=5 * 86400,
    )
    assert (alert.kind, alert.severity, alert.title) == ("digest", "info", "daily digest: 1 of 2 serving")
    details = dict(alert.details)
    assert details["qwen"] == (
        "RUNNING, up 2 h · restarts (24 h): 1 (1 ready) · KV pool per start: 312,448 tokens · breaker 0/3"
    )
    assert details["bad"].endswith("restarts (24 h): 0 · KV pool per start: no start · breaker 3/3 OPEN")
    assert details["MemAvailable"] == "54.2 GiB"
    assert details["next maintenance"] == "Sun 2026-09-27 04:00 CEST"
    assert details["supervisor up"] == "5 d"
    entry = MESSAGES["digest"]
    entry.title.en.format(**dict(alert.params))
    entry.title.zh.format(**dict(alert.params))
    off = digest_alert({}, {}, NOW, mem_available_gib=None, next_maintenance=None, uptime_s=0)
    assert dict(off.details)["next maintenance"] == "none scheduled"
    assert dict(off.details)["MemAvailable"] == "unknown"
