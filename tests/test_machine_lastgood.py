"""The machine's last known good and seat handover transitions (plain values, a plain ``now``)."""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.actions import CreateAndStart, PollDrain, ReleaseSlot, ReportFailedChange, SaveLastGood
from supervisor.core.events import (
    ConfigReloaded,
    ContainerExited,
    ContainerStarted,
    ContainerStartFailed,
    ContainerStopped,
    DrainProgress,
    FirstGeneration,
    HandoverRequested,
    LastGoodSaved,
    LogReady,
    PreflightDone,
    ResetRequested,
    Settled,
    SlotAcquired,
    StartRequested,
)
from supervisor.core.states import State
from tests.test_machine_driver import OK_HEALTH, Driver, fresh_boot, policy


def _rolled_back(d: Driver) -> bool:
    """Whether the next start creates the last known good (a call: no narrowing across events)."""
    return d.s.last_good_next


def _ready(d: Driver) -> list[object]:
    """STARTING with a container -> RUNNING; the actions of the last step."""
    d.send(LogReady())
    d.send(OK_HEALTH)
    actions: list[object] = list(d.send(FirstGeneration(ok=True, latency_ms=5.0, error=None)))
    assert d.st() == State.RUNNING
    return actions


def _good(d: Driver) -> None:
    """A first start from the profile reaches RUNNING and is saved as the last known good ("good")."""
    fresh_boot(d)
    d.to_starting()  # sends ContainerStarted("c1") without a fingerprint: the real job sends one
    d.s = replace(d.s, kv=replace(d.s.kv, fingerprint="good"))
    assert SaveLastGood("c1") in _ready(d)
    assert d.s.last_good_fingerprint is None  # known once the store kept it
    d.send(LastGoodSaved("good"))
    assert d.s.last_good_fingerprint == "good"


def _failed_start(d: Driver, fingerprint: str, cid: str) -> list[object]:
    """From BACKOFF (or STOPPED): one start whose container ran ``fingerprint`` and exited during load."""
    if d.st() == State.BACKOFF:
        d.advance(d.policy.backoff.max_s)
    else:
        d.send(StartRequested())
    assert d.st() == State.PREFLIGHT
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=90.0))
    d.send(SlotAcquired())
    out: list[object] = list(d.send(Settled(ok=True, detail="", mem_available_gib=90.0)))
    d.send(ContainerStarted(cid, 1.0, fingerprint=fingerprint))
    out += d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    return out


def _edited(on_failed: str) -> Driver:
    d = Driver(policy=policy(rollback_after=2, on_failed_change=on_failed, breaker={"limit": 5}))
    _good(d)
    d.send(
        ContainerExited(exit_code=0, signal=None, oom_killed=False)
    )  # dies: BACKOFF, a fresh start follows
    assert d.st() == State.BACKOFF
    d.send(ConfigReloaded())
    return d


def test_rollback_after_two_failed_starts_of_a_changed_config() -> None:
    """Two failed starts of a new fingerprint: alert once with action rollback; the next start creates the
    last known good; it reaching RUNNING is not saved again; a reload goes back to the profile."""
    d = _edited("rollback")
    first = _failed_start(d, "new", "c2")
    assert CreateAndStart(last_good=False) in first
    assert d.s.changed_failures == 1
    assert not [a for a in first if isinstance(a, ReportFailedChange)]
    second = _failed_start(d, "new", "c3")
    reports = [a for a in second if isinstance(a, ReportFailedChange)]
    assert reports == [ReportFailedChange("rollback", 2, "STARTING", "BACKOFF", None)]
    assert "config.change_failed" in d.emits()
    assert _rolled_back(d)
    d.advance(d.policy.backoff.max_s)
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=90.0))
    d.send(SlotAcquired())
    actions = d.send(Settled(ok=True, detail="", mem_available_gib=90.0))
    assert CreateAndStart(last_good=True) in actions
    assert d.s.running_spec == "last_known_good"
    assert "last_good.start" in d.emits(actions)
    d.send(ContainerStarted("c4", 1.0, image_id="sha256:a", fingerprint="good"))
    from supervisor.core.events import FirstGeneration, LogReady
    from tests.test_machine_driver import OK_HEALTH

    d.send(LogReady())
    d.send(OK_HEALTH)
    ready = d.send(FirstGeneration(ok=True, latency_ms=5.0, error=None))
    assert d.st() == State.RUNNING
    assert not [a for a in ready if isinstance(a, SaveLastGood)]  # it is the last known good
    assert d.s.status_dict(d.now)["running_spec"] == "last_known_good"
    d.send(ConfigReloaded())
    assert not _rolled_back(d)
    assert d.s.running_spec == "last_known_good"


