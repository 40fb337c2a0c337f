"""The maintenance schedule: crontab semantics on real calendar dates, time zones, DST and errors."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import tzlocal
from apscheduler.triggers.cron import CronTrigger

from supervisor.core.maintenance.schedule import CronSchedule, ScheduleError

BERLIN = ZoneInfo("Europe/Berlin")


def at(y: int, mo: int, d: int, h: int = 0, mi: int = 0, tz: ZoneInfo = BERLIN) -> float:
    """Epoch seconds of a wall-clock time in `tz`."""
    return datetime(y, mo, d, h, mi, tzinfo=tz).timestamp()


def local(ts: float, tz: ZoneInfo = BERLIN) -> datetime:
    """The wall-clock datetime of epoch `ts` in `tz`."""
    return datetime.fromtimestamp(ts, tz)


def fires(expr: str, start: float, n: int, tz: str = "Europe/Berlin") -> list[datetime]:
    """The next `n` fire times after `start`, as Berlin-local datetimes."""
    sched = CronSchedule.parse(expr, tz)
    out: list[datetime] = []
    t: float | None = start
    for _ in range(n):
        assert t is not None
        t = sched.next_fire(t)
        assert t is not None
        out.append(local(t, ZoneInfo(tz)))
    return out


def test_apscheduler_from_crontab_counts_from_monday() -> None:
    """The reason for this module: APScheduler 3.x's own from_crontab fires '0 4 * * 0' on a Monday."""
    trig = CronTrigger.from_crontab("0 4 * * 0", timezone=BERLIN)
    fire = trig.get_next_fire_time(None, datetime(2026, 12, 3, tzinfo=BERLIN))
    assert fire.weekday() == 0  # Monday
    with pytest.raises(ValueError, match="higher than the maximum value"):
        CronTrigger.from_crontab("0 4 * * 7")


@pytest.mark.parametrize(
    ("expr", "hour"),
    [("0 4 * * 0", 4), ("0 4 * * 7", 4), ("0 4 * * sun", 4), ("0 4 * * SUN", 4), ("@weekly", 0)],
)
def test_sunday_spellings_fire_on_sunday(expr: str, hour: int) -> None:
    """0, 7, sun, SUN and @weekly all fire on Sundays (datetime.weekday() == 6), eight weeks in a row."""
    got = fires(expr, at(2026, 12, 3), 8)
    assert all(d.weekday() == 6 and d.hour == hour and d.minute == 0 for d in got)
    assert got[0] == datetime(2026, 12, 6, hour, 0, tzinfo=BERLIN)
    assert [(b - a).days for a, b in itertools.pairwise(got)] == [7] * 7


def test_default_expression_describes_sunday() -> None:
    """The default '0 4 * * 0' is described as an absolute Sunday time with the zone abbreviation."""
    sched = CronSchedule.parse("0 4 * * 0", "Europe/Berlin")
    nxt = sched.next_fire(at(2026, 12, 3, 12))
    assert nxt is not None
    assert sched.describe(nxt) == "Sun 2026-12-06 04:00 CET"
    summer = sched.next_fire(at(2026, 7, 1))
    assert summer is not None
    assert sched.describe(summer) == "Sun 2026-07-05 04:00 CEST"


def test_weekdays_range_fires_monday_to_friday_only() -> None:
    """'0 4 * * 1-5' fires exactly Mon..Fri over two weeks: ten fires, never on a weekend."""
    sched = CronSchedule.parse("0 4 * * 1-5", "Europe/Berlin")
    got = [local(t) for t in sched.fires_between(at(2026, 12, 6, 12), at(2026, 12, 20, 12), limit=20)]
    assert [d.day for d in got] == [7, 8, 9, 10, 11, 14, 15, 16, 17, 18]
    assert [d.weekday() for d in got] == [0, 1, 2, 3, 4] * 2
    assert fires("0 4 * * mon-fri", at(2026, 12, 6, 12), 10) == got


def test_day_of_month_or_day_of_week() -> None:
    """'0 4 1 * 1' fires on the 1st (a Wednesday here) AND on every Monday (crontab's OR rule)."""
    got = fires("0 4 1 * 1", at(2026, 6, 25), 5)
    assert [(d.month, d.day, d.weekday()) for d in got] == [
        (6, 29, 0),
        (7, 1, 2),
        (7, 6, 0),
        (7, 13, 0),
        (7, 20, 0),
    ]
    assert CronSchedule.parse("0 4 1 * 1", "UTC").either_day


def test_star_prefixed_day_field_means_and() -> None:
    """As in cronie, a day field starting with '*' ('*/2') makes the two day fields AND: odd-day Mondays."""
    got = fires("0 4 */2 * 1", at(2026, 1, 1), 4)
    assert [(d.month, d.day) for d in got] == [(1, 5), (1, 19), (2, 9), (2, 23)]
    assert all(d.weekday() == 0 and d.day % 2 == 1 for d in got)


