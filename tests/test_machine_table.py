"""Exhaustive state x event table: every pair is defined or ignored, never raises."""

from __future__ import annotations

import json
import typing

import pytest

from supervisor.core import events as ev, host_events as hev
from supervisor.core.actions import Action, Emit, Reply
from supervisor.core.events import Event
from supervisor.core.machine import step
from supervisor.core.probe_events import GateResult
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.core.vllm.smoke import GateSpec
from tests.test_machine_driver import OK_HEALTH, Driver, fresh_boot, policy

_ACTION_TYPES = typing.get_args(Action)

EVENTS: list[Event] = [
    ev.Tick(),
    ev.StartRequested(),
    ev.StopRequested(),
    ev.RestartRequested(),
    ev.ResetRequested(),
    ev.MaintenanceRequested(),
    ev.DaemonStarted(boot_changed=False),
    ev.DaemonStarted(boot_changed=True),
    ev.ContainerObserved(container_id=None, running=False, exit_code=None),
    ev.ContainerObserved(container_id="c1", running=True, exit_code=None),
    ev.ContainerObserved(container_id="c1", running=False, exit_code=137),
    ev.PreflightDone(ok=True, detail="", mem_available_gib=90.0),
    ev.PreflightDone(ok=False, detail="low memory", mem_available_gib=5.0),
    ev.SlotAcquired(),
    ev.Settled(ok=True, detail="page cache dropped", mem_available_gib=95.0),
    ev.Settled(ok=False, detail="MemAvailable 3.0 GiB < 20 GiB after wait", mem_available_gib=3.0),
    hev.ShmSwept(removed=("psm_1 (4096 B)",), freed_bytes=4096, kept=(), warnings=(), mem_gain_gib=0.0),
    hev.ShmSwept(removed=(), freed_bytes=0, kept=(), warnings=(), mem_gain_gib=None),
    hev.KernelReport(kind="xid", summary="Xid 31 (pid 42 VLLM::EngineCor)", line="NVRM: Xid ...", ts=1.0),
    hev.KernelReport(kind="nvgpu_info", summary="nvgpu_info", line="nvgpu: ...", ts=1.0),
    hev.KernelReport(kind="nv_err_no_memory", summary="NV_ERR_NO_MEMORY", line="NVRM: ...", ts=1.0),
    hev.KernelReport(kind="oom_kill", summary="OOM kill", line="Out of memory: ...", ts=1.0, whose="ours"),
    hev.HardFloor(detail="MemAvailable 2.00 GiB < hard floor 3 GiB"),
    hev.ReserveMeasured(mem_available_gib=9.8),
    hev.ReserveMeasured(mem_available_gib=None),
    hev.HostAfterStop(
        container_id="c0",
        orphans=(
            hev.OrphanSeen(
                pid=77, name="VLLM::Worker_TP0", rss_bytes=2**30, reason="vllm_title", outcome="reported"
            ),
        ),
        mem_before_gib=100.0,
        mem_after_gib=60.0,
    ),
    hev.HostAfterStop(container_id="c0", orphans=(), mem_before_gib=None, mem_after_gib=None),
    ev.ContainerStarted(container_id="c1"),
    ev.ContainerStarted(container_id="c2"),
    ev.ContainerStarted(container_id="c1", created_at=1.0, image_id="sha256:aa", fingerprint="fp", gmu=0.73),
    ev.ContainerStartFailed(error="port in use"),
    ev.ContainerInfo(container_id="c1", started_at=1000.0),
    ev.ObserveFailed(error="Docker engine did not answer"),
    ev.StartDiagnosed(outcome="failed_engine_init", cause="nv_err_no_memory", diagnosis="lower gmu"),
    ev.KvBaseline(tokens=1_013_816),
    ev.KvBaseline(tokens=1_013_816, fingerprint="fp"),
    ev.KvBaseline(tokens=None, fingerprint="fp"),
    ev.LoadActivity(container_id="c1", cpu_s=12.5, io_bytes=4 << 20),
    ev.LoadActivity(container_id="c1", cpu_s=None, io_bytes=None),
    ev.LoadHistory(fingerprint="fp", times=(600.0, 720.0)),
    ev.LoadHistory(fingerprint=None),
    ev.LogProgress(pct=50.0, phase="weights"),
    ev.LogProgress(pct=None, phase=""),
    ev.LogReady(),
    ev.LogKvPool(tokens=557_599, max_concurrency=2.1),
    ev.LogKvPool(tokens=557_599, max_concurrency=None, kv_gib=26.3, model_gib=17.3),
    ev.LogKvPool(tokens=None, max_concurrency=None),
    ev.LogStartupFailure(outcome="failed_oom", detail="CUDA OOM"),
    ev.LogEngineDead(detail="EngineCore died"),
    ev.MemoryPressure(detail="MemAvailable 4.0 GiB < 6 GiB for 5 consecutive samples"),
    ev.LogMarker(name="mamba", forbidden=False),
    ev.LogMarker(name="errno=22", forbidden=True),
    ev.ContainerExited(exit_code=0, signal=None, oom_killed=False),
    ev.ContainerExited(exit_code=143, signal="SIGTERM", oom_killed=False),
    ev.ContainerExited(exit_code=137, signal=None, oom_killed=True, container_id="c1"),
    ev.ContainerExited(exit_code=1, signal=None, oom_killed=False, container_id="zz"),
    ev.ContainerStopped(),
    ev.ExternalStopChecked(engine_restarting=True),
    ev.ExternalStopChecked(engine_restarting=False),
    ev.DockerAnswered(ok=True, was_down=True),
    ev.DockerAnswered(ok=True, was_down=False),
    ev.DockerAnswered(ok=False, was_down=True),
    ev.ContainerSignalled("15", "c1"),
    ev.ContainerSignalled("9", "c1"),
    ev.DockerLink(False, "c1"),
    ev.DockerLink(True, "c1"),
    ev.HealthResult(ok=True, status=200, latency_ms=2.0, error=None),
    ev.HealthResult(ok=False, status=None, latency_ms=2.0, error="refused"),
    ev.ProbeRound(True, 200, True, 40.0, None, 0.0, 0.0, 10.0),
    ev.ProbeRound(False, None, None, None, "refused", None, None, None),
    ev.ProbeRound(True, 200, False, None, "timeout", 3.0, 1.0, 10.0),
    ev.GenerationDone(ok=True, latency_ms=40.0, error=None),
    ev.GenerationDone(ok=False, latency_ms=None, error="read timeout"),
    ev.FirstGeneration(ok=True, latency_ms=90.0, error=None),
    ev.FirstGeneration(ok=False, latency_ms=None, error="0 tokens"),
    ev.SmokeChecked(results=(GateResult("g", "tool_call", True, "tool calls: get_weather", 3.0),)),
    ev.SmokeChecked(results=(GateResult("g", "tool_call", False, "tool calls: none"),)),
    ev.SmokeChecked(results=(GateResult("w", "degeneration", False, "share 0.99", None, 0.99),)),
    ev.SmokeChecked(results=()),
    ev.AuthResult(status="enforced"),
    ev.AuthResult(status="open"),
    ev.AuthResult(status="unknown"),
    ev.AuthResult(status="weird"),
    ev.AuthResult(status="open", url="http://127.0.0.1:8000"),
    ev.KeyFileChecked(differs=False),
    ev.KeyFileChecked(differs=True, key_id="0123456789ab"),
    ev.KeyFileChecked(differs=True),
    ev.DrainProgress(requests_running=0.0),
    ev.DrainProgress(requests_running=None),
    ev.ConfigReloaded(),
    ev.DriftChecked(container_id="c1", fields=("image", "env"), detail="image: profile 'a', container 'b'"),
    ev.DriftChecked(container_id="c1"),
    ev.DriftChecked(container_id="c2", fields=("env",)),
    ev.DriftChecked(container_id="c1", error="Docker engine did not answer"),
    ev.HandoverRequested(to="other"),
    ev.LastGoodSaved(fingerprint="fp"),
    ev.ContainerStartFailed(error="no such image", fingerprint="fp2"),
    ev.AdoptedMarkers(
        container_id="c1", missing=("MADV 3/16",), forbidden=("errno=22",), complete=True, lines=9
    ),
    ev.StackRead(container_id="c1", error="py-spy is not installed"),
]


