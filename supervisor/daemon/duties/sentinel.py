"""The performance sentinel in the daemon: the loop schedules the canary, the pool runs it, the loop judges.

For each RUNNING profile with ``sentinel.enabled``: ``warmup_s`` after the run was first seen serving,
then every ``interval_s``, a pool job reads vLLM's /metrics gauges and sends the canary only when no
request is running or waiting (else it looks again ``busy_retry_s`` later: the canary never competes
with users nor measures their load). The answer (:class:`SentinelMeasured`) waits in the duty's own
queue until the loop's next tick applies it (the loop stays the only writer): the pure judgement
(core/perf/judge.py) decides, this module writes the perf ledger row, the history events
(``sentinel.sample`` / ``.slow`` / ``.recovered`` / ``.backend_changed`` / ``.restart``) and the alerts,
and returns the profiles that get a drained maintenance restart (``on_decay: restart``). Liveness is
never touched. See docs/sentinel.md.
"""

from __future__ import annotations

import queue
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.store.state import Store
from supervisor.adapters.vllm import probes
from supervisor.adapters.vllm.canary import run_canary
from supervisor.config import Profile
from supervisor.core import actions as A
from supervisor.core.alerts.localize import title_en
from supervisor.core.errors import StateError, SupervisorError
from supervisor.core.maintenance.duty import MaintenanceOrders
from supervisor.core.perf import judge
from supervisor.core.perf.counters import counters_from_text
from supervisor.core.perf.judge import PerfWatch, Sample
from supervisor.core.perf.view import figures, status_block
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.core.vllm.backends import backend_lines
from supervisor.core.vllm.metrics import VllmMetrics
from supervisor.core.vllm.signals import Ready, classify
from supervisor.daemon.executor.livekey import LiveKey
from supervisor.daemon.executor.records import Records

log = structlog.get_logger("supervisor.sentinel")

#: Runs ``fn(*args)`` on the executor's pool, one job of ``kind`` at a time (``Effects.background``).
Background = Callable[..., None]
#: Newest perf rows read for a run's baseline, and the earlier starts it keeps.
PERF_ROWS = 500
#: Perf ledger rows read at start-up for the last sentinel restart (6 h of canaries every 30 s is 720).
RESTART_SCAN_ROWS = 2000
HISTORY_STARTS = 10
#: The start's log is read for backend lines up to its ready line, at most this many lines.
MAX_LOG_LINES = 20000
METRICS_TIMEOUT_S = 10.0
#: Answers applied per tick at most (every loop bounded; one job per profile is in flight at a time).
MAX_ANSWERS = 64


@dataclass(frozen=True)
class SentinelMeasured:
    """One canary round of ``profile``'s container ``container_id``.

    ``busy``: the server had running or waiting requests (or /metrics did not answer): nothing sent.
    ``sample`` None and not busy: the canary failed (``error``). On a run's first round (``loaded``):
    ``history``, the per-start decode figures of earlier starts of this fingerprint, ``earlier_backends``
    the backends the newest of them logged, ``backends`` what this start logged.
    """

    profile: str
    container_id: str
    busy: bool = False
    sample: Sample | None = None
    error: str | None = None
    loaded: bool = False
    history: tuple[float, ...] = ()
    earlier_backends: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()


PostAnswer = Callable[[SentinelMeasured], None]


def history_of(
    rows: Sequence[Mapping[str, Any]], fingerprint: str | None, container_id: str
) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """Per-start decode figures of the earlier starts of ``fingerprint`` (oldest first, the newest
    ``HISTORY_STARTS``) and the backends the newest of them logged."""
    starts: dict[str, list[float]] = {}
    backends: dict[str, tuple[str, ...]] = {}
    for row in rows:
        cid = row.get("container_id")
        if not isinstance(cid, str) or cid == container_id or row.get("fingerprint") != fingerprint:
            continue
        tps = row.get("decode_tps")
        if isinstance(tps, int | float) and not row.get("slow"):
            starts.setdefault(cid, []).append(float(tps))
        if row.get("backends"):
            backends[cid] = tuple(str(b) for b in row["backends"])
    figures = [statistics.median(v) for v in starts.values() if v][-HISTORY_STARTS:]
    newest = list(backends.values())[-1] if backends else ()
    return tuple(figures), newest


def with_decode(
    starts: Sequence[Mapping[str, Any]], perf: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Start ledger rows with each start's median canary figures (``decode_tps``, ``ttft_ms``; None: no
    canary ran on that container): what `supervisorctl history` shows per start."""
    tps: dict[str, list[float]] = {}
    ttft: dict[str, list[float]] = {}
    for row in perf:
        cid = row.get("container_id")
        if isinstance(cid, str) and isinstance(row.get("decode_tps"), int | float):
            tps.setdefault(cid, []).append(float(row["decode_tps"]))
            if isinstance(row.get("ttft_ms"), int | float):
                ttft.setdefault(cid, []).append(float(row["ttft_ms"]))
    out = []
    for start in starts:
        cid = start.get("container_id")
        d, t = tps.get(cid or ""), ttft.get(cid or "")
        out.append(
            {
                **start,
                "decode_tps": round(statistics.median(d), 2) if d else None,
                "ttft_ms": round(statistics.median(t), 1) if t else None,
            }
        )
    return out


def _load_lines(docker: DockerAdapter, container_id: str) -> Iterator[str]:
    """The container's log up to its ready line (bounded)."""
    for i, line in enumerate(docker.logs(container_id)):
        yield line
        if i >= MAX_LOG_LINES or isinstance(classify(line), Ready):
            return


