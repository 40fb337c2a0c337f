"""Liveness from forward progress, with the shipped probe defaults (5 s rounds, freeze 15 s, canary 10 s):
each freeze shape of real vLLM (docs/vllm-facts.md "Forward progress") is acted on within 30 s, and a
prefill of any length up to --max-model-len (chunked or not), saturation, slow first requests and a long
generation are never acted on. An engine model with plain values and a driven clock."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from supervisor.core.actions import RunProbeRound
from supervisor.core.events import Event, GenerationDone, ProbeRound, Tick
from supervisor.core.machine import Policy
from supervisor.core.profile_state import ProfileState, Stall
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy

#: The daemon's shipped probe defaults (core/settings/profile.py ProbeConfig), as policy_for maps them.
SHIPPED = policy(probes={"interval_s": 5.0, "failure_threshold": 4})
TARGET_S = 30.0
#: The busiest thread of a stopped or idle engine (a poller) is runnable this share of the time: 0.09-0.31
#: measured on real vLLM 0.32 with the CPUs contended (docs/vllm-facts.md "Forward progress under CPU
#: starvation"); the top of that range.
POLLER_SHARE = 0.31
#: What a prefill got on real vLLM with 12 busy containers beside it: 0.1-0.4 cores (0.1 is the worst).
STARVED_SHARE = 0.1


@dataclass
class Job:
    """One request the engine model works on: ``prompt`` tokens to prefill, then ``out`` to generate."""

    prompt: float
    out: int
    done_prefill: float = 0.0
    done_out: int = 0
    canary: bool = False


class Engine:
    """vLLM as its probes see it: gauges and counters published at the end of each step, a prefill's
    prompt counted when it ends, CPU time moving while it steps (docs/vllm-facts.md)."""

    def __init__(self, d: Driver, *, chunked: bool = True, rate: float = 300.0, budget: int = 2048) -> None:
        self.d = d
        self.chunked, self.rate, self.budget = chunked, rate, budget
        self.jobs: list[Job] = []
        self.prompt = self.gen = self.iters = 0.0
        self.kv = 0.0
        self.cpu = 10.0
        self.running = self.waiting = 0.0  # as published at the last step end
        self.step_left = 0.0  # seconds left in the current step
        self.step_jobs: list[Job] = []
        self.frozen = False  # EngineCore stopped
        self.spinning = False  # EngineCore burns a core in a step that never ends (a hung CUDA kernel)
        self.api_frozen = False  # the API server stopped
        self.cpu_known = True
        self.share = 1.0  # the cores it gets while stepping (less when others take the CPUs: starved)
        self.demand_known = True  # its threads' runnable shares are read (adapters/cputime.ThreadDemand)
        self.runnable = 0.0  # seconds its busiest thread was runnable since the last round
        self.round_at: float | None = None
        self.decode_s = 0.05  # one decode step
        self.first_step_extra_s = 0.0  # a slow first step (compilation after a load)
        self.due: list[tuple[float, Event]] = []

    def submit(self, prompt: int, out: int, canary: bool = False) -> None:
        self.jobs.append(Job(prompt, out, canary=canary))

    def _plan_step(self) -> None:
        if not self.jobs:
            return
        budget: float = self.budget if self.chunked else 1e9
        self.step_jobs = []
        seconds = 0.0
        for j in self.jobs:
            left = j.prompt - j.done_prefill
            if left > 0:
                take = min(left, budget)
                if take < left and not self.chunked:
                    take = left
                budget -= take
                seconds += take / self.rate
                self.step_jobs.append(j)
                if budget <= 0:
                    break
            else:
                self.step_jobs.append(j)
        seconds = max(seconds, self.decode_s) + self.first_step_extra_s
        self.first_step_extra_s = 0.0
        self.step_left = seconds

    def _end_step(self) -> None:
        budget: float = self.budget if self.chunked else 1e9
        for j in self.step_jobs:
            left = j.prompt - j.done_prefill
            if left > 0:
                take = min(left, budget) if self.chunked else left
                budget -= take
                j.done_prefill += take
                if j.done_prefill >= j.prompt:
                    self.prompt += j.prompt
                    j.done_out += 1
                    self.gen += 1
            else:
                j.done_out += 1
                self.gen += 1
            if j.done_out >= 1 and j.canary:
                self.due.append((self.d.now, GenerationDone(True, 50.0, None)))
        self.iters += 1 if any(j.done_out for j in self.step_jobs) else 0
        for j in [j for j in self.jobs if j.done_out >= j.out or (j.canary and j.done_out >= 1)]:
            self.jobs.remove(j)
        self.running = float(len(self.jobs))
        self.kv = sum(j.done_prefill + j.done_out for j in self.jobs) / 1e6
        self.step_jobs = []

    def advance(self, dt: float) -> None:
        if self.frozen:
            self.cpu += 0.02 * dt
            self.runnable += POLLER_SHARE * dt
            return
        if self.spinning:
            self.cpu += self.share * dt
            self.runnable += dt
            return
        if self.step_left <= 0:
            self._plan_step()
        t = dt
        while t > 0 and self.step_left > 0:
            used = min(t, self.step_left / self.share)  # wall seconds; the step needs CPU seconds
            self.step_left -= used * self.share
            t -= used
            self.cpu += used * self.share
            self.runnable += used  # computing or waiting for a CPU: runnable throughout
            if self.step_left <= 1e-9:
                self.step_left = 0.0
                self._end_step()
                self._plan_step()
        self.cpu += 0.02 * t
        self.runnable += POLLER_SHARE * t

    def round(self, a: RunProbeRound) -> None:
        if self.api_frozen:
            self.d.send(ProbeRound(False, None, None, None, None, None, None, None))
            return
        cpu = self.cpu if self.cpu_known else None
        span = self.d.now - self.round_at if self.round_at is not None else 0.0
        demand = min(1.0, self.runnable / span) if span > 0 and self.demand_known else None
        self.runnable, self.round_at = 0.0, self.d.now
        ev = ProbeRound(
            True, 200, None, None, None, self.running, self.waiting, self.gen,
            prompt_tokens_total=self.prompt, iterations_total=self.iters, kv_usage=self.kv, cpu_s=cpu,
            thread_demand=demand,
        )  # fmt: skip
        self.d.send(ev)
        if a.generation:
            self.submit(8, 1, canary=True)

    def run(self, seconds: float, step: float = 0.25) -> None:
        """Drive the clock in ``step`` slices, answering what the machine asks, until ``seconds`` pass
        or the machine leaves RUNNING/DEGRADED."""
        end = self.d.now + seconds
        while self.d.now < end and self.d.st() in (State.RUNNING, State.DEGRADED):
            self.d.now += step
            self.advance(step)
            for at, ev in list(self.due):
                if at <= self.d.now:
                    self.due.remove((at, ev))
                    self.d.send(ev)
            for a in self.d.send(Tick()):
                if isinstance(a, RunProbeRound):
                    self.round(a)


def _running(pol: Policy = SHIPPED, **engine: object) -> tuple[Driver, Engine]:
    d = Driver(policy=pol)
    fresh_boot(d)
    d.to_running()
    return d, Engine(d, **engine)  # type: ignore[arg-type]


def _acted_on_within(d: Driver, e: Engine, seconds: float) -> float:
    t0 = d.now
    e.run(seconds)
    assert d.st() == State.STOPPING, d.emits()
    assert "emergency.stop" in d.emits()
    return d.now - t0


@pytest.mark.parametrize("share", [1.0, STARVED_SHARE], ids=["served", "starved"])
def test_engine_stopped_while_requests_run_is_acted_on_within_30_s(share: float) -> None:
    """``starved``: the engine got 0.1 cores while it stepped (its thread runnable throughout); stopped,
    its busiest thread is a poller's."""
    d, e = _running()
    e.share = share
    e.submit(32, 100_000)
    e.submit(32, 100_000)
    e.run(60)
    assert d.st() == State.RUNNING
    e.frozen = True
    took = _acted_on_within(d, e, 120)
    assert SHIPPED.probes.freeze_after_s - SHIPPED.probes.interval_s <= took <= TARGET_S, took
    assert "probe.stalled" in d.emits()


