"""An engine spinning without stepping (issue 35: a hung CUDA kernel spins the waiting host thread, so the
container burns a core while no step ends) with the shipped probe defaults: CPU time keeps a step alive only
up to the longest step this config can take (``step_factor x`` the step's tokens / the learned prefill
rate, at least ``freeze_after_s``; ``stall_after_s`` before the container's first counted step), never
longer; long prefills within that bound are never acted on. The engine model of test_machine_liveness with
a driven clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from supervisor.core.actions import Alert, Emit, ReadEngineStack
from supervisor.core.machine import Policy
from supervisor.core.probe_events import StackFrame, StackRead
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy
from tests.test_machine_liveness import TARGET_S, Engine

#: The field's measured prefill rate (prompt tokens/s, the Spark seed).
SPARK_RATE = 1670.0
#: The shipped Spark profile's engine shape (supervisor/data/examples/spark): chunked prefill on.
SPARK = policy(
    probes={"interval_s": 5.0, "failure_threshold": 4},
    engine={"max_num_batched_tokens": 4096, "max_model_len": 262144},
)


def _running(pol: Policy, learned: float | None, **engine: object) -> tuple[Driver, Engine]:
    d = Driver(policy=pol)
    fresh_boot(d)
    d.to_running()
    if learned is not None:  # a rate this config learned earlier (kept across restarts in the state)
        d.s = replace(d.s, prefill_rates=(learned,))
    return d, Engine(d, **engine)  # type: ignore[arg-type]


def _spin_after_serving(d: Driver, e: Engine) -> float:
    """Two long generations, then the step spins; the seconds until the emergency stop (bounded)."""
    e.submit(32, 100_000)
    e.submit(32, 100_000)
    e.run(60)
    assert d.st() == State.RUNNING, d.emits()
    e.spinning = True
    t0 = d.now
    e.run(2 * d.policy.probes.interval_s)  # a round that saw the CPU alone move
    assert d.s.stall.verdict == "busy", d.s.stall  # within the bound
    assert d.s.stall.signal == "cpu", d.s.stall
    e.run(900)
    assert d.st() == State.STOPPING, d.emits()
    assert "emergency.stop" in d.emits()
    return d.now - t0


def test_spinning_with_two_requests_running_is_acted_on_within_30_s_on_the_spark_shape() -> None:
    d, e = _running(SPARK, SPARK_RATE, rate=SPARK_RATE)
    took = _spin_after_serving(d, e)
    assert took <= TARGET_S, took
    stalled = [a for a in d.log if isinstance(a, Emit) and a.name == "probe.stalled"]
    assert "while the CPU works" in str(stalled[0].fields["reason"]), stalled


@pytest.mark.parametrize(("chunked", "tokens"), [(True, 8192), (False, 32768)])
def test_spinning_is_acted_on_within_the_documented_bound(chunked: bool, tokens: int) -> None:
    """No rate learned (the assumed 100 tokens/s): chunked, the default 8,192-token batch (164 s);
    monolithic, a 32,768-token --max-model-len (655 s). Never before the bound, never a round after."""
    pol = policy(
        probes={"interval_s": 5.0, "failure_threshold": 4},
        engine={"chunked_prefill": chunked, "max_model_len": 32768},
    )
    d, e = _running(pol, None, chunked=chunked)
    took = _spin_after_serving(d, e)
    bound = pol.probes.step_factor * tokens / pol.probes.prefill_tokens_per_s
    assert bound - pol.probes.interval_s <= took <= bound + 2 * pol.probes.interval_s, (took, bound)


def test_before_the_first_counted_step_the_floor_is_stall_after_s() -> None:
    """A container's first step may compile (counted nowhere, CPU busy): it gets ``stall_after_s``."""
    d, e = _running(SPARK, SPARK_RATE, rate=SPARK_RATE)
    e.spinning = True
    e.submit(32, 100)
    e.run(SPARK.probes.stall_after_s - SPARK.probes.interval_s)
    assert d.st() == State.RUNNING, d.emits()
    e.run(3 * SPARK.probes.interval_s)
    assert "emergency.stop" in d.emits()


@pytest.mark.parametrize("chunked", [True, False])
def test_prefills_up_to_max_model_len_at_the_learned_rate_are_never_acted_on(chunked: bool) -> None:
    """The Spark shape at its learned rate: a 131,072-token prompt beside a running generation (chunked:
    4,096-token steps of 2.5 s; monolithic, with --max-model-len 131072: one 78 s step under the 157 s
    bound)."""
    pol = replace(SPARK, engine=replace(SPARK.engine, chunked_prefill=chunked, max_model_len=131072))
    d, e = _running(pol, SPARK_RATE, rate=SPARK_RATE, chunked=chunked, budget=4096)
    e.submit(32, 100_000)
    e.run(20)
    e.submit(131_072, 4)
    e.run(131_072 / SPARK_RATE + 60)
    assert "emergency.stop" not in d.emits(), d.emits()
    assert d.st() == State.RUNNING
    assert e.prompt >= 131_072


def _stuck(d: Driver, e: Engine) -> ReadEngineStack:
    """Spin after serving until the machine asks for the stack; the request."""
    e.submit(32, 100_000)
    e.submit(32, 100_000)
    e.run(60)
    e.spinning = True
    end = d.now + 120
    while d.now < end:
        e.run(1)
        asks = [a for a in d.log if isinstance(a, ReadEngineStack)]
        if asks:
            return asks[-1]
    raise AssertionError(d.emits())