def test_impossible_day_of_month_in_or_keeps_weekday_part() -> None:
    """'0 4 31 2 mon' (no Feb 31st) still fires on February Mondays through the weekday part."""
    got = fires("0 4 31 2 mon", at(2026, 1, 1), 5)
    assert [(d.month, d.day) for d in got] == [(2, 2), (2, 9), (2, 16), (2, 23), (2, 1)]
    assert got[-1].year == 2027


def test_steps_lists_and_names() -> None:
    """Steps, lists, month names (any case) and weekday ranges ending on 'sun' expand as crontab does."""
    assert [(d.hour, d.minute) for d in fires("*/20 4,5 * * *", at(2026, 1, 1), 7)] == [
        (4, 0), (4, 20), (4, 40), (5, 0), (5, 20), (5, 40), (4, 0),
    ]  # fmt: skip
    sched = CronSchedule.parse("0 4 1-31/10 Jan-MAR,dec *", "UTC")
    assert sched.days == frozenset({1, 11, 21, 31})
    assert sched.months == frozenset({1, 2, 3, 12})
    assert CronSchedule.parse("0 4 * * fri-sun", "UTC").weekdays == frozenset({5, 6, 0})
    assert CronSchedule.parse("0 4 * * 0-7/2", "UTC").weekdays == frozenset({0, 2, 4, 6})
    assert CronSchedule.parse("0 4 * * sun-sun", "UTC").weekdays == frozenset({0})
    assert [d.day for d in fires("@monthly", at(2026, 1, 15), 3)] == [1, 1, 1]
    assert [(d.month, d.day) for d in fires("@annually", at(2026, 1, 15), 2)] == [(1, 1), (1, 1)]
    assert [d.hour for d in fires("@hourly", at(2026, 1, 15, 10, 30), 2)] == [11, 12]
    assert [d.day for d in fires("@daily", at(2026, 1, 15, 10), 2)] == [16, 17]


def test_next_fire_is_strictly_after() -> None:
    """A fire exactly at `after` is not returned; half a second before it is."""
    sched = CronSchedule.parse("0 4 * * 0", "Europe/Berlin")
    sunday = at(2026, 12, 6, 4)
    assert sched.next_fire(sunday - 0.5) == sunday
    assert sched.next_fire(sunday) == at(2026, 12, 13, 4)


def test_fires_between_is_half_open_and_keeps_the_latest() -> None:
    """fires_between covers (a, b] and, past `limit`, returns the latest fires (oldest first)."""
    sched = CronSchedule.parse("0 * * * *", "UTC")
    utc = ZoneInfo("UTC")
    a, b = at(2026, 1, 1, 0, tz=utc), at(2026, 1, 1, 5, tz=utc)
    assert sched.fires_between(a, b) == [a + 3600 * i for i in range(1, 6)]
    assert sched.fires_between(a, b, limit=2) == [b - 3600, b]
    assert sched.fires_between(b, a) == []
    years = CronSchedule.parse("* * * * *", "UTC").fires_between(0, b, limit=3)
    assert years == [b - 120, b - 60, b]


def test_time_zone_is_applied() -> None:
    """The same expression in Asia/Tokyo fires 9 h before UTC; describe uses the zone's abbreviation."""
    tokyo = CronSchedule.parse("0 4 * * 0", "Asia/Tokyo")
    utc = CronSchedule.parse("0 4 * * 0", "UTC")
    start = at(2026, 12, 3, tz=ZoneInfo("UTC"))
    t_tokyo, t_utc = tokyo.next_fire(start), utc.next_fire(start)
    assert t_tokyo is not None
    assert t_utc is not None
    assert t_utc - t_tokyo == 9 * 3600
    assert tokyo.describe(t_tokyo) == "Sun 2026-12-06 04:00 JST"
    assert utc.describe(t_utc) == "Sun 2026-12-06 04:00 UTC"
    assert tokyo.tz_name == "Asia/Tokyo"


def test_default_zone_is_the_hosts() -> None:
    """Without a zone the host's zone (tzlocal: TZ, /etc/localtime) is used."""
    assert CronSchedule.parse("0 4 * * 0", None).tz_name == str(tzlocal.get_localzone())


def test_unknown_time_zone_is_an_error() -> None:
    """A zone name that does not exist is a ScheduleError naming the zone."""
    for bad in ("Europe/Atlantis", "../etc/passwd", "CEST"):
        with pytest.raises(ScheduleError, match="unknown time zone") as err:
            CronSchedule.parse("0 4 * * 0", bad)
        assert err.value.field == "timezone"
        assert err.value.value == bad


