"""The daemon-wide snapshot (pure): what the fleet step knows between two events, persisted like the
profiles' snapshots (``fleet.json``, read back at start; a missing or corrupt file: a fresh state).

Every daemon-wide decision reads and writes only this value and the profiles' snapshots. Persisted: Docker's
health, each companion's health, whether the state directory was low on space (``fleet.json``), the
maintenance round and the schedule's last evaluation (``maintenance.json``, its own documented file). The
rest is for this run only, as it was before the fleet step (a new daemon starts those afresh).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from supervisor.core.alerts.channels import ChannelHealth
from supervisor.core.fleet.companions import CompanionHealth
from supervisor.core.fleet.docker import DockerHealth
from supervisor.core.fleet.heartbeat import ServingWatch
from supervisor.core.host.contiguity import ContiguityWatch
from supervisor.core.maintenance.duty import MaintenanceDuty
from supervisor.core.sentinel.judge import SentinelRun

#: Bumped when a field changes meaning (a file of another version is read as a fresh state).
VERSION = 1


@dataclass(frozen=True)
class FleetState:
    """The daemon-wide snapshot (the module docstring says what is persisted)."""

    docker: DockerHealth = field(default_factory=DockerHealth)
    host: Mapping[str, Any] = field(default_factory=dict)
    companions: Mapping[str, CompanionHealth] = field(default_factory=dict)
    #: Scheduled maintenance: the round in progress and the last evaluation of the schedule (persisted in
    #: ``maintenance.json``, its own documented file, not in ``fleet.json``).
    maintenance: MaintenanceDuty = field(default_factory=MaintenanceDuty)
    maint_evaluated: float | None = None
    state_dir_low: bool = False  # state_dir.low was raised (less free than host.state_dir_min_free_gib)
    # ---- this run only (not persisted) -----------------------------------------------------------
    mem_low_streak: int = 0  # the memory guard's low samples in a row (a new daemon counts afresh)
    #: The contiguity sentinel (core/host/contiguity.py): its first sample of a run is a change either way
    #: (an ``ok`` resolves what an earlier daemon raised; nothing is sent when nothing was raised)
    contiguity: ContiguityWatch = field(default_factory=ContiguityWatch)
    started_at: float | None = None  # the first tick of this run
    maint_begun: bool = False  # the first tick resumed the round and decided on the missed fires
    maint_next: float | None = None  # the schedule's next fire
    announced: bool = False  # daemon.started was sent
    serving: ServingWatch = field(default_factory=ServingWatch)  # the heartbeat's watch
    beat_failing: bool | None = None  # the heartbeat's last verdict (a flip is logged)
    digest_next: float | None = None  # the next daily digest (a fire missed while down: not caught up)
    channels: Mapping[str, ChannelHealth] = field(default_factory=dict)  # alert channels since start
    perf: Mapping[str, SentinelRun] = field(default_factory=dict)  # each profile's performance sentinel
    held: Mapping[str, tuple[int, tuple[str, ...]]] = field(
        default_factory=dict
    )  # preflight -> attempt, blockers
    claims: Mapping[str, frozenset[str]] = field(default_factory=dict)  # claimant -> seat-mates told

    def with_companion(self, key: str, health: CompanionHealth) -> FleetState:
        return replace(self, companions={**self.companions, key: health})

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "docker": {f.name: getattr(self.docker, f.name) for f in fields(DockerHealth)},
            "state_dir_low": self.state_dir_low,
            "companions": {
                k: {f.name: getattr(h, f.name) for f in fields(h)} for k, h in self.companions.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FleetState:
        """The snapshot a :meth:`to_dict` wrote; ValueError (or TypeError) when it is not one."""
        if not isinstance(data, Mapping) or data.get("version") != VERSION:
            raise ValueError(f"not a fleet state of version {VERSION}")
        companions = data.get("companions", {})
        if not isinstance(companions, Mapping):
            raise ValueError("companions must be a mapping")
        state = cls(
            docker=DockerHealth(**data.get("docker", {})),
            state_dir_low=_flag(data.get("state_dir_low", False), "state_dir_low"),
            companions={str(k): CompanionHealth(**v) for k, v in companions.items()},
        )
        _number(state.docker.since, "docker.since", none=True)
        _count(state.docker.failed_pings, "docker.failed_pings")
        for key, h in state.companions.items():
            _number(h.next_at, f"companions.{key}.next_at")
            _number(h.since, f"companions.{key}.since", none=True)
        return state


def _number(value: object, what: str, none: bool = False) -> None:
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {value!r}")


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, got {value!r}")
    return value


def _count(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a count, got {value!r}")
