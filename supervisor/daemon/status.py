"""The status document ``supervisorctl status --json`` prints (docs/contract.md "JSON shapes"), built
from the machine's snapshots. Pure: the loop publishes it; control threads read the published copy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from supervisor import __version__
from supervisor.config import DaemonConfig
from supervisor.core.fleet import companion_step, maintenance, seat_step, sentinel
from supervisor.core.fleet.docker import DockerHealth
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import channel_status
from supervisor.core.profile_state import ProfileState
from supervisor.core.sentinel.judge import SentinelRun
from supervisor.core.sentinel.view import status_block
from supervisor.core.spec.secrets import mask_url
from supervisor.daemon.executor.fleet_jobs import Keepers
from supervisor.daemon.sources.threads import Sources

#: Bumped when a key fleet scripts read changes meaning or goes away (adding keys does not bump it).
SCHEMA = 1
#: The state a configured profile shows before the daemon read its record (the first moments after a
#: start): never an empty table for a configured profile. Not a machine state: only the document has it.
READING = "READING"


def local_time(ts: float | None) -> str | None:
    """An absolute local time with its offset (ISO 8601), or None."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds") if ts is not None else None


def status_document(
    config: DaemonConfig,
    states: Mapping[str, ProfileState],
    *,
    now: float,
    uptime_s: float,
    docker: DockerHealth,
    maintenance: Mapping[str, Any],
    slot_holder: str | None,
    host: Mapping[str, Any] | None = None,
    kernel_log: Mapping[str, Any] | None = None,
    companions: Mapping[str, list[dict[str, Any]]] | None = None,
    removed: Mapping[str, str] | None = None,
    seats: Mapping[str, Mapping[str, Any]] | None = None,
    alerts: Mapping[str, Any] | None = None,
    threads: list[dict[str, Any]] | None = None,
    sentinel: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole status document at wall time ``now`` (``removed``: profile -> container left running)."""
    profiles = []
    for profile in config.profiles:
        state = states.get(profile.name)
        if state is None:  # configured, its record not read yet: shown as being read, never left out
            d = ProfileState(profile.name, booting=True).status_dict(now)
            d.update(state=READING, since=None)
        else:
            d = state.status_dict(now)
        d["container"] = profile.container.name
        d["next_maintenance"] = maintenance.get("next")
        d["next_maintenance_local"] = maintenance.get("next_local")
        d["base_url"] = mask_url(profile.base_url)  # the control API masks every reply too
        d["holds_load_slot"] = slot_holder == profile.name
        # what `supervisorctl start/restart --wait` derives its default timeout from
        d["timeouts"] = {
            "startup_deadline_s": profile.startup.deadline_s,
            "drain_timeout_s": profile.stop.drain_timeout_s,
            "stop_grace_s": profile.stop.grace_s,
        }
        d["companions"] = list((companions or {}).get(profile.name, []))
        # the seat it shares (one port, one GPU) and the seat-mates its start waits for
        d["seat"] = dict((seats or {}).get(profile.name) or {"name": profile.seat, "waiting_for": []})
        # the performance sentinel (docs/sentinel.md): SLOW shows next to the state; liveness untouched
        d["sentinel"] = dict((sentinel or {}).get(profile.name) or status_block(SentinelRun()))
        profiles.append(d)
    return {
        "schema": SCHEMA,
        "daemon": {
            "pid": os.getpid(),
            "version": __version__,
            "uptime_s": round(uptime_s, 1),
            "config": str(config.path),
            "docker": {**docker.to_dict(), "since_local": local_time(docker.since)},
            "load_slot": slot_holder,
            "host": dict(host or {}),
            "kernel_log": dict(kernel_log or {}),
            "maintenance": dict(maintenance),
            # profiles a reload took out of the config: their containers are left running, unsupervised
            "removed_profiles": [{"name": n, "container": c} for n, c in (removed or {}).items()],
            # alert channels: messages not delivered since this daemon started, which channel is failing
            "alerts": dict(alerts or {"undelivered": 0, "channels": []}),
            # the supervised threads (adapters/threads.py); the board fills it live when read
            "threads": list(threads or []),
            # the metrics endpoint (only with a metrics: section); the board fills it live when read
            "metrics": None
            if config.metrics is None
            else {"listen": config.metrics.listen, "serving": False, "error": None},
        },
        "profiles": profiles,
    }


class StatusBoard:
    """The last published status document: the loop writes it, control threads read it (never waiting).
    ``threads``: the supervised threads' live report (``daemon.threads``, adapters/threads.py)."""

    def __init__(self, threads: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self._lock = threading.Lock()
        self._doc: dict[str, Any] = {"schema": SCHEMA, "daemon": {}, "profiles": []}
        self._threads = threads
        #: Live ``daemon.<key>`` fields read at each ``read`` (the metrics endpoint's bind state).
        self.live: dict[str, Callable[[], object]] = {}

    def publish(self, doc: dict[str, Any]) -> None:
        with self._lock:
            self._doc = doc

    def refresh(
        self,
        config: DaemonConfig,
        states: Mapping[str, ProfileState],
        fleet: FleetState,
        policy: FleetPolicy,
        now: float,
        uptime_s: float,
        keepers: Keepers,
        sources: Sources,
        removed: Mapping[str, str],
    ) -> None:
        """Publish the document of the two snapshots (every profile's and the fleet's) now."""
        doc = status_document(
            config,
            states,
            now=now,
            uptime_s=uptime_s,
            docker=fleet.docker,
            slot_holder=next((n for n, s in states.items() if s.slot_held), None),
            host=fleet.host,
            companions=companion_step.status(fleet, policy),
            alerts=channel_status(fleet, policy),
            sentinel=sentinel.status(fleet, policy),
            maintenance=maintenance.status(fleet, policy.maintenance),
            kernel_log=sources.status(),
            seats=seat_step.status(fleet, states, policy),
            removed=removed,
        )
        self.publish(doc)

    def read(self) -> dict[str, Any]:
        with self._lock:
            doc = self._doc
        if (self._threads is None and not self.live) or not doc.get("daemon"):
            return doc
        live = {key: read() for key, read in self.live.items()}
        threads = {"threads": self._threads()} if self._threads is not None else {}
        return {**doc, "daemon": {**doc["daemon"], **live, **threads}}
