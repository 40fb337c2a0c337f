"""The daemon's own life, pure: its alive record, what the previous run's end means, and the messages
it sends when it starts, stops, or finds that its previous run crashed (docs/alerts.md "Lifecycle").

These messages are daemon-wide: they go out under the profile name :data:`SUPERVISOR`. The daemon
(supervisor/daemon/executor/lifecycle.py) does the file and clock work and calls these functions with
values; when ``daemon.started`` goes out is the fleet step's (core/fleet/tick.py, ``Announce``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from supervisor.core.actions import Alert
from supervisor.core.alerts.localize import title_en
from supervisor.core.alerts.message import iso_local
from supervisor.core.clock import format_duration
from supervisor.core.errors import StateError
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_UP_STATES, LAUNCH_STATES, State
from supervisor.core.vocab import Intent

#: The profile name of every daemon-wide message (start, stop, crash, digest).
SUPERVISOR = "supervisor"
#: The alive record's ``last_alive`` is refreshed this often: a crash is dated to within this much.
ALIVE_EVERY_S = 10.0
#: ``daemon.started`` goes out once every profile's container was looked at, or after this long.
SETTLE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class AliveRecord:
    """``alive.json``: this run's pid, start, last sign of life, host boot, and whether it stopped cleanly."""

    pid: int
    started_at: float
    last_alive: float
    boot_id: str | None = None
    clean_stop: bool = False
    version: str = ""
    exit_error: str | None = None  # the run ended on an uncaught error (not a clean stop)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        return {
            "pid": self.pid,
            "started_at": self.started_at,
            "last_alive": self.last_alive,
            "boot_id": self.boot_id,
            "clean_stop": self.clean_stop,
            "version": self.version,
            "exit_error": self.exit_error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AliveRecord:
        """Inverse of :meth:`to_dict`; StateError when a field has the wrong type."""

        def number(key: str) -> float:
            v = data.get(key)
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise StateError(f"alive record: {key} must be a number, got {v!r}")
            return float(v)

        def text(key: str) -> str | None:
            v = data.get(key)
            if v is not None and not isinstance(v, str):
                raise StateError(f"alive record: {key} must be a string, got {v!r}")
            return v

        clean = data.get("clean_stop", False)
        if not isinstance(clean, bool):
            raise StateError(f"alive record: clean_stop must be true or false, got {clean!r}")
        return cls(
            pid=int(number("pid")),
            started_at=number("started_at"),
            last_alive=number("last_alive"),
            boot_id=text("boot_id"),
            clean_stop=clean,
            version=text("version") or "",
            exit_error=text("exit_error"),
        )


@dataclass(frozen=True)
class PreviousRun:
    """How the previous daemon run ended, as its alive record tells (None at a first start)."""

    crashed: bool  # no clean stop was recorded: it was killed, crashed, or the host went down
    last_alive: float  # its last sign of life (a crash happened at most ALIVE_EVERY_S later)
    now: float
    rebooted: bool  # the host was rebooted in between (the boot id changed)
    booted_at: float | None = None  # when the host booted (with ``rebooted``)
    error: str | None = None  # it ended on an uncaught error

    @property
    def down_s(self) -> float:
        """How long no supervisor ran."""
        return max(0.0, self.now - self.last_alive)


def previous_run(
    prev: AliveRecord | None, now: float, boot_id: str | None, booted_at: float | None
) -> PreviousRun | None:
    """The verdict on the previous run from its alive record (None: no record, nothing to claim)."""
    if prev is None:
        return None
    rebooted = prev.boot_id is not None and boot_id is not None and prev.boot_id != boot_id
    return PreviousRun(
        crashed=not prev.clean_stop,
        last_alive=prev.last_alive,
        now=now,
        rebooted=rebooted,
        booted_at=booted_at if rebooted else None,
        error=prev.exit_error,
    )