def _snapshots() -> dict[str, ProfileState]:
    """One or more reachable snapshots of every state."""
    out: dict[str, ProfileState] = {"STOPPED-initial": ProfileState.initial("p", 0.0)}
    d = Driver(policy=policy(api_key_configured=True, watch_key_file=True, markers={"expected": ("mamba",)}))
    fresh_boot(d)
    out["PREFLIGHT"] = d.s
    d.send(ev.PreflightDone(ok=True, detail="", mem_available_gib=90.0))
    out["WAITING"] = d.s
    d.send(ev.SlotAcquired())
    out["WAITING-settling"] = d.s
    d.send(ev.Settled(ok=True, detail="", mem_available_gib=90.0))
    out["STARTING-no-container"] = d.s
    d.send(ev.ContainerStarted("c1"))
    out["STARTING"] = d.s
    d.send(ev.LogMarker(name="mamba", forbidden=False))
    d.send(ev.LogReady())
    out["STARTING-ready"] = d.s
    d.send(OK_HEALTH)
    out["STARTING-first-gen"] = d.s
    d.send(ev.FirstGeneration(ok=True, latency_ms=1.0, error=None))
    out["RUNNING"] = d.s
    d.advance(15)  # one probe interval: a round is out
    d.send(ev.ProbeRound(False, None, None, None, "x", None, None, None))
    out["DEGRADED"] = d.s
    d.send(ev.RestartRequested())  # a sick engine is not drained
    out["STOPPING-restart-undrained"] = d.s
    d.s = out["RUNNING"]
    d.send(ev.RestartRequested())
    out["DRAINING"] = d.s
    d.send(ev.DrainProgress(requests_running=0.0))
    out["STOPPING-restart"] = d.s
    d.send(ev.ContainerStopped())
    d.s = out["RUNNING"]
    d.send(ev.MaintenanceRequested())
    out["MAINTENANCE"] = d.s
    d.s = out["RUNNING"]
    d.send(ev.LogEngineDead(detail="x"))
    out["STOPPING-emergency"] = d.s
    d.s = out["STARTING"]
    d.send(ev.StopRequested())
    out["STOPPING-stop"] = d.s
    d.send(ev.ContainerStopped())
    out["STOPPED-manual"] = d.s
    d.s = out["STARTING"]
    d.send(ev.ContainerExited(exit_code=1, signal=None, oom_killed=False))
    out["BACKOFF"] = d.s
    d.s = out["STARTING"]
    d.policy = policy(breaker={"limit": 1})
    d.send(ev.ContainerExited(exit_code=1, signal=None, oom_killed=False))
    out["FATAL"] = d.s
    a = Driver()
    a.send(ev.DaemonStarted(boot_changed=False))
    out["STOPPED-booting"] = a.s
    a.send(ev.ContainerObserved(container_id="c1", running=True, exit_code=None))
    out["STARTING-adopted"] = a.s
    g = Driver(policy=policy(smoke_gates=(GateSpec("g", "tool_call", "fail"),)))
    fresh_boot(g)
    g.to_starting()
    g.send(ev.LogReady())
    g.send(OK_HEALTH)
    g.send(ev.FirstGeneration(ok=True, latency_ms=1.0, error=None))
    assert g.s.load.smoke_sent
    out["STARTING-smoke"] = g.s
    k = Driver(policy=policy(kv_pool={"min_tokens": 900_000}))
    fresh_boot(k)
    k.send(ev.PreflightDone(ok=True, detail="", mem_available_gib=90.0))
    k.send(ev.SlotAcquired())
    k.send(ev.Settled(ok=True, detail="", mem_available_gib=90.0))
    k.send(ev.ContainerStarted("c1", 1.0, image_id="sha256:aa", fingerprint="fp", gmu=0.73))
    out["STARTING-fingerprint"] = k.s
    k.send(ev.KvBaseline(tokens=1_013_816, fingerprint="fp"))
    out["STARTING-baseline"] = k.s
    k.send(ev.LogKvPool(tokens=557_599, max_concurrency=None))
    assert (k.s.state, k.s.pending) == (State.STOPPING, "redraw")
    out["STOPPING-redraw"] = k.s
    return out


