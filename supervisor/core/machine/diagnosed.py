"""A failed start's diagnosis arrived: remember it; a configuration error the exit outran opens the breaker.

The container's exit and its log lines come on two streams: when vLLM refuses its arguments it exits at
once, and the exit can be handled before the line that proves the configuration error (the start is then
``failed_exit``, in BACKOFF). The diagnosis reads the whole log tail: if it says ``config`` and no new
container was created yet, retrying cannot help, so the breaker opens now (-> FATAL), as it would have
had the line come first (builder.fail). So that no new container is created first, a retry after a
failed start waits for its diagnosis (``retry.tick_backoff``, at most ``DIAGNOSIS_WAIT_S``): the diagnosis
job reads the log's last lines and the kernel ring off the loop, which on a loaded box took longer than
the shipped 1 s backoff (a refused ``--max-model-len`` burnt a second start: tests/test_daemon_diagnoses.py).
"""

from __future__ import annotations

from supervisor.core.events import StartDiagnosed
from supervisor.core.machine import causes
from supervisor.core.machine.builder import Step
from supervisor.core.states import State
from supervisor.core.vocab import CONFIG_OUTCOMES, Outcome

#: The longest a retry waits for the diagnosis of the failed start before it: the job waits up to 3 s for
#: the log's last lines (daemon/executor/containers.py LOG_DRAIN_S), then reads the kernel ring; the rest is
# room for a
#: loaded box. A diagnosis that never comes (a failed job) delays the retry by this much.
DIAGNOSIS_WAIT_S = 30.0

#: States between a failed start and the next container: a late configuration verdict still applies.
_BEFORE_NEXT_START = (State.BACKOFF, State.PREFLIGHT, State.WAITING)


def on_start_diagnosed(c: Step, ev: StartDiagnosed) -> None:
    """Any state: keep the diagnosis; BACKOFF/PREFLIGHT/WAITING -> FATAL on a late configuration error."""
    c.set(last_diagnosis=ev.diagnosis, diagnosis_due_since=None)  # a held retry goes at the next tick
    late = ev.cause == Outcome.FAILED_CONFIG.cause and ev.outcome not in CONFIG_OUTCOMES
    if not late or c.s.state not in _BEFORE_NEXT_START or c.s.container_id is not None:
        causes.judge_start(c, ev)  # the same root cause twice (machine/causes.py)
        return
    old = c.s.state
    # BACKOFF | PREFLIGHT | WAITING -> FATAL: the log proved a configuration error after the exit
    c.release_slot()
    c.set(breaker=c.s.breaker.latch(c.now), fatal_alerted_at=c.now)
    c.emit("breaker.opened", failures=c.s.breaker.count(c.now), limit=c.s.breaker.limit, cause="config")
    reason = "configuration error (from the log, after the exit)"
    c.to(State.FATAL, reason)
    c.alert_kind("critical", "breaker.config_error", old, State.FATAL, reason)  # with last_diagnosis


def diagnosis_pending(c: Step) -> bool:
    """The failed start before this BACKOFF is not diagnosed yet, and not for DIAGNOSIS_WAIT_S already."""
    due = c.s.diagnosis_due_since
    return due is not None and due <= c.now < due + DIAGNOSIS_WAIT_S