@pytest.mark.parametrize("demand_known", [True, False])
def test_a_starved_monolithic_prefill_is_never_acted_on_when_its_threads_are_read(demand_known: bool) -> None:
    """8,192 tokens at 300 tokens/s of CPU: 27 s of work, 273 s at the 0.1 cores a starved engine got.
    Counted nowhere, the CPU time under the 0.2-core bound every round: only the runnable compute thread
    tells it from a stopped engine. Without it (``demand_known`` False), it is judged frozen: the rule
    before starvation was measured, and what a box without the per-thread data still does."""
    pol = policy(
        probes={"interval_s": 5.0, "failure_threshold": 4},
        engine={"chunked_prefill": False, "max_model_len": 16384},
    )
    d, e = _running(pol, chunked=False)
    e.share, e.demand_known = STARVED_SHARE, demand_known
    e.run(20)
    e.submit(8192, 4)
    e.run(100)
    if not demand_known:
        assert "emergency.stop" in d.emits()
        return
    assert d.s.stall.signal == "cpu_starved", d.s.stall  # mid-prefill: busy, and why
    e.run(8192 / 300 / STARVED_SHARE)
    assert "emergency.stop" not in d.emits(), d.emits()
    assert d.st() == State.RUNNING
    assert e.prompt >= 8192


