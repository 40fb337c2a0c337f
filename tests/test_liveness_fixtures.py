"""Replay what real vLLM 0.32 showed (tests/fixtures/progress, docs/vllm-facts.md "Forward progress")
through the pure machine with the shipped probe defaults: the prefills and the saturation are never
acted on; each freeze shape is acted on within 30 s of the SIGSTOP.

The recorded freezes lasted 10-20 s; past their SIGCONT the replay holds the last frozen reading (the CPU
time growing at the 0.025 cores measured while frozen) so the 30 s bound can be checked. A canary the
machine sends is answered as the real one was: after the SIGCONT when sent into a frozen engine, when
the generation counter next moves when sent into a busy one, in 0.1 s into an idle one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from supervisor.core.actions import RunProbeRound
from supervisor.core.events import GenerationDone, ProbeRound, Tick
from supervisor.core.machine import Policy
from supervisor.core.states import State
from supervisor.core.vllm.cmdline import engine_shape
from tests.test_machine_driver import Driver, fresh_boot, policy

FIXTURES = Path(__file__).parent / "fixtures" / "progress"
SHIPPED = policy(probes={"interval_s": 5.0, "failure_threshold": 4}, engine={"max_model_len": 16384})
FROZEN_CPU_CORES = 0.025
#: A spinning engine core burns a core (1.0 measured, tests/fixtures/progress/spin-spin_busy.json).
SPIN_CPU_CORES = 1.0
HOLD_S = 45.0


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return doc


def _event_t(doc: dict[str, Any], event: str) -> float | None:
    return next((e["t"] for e in doc["events"] if e["event"] == event), None)


class Replay:
    def __init__(self, doc: dict[str, Any], policy: Policy) -> None:
        self.doc = doc
        self.samples = doc["samples"]
        spin = _event_t(doc, "spin.start")  # the engine core's step spinning (issue 35): a core burns
        self.stop = spin if spin is not None else _event_t(doc, "sigstop")
        self.cont = _event_t(doc, "spin.stop") if spin is not None else _event_t(doc, "sigcont")
        self.held_cores = SPIN_CPU_CORES if spin is not None else FROZEN_CPU_CORES
        self.api = any(e.get("pid") == "api" for e in doc["events"] if e["event"] == "sigstop")
        self.d = Driver(policy=policy)
        fresh_boot(self.d)
        self.d.to_running()
        self.t0 = self.d.now
        self.canaries: list[float] = []  # answer times (fixture seconds)
        self.round_t: float | None = None

    def _frozen(self, t: float) -> bool:
        return self.stop is not None and t >= self.stop and (self.cont is None or t < self.cont or self.held)

    def sample(self, t: float) -> dict[str, Any]:
        """The reading at fixture time ``t`` (the last frozen one, its CPU growing, when held)."""
        if self.held and self.cont is not None and t >= self.cont:
            last = [s for s in self.samples if s["t"] < self.cont][-1]
            cpu = last["cpu_s"] + self.held_cores * (t - last["t"]) if last["cpu_s"] is not None else None
            return {**last, "cpu_s": cpu, "health": None if self.api else last["health"]}
        before = [s for s in self.samples if s["t"] <= t]
        found: dict[str, Any] = before[-1] if before else self.samples[0]
        return found

    def _canary_answer(self, t: float) -> float | None:
        if self._frozen(t):
            return None if self.held else self.cont
        s = self.sample(t)
        if not (s["running"] or s["waiting"]) and not self._cpu_busy(t):
            return t + 0.1
        later = [x["t"] for x in self.samples if x["t"] > t and x["gen"] != s["gen"]]
        return later[0] if later else None

    def _cpu_busy(self, t: float) -> bool:
        a, b = self.sample(t - 1.0), self.sample(t)
        if a["cpu_s"] is None or b["cpu_s"] is None or b["t"] <= a["t"]:
            return False
        return bool((b["cpu_s"] - a["cpu_s"]) / (b["t"] - a["t"]) >= 0.2)

    def run(self, until: float, held: bool) -> None:
        self.held = held
        t = 0.0
        while t < until and self.d.st() in (State.RUNNING, State.DEGRADED):
            t += 0.5
            self.d.now = self.t0 + t
            for at in [a for a in self.canaries if a <= t]:
                self.canaries.remove(at)
                self.d.send(GenerationDone(True, 50.0, None))
            for a in self.d.send(Tick()):
                if isinstance(a, RunProbeRound):
                    self._round(t, a)

    def _demand(self, t: float) -> float | None:
        """The busiest thread's runnable share since the last round: the mean of the recorded half-second
        shares in between (None where the fixture has none; held frozen past the SIGCONT)."""
        since, self.round_t = self.round_t, t
        if since is None:
            return None
        if self.held and self.cont is not None and t >= self.cont:
            since, t = self.cont - 1.0, self.cont  # held frozen: the last second before the thaw
        found = [s.get("thread_busy") for s in self.samples if since < s["t"] < t + 1e-9]
        shares = [x for x in found if x is not None]
        return sum(shares) / len(shares) if shares else None

    def _round(self, t: float, a: RunProbeRound) -> None:
        s = self.sample(t)
        if s["health"] != 200:
            self.d.send(ProbeRound(False, None, None, None, None, None, None, None))
            return
        ev = ProbeRound(
            True, 200, None, None, None, s["running"], s["waiting"], s["gen"],
            prompt_tokens_total=s["prompt"], iterations_total=s["iters"], kv_usage=s["kv"], cpu_s=s["cpu_s"],
            thread_demand=self._demand(t),
        )  # fmt: skip
        self.d.send(ev)
        if a.generation:
            at = self._canary_answer(t)
            if at is not None:
                self.canaries.append(at)


@pytest.mark.parametrize(
    "name",
    ["chunked-prefill", "monolithic-prefill", "chunked-saturation", "starved-prefill"],
)
def test_recorded_prefills_and_saturation_are_never_acted_on(name: str) -> None:
    doc = _load(name)
    r = Replay(doc, SHIPPED)
    r.run(doc["samples"][-1]["t"], held=False)
    assert r.d.st() == State.RUNNING, r.d.emits()
    assert "probe.failed" not in r.d.emits()


@pytest.mark.parametrize(
    "name",
    [
        f"{run}-{shape}"
        for run in ("chunked", "monolithic")
        for shape in ("freeze_busy", "freeze_idle", "freeze_api")
    ]
    + ["starved-freeze_busy", "spin-spin_busy"],
)
def test_recorded_freezes_are_acted_on_within_30_s(name: str) -> None:
    """``spin-spin_busy``: the engine core's step spinning on the CPU with two requests running (the test
    overlay tools/overlays/spin on the tiny model, chunked prefill on, --max-model-len 512): /health 200,
    a core burning, no counter moving; acted on by the longest-step bound (15 s: its floor)."""
    shape = name.split("-", 1)[1]
    doc = _load(name)
    shape_ = engine_shape(tuple(doc["argv"]))
    pol = replace(
        SHIPPED,
        engine=replace(
            SHIPPED.engine, chunked_prefill=shape_.chunked_prefill, max_model_len=shape_.max_model_len
        ),
    )
    r = Replay(doc, pol)
    assert r.stop is not None
    r.run(r.stop + HOLD_S, held=True)
    assert r.d.st() == State.STOPPING, r.d.emits()
    took = r.d.now - r.t0 - r.stop
    extra = SHIPPED.probes.interval_s if shape == "freeze_api" else 0.0  # the real /health timeout
    assert took + extra <= 30.0, took