def test_the_stop_waits_for_the_stack_and_the_alert_names_where_it_hung() -> None:
    d, e = _running(SPARK, SPARK_RATE, rate=SPARK_RATE)
    ask = _stuck(d, e)
    assert ask.budget_s == min(SPARK.probes.stack_wait_s, SPARK.urgent_grace_s())
    assert d.st() == State.RUNNING  # not stopped before the stack is read (at most budget_s)
    frames = (
        StackFrame("spin_while_triggered", "vsup_spin.py", 21),
        StackFrame("stepping", "vsup_spin.py", 42),
    )
    d.send(StackRead(ask.container_id, frames, samples=3, same=3, pid=4547))
    assert d.st() == State.STOPPING
    alert = next(a for a in d.log if isinstance(a, Alert) and a.kind == "emergency.stop")
    assert "spin_while_triggered (vsup_spin.py:21)" in alert.reason, alert.reason
    assert "same top frame in 3 of 3 samples" in alert.reason, alert.reason
    stack = next(a for a in d.log if isinstance(a, Emit) and a.name == "engine.stack")
    top = stack.fields["frames"]
    assert isinstance(top, list)
    assert top[0] == {"function": "spin_while_triggered", "file": "vsup_spin.py", "line": 21}


@pytest.mark.parametrize("answer", ["error", "none"])
def test_without_a_stack_the_stop_is_on_time_and_says_why(answer: str) -> None:
    """A box without py-spy (or CAP_SYS_PTRACE) answers at once with why; a read that never answers is
    given up after the wait (never longer than the emergency grace)."""
    d, e = _running(SPARK, SPARK_RATE, rate=SPARK_RATE)
    ask = _stuck(d, e)
    asked = d.now
    if answer == "error":
        d.send(StackRead(ask.container_id, error="py-spy is not installed"))
    else:
        e.run(ask.budget_s + 1)
    assert d.st() == State.STOPPING
    assert d.now - asked <= SPARK.urgent_grace_s()
    alert = next(a for a in d.log if isinstance(a, Alert) and a.kind == "emergency.stop")
    why = "py-spy is not installed" if answer == "error" else "not read within"
    assert f"no stack ({why}" in alert.reason, alert.reason


def test_no_stack_is_read_when_stack_wait_s_is_0() -> None:
    off = replace(SPARK, probes=replace(SPARK.probes, stack_wait_s=0.0))
    d, e = _running(off, SPARK_RATE, rate=SPARK_RATE)
    e.submit(32, 100_000)
    e.submit(32, 100_000)
    e.run(60)
    e.spinning = True
    e.run(60)
    assert d.st() == State.STOPPING
    assert not [a for a in d.log if isinstance(a, ReadEngineStack)]


#: No rate learned, chunked prefill with vLLM's default 8,192-token batch: the bound is 164 s.
UNLEARNED = policy(probes={"interval_s": 5.0, "failure_threshold": 4}, engine={"max_model_len": 32768})


def test_a_prefill_on_a_cpu_shared_four_ways_outlives_the_wall_bound() -> None:
    """A 6,000-token prefill at the assumed 100 tokens/s needs 60 s of CPU; getting a quarter of a core (8
    busy containers on 2 cores, bench.compare's long_prefill row) it takes 240 s, past the 164 s bound,
    while its container burned 60 s of CPU: not a spin (progress.step_spent)."""
    d, e = _running(UNLEARNED, None, rate=100.0, budget=8192)
    e.share = 0.25
    e.submit(6000, 4)
    e.run(300)
    assert "emergency.stop" not in d.emits(), d.emits()
    assert "probe.stalled" not in d.emits(), d.emits()
    assert e.prompt >= 6000  # the prefill ended and was counted
    assert d.st() == State.RUNNING


def test_a_spin_starved_of_cpu_is_still_acted_on_within_two_bounds() -> None:
    """A spinning engine that gets a quarter of a core: judged at twice the bound (the stretch's end; half a
    core over the bound would take as long), not at the bound."""
    d, e = _running(UNLEARNED, None, rate=100.0, budget=8192)
    e.share = 0.25
    bound = UNLEARNED.probes.step_factor * 8192 / UNLEARNED.probes.prefill_tokens_per_s
    took = _spin_after_serving(d, e)
    assert 2 * bound - 2 * UNLEARNED.probes.interval_s <= took <= 2 * bound + 2 * UNLEARNED.probes.interval_s
    stalled = [a for a in d.log if isinstance(a, Emit) and a.name == "probe.stalled"]
    assert "s of CPU)" in str(stalled[0].fields["reason"]), stalled


def test_a_spin_that_gets_almost_no_cpu_is_acted_on_at_two_bounds() -> None:
    """A twentieth of a core (runnable all the time, ``cpu_starved``): the budget would take 10 bounds to
    burn; the stretch ends at 2x the bound."""
    d, e = _running(UNLEARNED, None, rate=100.0, budget=8192)
    e.share = 0.05
    bound = UNLEARNED.probes.step_factor * 8192 / UNLEARNED.probes.prefill_tokens_per_s
    e.submit(32, 100_000)
    e.submit(32, 100_000)
    e.run(60)
    e.spinning = True
    t0 = d.now
    e.run(2 * bound - 2 * UNLEARNED.probes.interval_s)
    assert d.st() == State.RUNNING, d.emits()
    assert d.s.stall.signal.startswith("no step") or "cpu_starved" in d.s.stall.signal, d.s.stall
    e.run(4 * UNLEARNED.probes.interval_s)
    assert "emergency.stop" in d.emits(), d.emits()
    assert d.now - t0 <= 2 * bound + 2 * UNLEARNED.probes.interval_s
