"""The state machine of one profile: ``step(state, event, now, policy) -> (state, actions)``.

Pure and total: no I/O, no clock reads; every (state, event) pair either yields a defined transition
or is ignored (same state, no actions). The branches live in small modules by concern:

* ``machine.start``: PREFLIGHT -> WAITING (slot, settle) -> STARTING, and its failures
* ``machine.ready``: a loaded server's first generation -> RUNNING (or DEGRADED when adopted)
* ``machine.probe``: RUNNING/DEGRADED: probe schedule, probe rounds (saturation, stall), emergency stop
* ``machine.commands``: operator commands and the drain; ``machine.exits``: stops and exits;
  ``machine.boot``: daemon start and adoption; ``machine.retry``: the BACKOFF and FATAL timers
* ``machine.host``: kernel-log events, /dev/shm sweep, memory reserve, what a stopped container left
* ``machine.smoke``: the smoke gates' verdict before RUNNING
* ``machine.auth``: is the port guarded, does the running server still have the configured key
* ``machine.external``: a stop the daemon did not send (``docker stop``, dockerd going down)
* ``machine.last_good``: which spec a start creates, saving a good one, forgetting a rollback
* ``machine.loads``: a load's CPU/IO activity (progress while the log is silent), its ETA, a slow load
* ``machine.lottery``: the KV-pool lottery: a start's identity, baseline, verdict and redraws
* ``machine.notices``: the alerts that raise or resolve a condition, shared by the others
* ``machine.reload``: a reloaded profile and the drift of its container (never a bounce)
* ``machine.seat``: another profile of this profile's seat starts, so this one makes way
* ``machine.winddown``: probes while draining and stopping, a stop escalated to a kill
* ``machine.kill``: a kill with no grace (kernel memory errors, the hard memory floor)
* ``machine.diagnosed``: a diagnosis that arrives after the exit (a configuration error latches the breaker)

Shared by all: ``machine.builder`` (``Step``, the per-step builder) and ``machine.policy`` (``Policy``).
See docs/state-machine.md.
"""

from __future__ import annotations

from supervisor.core.actions import Action, ObserveContainer, ReleaseSlot
from supervisor.core.events import (
    AdoptedMarkers,
    AuthResult,
    ConfigReloaded,
    ContainerExited,
    ContainerInfo,
    ContainerObserved,
    ContainerSignalled,
    ContainerStarted,
    ContainerStartFailed,
    ContainerStopped,
    DaemonStarted,
    DockerAnswered,
    DockerLink,
    DrainProgress,
    DriftChecked,
    Event,
    ExternalStopChecked,
    FirstGeneration,
    GenerationDone,
    HandoverRequested,
    HealthResult,
    KeyFileChecked,
    KvBaseline,
    LastGoodSaved,
    LoadActivity,
    LoadHistory,
    LogEngineDead,
    LogKvPool,
    LogMarker,
    LogProgress,
    LogReady,
    LogStartupFailure,
    MaintenanceRequested,
    MemoryPressure,
    ObserveFailed,
    PreflightDone,
    ProbeRound,
    ResetRequested,
    RestartRequested,
    Settled,
    SlotAcquired,
    SmokeChecked,
    StackRead,
    StartDiagnosed,
    StartRequested,
    StopRequested,
    Tick,
)
from supervisor.core.host_events import HardFloor, HostAfterStop, KernelReport, ReserveMeasured, ShmSwept
from supervisor.core.machine import (
    auth as auth,
    boot as boot,
    commands as commands,
    diagnosed as diagnosed,
    exits as exits,
    external as external,
    host as host,
    kill as kill,
    last_good as last_good,
    loads as loads,
    lottery as lottery,
    markers as markers,
    probe as probe,
    ready as ready,
    reload as reload,
    retry as retry,
    seat as seat,
    smoke as smoke,
    start as start,
    winddown as winddown,
)
from supervisor.core.machine.builder import Step
from supervisor.core.machine.policy import Policy
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import (
    CONTAINER_STATES,
    CONTAINER_UP_STATES,
    DRAIN_STATES,
    SERVING_STATES,
    State,
)
from supervisor.core.vocab import Outcome, Pending

__all__ = ["Policy", "step"]

_SERVING = SERVING_STATES
_DRAIN = DRAIN_STATES
_UP = CONTAINER_UP_STATES


