"""The KV-pool lottery in the state machine: identity, baseline, verdict and redraw routing (plain values)."""

from __future__ import annotations

from supervisor.core.actions import Action, CreateAndStart, ReadKvBaseline, RecordStart, StopContainer
from supervisor.core.events import (
    ContainerExited,
    ContainerObserved,
    ContainerStarted,
    ContainerStopped,
    DaemonStarted,
    DrainProgress,
    FirstGeneration,
    KvBaseline,
    LogKvPool,
    LogReady,
    PreflightDone,
    RestartRequested,
    Settled,
    SlotAcquired,
    StopRequested,
)
from supervisor.core.states import State
from tests.test_machine_driver import OK_HEALTH, Driver, fresh_boot, policy

BIG, SMALL = 1_013_816, 557_599
LOTTERY = "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %)"
FP = "9c2e41d07a5b"


def _starting(d: Driver, cid: str = "c1", fp: str = FP) -> None:
    """Boot (if needed) and reach STARTING with a container that carries a fingerprint."""
    if d.st() == State.STOPPED:
        fresh_boot(d)
    assert d.st() == State.PREFLIGHT
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    d.send(ContainerStarted(cid, d.now, image_id="sha256:4f1c0d8e9a7b00", fingerprint=fp, gmu=0.73))


def _pool(tokens: int | None, conc: float | None = None) -> LogKvPool:
    return LogKvPool(tokens, conc, kv_gib=26.3 if tokens else None, model_gib=17.3 if tokens else None)


#: vLLM's "Actual usage" breakdown, printed after the pool line (the judgement waits for it or for ready).
USAGE = LogKvPool(None, None, usage=(("consumed", 19.84), ("activation", 3.1), ("cuda_graph", 0.95)))


def _serve(d: Driver) -> None:
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=90.0, error=None))
    assert d.st() == State.RUNNING


def test_container_started_asks_for_the_baseline_of_its_config() -> None:
    """The create job's fingerprint is kept and its baseline is read off the loop."""
    d = Driver()
    fresh_boot(d)
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    acts = d.send(ContainerStarted("c1", d.now, image_id="sha256:aa", fingerprint=FP, gmu=0.73))
    assert ReadKvBaseline(FP) in acts
    assert (d.s.kv.fingerprint, d.s.kv.image_id, d.s.kv.gmu) == (FP, "sha256:aa", 0.73)


def test_small_pool_after_baseline_alerts_with_both_numbers() -> None:
    """Baseline first, then the pool: one warning naming the pool, the baseline and the change."""
    d = Driver()
    _starting(d)
    d.send(KvBaseline(BIG, FP))
    assert not d.alerts(d.send(_pool(SMALL)))  # the memory breakdown comes after the pool line
    acts = d.send(USAGE)
    alerts = d.alerts(acts)
    assert [(a.severity, a.title, a.reason) for a in alerts] == [("warning", "KV pool lottery", LOTTERY)]
    assert "kv_pool.lottery" in d.emits(acts)
    assert d.st() == State.STARTING  # a warning, not a failure
    assert d.s.status_dict(d.now)["kv_pool"]["baseline_tokens"] == BIG


def test_pool_before_baseline_is_judged_when_the_baseline_arrives() -> None:
    """Pool first (the baseline read is still running): the verdict comes with the baseline."""
    d = Driver()
    _starting(d)
    assert not d.alerts(d.send(_pool(SMALL)))
    assert not d.alerts(d.send(LogReady()))  # no "Actual usage" line (a CPU worker): ready is enough
    acts = d.send(KvBaseline(BIG, FP))
    assert [a.reason for a in d.alerts(acts)] == [LOTTERY]


def test_verdict_is_given_once_per_start() -> None:
    """The second pool line (max concurrency) and a repeated baseline do not alert again."""
    d = Driver()
    _starting(d)
    d.send(KvBaseline(BIG, FP))
    d.send(_pool(SMALL))
    d.send(LogKvPool(SMALL, 2.13))
    d.send(KvBaseline(BIG, FP))
    _serve(d)
    assert len(d.alerts()) == 1
    assert d.emits().count("kv_pool.lottery") == 1


def test_baseline_of_another_config_is_ignored() -> None:
    """A late answer for another fingerprint neither sets the median nor judges the pool."""
    d = Driver()
    _starting(d)
    d.send(_pool(SMALL))
    acts = d.send(KvBaseline(BIG, "othercfg0000"))
    assert not d.alerts(acts)
    assert d.s.kv.baseline_tokens is None


def test_below_floor_wins_and_no_baseline_no_drop_alert() -> None:
    """Under warn_below_tokens: kv_pool.below_floor even on the first start (no baseline)."""
    d = Driver(policy=policy(kv_pool={"warn_below_tokens": 900_000}))
    _starting(d)
    d.send(KvBaseline(None, FP))
    d.send(_pool(SMALL))
    acts = d.send(LogReady())  # no "Actual usage" line: judged at the ready line
    assert "kv_pool.below_floor" in d.emits(acts)
    assert [a.title for a in d.alerts(acts)] == ["KV pool below floor"]
    assert d.alerts(acts)[0].reason == "KV pool below floor: 557,599 tokens, floor 900,000"