def canary_round(
    profile: Profile,
    container_id: str,
    first: bool,
    fingerprint: str | None,
    key: LiveKey,
    store: Store,
    docker: DockerAdapter,
    post: PostAnswer,
    now: Callable[[], float],
) -> None:
    """The pool job: idle check, canary, vLLM's counters; on a run's first round its history too."""
    name, s = profile.name, profile.sentinel
    loaded: dict[str, Any] = {}
    if first:
        try:
            rows = store.read_perf(name, n=PERF_ROWS)
        except StateError as exc:
            log.error("store.read_failed", what="perf", error=str(exc))
            rows = []
        history, earlier = history_of(rows, fingerprint, container_id)
        try:
            backends = backend_lines(_load_lines(docker, container_id))
        except SupervisorError as exc:
            log.warning("sentinel.log_unreadable", profile=name, error=str(exc))
            backends = ()
        loaded = {"loaded": True, "history": history, "earlier_backends": earlier, "backends": backends}
    mres, text = probes.fetch_metrics(profile.base_url, METRICS_TIMEOUT_S)
    m = VllmMetrics.from_text(text) if mres.ok else None
    if m is None or m.requests_running is None or m.requests_running > 0 or (m.requests_waiting or 0) > 0:
        post(SentinelMeasured(name, container_id, busy=True, **loaded))
        return
    model = profile.served_model_name or profile.container.name
    at = now()
    c = run_canary(
        profile.base_url, key.value(), model, prompt=s.prompt, max_tokens=s.max_tokens, timeout=s.timeout_s
    )
    if not c.ok or c.ttft_ms is None or c.decode_tps is None or c.tokens is None:
        post(SentinelMeasured(name, container_id, error=c.error or "failed", **loaded))
        return
    mres, text = probes.fetch_metrics(profile.base_url, METRICS_TIMEOUT_S)
    engine = counters_from_text(text) if mres.ok else counters_from_text("")
    sample = Sample(at, c.ttft_ms, c.decode_tps, c.tokens, engine.mtp_acceptance, engine.prefix_hit_rate)
    post(SentinelMeasured(name, container_id, sample=sample, **loaded))