def test_engine_stopped_while_idle_then_a_request_is_acted_on_within_30_s() -> None:
    d, e = _running()
    e.run(60)
    assert d.st() == State.RUNNING
    e.frozen = True
    e.run(3)
    e.submit(32, 8)  # counted nowhere: the engine never reads it
    took = 3 + _acted_on_within(d, e, 120)
    assert took <= TARGET_S, took
    assert any("canary" in str(getattr(a, "fields", {})) for a in d.log) or "probe.stalled" in d.emits()


def test_api_server_stopped_is_acted_on_within_30_s() -> None:
    d, e = _running()
    e.run(60)
    e.api_frozen = True
    took = _acted_on_within(d, e, 120)
    # the real round's /health waits out its timeout (min(timeout, 10 s, interval) = 5 s): add it
    assert took + SHIPPED.probes.interval_s <= TARGET_S, took


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("from_idle", [True, False])
def test_a_prefill_of_max_model_len_is_never_acted_on(chunked: bool, from_idle: bool) -> None:
    """262,144 tokens at 300 tokens/s: a 15-minute prefill (one step without chunking), CPU known; the
    policy knows the engine's shape (from its vLLM arguments, as the daemon does)."""
    pol = policy(
        probes={"interval_s": 5.0, "failure_threshold": 4},
        engine={"chunked_prefill": chunked, "max_model_len": 262_144},
    )
    d, e = _running(pol, chunked=chunked)
    if not from_idle:
        e.submit(32, 100_000)
    e.run(20)
    e.submit(262_144, 4)
    e.run(262_144 / 300 + 120)
    assert d.st() == State.RUNNING, d.emits()
    assert "emergency.stop" not in d.emits()
    assert "probe.failed" not in d.emits()
    assert e.prompt >= 262_144


@pytest.mark.parametrize("chunked", [True, False])
def test_without_the_cpu_time_a_prefill_within_the_longest_step_is_never_acted_on(chunked: bool) -> None:
    """No cgroup CPU (cpu_s None): the counters and the longest-step bound alone; a 32K prompt at the
    assumed rate (100 tokens/s: 328 s in one step without chunking) passes."""
    pol = policy(
        probes={"interval_s": 5.0, "failure_threshold": 4},
        engine={"chunked_prefill": chunked, "max_model_len": 32768},
    )
    d, e = _running(pol, chunked=chunked, rate=100.0)
    e.cpu_known = False
    e.run(20)
    e.submit(32768, 4)
    e.run(32768 / 100 + 60)
    assert "emergency.stop" not in d.emits(), d.emits()
    assert e.prompt >= 32768


def test_without_the_cpu_time_a_freeze_is_caught_within_the_longest_step() -> None:
    pol = policy(
        probes={"interval_s": 5.0, "failure_threshold": 4, "prefill_tokens_per_s": 300.0},
        engine={"max_num_batched_tokens": 2048},
    )
    d, e = _running(pol)
    e.cpu_known = False
    e.submit(32, 100_000)
    e.run(30)
    e.frozen = True
    took = _acted_on_within(d, e, 600)
    assert took <= max(pol.probes.stall_after_s, 2 * 2048 / 300) + 2 * pol.probes.interval_s, took