def crashed_alert(p: PreviousRun, story: str | None = None) -> Alert:
    """``daemon.crashed``: the previous run did not stop cleanly (critical when the host went down too).

    ``story``: the flight recorder's account of the end (supervisor/core/fleet/night.py), told first."""
    down_from, down_to, down_for = iso_local(p.last_alive), iso_local(p.now), format_duration(p.down_s)
    reason = f"the supervisor was down from {down_from} to {down_to} ({down_for}): it did not stop cleanly"
    if story and p.rebooted:  # the host went down: the story is the news
        reason = f"{story}. {reason[0].upper()}{reason[1:]}"
    rebooted = iso_local(p.booted_at) if p.booted_at is not None else ("yes" if p.rebooted else "")
    if p.rebooted:
        reason += f"; the host was rebooted in between (up since {rebooted})"
    if p.error:
        reason += f"; it ended on an internal error: {p.error}"
    if story and not p.rebooted:  # the daemon alone died: its last records come after the facts
        reason += f"; its last records: {story}"
    params = (
        ("down_from", down_from),
        ("down_to", down_to),
        ("down_for", down_for),
        ("rebooted_at", rebooted),
        ("error", p.error or ""),
    )
    return Alert(
        "critical" if p.rebooted else "warning",
        title_en("daemon.crashed", params),
        "running",
        "running",
        reason,
        details=(("last sign of life", down_from), ("down for", down_for)),
        kind="daemon.crashed",
        params=params,
    )


def start_line(s: ProfileState, now: float) -> tuple[str, str]:
    """What the daemon found and does for one profile once it settled: (category, text)."""
    breaker = f"{s.breaker.count(now)}/{s.breaker.limit}"
    if s.booting:
        return "unknown", f"not looked at yet (Docker did not answer), recorded as {s.state.value}"
    if s.state == State.FATAL:
        return "fatal", f"FATAL: circuit breaker open ({breaker}); supervisorctl reset {s.name} once fixed"
    if s.intent == Intent.STOP and s.state == State.STOPPED:
        return "stopped", "stopped (manual stop persisted)"
    if s.adopted and s.state in CONTAINER_UP_STATES and s.container_id:
        since = s.container_started_at
        when = (
            f", running since {iso_local(since)} (up {format_duration(now - since)})"
            if since is not None
            else ""
        )
        return "adopted", f"adopted container {s.container_id[:12]}{when}"
    if s.state == State.BACKOFF and s.backoff.retry_at is not None:
        return "starting", f"in backoff, next start at {iso_local(s.backoff.retry_at)} (breaker {breaker})"
    if s.state in LAUNCH_STATES:
        return "starting", f"starting ({s.state.value})"
    return "other", f"{s.state.value}" + (f": {s.last_reason}" if s.last_reason else "")


def _previous_text(prev: PreviousRun | None) -> str:
    if prev is None:
        return "first start with this state directory"
    if prev.crashed:
        return f"after a crash, down {format_duration(prev.down_s)} (see the daemon.crashed message)"
    text = f"stopped cleanly at {iso_local(prev.last_alive)}, for {format_duration(prev.down_s)}"
    if prev.rebooted:
        text += "; the host was rebooted in between"
    return text


def started_alert(
    states: Mapping[str, ProfileState],
    now: float,
    *,
    version: str,
    pid: int,
    previous: PreviousRun | None,
) -> Alert:
    """``daemon.started``: one line per profile (adopted, starting, stopped, FATAL) plus how the last run
    ended."""
    lines = {name: start_line(s, now) for name, s in states.items()}
    counts: dict[str, int] = {}
    for category, _text in lines.values():
        counts[category] = counts.get(category, 0) + 1
    order = ("adopted", "starting", "stopped", "fatal", "unknown", "other")
    summary = ", ".join(f"{counts[c]} {c}" for c in order if counts.get(c)) or "no profiles"
    previous_text = _previous_text(previous)
    params = (("version", version), ("pid", str(pid)), ("summary", summary), ("previous", previous_text))
    return Alert(
        "info",
        title_en("daemon.started", params),
        "stopped",
        "running",
        f"vllm-supervisor {version} (pid {pid}): {summary}; {previous_text}",
        details=tuple((name, text) for name, (_c, text) in lines.items()),
        kind="daemon.started",
        params=params,
    )


def stopped_alert(states: Mapping[str, ProfileState], uptime_s: float, *, version: str, pid: int) -> Alert:
    """``daemon.stopped``: a clean shutdown; the containers keep running, unsupervised until a start."""
    lines = tuple(
        (name, s.state.value + (f", container {s.container_id[:12]} left running" if s.container_id else ""))
        for name, s in states.items()
    )
    uptime = format_duration(uptime_s)
    return Alert(
        "info",
        title_en("daemon.stopped"),
        "running",
        "stopped",
        f"vllm-supervisor {version} (pid {pid}) stopping after {uptime}; nothing supervises the model "
        "servers until it starts again",
        details=lines,
        kind="daemon.stopped",
        params=(("version", version), ("pid", str(pid)), ("uptime", uptime)),
    )
