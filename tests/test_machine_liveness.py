"""The detection bound: a frozen engine (health and metrics answer, generations never do) is acted on
within probe_interval_s x failure_threshold of the freeze, whatever the probe timeout; a busy engine whose
generations are slow but whose tokens move is never acted on. Plain values, a driven clock."""

from __future__ import annotations

import pytest

from supervisor.core.actions import RunProbeRound
from supervisor.core.events import Event, GenerationDone, ProbeRound, Tick
from supervisor.core.machine import Policy
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy


class Server:
    """A model server seen through probes: answers rounds at once (health and metrics take milliseconds)
    and generations after ``gen_delay_s`` (never once frozen; a timeout after ``timeout_s`` then)."""

    def __init__(self, d: Driver) -> None:
        self.d = d
        self.frozen_at: float | None = None
        self.tokens = 100.0
        self.busy = False
        self.gen_delay_s = 0.2  # how long a healthy generation takes
        self.timeout_s: float | None = 30.0  # the probe's own timeout (None: it never gives up)
        self.due: list[tuple[float, Event]] = []

    def run(self, seconds: float) -> None:
        """Tick once a second for ``seconds``, answering what the machine asks."""
        end = self.d.now + seconds
        while self.d.now < end and self.d.st() in (State.RUNNING, State.DEGRADED):
            self.d.now += 1.0
            if self.busy and (self.frozen_at is None):
                self.tokens += 500.0  # other clients' requests keep the engine producing
            for at, ev in sorted(self.due, key=lambda x: x[0]):
                if at <= self.d.now:
                    self.due.remove((at, ev))
                    self.d.send(ev)
            for a in self.d.send(Tick()):
                if isinstance(a, RunProbeRound):
                    self._answer(a)

    def _answer(self, a: RunProbeRound) -> None:
        running = 4.0 if self.busy else 0.0
        self.d.send(ProbeRound(True, 200, None, None, None, running, 0.0, self.tokens))  # answers in ms
        if not a.generation:
            return
        if self.frozen_at is None:
            self.due.append(
                (self.d.now + self.gen_delay_s, GenerationDone(True, self.gen_delay_s * 1e3, None))
            )
        elif self.timeout_s is not None:
            self.due.append((self.d.now + self.timeout_s, GenerationDone(False, None, "read timeout")))


def _running(pol: Policy) -> tuple[Driver, Server]:
    d = Driver(policy=pol)
    fresh_boot(d)
    d.to_running()
    return d, Server(d)


@pytest.mark.parametrize("timeout_s", [5.0, 30.0, 120.0, None])
@pytest.mark.parametrize(("interval", "threshold"), [(15.0, 4), (5.0, 3), (60.0, 5)])
def test_frozen_engine_is_acted_on_within_interval_times_threshold(
    timeout_s: float | None, interval: float, threshold: int
) -> None:
    """Health 200, metrics frozen, no generation answer: emergency within interval x threshold."""
    d, srv = _running(policy(probe_interval_s=interval, failure_threshold=threshold))
    srv.timeout_s = timeout_s
    srv.run(interval * 5)
    assert d.st() == State.RUNNING
    srv.frozen_at = d.now
    srv.run(interval * threshold * 3)
    assert d.st() == State.STOPPING
    assert "emergency.stop" in d.emits()
    took = d.s.since - srv.frozen_at
    assert took <= interval * threshold, took
    assert took >= interval * (threshold - 2), took  # not acted on before the evidence exists


def test_busy_engine_with_slow_generations_is_never_acted_on() -> None:
    """Generations take 3 intervals under load, but tokens move: saturation, never a failure."""
    d, srv = _running(policy())
    srv.busy = True
    srv.gen_delay_s = 45.0
    srv.run(900)
    assert d.st() == State.RUNNING
    assert "probe.failed" not in d.emits()
    assert "probe.saturated" in d.emits()


def test_an_answer_clears_the_pending_generation() -> None:
    """A generation answered after two intervals leaves DEGRADED for RUNNING with no emergency."""
    d, srv = _running(policy())
    srv.gen_delay_s = 35.0  # slower than two intervals, faster than the threshold
    srv.run(600)
    assert d.st() in (State.RUNNING, State.DEGRADED)
    assert "emergency.stop" not in d.emits()
    assert d.s.consecutive_failures <= 3


def test_generation_timeouts_under_a_full_batch_are_saturation() -> None:
    """1 s x 2 with a 0.5 s probe timeout: every generation times out in the queue while tokens move; the
    timeout is judged at the next round with fresh metrics: saturation, never an emergency."""
    d, srv = _running(policy(probe_interval_s=1.0, failure_threshold=2))
    srv.busy = True
    srv.frozen_at = None
    srv.gen_delay_s = 60.0  # never answered in time ...
    srv.timeout_s = 0.5  # ... the probe gives up first

    def answer(a: RunProbeRound) -> None:
        srv.d.send(ProbeRound(True, 200, None, None, None, 1.0, 2.0, srv.tokens))
        if a.generation:
            srv.due.append((srv.d.now + 0.5, GenerationDone(False, None, "read timeout")))

    srv._answer = answer  # type: ignore[method-assign]
    srv.run(120)
    assert d.st() == State.RUNNING
    assert "emergency.stop" not in d.emits()
    assert "probe.saturated" in d.emits()


def test_without_liveness_generations_only_health_and_metrics_are_asked() -> None:
    """probes.generation: false: rounds never send a generation, so nothing is ever pending."""
    d, srv = _running(policy(liveness_generation=False))
    srv.run(120)
    rounds = [a for a in d.log if isinstance(a, RunProbeRound)]
    assert rounds
    assert all(not a.generation for a in rounds)
    assert d.s.gen_pending_since is None
    assert d.st() == State.RUNNING