SNAPSHOTS = _snapshots()

#: (state, event type) pairs that must be ignored outright: late or duplicate answers.
_IGNORED: dict[type, frozenset[State]] = {
    ev.PreflightDone: frozenset(State) - {State.PREFLIGHT},
    ev.Settled: frozenset(State) - {State.WAITING},
    hev.ReserveMeasured: frozenset(State) - {State.RUNNING, State.DEGRADED},
    hev.KernelReport: frozenset({State.STOPPED, State.FATAL, State.BACKOFF, State.PREFLIGHT, State.WAITING}),
    ev.ContainerStartFailed: frozenset(State) - {State.STARTING},
    ev.LogProgress: frozenset(State) - {State.STARTING},
    ev.LogReady: frozenset(State) - {State.STARTING},
    ev.LogStartupFailure: frozenset(State) - {State.STARTING},
    ev.HealthResult: frozenset(State) - {State.STARTING},
    ev.FirstGeneration: frozenset(State) - {State.STARTING},
    ev.SmokeChecked: frozenset(State) - {State.STARTING},
    ev.ProbeRound: frozenset(State)
    - {State.RUNNING, State.DEGRADED, State.DRAINING, State.MAINTENANCE}
    - {State.STOPPING},
    ev.DrainProgress: frozenset(State) - {State.DRAINING, State.MAINTENANCE},
    ev.ContainerStopped: frozenset(State) - {State.STOPPING},
    ev.ContainerExited: frozenset(
        {State.STOPPED, State.FATAL, State.BACKOFF, State.PREFLIGHT, State.WAITING}
    ),
    ev.LogEngineDead: frozenset({State.STOPPED, State.FATAL, State.BACKOFF, State.PREFLIGHT, State.WAITING}),
    ev.MemoryPressure: frozenset({State.STOPPED, State.FATAL, State.BACKOFF, State.PREFLIGHT, State.WAITING}),
    ev.LoadActivity: frozenset(State) - {State.STARTING},
    ev.LoadHistory: frozenset(State) - {State.STARTING},
    ev.AdoptedMarkers: frozenset(
        {State.STOPPED, State.FATAL, State.BACKOFF, State.PREFLIGHT, State.WAITING, State.STOPPING}
    ),
    ev.StackRead: frozenset(State),  # no stuck engine waits for it in any snapshot
}


