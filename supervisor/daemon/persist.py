"""Each profile's snapshot on disk: read back at start (with the operator's intent), written after changes.

The intent lives in its own small file, so a corrupt state file never loses an operator's stop. Durable
changes (state, intent, container, breaker, backoff, counts) are written at once; snapshots that only
moved volatile fields (probe times) at most every ``PERSIST_EVERY_S``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from supervisor.adapters.host import system as host
from supervisor.adapters.store.state import Store
from supervisor.config import Profile
from supervisor.core.errors import HostError, StateError
from supervisor.core.fleet.docker import DockerHealth
from supervisor.core.fleet.state import FleetState
from supervisor.core.machine import Policy
from supervisor.core.maintenance.duty import MaintenanceDuty
from supervisor.core.profile_state import ProfileState
from supervisor.core.vocab import Intent
from supervisor.daemon.executor.records import Records

log = structlog.get_logger("supervisor.daemon")

#: Unchanged-but-volatile snapshots (probe times) are persisted at most this often.
PERSIST_EVERY_S = 30.0


#: Every profile's current snapshot, by name (what the fleet step and the status document read).
States = dict[str, ProfileState]


@dataclass
class Supervised:
    """The loop's view of one profile: its config, its policy and its current snapshot."""

    profile: Profile
    policy: Policy
    state: ProfileState

    @property
    def name(self) -> str:
        return self.profile.name


def boot_changed(store: Store) -> tuple[str | None, bool]:
    """This boot's id, and whether the host rebooted since the state directory was last used."""
    try:
        boot = host.boot_id()
        return boot, store.swap_boot_id(boot)
    except HostError as exc:
        log.error("host.boot_id_unreadable", error=str(exc))
        return None, False


def restore_state(
    store: Store, records: Records, profile: Profile, now: float, policy: Policy
) -> ProfileState:
    """The persisted snapshot (or a fresh one) with the operator's intent applied."""
    name = profile.name
    limit, window = policy.breaker.limit, policy.breaker.window_s
    try:
        data = store.load_profile_state(name)
        state = (
            ProfileState.from_dict(data)
            if data is not None
            else ProfileState.initial(name, now, limit, window)
        )
    except StateError as exc:
        # a corrupt state file: start clean, but never lose the operator's stop
        log.error("state.corrupt", profile=name, error=str(exc))
        records.emit(name, "state.corrupt", {"error": str(exc)})
        state = ProfileState.initial(name, now, limit, window)
    try:
        intent = store.load_intent(name)
    except StateError as exc:
        log.error("state.intent_unreadable", profile=name, error=str(exc))
        intent = Intent.STOP  # unreadable intent: do not start anything on our own
    if intent is None and not profile.autostart:
        intent = Intent.STOP  # never started by an operator and not to be started on our own
    if intent is not None:
        state = dataclasses.replace(state, intent=intent)
    return state


def new_autostart(store: Store, profile: Profile) -> bool:
    """Whether ``profile`` starts on its own for the first time here (autostart, no intent recorded yet)."""
    if not profile.autostart:
        return False
    try:
        return store.load_intent(profile.name) is None
    except StateError:
        return False


class SnapshotWriter:
    """Writes profile snapshots, remembering per profile what it last wrote and when."""

    def __init__(self, store: Store, monotonic: Callable[[], float]) -> None:
        self._store = store
        self._monotonic = monotonic
        self._last: dict[str, tuple[tuple[object, ...], float]] = {}

    def write(self, s: ProfileState, force: bool = False) -> None:
        durable = (
            s.state,
            s.intent,
            s.container_id,
            s.breaker,
            s.backoff,
            s.restarts,
            s.pending,
            s.emergencies,
        )
        now = self._monotonic()
        last = self._last.get(s.name)
        if not force and last is not None and durable == last[0] and now - last[1] < PERSIST_EVERY_S:
            return
        try:
            if last is None or durable[1] != last[0][1] or force:
                self._store.save_intent(s.name, s.intent)
            self._store.save_profile_state(s.name, s.to_dict())
            self._last[s.name] = (durable, now)
        except StateError as exc:
            log.error("state.write_failed", profile=s.name, error=str(exc))


def restore_fleet(store: Store, records: Records) -> FleetState:
    """The persisted fleet snapshot; a fresh one when there is none, or when it is unreadable or not a fleet
    snapshot (then ``fleet.state_corrupt`` in the history, the file kept aside by the store). A fresh one
    still knows a ``docker.down`` an earlier daemon raised (conditions.json): ``docker.up`` resolves it."""
    try:
        data = store.load_fleet()
        if data is not None:
            return FleetState.from_dict(data)
    except StateError as exc:
        error: str | None = str(exc)
    except (ValueError, TypeError) as exc:
        error = f"fleet.json: {exc}"
    else:
        error = None
    if error is not None:
        log.error("fleet.state_corrupt", error=error)
        records.emit("", "fleet.state_corrupt", {"error": error})
    return FleetState(docker=DockerHealth(alerted=records.is_raised("", "docker")))


def restore_maintenance(store: Store, fleet: FleetState) -> FleetState:
    """``maintenance.json`` (the last evaluation of the schedule, the round in progress) into the fleet
    snapshot. A missing file is a first run (nothing caught up); a corrupt one is moved aside by the store,
    logged, and treated as a first run."""
    try:
        data = store.load_maintenance() or {}
        last = data.get("last_evaluated")
        if last is not None and (isinstance(last, bool) or not isinstance(last, int | float)):
            raise StateError(f"maintenance.json: last_evaluated must be a number, got {last!r}")
        duty = MaintenanceDuty.from_dict(data["duty"]) if data.get("duty") is not None else MaintenanceDuty()
    except StateError as exc:
        log.error("maintenance.state_unreadable", error=str(exc))
        return fleet
    return dataclasses.replace(
        fleet, maintenance=duty, maint_evaluated=float(last) if last is not None else None
    )


class FleetWriter:
    """Reads the fleet snapshot back at start, writes it after each step that changed what it keeps."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._last: dict[str, Any] | None = None

    def restore(self, records: Records) -> FleetState:
        fleet = restore_maintenance(self._store, restore_fleet(self._store, records))
        self._last = fleet.to_dict()
        return fleet

    def write(self, fleet: FleetState) -> None:
        """A failure is logged; the next change tries again."""
        data = fleet.to_dict()
        if data == self._last:
            return
        try:
            self._store.save_fleet(data)
            self._last = data
        except StateError as exc:
            log.error("fleet.write_failed", error=str(exc))
