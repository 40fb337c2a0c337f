"""The performance sentinel's side of the fleet step (pure; docs/sentinel.md): for each RUNNING profile with
``sentinel.enabled``, ``warmup_s`` after its run was first seen serving and then every ``interval_s``, a
canary round on the pool; each answer judged (core/sentinel/judge.py): the perf ledger's row, the history
events
(``sentinel.sample`` / ``.slow`` / ``.recovered`` / ``.backend_changed`` / ``.restart`` / ``.failed``), the
alerts, and a drained maintenance restart (``on_decay: restart``) as a ``Dispatch``. Liveness is never
touched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from supervisor.core.actions import Alert
from supervisor.core.alerts.localize import title_en
from supervisor.core.events import MaintenanceRequested
from supervisor.core.fleet.actions import AppendPerf, Dispatch, FleetAction, Raise, Record, RunCanary
from supervisor.core.fleet.events import CanaryMeasured
from supervisor.core.fleet.policy import Canary, FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.profile_state import ProfileState
from supervisor.core.sentinel import judge
from supervisor.core.sentinel.judge import Sample, SentinelRun
from supervisor.core.sentinel.view import figures, status_block
from supervisor.core.states import State


def due(
    fleet: FleetState, now: float, profiles: Mapping[str, ProfileState], policy: FleetPolicy
) -> tuple[FleetState, list[FleetAction]]:
    """The rounds due now (a new container starts a fresh watch); watches of removed profiles dropped."""
    watches = {c.profile: fleet.perf.get(c.profile) or SentinelRun() for c in policy.canaries}
    actions: list[FleetAction] = []
    for c in policy.canaries:
        st, w = profiles.get(c.profile), watches[c.profile]
        if not c.enabled or st is None or st.container_id is None or st.state != State.RUNNING:
            continue
        if w.container_id != st.container_id:
            w = judge.fresh(w, st.container_id, st.kv.fingerprint, now)
        if judge.due(w, now, c.judge):
            w = judge.scheduled(w, now, c.judge)
            actions.append(RunCanary(c.profile, st.container_id, not w.history_loaded, st.kv.fingerprint))
        watches[c.profile] = w
    return replace(fleet, perf=watches), actions


def measured(
    fleet: FleetState, ev: CanaryMeasured, now: float, policy: FleetPolicy
) -> tuple[FleetState, list[FleetAction]]:
    """One answer: judged; a late answer about an earlier container (or a removed profile) is dropped."""
    c, w = next((c for c in policy.canaries if c.profile == ev.profile), None), fleet.perf.get(ev.profile)
    if c is None or w is None or ev.container_id != w.container_id:
        return fleet, []
    actions: list[FleetAction] = []
    if ev.loaded:
        w = replace(w, history=ev.history, history_loaded=True, backends=ev.backends)
        if ev.last_restart is not None and (w.last_restart_at is None or ev.last_restart > w.last_restart_at):
            w = replace(w, last_restart_at=ev.last_restart)  # the rate limit survives a daemon restart
        actions += _backends(c, ev)
    if ev.busy:
        w = judge.busy(w, now, c.busy_retry_s)
    elif ev.sample is None:
        actions.append(Record(ev.profile, "sentinel.failed", {"error": ev.error}))
    else:
        w, verdict = judge.observe(w, ev.sample, now, c.judge)
        actions += _ledger(c, w, ev.sample, verdict) + _flip(c, w, ev.sample, verdict)
    return replace(fleet, perf={**fleet.perf, ev.profile: w}), actions


def status(fleet: FleetState, policy: FleetPolicy) -> dict[str, dict[str, Any]]:
    """``{profile: sentinel block}`` for the status document (every key present from the start)."""
    return {c.profile: status_block(fleet.perf.get(c.profile) or SentinelRun()) for c in policy.canaries}


def _ledger(c: Canary, w: SentinelRun, sample: Sample, verdict: judge.Verdict) -> list[FleetAction]:
    row = {
        "profile": c.profile,
        "fingerprint": w.fingerprint,
        "container_id": w.container_id,
        **figures(sample),
        "baseline_tps": round(verdict.baseline, 2) if verdict.baseline is not None else None,
        "slow": verdict.slow_sample,
        "backends": list(w.backends) if w.samples == 1 else [],
        "restart": verdict.restart,
    }
    fields = {k: v for k, v in row.items() if k not in ("profile", "backends")}
    return [AppendPerf(row), Record(c.profile, "sentinel.sample", fields)]


def _flip(c: Canary, w: SentinelRun, sample: Sample, verdict: judge.Verdict) -> list[FleetAction]:
    message = verdict.message(sample, w.slow_since)
    params = (("message", message),)
    out: list[FleetAction] = []
    if verdict.flip == "slow":
        out.append(Record(c.profile, "sentinel.slow", {"message": message, "on_decay": c.judge.on_decay}))
        alert = Alert(
            "warning", title_en("sentinel.slow", params), "RUNNING", "SLOW", message,
            kind="sentinel.slow", params=params, condition="sentinel",
        )  # fmt: skip
        out.append(Raise(c.profile, alert, c.container))
    elif verdict.flip == "recovered":
        out.append(Record(c.profile, "sentinel.recovered", {"message": message}))
        alert = Alert(
            "info", title_en("sentinel.back", params), "SLOW", "RUNNING", message,
            kind="sentinel.back", params=params, condition="sentinel", resolves=True,
        )  # fmt: skip
        out.append(Raise(c.profile, alert, c.container))
    if verdict.restart:
        out += [
            Record(c.profile, "sentinel.restart", {"message": message}),
            Dispatch(c.profile, MaintenanceRequested()),
        ]
    return out


def _backends(c: Canary, ev: CanaryMeasured) -> list[FleetAction]:
    changes = judge.backend_change([ev.earlier_backends], ev.backends)
    if not changes:
        return []
    text = "; ".join(changes)
    params = (("changes", text),)
    alert = Alert(
        "warning", title_en("sentinel.backend_changed", params), "RUNNING", "RUNNING", text,
        kind="sentinel.backend_changed", params=params,
    )  # fmt: skip
    return [
        Record(c.profile, "sentinel.backend_changed", {"changes": list(changes)}),
        Raise(c.profile, alert, c.container),
    ]