class SentinelDuty:
    """The sentinel of every profile: schedule and judge (``tick``), report (``status``)."""

    def __init__(
        self,
        profiles: Sequence[Profile],
        store: Store,
        records: Records,
        docker: DockerAdapter,
        background: Background,
        now: Callable[[], float],
    ) -> None:
        self._store, self._records, self._docker = store, records, docker
        self._background, self._now = background, now
        self._answers: queue.Queue[SentinelMeasured] = queue.Queue()
        self._profiles: dict[str, Profile] = {}
        self._keys: dict[str, LiveKey] = {}
        self.watches: dict[str, PerfWatch] = {}
        self._configured: tuple[Profile, ...] = ()
        self.configure(profiles)

    def configure(self, profiles: Sequence[Profile]) -> None:
        """The profiles of the (re)loaded config; a kept profile keeps its watch."""
        self._configured = tuple(profiles)
        self._profiles = {p.name: p for p in profiles}
        for p in profiles:
            if p.name not in self.watches:  # the restart rate limit survives a daemon restart
                self.watches[p.name] = PerfWatch(last_restart_at=self._last_restart(p.name))
            key = self._keys.get(p.name)
            if key is None:
                self._keys[p.name] = LiveKey(self._docker, p.api_key, p.container)
            else:
                key.configure(p.api_key, p.container)
        for gone in set(self.watches) - set(self._profiles):
            del self.watches[gone]
            self._keys.pop(gone, None)

    def _last_restart(self, name: str) -> float | None:
        try:
            return judge.last_restart(self._store.read_perf(name, n=RESTART_SCAN_ROWS))
        except StateError as exc:
            log.error("store.read_failed", what="perf", error=str(exc))
            return None

    def post(self, answer: SentinelMeasured) -> None:
        """A pool job's answer (any thread): applied on the loop's next tick."""
        self._answers.put(answer)

    def tick(
        self, now: float, states: Mapping[str, ProfileState], profiles: Sequence[Profile]
    ) -> MaintenanceOrders:
        """On the loop: apply the answers, start the rounds that are due; the restarts to dispatch."""
        if tuple(profiles) != self._configured:
            self.configure(profiles)
        restarts: list[str] = []
        for _ in range(MAX_ANSWERS):
            try:
                answer = self._answers.get_nowait()
            except queue.Empty:
                break
            try:
                restarts += self.apply(answer, now)
            except Exception as exc:  # the sentinel never takes the daemon down
                log.exception("sentinel.crashed", profile=answer.profile, error=str(exc))
        for name, profile in self._profiles.items():
            st, w = states.get(name), self.watches[name]
            if not profile.sentinel.enabled or st is None or st.container_id is None:
                continue
            if st.state != State.RUNNING:
                continue
            if w.container_id != st.container_id:
                w = judge.fresh(w, st.container_id, st.kv_fingerprint, now)
                self._keys[name].watching(st.container_id)
            policy = profile.sentinel.policy()
            if judge.due(w, now, policy):
                w = judge.scheduled(w, now, policy)
                args = (profile, st.container_id, not w.history_loaded, st.kv_fingerprint, self._keys[name])
                self._background(
                    f"sentinel-{name}", canary_round, *args, self._store, self._docker, self.post, self._now
                )
            self.watches[name] = w
        return MaintenanceOrders(requests=tuple(n for n in restarts if n in self._profiles))

    def apply(self, ev: SentinelMeasured, now: float) -> list[str]:
        """One answer (on the loop); the profiles to give a drained maintenance restart."""
        profile, w = self._profiles.get(ev.profile), self.watches.get(ev.profile)
        if profile is None or w is None or ev.container_id != w.container_id:
            return []  # a late answer about an earlier container
        if ev.loaded:
            w = replace(w, history=ev.history, history_loaded=True, backends=ev.backends)
            self._backends(profile, ev)
        policy = profile.sentinel.policy()
        if ev.busy:
            self.watches[ev.profile] = judge.busy(w, now, profile.sentinel.busy_retry_s)
            return []
        if ev.sample is None:
            self.watches[ev.profile] = w
            self._records.emit(ev.profile, "sentinel.failed", {"error": ev.error})
            return []
        w, verdict = judge.observe(w, ev.sample, now, policy)
        self.watches[ev.profile] = w
        self._ledger(profile, w, ev.sample, verdict)
        return self._flip(profile, w, ev.sample, verdict)

    def _ledger(self, profile: Profile, w: PerfWatch, sample: Sample, verdict: judge.Verdict) -> None:
        row = {
            "profile": profile.name,
            "fingerprint": w.fingerprint,
            "container_id": w.container_id,
            **figures(sample),
            "baseline_tps": round(verdict.baseline, 2) if verdict.baseline is not None else None,
            "slow": verdict.slow_sample,
            "backends": list(w.backends) if w.samples == 1 else [],
            "restart": verdict.restart,
        }
        try:
            self._store.append_perf(row)
        except StateError as exc:
            log.error("store.write_failed", what="perf", error=str(exc))
        fields = {k: v for k, v in row.items() if k not in ("profile", "backends")}
        self._records.emit(profile.name, "sentinel.sample", fields)

    def _flip(self, profile: Profile, w: PerfWatch, sample: Sample, verdict: judge.Verdict) -> list[str]:
        name, container = profile.name, profile.container.name
        message = verdict.message(sample, w.slow_since)
        params = (("message", message),)
        if verdict.flip == "slow":
            self._records.emit(
                name, "sentinel.slow", {"message": message, "on_decay": profile.sentinel.on_decay}
            )
            alert = A.Alert(
                "warning", title_en("sentinel.slow", params), "RUNNING", "SLOW", message,
                kind="sentinel.slow", params=params, condition="sentinel",
            )  # fmt: skip
            self._records.alert(name, container, alert, None)
        elif verdict.flip == "recovered":
            self._records.emit(name, "sentinel.recovered", {"message": message})
            alert = A.Alert(
                "info", title_en("sentinel.back", params), "SLOW", "RUNNING", message,
                kind="sentinel.back", params=params, condition="sentinel", resolves=True,
            )  # fmt: skip
            self._records.alert(name, container, alert, None)
        if verdict.restart:
            self._records.emit(name, "sentinel.restart", {"message": message})
            return [name]
        return []

    def _backends(self, profile: Profile, ev: SentinelMeasured) -> None:
        changes = judge.backend_change([ev.earlier_backends], ev.backends)
        if not changes:
            return
        text = "; ".join(changes)
        self._records.emit(profile.name, "sentinel.backend_changed", {"changes": list(changes)})
        params = (("changes", text),)
        alert = A.Alert(
            "warning", title_en("sentinel.backend_changed", params), "RUNNING", "RUNNING", text,
            kind="sentinel.backend_changed", params=params,
        )  # fmt: skip
        self._records.alert(profile.name, profile.container.name, alert, None)

    def status(self) -> dict[str, dict[str, Any]]:
        """``{profile: sentinel block}`` for the status document (every key present from the start)."""
        return {name: status_block(w) for name, w in self.watches.items()}
