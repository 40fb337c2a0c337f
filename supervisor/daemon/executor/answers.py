"""Every pool job kind's crash answer and deadline: a job that raises or never ends must not leave the
machine waiting for an answer that cannot come, nor its kind "running" for ever.

:data:`CRASH_ANSWERS`: what the machine hears when the job of a kind crashes (or overruns its deadline):
the failure answer it already handles. :data:`NO_ANSWER`: the kinds whose answer nobody waits for, and
why (a test requires every kind the executor submits to be in one of the two). :class:`InFlight`: the
kinds running for one profile, each with its start; one past its deadline (:func:`deadline_s`) is
released and answered as crashed (the thread itself cannot be killed: it is logged and left).
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.core.events import (
    AuthResult,
    ContainerStartFailed,
    DockerAnswered,
    DrainProgress,
    Event,
    ExternalStopChecked,
    FirstGeneration,
    GenerationDone,
    HealthResult,
    KvBaseline,
    ObserveFailed,
    PreflightDone,
    Settled,
    SmokeChecked,
)
from supervisor.core.host_events import ReserveMeasured
from supervisor.core.probe_events import GateResult

#: kind -> the failure answer the machine handles (a crashed settle releases the load slot and postpones
#: the start; a crashed create is a failed start; a crashed smoke run fails the start's gates ...).
CRASH_ANSWERS: dict[str, Callable[[str], Event]] = {
    "preflight": lambda error: PreflightDone(False, error, None),
    "settle": lambda error: Settled(False, error, None),
    "create": ContainerStartFailed,
    "health": lambda error: HealthResult(False, None, 0.0, error),
    "generation": lambda error: GenerationDone(False, None, error),
    "first": lambda error: FirstGeneration(False, None, error),
    "observe": ObserveFailed,
    "wait-docker": lambda _error: DockerAnswered(ok=False, was_down=True),
    "external-stop": lambda _error: ExternalStopChecked(engine_restarting=False),  # an operator's: kept
    "reserve": lambda _error: ReserveMeasured(None),
    "kv-baseline": lambda _error: KvBaseline(None),
    "auth": lambda _error: AuthResult("unknown"),
    "drain": lambda _error: DrainProgress(None),  # unknown: the drain waits until its timeout
    "smoke": lambda error: SmokeChecked((GateResult("internal", "internal", False, error[:500]),)),
}
#: kind (or its prefix before '-<id>') -> why no answer is needed.
NO_ANSWER: dict[str, str] = {
    "round": "the machine counts a round that never answers itself (no answer in probe_interval_s)",
    "load-sample": "answers its own read failures (no readings); a hung one: sampled again at the next tick",
    "key-file": "checked again at the next round; no answer is normal (unchanged file)",
    "drift": "rechecked every DRIFT_RECHECK_S; nothing waits on it",
    "stop": "STOP_OVERDUE_S: the machine kills a stop that never reports",
    "kill": "the machine's stop-overdue path again, and the container watcher reports the exit",
    "stop-unwanted": "a stray container: nothing waits on it",
    "after-stop": "a report after the stop (orphans, memory back): nothing waits on it",
    "last-good": "a record: nothing waits on it",
    "change-alert": "an alert: nothing waits on it",
    "archive-log": "a record: nothing waits on it",
    "alert": "an alert: nothing waits on it",
    "stack": "the stop waits for it at most stack_wait_s, then goes ahead (core/machine/stuck.py)",
}
#: Longer than any legitimate run of the kind (each bounded by its own config); default 15 min.
DEADLINES_S: dict[str, float] = {
    "create": 7200.0,  # an image pull, then the create
    "settle": 7200.0,  # host.settle_timeout_s, bounded by config.bounds
    "stop": 7200.0,  # stop.grace_s <= 1 h, then the wait for the exit
    "kill": 7200.0,
    "wait-docker": 7200.0,
    "smoke": 7200.0,  # every gate's timeout_s (<= 1 h each)
    "drain": 7200.0,
}
DEFAULT_DEADLINE_S = 900.0


def family(kind: str) -> str:
    """``stop-unwanted-<id>`` -> ``stop-unwanted``; ``alert-<n>`` -> ``alert``; a plain kind itself."""
    for name in sorted((*CRASH_ANSWERS, *NO_ANSWER), key=len, reverse=True):
        if kind == name or kind.startswith(name + "-"):
            return name
    return kind


def deadline_s(kind: str) -> float:
    return DEADLINES_S.get(family(kind), DEFAULT_DEADLINE_S)


class InFlight(set[str]):
    """The job kinds running for one profile (a set, as the kill thread uses it), each claim with its start
    (``now``: the executor's monotonic clock) and a generation, so a hung job released at its deadline
    never releases the claim of the job that replaced it."""

    def __init__(self, now: Callable[[], float]) -> None:
        super().__init__()
        self._now = now
        self._since: dict[str, tuple[float, int]] = {}
        self._gen = 0

    def claim(self, kind: str) -> int:
        self._gen += 1
        self.add(kind)
        self._since[kind] = (self._now(), self._gen)
        return self._gen

    def release(self, kind: str, gen: int) -> None:
        if kind in self._since and self._since[kind][1] == gen:
            self.discard(kind)
            del self._since[kind]

    def overdue(self) -> list[tuple[str, float]]:
        """(kind, age) of every claim past its deadline, released (call with the executor's lock held)."""
        now, out = self._now(), []
        for kind, (since, _gen) in list(self._since.items()):
            if now - since > deadline_s(kind):
                out.append((kind, now - since))
                self.discard(kind)
                del self._since[kind]
        return out
