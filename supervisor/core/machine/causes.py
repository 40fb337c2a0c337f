"""Root-cause lines across starts and deaths: the same line twice stops the retries, a death says why.

A failed start's diagnosis quotes the traceback's last exception line (core/vllm/root_cause.py). Two
consecutive failed starts of one config fingerprint that die on the same line (numbers, addresses, pids
normalised) open the breaker at once: FATAL with the critical alert ``breaker.same_cause`` quoting the
line and where it was raised; a changed config or overlay file (a new fingerprint) or ``reset`` re-arms
it; a host-dependent failure (kernel or host memory) is never "the same cause"; a rollback to the last
known good that is due goes ahead (the next start is another config). An engine that died while
serving gets one follow-up alert ``engine.death_cause`` as soon as its diagnosis arrives, quoting the line;
a second death on the same line says so. Every decision is in the history (``start.same_cause``,
``engine.death_cause``). See docs/state-machine.md "The same root cause twice".
"""

from __future__ import annotations

from supervisor.core.events import StartDiagnosed
from supervisor.core.log_events import RootCause
from supervisor.core.machine.builder import Step
from supervisor.core.states import State
from supervisor.core.vllm import root_cause as rc
from supervisor.core.vocab import CONFIG_OUTCOMES, Outcome

#: Ledger outcomes that end a run that had served (its diagnosis explains a death, not a failed start).
SERVING_ENDS = frozenset({Outcome.DIED, Outcome.EMERGENCY})
#: States between a failed start and the next container: the rule can still stop the next start.
BEFORE_NEXT_START = (State.BACKOFF, State.PREFLIGHT, State.WAITING)


def _current(ev: StartDiagnosed) -> RootCause | None:
    return RootCause(ev.root_cause, ev.where, ev.fingerprint) if ev.root_cause else None


def judge_start(c: Step, ev: StartDiagnosed) -> None:
    """A failed start's diagnosis: remember its line; the same line as the failed start before -> FATAL."""
    if ev.outcome in SERVING_ENDS:
        _judge_death(c, ev)
        return
    if ev.outcome in CONFIG_OUTCOMES or ev.outcome == Outcome.WEDGED:
        return  # the breaker is open already (a refusal), or the host went down: nothing to compare
    current = _current(ev)
    decision = rc.judge(c.s.last_cause, current, ev.outcome, ev.cause)
    if decision == rc.SAME and _rolling_back(c, current):
        decision = rc.ROLLBACK
    c.emit(
        "start.same_cause",
        decision=decision,
        line=current.line if current else None,
        where=current.where if current else None,
        fingerprint=ev.fingerprint,
    )
    c.set(last_cause=current if decision in (rc.FIRST, rc.DIFFERENT, rc.SAME, rc.ROLLBACK) else None)
    if decision != rc.SAME or current is None:
        return
    if c.s.state not in BEFORE_NEXT_START or c.s.container_id is not None:
        return  # already FATAL, or the next start is under way: its own failure compares again
    old = c.s.state
    # BACKOFF | PREFLIGHT | WAITING -> FATAL: two starts of this config died on the same line
    c.release_slot()
    c.set(breaker=c.s.breaker.latch(c.now), fatal_alerted_at=c.now)
    c.emit("breaker.opened", failures=c.s.breaker.count(c.now), limit=c.s.breaker.limit, cause="same_cause")
    reason = f"the same root cause twice: {rc.quote(current)}"
    c.to(State.FATAL, reason)
    c.alert_kind(
        "critical",
        "breaker.same_cause",
        old,
        State.FATAL,
        reason,
        line=current.line,
        where=current.where or "not shown in the log",
    )


def _rolling_back(c: Step, current: RootCause | None) -> bool:
    """The next start creates the last known good (a rollback of a failed change is on): another config, so
    the same line twice proved the change broken, which the rollback answers; nothing to stop."""
    good = c.s.last_good_fingerprint
    return c.s.last_good_next and good is not None and current is not None and good != current.fingerprint


def _judge_death(c: Step, ev: StartDiagnosed) -> None:
    """A run that served ended: one follow-up alert quoting its root cause; the same line twice says so."""
    current = _current(ev)
    previous = c.s.last_death
    same = (
        current is not None
        and previous is not None
        and rc.normalise(previous.line) == rc.normalise(current.line)
    )
    c.emit(
        "engine.death_cause",
        line=current.line if current else None,
        where=current.where if current else None,
        same_as_last=same,
        fingerprint=ev.fingerprint,
    )
    c.set(last_death=current)
    if current is None:
        return
    left = max(0, c.s.breaker.limit - c.s.breaker.count(c.now))
    again = (
        f"the same error as the last death: a request or a bug that kills the engine; the breaker opens "
        f"after {left} more"
        if same
        else "first death on this line"
    )
    c.alert_kind(
        "critical",
        "engine.death_cause",
        c.s.state,
        c.s.state,
        f"{rc.quote(current)}; {again}",
        line=current.line,
        where=current.where or "not shown in the log",
    )
