"""Docker's health as the fleet sees it (pure): whether the engine answers its pings, since when, and when
its silence is worth a ``docker.down`` alert (docs/alerts.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from supervisor.core.actions import Alert
from supervisor.core.clock import format_duration
from supervisor.core.fleet.actions import Raise, Record

DOCKER_ANSWERING = "answering"
DOCKER_NOT_ANSWERING = "not answering"
DOCKER_UNKNOWN = "unknown"


#: Docker not answering is told in the chat (``docker.down``) once this many pings in a row failed over at
#: least ``DOCKER_DOWN_AFTER_S``: an engine restart of a few seconds is no news (docs/alerts.md).
DOCKER_DOWN_AFTER_PINGS = 2
DOCKER_DOWN_AFTER_S = 6.0


@dataclass(frozen=True)
class DockerHealth:
    """Whether the Docker engine answers its pings, since when, and the last error (a value).

    ``failed_pings``: pings in a row that failed; ``alerted``: docker.down was raised for this outage."""

    state: str = DOCKER_UNKNOWN
    since: float | None = None
    error: str | None = None
    failed_pings: int = 0
    alerted: bool = False

    def observe(self, ok: bool, now: float, error: str | None = None) -> tuple[DockerHealth, bool]:
        """The health after one ping; True when it flipped (worth an event)."""
        state = DOCKER_ANSWERING if ok else DOCKER_NOT_ANSWERING
        failed = 0 if ok else self.failed_pings + 1
        if state == self.state:
            return replace(self, error=None if ok else error, failed_pings=failed), False
        return DockerHealth(state, now, None if ok else error, failed), True

    def down_due(self, now: float) -> bool:
        """Not answering long enough to tell a human, and not told yet for this outage."""
        return (
            self.state == DOCKER_NOT_ANSWERING
            and not self.alerted
            and self.failed_pings >= DOCKER_DOWN_AFTER_PINGS
            and self.since is not None
            and now - self.since >= DOCKER_DOWN_AFTER_S
        )

    def down_alert(self, now: float) -> Alert:
        """``docker.down``: critical (nothing can be started, stopped or watched while it lasts)."""
        silent = format_duration(now - (self.since if self.since is not None else now))
        return Alert(
            "critical",
            "Docker not answering",
            DOCKER_ANSWERING,
            DOCKER_NOT_ANSWERING,
            f"{self.failed_pings} pings in a row failed over {silent}: {self.error or 'no answer'}",
            kind="docker.down",
            params=(("for", silent), ("error", self.error or "no answer")),
        )

    @staticmethod
    def up_alert() -> Alert:
        """``docker.up``: the engine answers again (resolves docker.down)."""
        return Alert(
            "info",
            "Docker answering again",
            DOCKER_NOT_ANSWERING,
            DOCKER_ANSWERING,
            "ping ok",
            kind="docker.up",
        )

    def to_dict(self) -> dict[str, object]:
        """For the status document."""
        return {
            "state": self.state,
            "since": self.since,
            "error": self.error,
            "failed_pings": self.failed_pings,
        }


def on_ping(
    health: DockerHealth, ok: bool, error: str | None, now: float
) -> tuple[DockerHealth, list[Record | Raise]]:
    """The health after one ping, and what to record and alert: each flip a history event
    (``docker.answering`` / ``docker.not_answering``), ``docker.down`` once per outage when it lasts,
    ``docker.up`` when the engine answers after a raised ``docker.down`` (also one a previous daemon
    raised: the health is persisted with the fleet state)."""
    new, flipped = health.observe(ok, now, error)
    out: list[Record | Raise] = []
    if flipped:
        out.append(Record("", "docker.answering" if ok else "docker.not_answering", {"error": error}))
    if new.down_due(now):
        new = replace(new, alerted=True)
        out.append(Raise("", new.down_alert(now)))
    elif flipped and ok and health.alerted:
        out.append(Raise("", DockerHealth.up_alert()))
    return new, out