def test_first_start_and_a_bigger_pool_stay_quiet() -> None:
    """No earlier draw, or a pool bigger than usual: no verdict."""
    d = Driver()
    _starting(d)
    d.send(KvBaseline(None, FP))
    d.send(_pool(SMALL))
    _serve(d)
    d.send(RestartRequested())
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    _starting(d, "c2")
    d.send(KvBaseline(SMALL, FP))
    d.send(_pool(BIG))
    _serve(d)
    assert not d.alerts()
    assert d.s.status_dict(d.now)["kv_pool"]["baseline_tokens"] == SMALL


def test_ledger_row_carries_the_new_fields() -> None:
    """The ready row has kv GiB, model GiB, concurrency, gmu, image id and fingerprint."""
    d = Driver()
    _starting(d)
    d.send(_pool(SMALL))
    d.send(LogKvPool(SMALL, 2.13))
    d.advance(5)
    _serve(d)
    (row,) = d.records()
    assert (row.outcome, row.kv_tokens, row.max_concurrency) == ("ready", SMALL, 2.13)
    assert (row.kv_gib, row.model_gib, row.gmu) == (26.3, 17.3, 0.73)
    assert (row.image_id, row.fingerprint) == ("sha256:4f1c0d8e9a7b00", FP)
    assert row.load_s == 5.0


def test_redraw_is_a_restart_outside_the_breaker() -> None:
    """min_tokens: a small pool stops the start (pending redraw), records 'redrawn' and starts again."""
    d = Driver(policy=policy(kv_pool={"min_tokens": 900_000, "max_redraws": 2}))
    _starting(d)
    acts = d.send(_pool(SMALL))
    assert d.st() == State.STOPPING
    assert d.s.pending == "redraw"
    assert any(isinstance(a, StopContainer) for a in acts)
    assert "kv_pool.redraw" in d.emits(acts)
    assert not d.alerts(acts)
    d.send(LogKvPool(SMALL, 2.13))  # the concurrency line, while the stop runs
    acts = d.send(ContainerStopped())
    rows = [a for a in acts if isinstance(a, RecordStart)]
    assert [(r.outcome, r.kv_tokens, r.max_concurrency, r.fingerprint) for r in rows] == [
        ("redrawn", SMALL, 2.13, FP)
    ]
    assert d.st() == State.PREFLIGHT
    assert d.s.breaker.count(d.now) == 0
    assert d.s.restarts == 1
    assert d.s.kv.redraws == 1
    assert not d.alerts()
    assert "start.failed" not in d.emits()
    # the second draw is big: it serves, and the counter is reset
    _starting(d, "c2")
    d.send(KvBaseline(SMALL, FP))
    d.send(_pool(BIG))
    _serve(d)
    assert d.s.kv.redraws == 0
    assert [r.outcome for r in d.records()] == ["redrawn", "ready"]


def test_redraws_stop_after_max_redraws_then_serve_with_a_warning() -> None:
    """At most max_redraws in a row; then the small pool serves and a warning names both numbers."""
    d = Driver(policy=policy(kv_pool={"min_tokens": 900_000, "max_redraws": 2}))
    for cid in ("c1", "c2"):
        _starting(d, cid)
        d.send(_pool(SMALL))
        d.send(ContainerExited(exit_code=130, signal="15", oom_killed=False, container_id=cid))
        assert d.st() == State.PREFLIGHT
    _starting(d, "c3")
    acts = d.send(_pool(SMALL))
    assert d.st() == State.STARTING
    assert "kv_pool.redraw_gave_up" in d.emits(acts)
    (alert,) = d.alerts(acts)
    assert alert.severity == "warning"
    assert alert.reason == (
        "KV pool below kv_pool.min_tokens after 2 redraws: 557,599 tokens, minimum 900,000; serving anyway"
    )
    assert not alert.await_diagnosis
    _serve(d)
    assert [r.outcome for r in d.records()] == ["redrawn", "redrawn", "ready"]
    assert d.s.breaker.count(d.now) == 0
    assert d.s.kv.redraws == 0


def test_operator_stop_during_a_redraw_stops() -> None:
    """A stop asked while the redraw's stop runs ends STOPPED (the redrawn row is still written)."""
    d = Driver(policy=policy(kv_pool={"min_tokens": 900_000}))
    _starting(d)
    d.send(_pool(SMALL))
    d.send(StopRequested())
    d.send(ContainerStopped())
    assert d.st() == State.STOPPED
    assert [r.outcome for r in d.records()] == ["redrawn"]


