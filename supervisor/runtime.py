"""Per-profile runtime bookkeeping of the daemon (mutable, owned by the main loop)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from supervisor.config import Profile
from supervisor.core.machine.policy import Policy
from supervisor.core.profile_state import ProfileState
from supervisor.watchers import ContainerWatch


@dataclass
class ProfileRuntime:
    """One supervised profile: its immutable config, its machine snapshot and its live watchers."""

    profile: Profile
    policy: Policy
    state: ProfileState
    watch: ContainerWatch | None = None
    #: Set while the daemon itself is stopping the container (so its SIGTERM is not an "external stop").
    stopping: threading.Event = field(default_factory=threading.Event)
    #: Probe kinds currently running in the pool (one of each at a time).
    in_flight: set[str] = field(default_factory=set)
    waiting_for_slot: bool = False
    container_started_at: float | None = None
    container_created_at: float | None = None
    median_kv_tokens: int | None = None
    #: The diagnosis of the last failed start (attached to the alerts that follow it).
    last_diagnosis: str | None = None
    last_persisted: tuple[object, ...] | None = None
    last_persist_at: float = 0.0

    @property
    def name(self) -> str:
        return self.profile.name
