"""The machine and the host: settle after the slot, kernel events, orphans/memory after a stop, reserve."""

from __future__ import annotations

from supervisor.core.actions import (
    AcquireSlot,
    CheckHostAfterStop,
    CheckReserve,
    CreateAndStart,
    Emit,
    ReleaseSlot,
    Settle,
)
from supervisor.core.events import (
    ContainerExited,
    ContainerStopped,
    LogEngineDead,
    LogStartupFailure,
    PreflightDone,
    Settled,
    SlotAcquired,
    StopRequested,
    Tick,
)
from supervisor.core.host.memguard import MemoryGuard
from supervisor.core.host_events import HostAfterStop, KernelReport, OrphanSeen, ReserveMeasured
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy

XID = KernelReport("xid", "Xid 31 (pid 4242 VLLM::EngineCor)", "NVRM: Xid (PCI:0000:0a:00): 31, ...", 1.0)
NOMEM = KernelReport("nv_err_no_memory", "NV_ERR_NO_MEMORY", "NVRM: nvCheckOkFailedNoLog: ...", 1.0)


def _waiting() -> Driver:
    d = Driver()
    fresh_boot(d)
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=80.0))
    assert d.st() == State.WAITING
    return d


def test_settle_runs_after_the_slot_is_granted_then_the_container_is_created() -> None:
    """WAITING: slot granted -> Settle (still WAITING, no CreateAndStart yet) -> Settled ok -> STARTING."""
    d = _waiting()
    acts = d.send(SlotAcquired())
    assert [type(a) for a in acts if isinstance(a, Settle | CreateAndStart)] == [Settle]
    assert d.st() == State.WAITING
    assert d.s.slot_held
    assert not any(isinstance(a, AcquireSlot) for a in d.send(Tick()))  # no new request while settling
    assert d.send(SlotAcquired()) == []  # a repeated grant changes nothing
    acts = d.send(Settled(ok=True, detail="page cache dropped", mem_available_gib=90.0))
    assert any(isinstance(a, CreateAndStart) for a in acts)
    assert d.st() == State.STARTING
    assert d.s.load.mem_available_gib == 90.0  # measured after settling, right before the create
    assert d.s.mem_before_start_gib == 90.0
    assert d.emits(acts) == ["settle.done", "state.changed"]


def test_memory_that_does_not_settle_postpones_the_start_and_frees_the_slot() -> None:
    """Settled not ok -> BACKOFF without a breaker record, slot released, one warning."""
    d = _waiting()
    d.send(SlotAcquired())
    acts = d.send(Settled(ok=False, detail="MemAvailable 3.0 GiB < 20 GiB after wait", mem_available_gib=3.0))
    assert d.st() == State.BACKOFF
    assert any(isinstance(a, ReleaseSlot) for a in acts)
    assert not d.s.slot_held
    assert d.s.breaker.failures == ()
    assert [a.title for a in d.alerts(acts)] == ["host memory did not settle: start postponed"]


def test_a_stop_while_settling_releases_the_slot_and_ignores_the_late_answer() -> None:
    """Stop during settling -> STOPPED with the slot released; a late Settled does nothing."""
    d = _waiting()
    d.send(SlotAcquired())
    acts = d.send(StopRequested())
    assert d.st() == State.STOPPED
    assert any(isinstance(a, ReleaseSlot) for a in acts)
    assert d.send(Settled(ok=True, detail="", mem_available_gib=90.0)) == []


def test_kernel_event_while_serving_raises_one_warning_per_event() -> None:
    """NV_ERR_NO_MEMORY while RUNNING with ``kernel_memory_error: warn``: a warning (the server survives);
    the same again: no second alert. (The default kills: tests/test_machine_wedge.py.)"""
    d = Driver(policy=policy(host={"kernel_memory_error": "warn"}))
    fresh_boot(d)
    d.to_running()
    acts = d.send(NOMEM)
    assert d.st() == State.RUNNING
    alerts = d.alerts(acts)
    assert [(a.severity, a.title) for a in alerts] == [("warning", "kernel: NV_ERR_NO_MEMORY while serving")]
    assert "kernel.while_serving" in d.emits(acts)
    assert d.alerts(d.send(NOMEM)) == []
    assert d.alerts(d.send(KernelReport("nvgpu_info", "nvgpu_info", "nvgpu: ...", 2.0))) == []