def test_hold_alerts_once_and_keeps_the_new_config() -> None:
    """on_failed_change hold: the second failure alerts (action hold); later starts still use the profile."""
    d = _edited("hold")
    _failed_start(d, "new", "c2")
    second = _failed_start(d, "new", "c3")
    assert next(a for a in second if isinstance(a, ReportFailedChange)).action == "hold"
    third = _failed_start(d, "new", "c4")
    assert CreateAndStart(last_good=False) in third
    assert not [a for a in third if isinstance(a, ReportFailedChange)]
    assert d.s.changed_failures == 3
    assert not _rolled_back(d)


def test_a_failed_create_counts_with_its_fingerprint_and_operator_start_clears() -> None:
    """A create that failed (e.g. an image that does not exist) counts by the fingerprint it tried; an
    operator start after the rollback decision goes back to the profile."""
    d = _edited("rollback")
    for _ in range(2):
        d.advance(d.policy.backoff.max_s)
        d.send(PreflightDone(ok=True, detail="", mem_available_gib=90.0))
        d.send(SlotAcquired())
        d.send(Settled(ok=True, detail="", mem_available_gib=90.0))
        d.send(ContainerStartFailed("no such image", fingerprint="typo"))
    assert _rolled_back(d)
    assert d.st() == State.BACKOFF
    actions = d.send(StartRequested())
    assert not _rolled_back(d)
    assert d.s.changed_failures == 0
    assert "last_good.cleared" in d.emits(actions)


def test_same_config_failing_is_not_a_change_and_reset_clears() -> None:
    """A start of the last known good's own fingerprint failing resets the streak; reset clears a rollback."""
    d = _edited("rollback")
    _failed_start(d, "new", "c2")
    _failed_start(d, "good", "c3")
    assert d.s.changed_failures == 0
    d.s = d.s.__class__(**{**d.s.__dict__, "last_good_next": True, "changed_failures": 2})
    d.policy = policy(breaker={"limit": 1})
    _failed_start(d, "new", "c5")  # the breaker opens: FATAL
    assert d.st() == State.FATAL
    d.send(StartRequested())  # refused: the rollback stays
    assert _rolled_back(d)
    d.send(ResetRequested())
    assert not _rolled_back(d)
    assert d.st() == State.PREFLIGHT


def test_handover_drains_a_serving_profile_then_stops_it_for_good() -> None:
    """RUNNING -> DRAINING (pending stop, intent stop) -> STOPPING -> STOPPED; nothing starts after."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    actions = d.send(HandoverRequested(to="b"))
    assert d.st() == State.DRAINING
    assert d.s.intent == "stop"
    assert d.s.pending == "stop"
    assert PollDrain() in actions
    assert "seat.handover" in d.emits(actions)
    d.send(DrainProgress(requests_running=0.0))
    assert d.st() == State.STOPPING
    d.send(ContainerStopped())
    assert d.st() == State.STOPPED
    d.advance(3600)
    assert d.st() == State.STOPPED


def test_handover_in_other_states() -> None:
    """STARTING stops at once; WAITING gives the slot request back and stops; STOPPED stays."""
    d = Driver()
    fresh_boot(d)
    d.to_starting()
    d.send(HandoverRequested(to="b"))
    assert (d.st(), d.s.pending, d.s.intent) == (State.STOPPING, "stop", "stop")
    w = Driver()
    fresh_boot(w)
    w.send(PreflightDone(ok=True, detail="", mem_available_gib=90.0))
    actions = w.send(HandoverRequested(to="b"))
    assert w.st() == State.STOPPED
    assert ReleaseSlot() in actions
    actions = w.send(HandoverRequested(to="b"))
    assert w.st() == State.STOPPED
    assert w.emits(actions) == ["seat.handover"]