def test_adopted_container_is_neither_judged_nor_redrawn() -> None:
    """A container found at daemon start was judged by the daemon that created it."""
    d = Driver(policy=policy(kv_pool={"min_tokens": 900_000, "warn_below_tokens": 900_000}))
    d.send(DaemonStarted(boot_changed=False))
    d.send(ContainerObserved(container_id="c9", running=True, exit_code=None))
    assert d.st() == State.STARTING
    acts = d.send(_pool(SMALL))
    acts += d.send(KvBaseline(BIG, None))
    assert d.st() == State.STARTING
    assert not d.alerts(acts)
    assert d.s.kv.tokens == SMALL
    assert d.s.kv.baseline_tokens == BIG  # the status still shows the baseline


def test_daemon_start_reads_the_baseline_of_the_persisted_start() -> None:
    """After a daemon restart the persisted start's baseline excludes its own ledger row."""
    d = Driver()
    _starting(d)
    d.send(KvBaseline(BIG, FP))
    d.send(_pool(BIG))
    _serve(d)
    acts = d.send(DaemonStarted(boot_changed=False))
    assert ReadKvBaseline(FP, exclude="c1") in acts
    d.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    d.send(KvBaseline(BIG, FP))
    assert d.s.kv.baseline_tokens == BIG
    assert not d.alerts()


# --- the "Actual usage" breakdown and kv_pool.pin ---------------------------------------------------

BEST_USAGE = (("free_at_start", 112.4), ("consumed", 19.84), ("activation", 3.1), ("cuda_graph", 0.95))
BAD_USAGE = LogKvPool(None, None, usage=(("free_at_start", 112.2), ("consumed", 32.84), ("activation", 3.1)))


def _bad_draw(d: Driver) -> list[Action]:
    """STARTING with the field's numbers: baseline 1,013,816 (its breakdown), pool 557,599, then the
    breakdown with 13 GiB more consumed memory; the actions of the breakdown line."""
    _starting(d)
    d.send(KvBaseline(BIG, FP, (), BEST_USAGE, 47.8))
    d.send(_pool(SMALL))
    return d.send(BAD_USAGE)


def test_the_alert_names_the_part_that_grew() -> None:
    """The breakdown of the bad draw against the best one: the consumed memory grew by 13 GiB."""
    d = Driver()
    (alert,) = d.alerts(_bad_draw(d))
    assert alert.reason == (
        LOTTERY
        + "; consumed memory (weights + non-torch) grew 19.84 -> 32.84 GiB (+13.0 GiB against the best draw)"
    )
    assert d.s.status_dict(d.now)["kv_pool"]["usage"] == {
        "free_at_start": 112.2,
        "consumed": 32.84,
        "activation": 3.1,
    }
    _serve(d)
    (row,) = d.records()
    assert dict(row.usage)["consumed"] == 32.84


def test_pin_advise_names_the_flag_and_changes_nothing() -> None:
    """advise: the alert says the --kv-cache-memory-bytes of the best draw (reserve kept); no pin is set."""
    d = Driver(policy=policy(kv_pool={"pin": "advise"}, host={"reserve_gib": 15.0}))
    (alert,) = d.alerts(_bad_draw(d))
    per_token = 26.3 * (1 << 30) / SMALL
    want = int(BIG * per_token // (1 << 20)) * (1 << 20)
    assert f"pin it with --kv-cache-memory-bytes {want} " in alert.reason
    assert d.s.kv.pin_bytes is None


def test_pin_apply_adds_the_flag_to_the_next_start_and_status_shows_it() -> None:
    """apply: the bad draw sets the pin; the next create carries it, status kv_pool.pin says it runs;
    switching the mode back to advise drops it at the following create."""
    d = Driver(policy=policy(kv_pool={"pin": "apply"}, host={"reserve_gib": 15.0}))
    (alert,) = d.alerts(_bad_draw(d))
    assert "next starts use --kv-cache-memory-bytes" in alert.reason
    pin = d.s.kv.pin_bytes
    assert pin is not None
    assert pin > 26.3 * (1 << 30)
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    d.advance(120)
    assert d.st() == State.PREFLIGHT
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    acts = d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    (create,) = [a for a in acts if isinstance(a, CreateAndStart)]
    assert create.kv_cache_memory_bytes == pin
    assert "kv_pool.pin_applied" in d.emits(acts)
    assert d.s.status_dict(d.now)["kv_pool"]["pin"] == {"bytes": pin, "running": True}
    d.policy = policy(kv_pool={"pin": "advise"})
    d.send(ContainerStarted("c2", d.now, fingerprint="pinned00000"))
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    d.advance(300)
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    acts = d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    (create,) = [a for a in acts if isinstance(a, CreateAndStart)]
    assert create.kv_cache_memory_bytes is None
    assert d.s.status_dict(d.now)["kv_pool"]["pin"] == {"bytes": None, "running": False}