def test_kernel_events_name_the_cause_of_a_serving_death() -> None:
    """Xid then the container dies: the 'container died' alert and the exit event name the Xid."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    d.send(XID)
    d.advance(5)
    acts = d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    died = [a for a in d.alerts(acts) if a.title == "container died"]
    assert len(died) == 1
    assert died[0].reason == "container exited (code 0); kernel: Xid 31 (pid 4242 VLLM::EngineCor)"
    exited = [a for a in acts if isinstance(a, Emit) and a.name == "container.exited"]
    assert exited[0].fields["kernel"] == ["Xid 31 (pid 4242 VLLM::EngineCor)"]
    # the run's ledger row (supervisorctl history) names it too, and the alert waits for its diagnosis
    assert (d.records()[-1].outcome, d.records()[-1].kernel) == (
        "died",
        ("Xid 31 (pid 4242 VLLM::EngineCor)",),
    )
    assert died[0].await_diagnosis is True


def test_kernel_events_older_than_the_window_are_not_a_cause() -> None:
    """A kernel event long before the death is not named."""
    d = Driver(policy=policy(kernel_window_s=60.0))
    fresh_boot(d)
    d.to_running()
    d.send(XID)
    d.advance(61, tick_every=10)
    acts = d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    assert [a.reason for a in d.alerts(acts) if a.title == "container died"] == ["container exited (code 0)"]


def test_emergency_stop_names_the_kernel_cause() -> None:
    """Engine dead after NV_ERR_NO_MEMORY (policy warn): the emergency alert and event carry it."""
    d = Driver(policy=policy(host={"kernel_memory_error": "warn"}))
    fresh_boot(d)
    d.to_running()
    d.send(NOMEM)
    acts = d.send(LogEngineDead(detail="EngineCore died"))
    em = [a for a in d.alerts(acts) if a.title == "emergency stop"]
    assert em[0].reason.endswith("; kernel: NV_ERR_NO_MEMORY")
    d.send(ContainerExited(exit_code=0, signal="SIGTERM", oom_killed=False))  # our own stop completes
    assert (d.records()[-1].outcome, d.records()[-1].kernel) == ("emergency", ("NV_ERR_NO_MEMORY",))


def test_a_failed_start_records_its_kernel_cause_in_the_ledger() -> None:
    """NV_ERR during the load (policy warn; kill: tests/test_machine_wedge.py), then the engine fails:
    RecordStart.kernel and the alert name it."""
    d = Driver(policy=policy(host={"kernel_memory_error": "warn"}))
    fresh_boot(d)
    d.to_starting()
    d.send(NOMEM)
    assert d.alerts() == []  # not serving: remembered, not alerted
    d.send(LogStartupFailure(outcome="failed_engine_init", detail="Engine core initialization failed"))
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert d.records()[-1].kernel == ("NV_ERR_NO_MEMORY",)
    failed = [a for a in d.alerts() if a.title == "start failed"]
    assert "kernel: NV_ERR_NO_MEMORY" in failed[0].reason


def test_a_stopped_container_is_checked_for_orphans_and_memory() -> None:
    """Whatever removes our container, the host is checked with MemAvailable from before the start."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    d.send(StopRequested())
    acts = d.send(ContainerStopped())
    checks = [a for a in acts if isinstance(a, CheckHostAfterStop)]
    assert checks == [CheckHostAfterStop("c1", 100.0, 98.0)]
    assert d.st() == State.STOPPED
    orphan = OrphanSeen(
        pid=77, name="VLLM::Worker_TP0", rss_bytes=3 * 2**30, reason="vllm_title", outcome="killed"
    )
    acts = d.send(HostAfterStop("c1", (orphan,), mem_before_gib=100.0, mem_after_gib=70.0))
    assert d.emits(acts) == ["host.orphans", "host.memory_not_returned", "host.after_stop"]
    (alert,) = d.alerts(acts)
    assert alert.severity == "warning"
    assert "VLLM::Worker_TP0 pid 77 3.0 GiB (vllm_title, killed)" in alert.reason
    assert "MemAvailable 70.0 GiB after the stop < 100.0 GiB before the start" in alert.reason
    clean = d.send(HostAfterStop("c1", (), mem_before_gib=100.0, mem_after_gib=99.0))
    assert d.emits(clean) == ["host.after_stop"]
    assert d.alerts(clean) == []


def test_a_serving_death_is_checked_too() -> None:
    """The container died on its own: the same check follows."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    acts = d.send(ContainerExited(exit_code=137, signal=None, oom_killed=False))
    assert [a.container_id for a in acts if isinstance(a, CheckHostAfterStop)] == ["c1"]


def test_reserve_after_load_warns_with_the_numbers() -> None:
    """reserve_gib set: RUNNING asks for MemAvailable; below the reserve -> warning, above -> recorded."""
    d = Driver(policy=policy(host={"reserve_gib": 15.0}))
    fresh_boot(d)
    d.to_running()
    assert any(isinstance(a, CheckReserve) for a in d.log)
    acts = d.send(ReserveMeasured(9.8))
    (alert,) = d.alerts(acts)
    assert alert.reason.startswith("MemAvailable 9.8 GiB after load < reserve 15 GiB")
    assert d.emits(d.send(ReserveMeasured(40.0))) == ["host.reserve_ok"]
    off = Driver()
    fresh_boot(off)
    off.to_running()
    assert not any(isinstance(a, CheckReserve) for a in off.log)


def test_memory_guard_counts_psi_stalls_as_bad_samples() -> None:
    """PSI full avg10 above the limit is a bad sample; without PSI (None) or with the limit 0 it is not."""
    g = MemoryGuard(mem_available_min_gib=6.0, samples=2, psi_full_avg10_max=20.0)
    g, why = g.observe(50.0, 40.0, 35.0)
    assert why is None
    assert g.low_streak == 1
    g, why = g.observe(50.0, 40.0, 36.0)
    assert why is not None
    assert "PSI full avg10) 36.0% > 20%" in why
    _g2, why2 = MemoryGuard(samples=1).observe(50.0, 40.0, 99.0)
    assert why2 is None
    _g3, why3 = MemoryGuard(samples=1, psi_full_avg10_max=20.0).observe(50.0, 40.0, None)
    assert why3 is None