def test_dst_spring_forward_fires_once_after_the_gap() -> None:
    """Berlin 2026-03-29 02:00 -> 03:00: a 02:30 fire happens once, at 03:30 CEST (01:30 UTC)."""
    got = fires("30 2 * * *", at(2026, 3, 28, 12), 3)
    assert got[0] == datetime(2026, 3, 29, 3, 30, tzinfo=BERLIN)
    assert got[0].utcoffset() == timedelta(hours=2)
    assert [(d.day, d.hour) for d in got[1:]] == [(30, 2), (31, 2)]


def test_dst_fall_back_fixed_time_fires_once() -> None:
    """Berlin 2026-10-25 (03:00 CEST -> 02:00 CET): '30 2 * * *' fires once, at the first 02:30 (CEST)."""
    got = fires("30 2 * * *", at(2026, 10, 24, 12), 3)
    assert got[0].timestamp() == datetime(2026, 10, 25, 0, 30, tzinfo=ZoneInfo("UTC")).timestamp()
    assert got[0].tzname() == "CEST"
    assert [(d.day, d.hour, d.tzname()) for d in got[1:]] == [(26, 2, "CET"), (27, 2, "CET")]


def test_dst_fall_back_apscheduler_alone_fires_twice() -> None:
    """Pins APScheduler 3.x: a bare CronTrigger fires 02:30 twice on the fall-back day (we drop one)."""
    trig = CronTrigger(hour="2", minute="30", second="0", timezone=BERLIN)
    first = trig.get_next_fire_time(None, datetime(2026, 10, 24, 12, tzinfo=BERLIN))
    second = trig.get_next_fire_time(None, datetime.fromtimestamp(first.timestamp() + 1, BERLIN))
    assert second.timestamp() - first.timestamp() == 3600


def test_dst_fall_back_wildcard_hour_fires_in_both_hours() -> None:
    """'30 * * * *' fires at both 02:30s of the fall-back day (cronie runs wildcard jobs in the repeat)."""
    got = [local(t) for t in CronSchedule.parse("30 * * * *", "Europe/Berlin").fires_between(
        at(2026, 10, 25, 1, 45), at(2026, 10, 25, 3, 45)
    )]  # fmt: skip
    assert [(d.hour, d.tzname()) for d in got] == [(2, "CEST"), (2, "CET"), (3, "CET")]


@pytest.mark.parametrize(
    ("expr", "field", "message"),
    [
        ("0 4 * * 8", "day-of-week", "day-of-week 8 out of range 0-7"),
        ("60 4 * * *", "minute", "minute 60 out of range 0-59"),
        ("0 24 * * *", "hour", "hour 24 out of range 0-23"),
        ("0 4 0 * *", "day-of-month", "day-of-month 0 out of range 1-31"),
        ("0 4 * 13 *", "month", "month 13 out of range 1-12"),
        ("-1 4 * * *", "minute", "minute '-1' is not a number or a range a-b"),
        ("0 4 1-2-3 * *", "day-of-month", "'1-2-3' is not a number or a range a-b"),
        ("0 4 * * monday", "day-of-week", "'monday' is not a number (names: the first three letters"),
        ("0 4 L * *", "day-of-month", "day-of-month 'L' is not a number"),
        ("0 4 * * mon-fri/0", "day-of-week", "step '0' must be a whole number >= 1"),
        ("5/10 * * * *", "minute", "a step needs a range or '*' (write 5-59/10)"),
        ("0 4 * * fri-tue", "day-of-week", "backwards (start after end): write fri-sun,mon-tue"),
        ("0 4 * nov-feb *", "month", "write nov-dec,jan-feb"),
        ("0 4 * * 1,,2", "day-of-week", "empty list element"),
        ("0 4 31 2 *", "day-of-month", "never fire"),
        ("0 4 * *", "cron", "5-field"),
        ("0 0 4 * * 0", "cron", "got 6 field(s)"),
        ("", "cron", "got 0 field(s)"),
        ("@reboot", "cron", "@reboot is not supported"),
        ("@fortnightly", "cron", "unknown nickname '@fortnightly'"),
    ],
)
def test_errors_name_field_and_value(expr: str, field: str, message: str) -> None:
    """Each bad expression raises a ValueError subclass naming the field and the bad value."""
    with pytest.raises(ScheduleError) as err:
        CronSchedule.parse(expr, "UTC")
    assert isinstance(err.value, ValueError)
    assert err.value.field == field
    assert message in str(err.value)


def test_schedule_is_a_frozen_value() -> None:
    """Two parses of one expression are equal; a schedule cannot be changed."""
    a, b = CronSchedule.parse("0 4 * * 7", "UTC"), CronSchedule.parse("0 4 * * 7", "UTC")
    assert a == b
    assert a.weekdays == frozenset({0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.expr = "x"  # type: ignore[misc]
    assert str(a) == "0 4 * * 7 (UTC)"
