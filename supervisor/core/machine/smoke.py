"""The smoke gates' verdict: STARTING (gates asked for) -> RUNNING, or -> STOPPING (failed_start).

``ready.on_first_generation`` asks for the gates (RunSmokeGates) once our start's first generation
succeeded; the answer (SmokeChecked) lands here. A failed ``fail`` gate fails the start (ledger outcome
``failed_smoke_<kind>``, a breaker record like any failed start); a failed ``warn`` gate alerts and the
server serves. Adopted containers are never gated (they served before this daemon came).
"""

from __future__ import annotations

from supervisor.core.events import SmokeChecked
from supervisor.core.machine import ready, start
from supervisor.core.machine.builder import Step
from supervisor.core.probe_events import GateResult
from supervisor.core.profile_state import GateRecord
from supervisor.core.states import State
from supervisor.core.vllm.smoke import POLICY_FAIL, outcome_for, policy_of


def on_smoke_checked(c: Step, ev: SmokeChecked) -> None:
    """STARTING: the gates answered; decide from each result and its gate's policy."""
    if not c.s.load.smoke_sent:
        return  # a late answer: the gates were not asked for by this start attempt
    gates = c.policy.smoke_gates
    # a gate a reload removed meanwhile has no policy any more: its result is dropped
    judged = [(r, p) for r in ev.results if (p := policy_of(gates, r.name)) is not None]
    c.set(smoke=tuple(_record(r, p, c.now) for r, p in judged))
    failed = [(r, p) for r, p in judged if not r.ok]
    for r, p in failed:
        c.emit("smoke.failed", gate=r.name, kind=r.kind, policy=p, detail=r.detail, value=r.value)
    blocking = [r for r, p in failed if p == POLICY_FAIL]
    if blocking:
        # STARTING -> STOPPING (failed_start): the server answers, but not as it must
        first = blocking[0]
        detail = "; ".join(f"{r.name}: {r.detail}" for r in blocking)
        start.start_failed_stop(c, outcome_for(first.kind), f"smoke gate {first.name} failed", detail)
        return
    if not failed:
        c.emit("smoke.passed", gates=[r.name for r, _p in judged])
    # STARTING -> RUNNING (warn gates that failed alert, the server serves)
    reason = "smoke gates passed" if not failed else "smoke gates passed (warnings)"
    old = ready.become_ready(c, True, c.s.load.first_gen_ms, None, reason)
    for r, _p in failed:
        c.alert_kind("warning", "smoke.failed", old, State.RUNNING, f"{r.kind}: {r.detail}", gate=r.name)


def _record(r: GateResult, policy: str, now: float) -> GateRecord:
    return GateRecord(
        name=r.name,
        kind=r.kind,
        policy=policy,
        ok=r.ok,
        detail=r.detail,
        at=now,
        latency_ms=r.latency_ms,
        value=r.value,
    )
