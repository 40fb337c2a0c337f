"""BACKOFF and FATAL on Tick: the retry after a failure (never before its diagnosis), the open breaker's
re-alert."""

from __future__ import annotations

from supervisor.core.machine.builder import Step
from supervisor.core.machine.diagnosed import diagnosis_pending
from supervisor.core.states import State
from supervisor.core.vocab import Intent

#: What a command refused by the open circuit breaker (or its alert) tells the operator.
BREAKER_MSG = "circuit breaker open: run reset"


def tick_backoff(c: Step) -> None:
    """BACKOFF on Tick: at retry_at, re-check everything (PREFLIGHT), never relaunch blindly; not before
    the diagnosis of the failed start that led here (machine/diagnosed.py)."""
    retry_at = c.s.backoff.retry_at
    cap = c.now + c.policy.backoff.max_s
    if retry_at is not None and retry_at > cap:  # the wall clock jumped backwards
        c.set(backoff=type(c.s.backoff)(c.s.backoff.attempt, cap))
        return
    if diagnosis_pending(c):
        return  # BACKOFF stays BACKOFF: the failed start's diagnosis may still prove a configuration error
    if c.s.intent == Intent.RUN and (retry_at is None or c.now >= retry_at):
        # BACKOFF -> PREFLIGHT
        c.emit("backoff.retry", attempt=c.s.backoff.attempt)
        c.preflight("backoff elapsed")


def tick_fatal(c: Step) -> None:
    """FATAL on Tick: re-alert every breaker.realert_s while the operator still wants it running."""
    last = c.s.fatal_alerted_at
    if last is None or last > c.now:
        c.set(fatal_alerted_at=c.now)
        return
    if c.s.intent == Intent.RUN and c.now - last >= c.policy.breaker.realert_s:
        c.set(fatal_alerted_at=c.now)
        c.emit("breaker.still_open", since=c.s.since)
        c.alert_kind("critical", "breaker.still_open", State.FATAL, State.FATAL, BREAKER_MSG)
