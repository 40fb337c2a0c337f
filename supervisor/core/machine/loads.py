"""STARTING: what counts as a load's progress besides its log, and what its history says.

- Activity: while the log is silent the container's CPU time and block IO are sampled
  (:class:`SampleLoad` -> :class:`LoadActivity`); a sample that moved (``activity.active``) extends the
  silence window like a log line, so a CPU-bound silent warm-up is not a hang, and a load with no log
  line, no CPU and no IO for ``startup.silence_timeout_s`` is (``start.tick_starting``).
- History: the load times of the earlier ready starts of the same config (:class:`LoadHistory`, read
  from the ledger with the KV baseline) give ``status`` its ETA and, past ``loadtime.SLOW_FACTOR`` x
  their median, one ``start.slow_load`` warning per start.

See docs/state-machine.md "Load activity".
"""

from __future__ import annotations

from supervisor.core import loadtime
from supervisor.core.actions import SampleLoad
from supervisor.core.clock import format_duration
from supervisor.core.events import LoadActivity, LoadHistory
from supervisor.core.machine.builder import Step
from supervisor.core.states import State
from supervisor.core.vllm import activity


def on_load_history(c: Step, ev: LoadHistory) -> None:
    """The load times of the current start's config: kept for the ETA and the slow-load check."""
    if ev.fingerprint is None or ev.fingerprint != c.s.kv.fingerprint or c.s.state != State.STARTING:
        return  # another start's answer, or the load is over
    if c.s.adopted:
        return  # its load began before the adoption: no elapsed time to compare
    c.set_load(load_times=tuple(ev.times))


def on_load_activity(c: Step, ev: LoadActivity) -> None:
    """STARTING: a CPU/IO sample; CPU or IO that moved since the last sample is loading progress."""
    ld = c.s.load
    if ev.container_id != c.s.container_id:
        return  # a sample of an earlier container
    same = ld.sampled_at is not None and ld.sampled_at <= c.now
    dt = c.now - ld.sampled_at if same and ld.sampled_at is not None else 0.0
    moved = (
        ()
        if not same
        else activity.active(
            ld.sampled_cpu_s,
            ev.cpu_s,
            ld.sampled_io_bytes,
            ev.io_bytes,
            dt,
            c.policy.probes.cpu_busy_cores,
            ev.thread_demand,
        )
    )
    c.set_load(sampled_cpu_s=ev.cpu_s, sampled_io_bytes=ev.io_bytes, sampled_at=c.now)
    if moved:
        what = "+".join(moved)
        if ld.activity != what:
            silent = c.now - ld.last_progress_at if ld.last_progress_at is not None else None
            c.emit("load.activity", signal=what, silent_s=silent, pct=ld.pct, phase=ld.phase)
        c.set_load(last_progress_at=c.now, activity=what)


def window_ran_out(c: Step) -> float | None:
    """Seconds since the load's last progress when its silence window ran out (None: it has not, or the load
    is past the point the window applies: ready line seen, first generation sent)."""
    ld = c.s.load
    last_progress = min(ld.last_progress_at if ld.last_progress_at is not None else c.now, c.now)
    silent = c.now - last_progress
    if ld.ready_seen or ld.first_gen_sent or not silent >= ld.silence_s > 0:
        return None
    return silent


def silence_seen(c: Step, last_progress: float) -> bool:
    """Whether a load's silence since ``last_progress`` was seen, not assumed: a CPU/IO sample answered
    after its window ended found nothing moving. The daemon itself can stall longer than a window (a
    starved or swapping host, a paused process); a clock that ran while nobody looked is no evidence that
    the load stopped working. No container yet (its create is in flight: a busy dockerd took 7.4 s in a CI
    run, an image pull takes minutes): no load to be silent, only ``startup.deadline_s`` bounds it."""
    ld = c.s.load
    if c.s.container_id is None:
        return False
    return ld.sampled_at is not None and ld.sampled_at >= last_progress + ld.silence_s


def tick(c: Step, sample_now: bool = False) -> None:
    """STARTING on Tick (before the health poll): sample CPU/IO while not ready (at once when the silence
    window ran out without a sample after it: ``sample_now``); warn once when slow."""
    ld = c.s.load
    cid = c.s.container_id
    every = activity.sample_every_s(ld.silence_s)
    due = ld.next_sample_at
    if due is not None and (due > c.now + every or sample_now):
        due = None  # the wall clock went back, or the silence verdict waits for this sample
    if cid is not None and not ld.ready_seen and (due is None or c.now >= due):
        c.set_load(next_sample_at=c.now + every)
        c.do(SampleLoad(cid))
    median = loadtime.median_load_s(ld.load_times)
    elapsed = c.load_s()
    if ld.slow_alerted or c.s.adopted or not loadtime.is_slow(median, elapsed):
        return
    assert median is not None
    assert elapsed is not None
    c.set_load(slow_alerted=True)
    n = len(ld.load_times)
    c.emit("load.slow", load_s=elapsed, median_load_s=median, starts=n, pct=ld.pct, phase=ld.phase)
    detail = f"loading for {format_duration(elapsed)}, median {format_duration(median)} over {n} starts"
    c.alert_kind(
        "warning",
        "start.slow_load",
        State.STARTING,
        State.STARTING,
        detail,
        elapsed=format_duration(elapsed),
        median=format_duration(median),
        starts=n,
    )
