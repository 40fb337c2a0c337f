"""Liveness outside RUNNING/DEGRADED: probes never stop while a profile drains or stops.

* DRAINING/MAINTENANCE: the same probe rounds as while serving (a generation included), judged by the
  same rules (machine.probe); their emergency ends the drain at once, instead of after drain_timeout_s
  (600 s) spent waiting for requests a frozen engine never finishes.
* STOPPING: the SIGTERM was sent, so /health may fail and a new generation may be refused on purpose
  (vLLM drains or aborts): rounds only read /health and /metrics. Requests still running while no token
  moves for ``probes.interval_s x (probes.failure_threshold - 1)`` (the serving bound of an unanswered
  generation) is a frozen shutdown: the stop becomes a SIGKILL now, not at the end of a 120 s planned grace.
"""

from __future__ import annotations

from supervisor.core.actions import RunProbeRound, StopContainer
from supervisor.core.events import ProbeRound
from supervisor.core.machine.builder import Step
from supervisor.core.profile_state import Stall


def tick(c: Step, generation: bool) -> None:
    """A Tick in DRAINING/MAINTENANCE (``generation``: with the liveness generation) or STOPPING
    (without): one probe round every probe interval, the first one interval after the stop began."""
    p = c.policy
    nxt = c.s.next_probe_at
    if nxt is None or nxt > c.now + p.probes.interval_s:  # none yet, or the clock jumped backwards
        c.set(next_probe_at=c.now + p.probes.interval_s)
        return
    if c.now < nxt:
        return
    c.set(next_probe_at=c.now + p.probes.interval_s)
    send = generation and p.probes.generation and not c.s.gen_in_flight
    if send:
        c.set(gen_in_flight=True)
        if c.s.gen_pending_since is None:
            c.set(gen_pending_since=c.now, gen_pending_tokens=c.s.stall.last_tokens)
    c.do(RunProbeRound(generation=send, measure=False, container_id=c.s.container_id))  # its CPU time too


def frozen_stop_after_s(c: Step) -> float:
    """How long requests may run without a token while the container stops before the stop is a kill."""
    p = c.policy
    return max(p.probes.interval_s, p.probes.interval_s * (p.probes.failure_threshold - 1))


def on_round_stopping(c: Step, ev: ProbeRound) -> None:
    """STOPPING: track the tokens; a frozen shutdown (requests run, tokens flat) is killed now."""
    st = c.s.stall
    tokens, running = ev.generation_tokens_total, ev.requests_running
    if tokens is None or running is None or running <= 0:
        c.set(stall=Stall(last_tokens=tokens, last_running=running, last_round_at=c.now))
        return
    frozen = st.last_tokens is not None and tokens == st.last_tokens
    since = None
    if frozen:
        prev_busy = st.last_running is not None and st.last_running > 0
        since = st.since if st.since is not None else (st.last_round_at if prev_busy else c.now)
        if since is None or since > c.now:
            since = c.now
    c.set(stall=Stall(last_tokens=tokens, last_running=running, since=since, last_round_at=c.now))
    if since is not None and c.now - since >= frozen_stop_after_s(c):
        escalate(c, f"no token for {c.now - since:.0f} s while {running:g} request(s) run")


def escalate(c: Step, why: str) -> None:
    """STOPPING: SIGKILL now if the stop in progress would still wait longer than the emergency grace."""
    p = c.policy
    deadline = c.s.stop_deadline
    left = None if deadline is None else deadline - p.stop_overdue_s - c.now
    if left is not None and left <= p.urgent_grace_s():
        return  # the kill comes soon enough (or was already sent)
    c.emit("stop.escalated", reason=c.s.pending, why=why, grace_left_s=left)
    reason = f"{c.s.pending or 'stop'}_escalated"
    c.do(StopContainer(grace_s=0.0, reason=reason, container_id=c.s.container_id))
    c.set(stop_deadline=c.now + p.stop_overdue_s)


def looks_frozen(c: Step) -> bool:
    """RUNNING, yet the engine looks frozen: a failure counted, or our generation unanswered for two probe
    intervals while no token moved (the serving judgement counts that as two failures at its next round).
    A ``restart`` then skips the drain. Tokens that moved since the send are saturation; a long prefill
    (tokens flat while a request runs, our generation answered) is not frozen either: it is drained."""
    s = c.s
    since = s.gen_pending_since
    unanswered = since is not None and c.now - since >= 2 * c.policy.probes.interval_s
    moved = s.stall.last_tokens is not None and s.gen_pending_tokens is not None
    moved = moved and (s.stall.last_tokens or 0) > (s.gen_pending_tokens or 0)
    return s.consecutive_failures > 0 or (unanswered and not moved)
