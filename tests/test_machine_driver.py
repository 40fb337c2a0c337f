"""A small driver for machine scenarios (plain ``now``, no I/O), plus tests of the happy paths it builds."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from supervisor.config.policy import default_policy
from supervisor.core.actions import Action, Alert, Emit, ProbeHealth, RecordStart, Reply, SampleLoad
from supervisor.core.events import (
    ContainerObserved,
    ContainerStarted,
    DaemonStarted,
    Event,
    FirstGeneration,
    HealthResult,
    LoadActivity,
    LogReady,
    PreflightDone,
    Settled,
    SlotAcquired,
    StartRequested,
    Tick,
)
from supervisor.core.machine import Policy, step
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State

T0 = 1_790_000_000.0
OK_HEALTH = HealthResult(ok=True, status=200, latency_ms=3.0, error=None)
BAD_HEALTH = HealthResult(ok=False, status=None, latency_ms=1.0, error="refused")
#: The product's Policy of a profile and daemon config that set nothing (parsed by the real parser).
DEFAULT_POLICY = default_policy()


def policy(**overrides: Any) -> Policy:
    """The product's default Policy with ``overrides``: a test names every value it assumes. A section is
    overridden field by field, under the YAML's names: ``policy(probes={"interval_s": 60.0})``."""
    changes = {
        name: replace(getattr(DEFAULT_POLICY, name), **value) if isinstance(value, dict) else value
        for name, value in overrides.items()
    }
    return replace(DEFAULT_POLICY, **changes)


@dataclass
class Driver:
    """Feeds events to ``step`` at a plain ``now`` and keeps every action."""

    policy: Policy = field(default_factory=lambda: DEFAULT_POLICY)
    now: float = T0
    s: ProfileState = field(default_factory=lambda: ProfileState.initial("p", T0))
    log: list[Action] = field(default_factory=list)

    def send(self, ev: Event) -> list[Action]:
        """Apply one event; return its actions."""
        self.s, actions = step(self.s, ev, self.now, self.policy)
        self.log.extend(actions)
        return actions

    def advance(self, seconds: float, tick_every: float = 1.0) -> list[Action]:
        """Move time forward ticking every ``tick_every`` seconds; return all actions. A load sample is
        answered as the daemon's job answers a cgroup it cannot read (no readings: nothing moved), and the
        /health a silence verdict asks first as a loading vLLM answers it (refused), since the machine
        judges a load's silence only after both (machine/start.judge_silence)."""
        out: list[Action] = []
        end = self.now + seconds
        while self.now < end:
            self.now = min(self.now + tick_every, end)
            todo = self.send(Tick())
            while todo:
                a = todo.pop(0)
                out.append(a)
                if isinstance(a, SampleLoad):
                    todo.extend(self.send(LoadActivity(a.container_id, None, None)))
                elif isinstance(a, ProbeHealth) and self.s.load.silence_health_asked_at is not None:
                    refused = HealthResult(ok=False, status=None, latency_ms=0.5, error="refused")
                    todo.extend(self.send(refused))
        return out

    def st(self) -> State:
        """The current state (a call, so type checkers do not narrow it across events)."""
        return self.s.state

    def emits(self, actions: list[Action] | None = None) -> list[str]:
        """Names of Emit actions."""
        return [a.name for a in (self.log if actions is None else actions) if isinstance(a, Emit)]

    def alerts(self, actions: list[Action] | None = None) -> list[Alert]:
        return [a for a in (self.log if actions is None else actions) if isinstance(a, Alert)]

    def records(self) -> list[RecordStart]:
        return [a for a in self.log if isinstance(a, RecordStart)]

    def to_starting(self, cid: str = "c1") -> None:
        """STOPPED -> PREFLIGHT -> WAITING (slot, settle) -> STARTING with a started container."""
        if self.st() in (State.STOPPED, State.BACKOFF):
            self.send(StartRequested())
        assert self.st() == State.PREFLIGHT
        self.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
        assert self.st() == State.WAITING
        self.send(SlotAcquired())
        assert self.st() == State.WAITING
        self.send(Settled(ok=True, detail="", mem_available_gib=100.0))
        assert self.st() == State.STARTING
        self.send(ContainerStarted(cid))

    def to_running(self, cid: str = "c1", load_s: float = 30.0) -> None:
        """A full normal start, ending RUNNING."""
        self.to_starting(cid)
        self.advance(load_s)
        self.send(LogReady())
        self.send(OK_HEALTH)
        self.send(FirstGeneration(ok=True, latency_ms=200.0, error=None))
        assert self.st() == State.RUNNING


def reply_of(actions: list[Action]) -> Reply:
    """The single Reply among ``actions``."""
    replies = [a for a in actions if isinstance(a, Reply)]
    assert len(replies) == 1
    return replies[0]


def fresh_boot(d: Driver) -> None:
    """Daemon start with nothing persisted: DaemonStarted, then no container."""
    d.send(DaemonStarted(boot_changed=False))
    d.send(ContainerObserved(container_id=None, running=False, exit_code=None))


def test_driver_normal_start_reaches_running() -> None:
    """A normal start goes PREFLIGHT -> WAITING -> STARTING -> RUNNING with a ledger row."""
    d = Driver()
    fresh_boot(d)
    assert d.st() == State.PREFLIGHT
    d.to_running()
    rows = d.records()
    assert len(rows) == 1
    assert rows[0].outcome == "ready"
    assert rows[0].load_s == 30.0
    assert rows[0].mem_available_gib == 100.0
    changes = [a.fields["new"] for a in d.log if isinstance(a, Emit) and a.name == "state.changed"]
    assert changes == ["PREFLIGHT", "WAITING", "STARTING", "RUNNING"]
    assert not d.s.slot_held
