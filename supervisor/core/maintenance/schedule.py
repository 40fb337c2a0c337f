"""The maintenance schedule: a crontab expression with standard (Vixie/cronie) semantics, on APScheduler 3.x.

APScheduler 3.x's ``CronTrigger.from_crontab`` numbers weekdays from Monday = 0, so ``0 4 * * 0`` would fire
on Mondays, ``7`` is refused and ``1-5`` means Tue-Sat. Here the expression is parsed by man 5 crontab and
each field is handed to APScheduler as an explicit list (weekdays as names ``mon,tue,...``), so no numbering
or range-wrap question reaches APScheduler. See docs/maintenance.md for the semantics and DST behaviour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

#: The @-nicknames of cronie (``@reboot`` is refused: the daemon has no boot hook).
NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab numbering: 0 (and 7) = Sunday
_DAY_LABELS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February 29 exists in leap years


class ScheduleError(ValueError):
    """A crontab expression or time zone that cannot be used; ``field`` and ``value`` say where."""

    def __init__(self, message: str, field: str = "", value: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value


@dataclass(frozen=True)
class _Spec:
    name: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()  # names[i] stands for lo + i


_SPECS = (
    _Spec("minute", 0, 59),
    _Spec("hour", 0, 23),
    _Spec("day-of-month", 1, 31),
    _Spec("month", 1, 12, _MONTHS),
    _Spec("day-of-week", 0, 7, _DAYS),
)


def _number(spec: _Spec, text: str) -> int:
    low = text.lower()
    if spec.names and low in spec.names:
        return spec.lo + spec.names.index(low)
    if not text.isdigit() or not text.isascii():
        hint = f" (names: the first three letters, e.g. {spec.names[1]})" if spec.names else ""
        raise ScheduleError(f"{spec.name} {text!r} is not a number{hint}", spec.name, text)
    n = int(text)
    if not spec.lo <= n <= spec.hi:
        raise ScheduleError(f"{spec.name} {n} out of range {spec.lo}-{spec.hi}", spec.name, text)
    return n


def _element(spec: _Spec, item: str) -> set[int]:
    """One list element: ``*``, ``*/n``, ``a``, ``a-b`` or ``a-b/n``."""
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or not step_text.isascii() or int(step_text) == 0:
            raise ScheduleError(
                f"{spec.name} step {step_text!r} must be a whole number >= 1", spec.name, item
            )
        step = int(step_text)
    if base == "*":
        lo, hi = spec.lo, spec.hi
    elif "-" in base:
        a, _, b = base.partition("-")
        if not a or not b or "-" in b:
            raise ScheduleError(f"{spec.name} {base!r} is not a number or a range a-b", spec.name, item)
        lo, hi = _number(spec, a), _number(spec, b)
        if spec.name == "day-of-week" and b.lower() == "sun" and lo > 0:
            hi = 7  # "fri-sun" ends on the Sunday after (cronie reads "sun" as 0 and refuses it)
        if lo > hi:
            top, bottom = {"month": ("dec", "jan"), "day-of-week": ("sun", "mon")}.get(
                spec.name, (spec.hi, spec.lo)
            )
            if spec.name == "day-of-week" and a.isdigit():
                top, bottom = 7, 0
            raise ScheduleError(
                f"{spec.name} range {item!r} is backwards (start after end): write {a}-{top},{bottom}-{b}",
                spec.name,
                item,
            )
    else:
        lo = hi = _number(spec, base)
        if slash:
            raise ScheduleError(
                f"{spec.name} {item!r}: a step needs a range or '*' (write {base}-{spec.hi}/{step})",
                spec.name,
                item,
            )
    return set(range(lo, hi + 1, step))


def _field(spec: _Spec, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise ScheduleError(f"{spec.name} {text!r} has an empty list element", spec.name, text)
        values |= _element(spec, item)
    if spec.name == "day-of-week" and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


def _csv(values: frozenset[int], spec: _Spec, full: int) -> str:
    if len(values) == full:
        return "*"
    if spec.name == "day-of-week":  # APScheduler counts from Monday: never hand it a number
        return ",".join(_DAYS[d] for d in sorted(values, key=lambda d: (d - 1) % 7))
    return ",".join(str(v) for v in sorted(values))


def zone(tz: str | None) -> tzinfo:
    """The tzinfo of IANA zone `tz` (None: the host's zone); ScheduleError when unknown."""
    if tz is None:
        try:
            return tzlocal.get_localzone()
        except (LookupError, ValueError, OSError) as exc:  # a TZ variable naming no zone, a broken link
            msg = f"cannot tell the host's time zone ({exc}); set an IANA name such as Europe/Berlin"
            raise ScheduleError(msg, "timezone", "") from exc
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(
            f"unknown time zone {tz!r} (an IANA name such as Europe/Berlin)", "timezone", tz
        ) from exc


@dataclass(frozen=True)
class CronSchedule:
    """A parsed crontab schedule in one time zone. Build it with :meth:`parse`."""

    expr: str
    tz: tzinfo
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # crontab numbering, 0 = Sunday (7 folded into 0)
    either_day: bool  # both day fields restricted: fire when EITHER matches (crontab's OR rule)
    fixed_time: bool  # neither minute nor hour starts with '*': a repeated (DST fall-back) hour fires once
    _trigger: BaseTrigger = field(compare=False, repr=False)

    @classmethod
    def parse(cls, expr: str, tz: str | None = None) -> CronSchedule:
        """Parse a 5-field crontab line or @-nickname in IANA zone `tz` (None: the host's zone)."""
        text = expr.strip()
        if text.lower() == "@reboot":
            raise ScheduleError(
                "@reboot is not supported (the maintenance schedule is periodic)", "cron", expr
            )
        if text.startswith("@"):
            if text.lower() not in NICKNAMES:
                raise ScheduleError(
                    f"unknown nickname {text!r} (use one of {', '.join(NICKNAMES)})", "cron", expr
                )
            text = NICKNAMES[text.lower()]
        parts = text.split()
        if len(parts) != 5:
            raise ScheduleError(
                "must be a standard 5-field cron expression (minute hour day-of-month month day-of-week), "
                f"got {len(parts)} field(s)",
                "cron",
                expr,
            )
        where = zone(tz)
        minute, hour, dom, month, dow = (_field(s, p) for s, p in zip(_SPECS, parts, strict=True))
        dom_star, dow_star = parts[2].startswith("*"), parts[4].startswith("*")
        either = not dom_star and not dow_star
        possible = any(d <= _MONTH_DAYS[m - 1] for m in month for d in dom)
        if not possible and not either:
            raise ScheduleError(
                f"day-of-month {parts[2]} never occurs in month {parts[3]}: the schedule would never fire",
                "day-of-month",
                parts[2],
            )
        common = {
            "minute": _csv(minute, _SPECS[0], 60),
            "hour": _csv(hour, _SPECS[1], 24),
            "month": _csv(month, _SPECS[3], 12),
            "second": "0",
            "timezone": where,
        }
        days, weekdays = _csv(dom, _SPECS[2], 31), _csv(dow, _SPECS[4], 7)
        trigger: BaseTrigger
        if either:
            by_day = [CronTrigger(day=days, **common)] if possible else []
            trigger = OrTrigger([*by_day, CronTrigger(day_of_week=weekdays, **common)])
        else:
            trigger = CronTrigger(day=days, day_of_week=weekdays, **common)
        fixed = not parts[0].startswith("*") and not parts[1].startswith("*")
        return cls(expr, where, minute, hour, dom, month, dow, either, fixed, trigger)

    @property
    def tz_name(self) -> str:
        """The zone's IANA name (or its str() when it has none)."""
        return str(getattr(self.tz, "key", self.tz))

    def next_fire(self, after: float) -> float | None:
        """The first fire time strictly after epoch `after` (None if the schedule never fires again)."""
        start = math.floor(after) + 1  # fire times are whole minutes: this is exactly "strictly after"
        for _ in range(3):  # at most one repeated-hour fire is skipped
            fire = self._trigger.get_next_fire_time(None, datetime.fromtimestamp(start, self.tz))
            if fire is None:
                return None
            ts = float(fire.timestamp())
            if not (self.fixed_time and self._is_repeat(ts)):
                return ts
            start = int(ts) + 1
        return None  # pragma: no cover - two repeated hours in a row do not exist

    def _is_repeat(self, ts: float) -> bool:
        """Whether `ts` is the second occurrence of its wall-clock time (a DST fall-back's repeated hour)."""
        wall = datetime.fromtimestamp(ts, self.tz).replace(tzinfo=None)
        return wall.replace(tzinfo=self.tz, fold=0).timestamp() < ts

    def fires_between(self, a: float, b: float, limit: int = 10) -> list[float]:
        """Fire times in (a, b], ascending: the LATEST `limit` of them when there are more."""
        if limit <= 0 or b <= a:
            return []
        span = 3600.0
        while True:
            start = max(a, b - span)
            fires: list[float] = []
            t = self.next_fire(start)
            count = 0
            while t is not None and t <= b and count < 100_000:  # bounded even for '* * * * *' over years
                fires.append(t)
                fires = fires[-limit:]
                count += 1
                t = self.next_fire(t)
            if count >= limit or start <= a:
                return fires
            span *= 4

    def describe(self, ts: float) -> str:
        """Absolute local time with weekday and zone abbreviation, e.g. ``Sun 2026-12-06 04:00 CET``."""
        dt = datetime.fromtimestamp(ts, self.tz)
        return f"{_DAY_LABELS[(dt.weekday() + 1) % 7]} {dt:%Y-%m-%d %H:%M} {dt.tzname()}"

    def __str__(self) -> str:
        return f"{self.expr} ({self.tz_name})"
