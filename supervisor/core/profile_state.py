"""Frozen snapshot of one supervised profile: what the machine decides on and what is persisted.

``to_dict()`` / ``from_dict()`` are JSON-safe; ``from_dict`` tolerates missing keys (older files) and
raises :class:`StateError` on wrong types. ``status_dict()`` gives docs/contract.md's per-profile status keys.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields
from typing import Any

from supervisor.core import loadtime
from supervisor.core.backoff import Backoff
from supervisor.core.breaker import Breaker
from supervisor.core.errors import StateError
from supervisor.core.host_events import KernelRecord as KernelRecord
from supervisor.core.log_events import RootCause as RootCause
from supervisor.core.probe_events import GateRecord as GateRecord
from supervisor.core.record_codec import (
    check_field,
    flat_from_dict,
    flat_to_dict,
    gather_flat,
    records_from_list,
)
from supervisor.core.states import CONTAINER_STATES, State
from supervisor.core.vocab import Intent, Pending

__all__ = ["GateRecord", "KernelRecord", "KvDraw", "LastProbe", "Load", "ProfileState", "Stall"]


@dataclass(frozen=True)
class LastProbe:
    """The last liveness verdict."""

    ok: bool | None = None
    latency_ms: float | None = None
    at: float | None = None


@dataclass(frozen=True)
class Load:
    """One start attempt in progress (STARTING)."""

    started_at: float | None = None
    deadline: float | None = None  # hard cap
    last_progress_at: float | None = None
    silence_s: float = 0.0  # fail when no progress for this long (before ready)
    pct: float | None = None
    phase: str = ""
    ready_seen: bool = False
    health_ok: bool = False
    first_gen_sent: bool = False
    first_gen_failures: int = 0
    smoke_sent: bool = False  # the smoke gates were asked for (after the first generation)
    first_gen_ms: float | None = None  # the first generation's latency (start.ready once the gates pass)
    next_health_at: float | None = None
    failure_outcome: str | None = None
    failure_detail: str = ""
    mem_available_gib: float | None = None
    markers_seen: tuple[str, ...] = ()
    # load activity and history (docs/state-machine.md "Load activity")
    sampled_cpu_s: float | None = None  # the last CPU/IO sample of the container (LoadActivity)
    sampled_io_bytes: int | None = None
    sampled_at: float | None = None
    next_sample_at: float | None = None
    activity: str = ""  # what kept the silence window open last: log, cpu, io, cpu+io, health
    # the /health a silence verdict asks first (machine/start.judge_silence): asked at, answered not ok at
    silence_health_asked_at: float | None = None
    silence_health_failed_at: float | None = None
    load_times: tuple[float, ...] = ()  # earlier ready starts' load times (s, newest first; ledger)
    slow_alerted: bool = False
    # an adopted container that did not answer /health yet was still loading: its start gets its ledger row
    adopted_loading: bool = False
    settle_since: float | None = None  # the settle job (memory floor wait) runs since then (status)


@dataclass(frozen=True)
class Stall:
    """Forward-progress tracking over probe rounds (docs/state-machine.md "Liveness").

    ``last_*``: the previous round's readings; ``work_since``: first round with work present (requests
    running or waiting, or our canary pending) since the engine was last idle; ``progress_at``: last round
    any progress signal moved (the CPU time included); ``counters_at``: last round a /metrics counter
    moved (the CPU aside: a step ended);
    ``verdict``/``signal``: the current judgement and what it rests on (``supervisorctl status``)."""

    last_tokens: float | None = None
    last_running: float | None = None
    since: float | None = None
    last_round_at: float | None = None
    last_prompt: float | None = None
    last_iterations: float | None = None
    last_kv: float | None = None
    last_cpu: float | None = None
    last_preemptions: float | None = None
    last_gpu_w: float | None = None  # the GPU's power draw at the last round (W; None: not reported)
    gpu_idle_w: float | None = None  # ... at the last round with no work (a reference, never a decision)
    gpu_busy_w: float | None = None  # ... at the last round a step ended
    last_waiting: float | None = None
    work_since: float | None = None
    rate_since: float | None = None  # a prefill-rate sample times from here
    health_failing_since: float | None = None  # first round of /health failing in a row
    progress_at: float | None = None
    counters_at: float | None = None
    prompt_at_work: float | None = None  # prompt_tokens_total when work began (a rate sample's base)
    lone: bool = True  # at most one request running and none waiting in every round since work began
    step_cpu: float | None = None  # the container's CPU time when the current step began (its budget)
    stepped: bool = False  # this container's engine ended a step (its first, which may compile, is behind it)
    verdict: str = "unknown"  # idle | busy | waiting | stuck | unknown
    signal: str = ""


@dataclass(frozen=True)
class KvDraw:
    """The KV-pool lottery of the current start (docs/kv-pool.md): the pool it drew, the baseline of its
    config (the earlier draws in the ledger), whether it was judged, the redraws and the pin."""

    # this start's draw (reset by every start attempt: :meth:`fresh`)
    tokens: int | None = None
    max_concurrency: float | None = None
    gib: float | None = None  # "Available KV cache memory" of this start
    model_gib: float | None = None  # "Model loading took X GiB" of this start
    usage: tuple[tuple[str, float], ...] = ()  # vLLM's "Actual usage" breakdown of this start (GiB)
    fingerprint: str | None = None  # config fingerprint of this start
    image_id: str | None = None  # Docker image id this start runs
    gmu: float | None = None  # --gpu-memory-utilization of this start
    judged: bool = False  # this start's pool was compared with its baseline (or redrawn)
    # the baseline: the earlier draws of this config (ledger)
    baseline_tokens: int | None = None  # best pool of the newest earlier starts of this config
    baseline_for: str | None = None  # the fingerprint baseline_tokens was computed for
    recent: tuple[int, ...] = ()  # those earlier draws, newest first (the bad ones in a row)
    best_usage: tuple[tuple[str, float], ...] = ()  # the "Actual usage" of the best earlier draw
    best_gib: float | None = None  # "Available KV cache memory" of the best earlier draw
    # across starts
    redraws: int = 0  # KV-pool redraws in a row just before the current start
    pin_bytes: int | None = None  # kv_pool.pin apply: --kv-cache-memory-bytes for the next starts
    pin_running: bool = False  # the current container was created with pin_bytes

    def fresh(self) -> KvDraw:
        """The record of a new start attempt: its draw and baseline unknown; the earlier draws, the redraws
        in a row and the pin kept."""
        return KvDraw(
            recent=self.recent, redraws=self.redraws, pin_bytes=self.pin_bytes, pin_running=self.pin_running
        )


#: Older state files kept these values as flat ``kv_*`` / ``kernel_*`` keys (tests/fixtures/state/).
_FLAT_GROUPS: dict[str, type] = {"kv": KvDraw, "kernel": KernelRecord}


@dataclass(frozen=True)
class ProfileState:
    """Everything the machine knows about one profile."""

    name: str
    state: State = State.STOPPED
    since: float = 0.0
    intent: Intent = Intent.RUN
    container_id: str | None = None
    adopted: bool = False
    breaker: Breaker = field(default_factory=Breaker)
    backoff: Backoff = field(default_factory=Backoff)
    restarts: int = 0
    emergencies: int = 0
    consecutive_failures: int = 0
    last_probe: LastProbe = field(default_factory=LastProbe)
    load: Load = field(default_factory=Load)
    stall: Stall = field(default_factory=Stall)
    kv: KvDraw = field(default_factory=KvDraw)  # the KV-pool lottery of the current start (docs/kv-pool.md)
    kernel: KernelRecord = field(default_factory=KernelRecord)  # kernel lines seen and warned about lately
    healthy_since: float | None = None
    auth: str | None = None
    pending: Pending | None = None  # what happens after the stop completes
    next_probe_at: float | None = None
    slot_held: bool = False
    last_reason: str = ""
    booting: bool = False  # DaemonStarted seen, ContainerObserved not yet
    fatal_alerted_at: float | None = None
    drain_deadline: float | None = None
    next_drain_poll_at: float | None = None
    stop_deadline: float | None = None
    recovering: bool = False  # a failure happened; alert "recovered" on the next RUNNING
    maintenance_run: bool = False  # the current start is a maintenance restart (smoke test)
    maintenance_kv_before: int | None = None  # the KV pool before the maintenance restart (for its alert)
    preflight_failures: int = 0
    container_created_at: float | None = None  # wall time our container was created (None: adopted)
    container_started_at: float | None = None  # wall time Docker says it started (uptime)
    last_diagnosis: str | None = None  # of the last failed start; cleared by a ready start
    #: A failed start's diagnosis is on its way since then (the retry waits for it: retry.tick_backoff).
    diagnosis_due_since: float | None = None
    observe_failed_at: float | None = None  # Docker last failed to answer the look at the container
    mem_before_start_gib: float | None = None  # MemAvailable before our current container was created
    start_attempts: int = 0  # start attempts begun (PREFLIGHT entries): `--wait` tells its start by it
    drift: tuple[str, ...] = ()  # fields in which the container differs from its profile (never bounced)
    gen_in_flight: bool = False  # a liveness generation has been sent and has not answered yet
    gen_pending_since: float | None = None  # first generation sent without an answer since the last ok one
    gen_pending_tokens: float | None = None  # generation_tokens_total when that pending period began
    running_spec: str = "profile"  # what the current (last) container was made from: profile|last_known_good
    last_good_fingerprint: str | None = None  # fingerprint of the last known good (None: none saved yet)
    last_good_next: bool = False  # a failing change was rolled back: the next start uses last known good
    changed_failures: int = 0  # failed starts in a row of a config differing from the last known good
    external_stop_unconfirmed: bool = False  # an outside SIGTERM: operator or dockerd shutdown? (being asked)
    outside_signal_at: float | None = None  # a stop signal we did not send was seen; its exit follows
    docker_lost_at: float | None = None  # the container's watch lost Docker (not answering) since then
    docker_back_at: float | None = None  # ... and had it again then (machine.external)
    gen_last_error: str | None = None  # why the last liveness generation failed (judged at the next round)
    smoke: tuple[GateRecord, ...] = ()  # the last result of each smoke gate (docs/operations.md)
    stuck_reason: str | None = None  # judged stuck; its stack is being read, the stop follows (stuck.py)
    stuck_until: float | None = None  # ... until then at most
    ready_at: float | None = None  # when the current container became ready (its warm-up counts from here)
    key_rotation_warned: str | None = None  # key id of the rotated key file already alerted about
    prefill_rates: tuple[float, ...] = ()  # learned prompt tokens/s of this config (newest last)
    prefill_rates_for: str | None = None  # the config fingerprint those rates were learned for
    next_drift_check_at: float | None = None  # when a serving container is next compared with its profile
    #: The root-cause line of the last failed start (None: none, or a host-dependent one; cleared by a ready
    #: start and by reset): the same line again opens the breaker (core/vllm/root_cause.py).
    last_cause: RootCause | None = None
    last_death: RootCause | None = None  # the root-cause line of the last engine death while serving
    probe_rounds: int = 0  # liveness rounds this daemon judged for the profile (from 0 at each daemon start)

    @classmethod
    def initial(
        cls, name: str, now: float, breaker_limit: int = 3, breaker_window_s: float = 7200.0
    ) -> ProfileState:
        """A never-started profile (intent RUN; the daemon's start sequence decides what to do)."""
        return cls(name=name, since=now, breaker=Breaker(limit=breaker_limit, window_s=breaker_window_s))

    # --- persistence ---------------------------------------------------------------------------

    def retry_due(self, now: float) -> bool:
        """BACKOFF with its retry due by ``now`` (a run that served ended: retried at once): the loop ticks
        the profile then rather than at its next once-a-second tick."""
        retry_at = self.backoff.retry_at
        return (
            self.state == State.BACKOFF
            and self.intent == Intent.RUN
            and retry_at is not None
            and retry_at <= now
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of every field."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Breaker | Backoff):
                out[f.name] = value.to_dict()
            elif isinstance(value, LastProbe | Load | Stall | KvDraw | KernelRecord):
                out[f.name] = flat_to_dict(value)
            elif isinstance(value, State):
                out[f.name] = value.value
            elif f.name == "smoke":
                out[f.name] = [flat_to_dict(r) for r in self.smoke]
            elif isinstance(value, RootCause):
                out[f.name] = value.to_dict()
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: object) -> ProfileState:
        """Inverse of :meth:`to_dict`; missing keys take defaults, wrong types raise StateError."""
        if not isinstance(data, dict):
            raise StateError(f"profile state: expected an object, got {type(data).__name__}")
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise StateError("profile state: 'name' must be a non-empty string")
        raw_state = data.get("state", State.STOPPED.value)
        try:
            state = State(raw_state)
        except ValueError as exc:
            raise StateError(f"profile state {name}: unknown state {raw_state!r}") from exc
        kwargs: dict[str, Any] = {"name": name, "state": state}
        data = gather_flat(data, _FLAT_GROUPS)
        defaults = cls(name=name)
        for f in fields(cls):
            if f.name in ("name", "state") or f.name not in data:
                continue
            value = data[f.name]
            default = getattr(defaults, f.name)
            if isinstance(default, Breaker):
                kwargs[f.name] = Breaker.from_dict(value)
            elif isinstance(default, Backoff):
                kwargs[f.name] = Backoff.from_dict(value)
            elif isinstance(default, LastProbe | Load | Stall | KvDraw | KernelRecord):
                kwargs[f.name] = flat_from_dict(type(default), value, f"{name}.{f.name}")
            elif f.name == "smoke":
                kwargs[f.name] = records_from_list(GateRecord, value, f"{name}.smoke")
            elif f.name in ("last_cause", "last_death"):
                kwargs[f.name] = RootCause.from_dict(value)
            elif f.name == "intent":
                kwargs[f.name] = _intent(value, name)
            elif f.name == "pending":
                # a value a newer version wrote reads as None: the stop completes by intent
                kwargs[f.name] = Pending.parse(value)
            else:
                kwargs[f.name] = check_field(value, str(f.type), f"{name}.{f.name}")
        return cls(**kwargs)

    # --- status --------------------------------------------------------------------------------

    def status_dict(self, now: float) -> dict[str, Any]:
        """The docs/contract.md per-profile status fields (plus a few extras)."""
        return {
            "name": self.name,
            "state": self.state.value,
            "since": self.since,
            "container_id": self.container_id,
            "restarts": self.restarts,
            "breaker": {
                "state": "open" if self.breaker.is_open(now) else "closed",
                "emergencies": self.breaker.count(now),
                "window_s": self.breaker.window_s,
                "limit": self.breaker.limit,
            },
            "last_probe": {
                "ok": self.last_probe.ok,
                "latency_ms": self.last_probe.latency_ms,
                "at": self.last_probe.at,
            },
            "load_progress": {
                "pct": self.load.pct if self.state == State.STARTING else None,
                "phase": self.load.phase if self.state == State.STARTING else None,
                **self._load_eta(now),
            },
            "kv_pool": {
                "tokens": self.kv.tokens,
                "max_concurrency": self.kv.max_concurrency,
                "baseline_tokens": self.kv.baseline_tokens,
                "kv_gib": self.kv.gib,
                "fingerprint": self.kv.fingerprint,
                "redraws": self.kv.redraws,
                "usage": dict(self.kv.usage) or None,
                "pin": {"bytes": self.kv.pin_bytes, "running": self.kv.pin_running},
            },
            "uptime_s": (
                round(max(0.0, now - self.container_started_at), 1)
                if self.state in CONTAINER_STATES and self.container_started_at is not None
                else None
            ),
            "last_diagnosis": self.last_diagnosis,
            "memory_wait": (
                {
                    "since": self.load.settle_since,
                    "waited_s": round(max(0.0, now - self.load.settle_since), 1),
                }
                if self.state == State.WAITING and self.load.settle_since is not None
                else None
            ),
            "intent": self.intent,
            "adopted": self.adopted,
            "observed": not self.booting,  # False: as last recorded; Docker has not been asked yet
            "consecutive_failures": self.consecutive_failures,
            "emergencies_total": self.emergencies,
            "backoff": {"attempt": self.backoff.attempt, "retry_at": self.backoff.retry_at},
            "healthy_since": self.healthy_since,
            "auth": self.auth,
            "last_reason": self.last_reason,
            "start_attempts": self.start_attempts,
            "drift": list(self.drift),
            "running_spec": self.running_spec,
            "last_known_good": {
                "fingerprint": self.last_good_fingerprint,
                "next_start": self.last_good_next,
                "changed_failures": self.changed_failures,
            },
            "smoke": [flat_to_dict(r) for r in self.smoke],
            "liveness": {
                "verdict": self.stall.verdict,
                "signal": self.stall.signal,
                "progress_at": self.stall.progress_at,
                "work_since": self.stall.work_since,
                "prefill_rate": statistics.median(self.prefill_rates) if self.prefill_rates else None,
                "gpu_power_w": self.stall.last_gpu_w,  # recorded only (docs/state-machine.md)
                "rounds": self.probe_rounds,
            },
        }

    def _load_eta(self, now: float) -> dict[str, Any]:
        """While STARTING: the ETA from the config's median load time (None without history)."""
        ld, starting = self.load, self.state == State.STARTING
        median = loadtime.median_load_s(ld.load_times) if starting else None
        elapsed = max(0.0, now - ld.started_at) if ld.started_at is not None else None
        eta = loadtime.eta_s(median, elapsed)
        return {
            "eta_s": round(eta, 1) if eta is not None else None,
            "median_load_s": round(median, 1) if median is not None else None,
            "history_starts": len(ld.load_times) if starting else 0,
            "activity": ld.activity if starting else None,
        }


def _intent(value: object, name: str) -> Intent:
    try:
        return Intent(value if isinstance(value, str) else "")
    except ValueError as exc:
        raise StateError(f"profile state {name}: intent must be 'run' or 'stop'") from exc