def test_snapshots_cover_every_state() -> None:
    """The table's snapshots reach every state of the contract."""
    assert {s.state for s in SNAPSHOTS.values()} == set(State)


def test_events_cover_every_event_type() -> None:
    """The table lists at least one instance of every event type."""
    assert {type(e) for e in EVENTS} == set(typing.get_args(Event))


@pytest.mark.parametrize("label", sorted(SNAPSHOTS))
def test_every_event_in_every_state(label: str) -> None:
    """Each event is either a defined transition or ignored; invariants hold; nothing raises."""
    snapshot = SNAPSHOTS[label]
    for event in EVENTS:
        for now in (snapshot.since + 1.0, snapshot.since + 100_000.0, snapshot.since - 86_400.0):
            new, actions = step(snapshot, event, now, policy(api_key_configured=True, watch_key_file=True))
            where = f"{label} x {event!r} @ {now - snapshot.since:+}"
            assert isinstance(new.state, State), where
            assert all(isinstance(a, _ACTION_TYPES) for a in actions), where
            ignored_in = _IGNORED.get(type(event), frozenset())
            if snapshot.state in ignored_in:
                assert (new, actions) == (snapshot, []), where
            replies = [a for a in actions if isinstance(a, Reply)]
            assert len(replies) == (1 if isinstance(event, ev.OPERATOR_EVENTS) else 0), where
            changes = [a for a in actions if isinstance(a, Emit) and a.name == "state.changed"]
            if new.state != snapshot.state:
                assert changes, where
                assert changes[-1].fields["new"] == new.state.value, where
            for a in actions:
                if isinstance(a, Emit):
                    json.dumps(a.fields)
            assert ProfileState.from_dict(json.loads(json.dumps(new.to_dict()))) == new, where
            if isinstance(event, ev.Tick) and new.state == State.BACKOFF and new.backoff.retry_at is not None:
                # after a Tick, a wait is never longer than its cap (even if the clock stepped back)
                assert new.backoff.retry_at - now <= policy().backoff.max_s, where


def test_ignored_event_is_identity() -> None:
    """A late first-generation answer while RUNNING changes nothing."""
    s = SNAPSHOTS["RUNNING"]
    assert step(s, ev.FirstGeneration(ok=False, latency_ms=None, error="x"), s.since + 5, policy()) == (s, [])
