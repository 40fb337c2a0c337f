"""Docker's pings in the daemon: the health flips become history events and the docker.down / docker.up
alerts (a daemon-wide condition: profile "" in the history, "supervisor" in the message; docs/alerts.md)."""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.fleet.rules import DockerHealth
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import DockerPing


def on_ping(
    health: DockerHealth, ping: DockerPing, now: float, records: Records
) -> tuple[DockerHealth, bool]:
    """The health after ``ping`` (on the loop); True when it flipped (publish the status)."""
    new, flipped = health.observe(ping.ok, now, ping.error)
    if flipped:
        records.emit("", "docker.answering" if ping.ok else "docker.not_answering", {"error": ping.error})
    if new.down_due(now):
        new = replace(new, alerted=True)
        records.alert("", "", new.down_alert(now), None)
    elif flipped and ping.ok and (health.alerted or records.is_raised("", "docker")):
        # also the first answer after a daemon restart when the previous daemon had raised it
        records.alert("", "", DockerHealth.up_alert(), None)
    return new, flipped
