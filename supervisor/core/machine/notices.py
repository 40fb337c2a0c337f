"""Alerts that raise or resolve a condition (docs/alerts.md "Raised and resolved"), shared by the machine
modules: breaker reset, maintenance started/cancelled, degraded, recovered.

The machine sends a resolving alert whenever it sees the good state again; the daemon's condition
tracker (:mod:`supervisor.core.alerts.conditions`) sends it to the chat only when the condition was raised.
"""

from __future__ import annotations

from supervisor.core.machine.builder import Step
from supervisor.core.states import State


def breaker_reset(c: Step, old: State, by: str, reason: str) -> None:
    """``breaker.reset``: the breaker was closed (operator reset, or re-armed by a reboot)."""
    c.alert(
        "info",
        f"circuit breaker reset by {by}",
        old,
        c.s.state,
        reason,
        kind="breaker.reset",
        params=(("by", by),),
    )


def maintenance_started(c: Step, old: State) -> None:
    """``maintenance.started``: a maintenance restart begins (draining), with the KV pool before it."""
    before = c.s.maintenance_kv_before
    text = f"{before:,}" if before is not None else "unknown"
    c.alert(
        "info",
        f"maintenance restart begun: KV pool {text} tokens",
        old,
        c.s.state,
        "operator maintenance",
        kind="maintenance.started",
        params=(("kv_before", text),),
    )


def maintenance_cancelled(c: Step, why: str) -> None:
    """A maintenance restart will not complete (operator stop, outside stop, seat handover): forget it and
    resolve its ``maintenance.started`` (``maintenance.cancelled``). Nothing when none is under way."""
    if not c.s.maintenance_run:
        return
    c.set(maintenance_run=False, maintenance_kv_before=None)
    c.emit("maintenance.cancelled", reason=why)
    st = c.s.state
    c.alert(
        "info",
        f"maintenance restart cancelled: {why}",
        st,
        st,
        why,
        kind="maintenance.cancelled",
        params=(("why", why),),
    )


def degraded(c: Step, old: State, reason: str) -> State:
    """``degraded``: serving, but a probe failed (RUNNING -> DEGRADED, or an adopted server's first
    generation failed); a warning with the failure. Returns ``old``."""
    c.alert("warning", "degraded: a probe failed", old, State.DEGRADED, reason, kind="degraded")
    return old


def recovered(c: Step, old: State, reason: str) -> None:
    """``recovered``: serving again (resolves ``degraded`` and the ``serving`` condition)."""
    c.alert("info", "recovered: serving again", old, State.RUNNING, reason, kind="recovered")