def step(state: ProfileState, event: Event, now: float, policy: Policy) -> tuple[ProfileState, list[Action]]:
    """Apply one event at wall time ``now``; return the new snapshot and the actions to execute."""
    c = Step(state, now, policy)
    _dispatch(c, event)
    lottery.pin_next_start(c)  # kv_pool.pin apply: the create carries --kv-cache-memory-bytes
    check = host.after_stop(state, c.s, policy)
    if check is not None:
        c.do(check)  # whatever made our container go away: look at what it left behind
    return c.s, c.actions


def _dispatch(c: Step, ev: Event) -> None:
    st = c.s.state
    match ev:
        case Tick() if c.s.booting:
            # the container has not been observed yet (Docker silent): no deadline, no probe; look again
            c.do(ObserveContainer())
        case Tick():
            _tick(c)
        case StartRequested():
            commands.on_start(c)
            last_good.forget_rollback(c, "operator start")
        case StopRequested():
            commands.on_stop(c)
        case RestartRequested():
            commands.on_restart(c)
        case MaintenanceRequested():
            commands.on_restart(c, maintenance=True)
        case ResetRequested():
            commands.on_reset(c, ev)
            last_good.forget_rollback(c, "operator reset")
        case HandoverRequested():
            seat.on_handover(c, ev)
        case LastGoodSaved():
            last_good.on_saved(c, ev)
        case DaemonStarted():
            boot.on_daemon_started(c, ev)
        case ContainerObserved():
            boot.on_observed(c, ev)
        case ObserveFailed() if c.s.booting:
            boot.on_observe_failed(c, ev)
        case ContainerInfo() if ev.container_id == c.s.container_id:
            c.set(container_started_at=ev.started_at)
        case ConfigReloaded():
            reload.on_config_reloaded(c)
        case DriftChecked():
            reload.on_drift_checked(c, ev)
        case StartDiagnosed():
            diagnosed.on_start_diagnosed(c, ev)
        case KvBaseline():
            lottery.on_kv_baseline(c, ev)
        case PreflightDone() if st == State.PREFLIGHT:
            start.on_preflight_done(c, ev)
        case SlotAcquired() if st == State.WAITING and not c.s.slot_held:
            start.on_slot_acquired(c)
        case SlotAcquired() if st == State.WAITING:
            pass  # a repeated grant while settling: the slot is already ours
        case Settled() if st == State.WAITING and c.s.slot_held:
            start.on_settled(c, ev)
        case ShmSwept():
            host.on_shm_swept(c, ev)
        case KernelReport():
            host.on_kernel(c, ev)
        case HardFloor():
            kill.on_hard_floor(c, ev)
        case ReserveMeasured() if st in _SERVING:
            host.on_reserve(c, ev)
        case HostAfterStop():
            host.on_host_after_stop(c, ev)
        case SlotAcquired() if st == State.STARTING and c.s.adopted and not c.s.slot_held:
            c.set(slot_held=True)  # an adopted load in progress: other profiles' loads wait for it
        case SlotAcquired():
            c.do(ReleaseSlot())  # granted too late: give it back at once
        case ContainerStarted() if st == State.STARTING and c.s.container_id is None:
            start.on_container_started(c, ev)
        case ContainerStarted() if ev.container_id != c.s.container_id:
            exits.on_unwanted_container(c, ev.container_id)
        case ContainerStartFailed() if st == State.STARTING and c.s.container_id is None and ev.transient:
            external.on_start_deferred(c, ev)
        case ContainerStartFailed() if st == State.STARTING and c.s.container_id is None:
            start.on_start_failed(c, ev)
        case LogProgress() if st == State.STARTING:
            start.on_log_progress(c, ev)
        case LogKvPool() if st in _UP or (st == State.STOPPING and c.s.pending == Pending.REDRAW):
            lottery.on_kv_pool(c, ev)  # (a redrawn start's second pool line still goes to its ledger row)
        case LogReady() if st == State.STARTING:
            start.on_log_ready(c, ev)
            lottery.report(c)  # a pool still waiting for an "Actual usage" line vLLM did not print
        case LogStartupFailure() if st == State.STARTING:
            start.on_startup_failure(c, ev)
        case LogEngineDead() if st == State.STARTING:
            start.on_engine_dead_starting(c, ev)
        case LogEngineDead() if st in _SERVING:
            probe.on_engine_dead_serving(c, ev)
        case LogEngineDead() if st in _DRAIN:
            # DRAINING/MAINTENANCE -> STOPPING: nothing left to drain
            c.emit("engine.dead", detail=ev.detail)
            c.stop(c.s.pending or Pending.RESTART, c.s.pending or Pending.RESTART)
        case MemoryPressure() if st == State.STARTING:
            # STARTING -> STOPPING (failed_start): the load would freeze the host
            c.emit("memory.pressure", detail=ev.detail)
            start.start_failed_stop(c, Outcome.FAILED_MEMORY_GUARD, "memory guard", ev.detail)
        case MemoryPressure() if st == State.STOPPING:
            winddown.escalate(c, f"memory guard: {ev.detail}")  # a planned grace left: SIGKILL now
        case MemoryPressure() if st in _SERVING | _DRAIN:
            # RUNNING/DEGRADED/DRAINING/MAINTENANCE -> STOPPING (emergency)
            c.emit("memory.pressure", detail=ev.detail)
            probe.emergency(c, f"memory guard: {ev.detail}")
        case LogMarker() if st == State.STARTING:
            start.on_marker_starting(c, ev)
        case LogMarker() if st in _SERVING:
            probe.on_marker_serving(c, ev)
        case AdoptedMarkers() if st in _UP:
            markers.on_adopted_markers(c, ev)
        case ContainerExited() if st in CONTAINER_STATES:
            exits.on_exited(c, ev)
        case ContainerSignalled() if ev.container_id == c.s.container_id:
            external.on_signalled(c, ev)
        case DockerLink() if ev.container_id == c.s.container_id:
            external.on_docker_link(c, ev)
        case ExternalStopChecked():
            external.on_external_stop_checked(c, ev)
        case DockerAnswered() if st == State.BACKOFF:
            external.on_docker_answered(c, ev)
        case ContainerStopped() if st == State.STOPPING:
            exits.on_stopped(c)
        case HealthResult() if st == State.STARTING:
            start.on_health(c, ev)
        case ProbeRound() if st in _SERVING | _DRAIN:
            probe.on_probe_round(c, ev)  # a drain is watched as serving is: its emergency ends the drain
        case ProbeRound() if st == State.STOPPING:
            winddown.on_round_stopping(c, ev)
        case GenerationDone() if st in _SERVING | _DRAIN:
            probe.on_generation_done(c, ev)
        case StackRead() if st in _SERVING | _DRAIN:
            probe.on_stack_read(c, ev)
        case FirstGeneration() if st == State.STARTING:
            ready.on_first_generation(c, ev)
            lottery.report(c)  # ready on /health alone (no ready line): judged once serving
        case SmokeChecked() if st == State.STARTING:
            smoke.on_smoke_checked(c, ev)
        case AuthResult() if st in _UP:
            auth.on_auth(c, ev)
        case KeyFileChecked() if st in _SERVING:
            auth.on_key_file_checked(c, ev)
        case DrainProgress() if st in _DRAIN:
            commands.on_drain_progress(c, ev)
        case LoadActivity() if st == State.STARTING:
            loads.on_load_activity(c, ev)
            start.judge_silence(c)  # a sample after the silence window that saw nothing move ends the load
        case LoadHistory():
            loads.on_load_history(c, ev)
        case _:
            pass  # a duplicate or late event in this state: ignored on purpose


def _tick(c: Step) -> None:
    st = c.s.state
    if st in _SERVING | _DRAIN:
        probe.tick_stuck(c)  # a stuck engine's stop waited its longest for the stack
        st = c.s.state
    if st == State.STARTING:
        start.tick_starting(c)
    elif st in _SERVING:
        probe.tick_serving(c)
        reload.tick_drift(c)
    elif st in _DRAIN:
        commands.tick_draining(c)
    elif st == State.STOPPING:
        exits.tick_stopping(c)
    elif st == State.BACKOFF:
        retry.tick_backoff(c)
    elif st == State.FATAL:
        retry.tick_fatal(c)
    elif st == State.WAITING:
        start.tick_waiting(c)
    # STOPPED, PREFLIGHT: nothing is timed here (the preflight job bounds its own waits)