def test_saturation_every_slot_busy_is_never_acted_on_and_sends_no_canary() -> None:
    d, e = _running(rate=2000.0)
    for _ in range(256):
        e.submit(64, 10**6)
    e.waiting = 100.0
    e.run(900)
    assert d.st() == State.RUNNING
    assert "probe.failed" not in d.emits()
    gens = [a for a in d.log if isinstance(a, RunProbeRound) and a.generation]
    assert len(gens) <= 2  # only before the load was seen


def test_a_single_30_minute_generation_is_never_acted_on() -> None:
    d, e = _running()
    e.decode_s = 0.5
    e.submit(100, 3600)
    e.run(1800)
    assert d.st() == State.RUNNING
    assert "probe.failed" not in d.emits()


def test_a_slow_first_request_after_a_load_is_never_acted_on() -> None:
    """The first step compiles for 60 s (counted nowhere, CPU busy): no emergency."""
    d, e = _running()
    e.first_step_extra_s = 60.0
    e.run(120)
    assert d.st() == State.RUNNING, d.emits()
    assert "emergency.stop" not in d.emits()


def test_a_lone_prefill_teaches_the_rate_and_the_limit_follows() -> None:
    pol = policy(
        probes={"interval_s": 5.0, "failure_threshold": 4},
        engine={"chunked_prefill": False, "max_model_len": 65536},
    )
    d, e = _running(pol, chunked=False, rate=500.0)
    e.run(10)
    e.submit(30_000, 1)
    e.run(30_000 / 500 + 20)
    assert d.s.prefill_rates, d.emits()
    rate = d.s.prefill_rates[-1]
    assert 400.0 <= rate <= 600.0, rate  # timed within a round's precision (5 s of 60 s)
    assert "probe.prefill_rate" in d.emits()
    # the status shows the verdict, the signal it rests on and the learned rate
    live = d.s.status_dict(d.now)["liveness"]
    assert live["verdict"] in ("idle", "busy")
    assert live["prefill_rate"] == pytest.approx(rate)


def test_rates_survive_a_save_and_load() -> None:
    s = ProfileState(name="p", prefill_rates=(300.0, 320.5), prefill_rates_for="fp1")
    back = ProfileState.from_dict(s.to_dict())
    assert back.prefill_rates == (300.0, 320.5)
    assert back.prefill_rates_for == "fp1"


def test_without_liveness_generations_no_canary_is_ever_sent() -> None:
    d, e = _running(policy(probes={"interval_s": 5.0, "generation": False}))
    e.run(120)
    rounds = [a for a in d.log if isinstance(a, RunProbeRound)]
    assert rounds
    assert all(not a.generation for a in rounds)
    assert d.s.gen_pending_since is None
    assert d.st() == State.RUNNING


def test_a_new_container_starts_with_a_fresh_progress_record() -> None:
    """Seen on the real vLLM: the record of a container stopped for a freeze (work since long ago, no
    progress since) carried over to the next one made its first idle round "stuck" (a false emergency)."""
    d = Driver(policy=SHIPPED)
    fresh_boot(d)
    stale = Stall(last_round_at=d.now - 100, work_since=d.now - 100, progress_at=d.now - 100, last_cpu=5.0)
    d.s = replace(d.s, stall=stale)
    d.to_running()
    e = Engine(d)
    e.run(120)
    assert d.st() == State.RUNNING, d.emits()
    assert "probe.failed" not in d.emits()


def test_an_idle_server_answering_its_canaries_is_never_stuck_even_if_its_counters_do_not_move() -> None:
    """A canary answered ends the work it made: an idle engine whose counters stay flat (a server that
    does not count 1-token requests) is idle, not stuck."""
    d, e = _running()
    orig = e._end_step

    def no_counting() -> None:
        gen, prompt, iters = e.gen, e.prompt, e.iters
        orig()
        e.gen, e.prompt, e.iters = gen, prompt, iters

    e._end_step = no_counting  # type: ignore[method-assign]
    e.run(300)
    assert d.st() == State.RUNNING, d.emits()
