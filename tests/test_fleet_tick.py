"""The fleet step's tick and the sentinel's answers, pure (plain values, times as numbers): daemon.started
once every profile was looked at (or after the settle timeout), the heartbeat's verdict every tick, the
digest at its minute, a sentinel round when due and its answer judged (a late one dropped)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeVar

from supervisor.core.fleet.actions import (
    Announce,
    AppendPerf,
    Beat,
    Dispatch,
    FleetAction,
    Raise,
    Record,
    RunCanary,
    SendDigest,
)
from supervisor.core.fleet.events import CanaryMeasured, Tick
from supervisor.core.fleet.policy import Canary, FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step
from supervisor.core.profile_state import ProfileState
from supervisor.core.sentinel.judge import Sample, SentinelPolicy
from supervisor.core.states import State

T0 = 1_790_000_000.0
A = TypeVar("A")
CID = "c0ffee0123456789"


def _of(actions: list[FleetAction], kind: type[A]) -> list[A]:
    return [a for a in actions if isinstance(a, kind)]


def _running(fingerprint: str | None = None) -> ProfileState:
    s = ProfileState.initial("p", T0)
    return replace(
        s, state=State.RUNNING, booting=False, container_id=CID, kv=replace(s.kv, fingerprint=fingerprint)
    )


def test_started_is_announced_once_when_every_profile_was_looked_at_or_after_the_timeout() -> None:
    policy = FleetPolicy(settle_timeout_s=30.0)
    booting = {"p": replace(ProfileState.initial("p", T0), booting=True)}  # not looked at yet
    fleet, out = step(FleetState(), Tick(), T0, booting, policy)
    assert _of(out, Announce) == []
    fleet, out = step(fleet, Tick(), T0 + 31, booting, policy)
    assert _of(out, Announce) == [Announce(booting, 31.0)]
    assert _of(step(fleet, Tick(), T0 + 32, booting, policy)[1], Announce) == []
    looked_at = {"p": _running()}
    assert len(_of(step(FleetState(), Tick(), T0, looked_at, policy)[1], Announce)) == 1


def test_the_heartbeat_verdict_goes_out_every_tick_and_fails_after_fail_after_s() -> None:
    policy = FleetPolicy(heartbeat=True, fail_after_s=120.0)
    down = {"p": replace(ProfileState.initial("p", T0), state=State.BACKOFF, booting=False)}
    fleet, out = step(FleetState(), Tick(), T0, down, policy)
    assert _of(out, Beat) == [Beat(False, (), "p: BACKOFF")]
    fleet, out = step(fleet, Tick(), T0 + 121, down, policy)
    (beat,) = _of(out, Beat)
    assert beat.failing
    assert "p not serving for 2 min" in beat.reasons[0]
    assert _of(step(FleetState(), Tick(), T0, down, FleetPolicy())[1], Beat) == []  # no heartbeat configured


def test_the_digest_goes_out_at_its_minute_once_a_day() -> None:
    at = datetime.fromtimestamp(T0 + 1800, UTC)  # half an hour from now, to the minute
    policy = FleetPolicy(digest_at=(at.hour, at.minute), digest_tz=UTC)
    fleet, out = step(FleetState(), Tick(), T0, {}, policy)  # scheduled, not sent
    assert _of(out, SendDigest) == []
    due = fleet.digest_next
    assert due is not None
    assert T0 < due <= T0 + 1800
    fleet, out = step(fleet, Tick(), due - 1, {}, policy)
    assert _of(out, SendDigest) == []
    fleet, out = step(fleet, Tick(), due, {}, policy)
    assert len(_of(out, SendDigest)) == 1
    assert fleet.digest_next == due + 86400


def test_a_sentinel_round_when_due_and_its_answers_judged() -> None:
    judge = SentinelPolicy(warmup_s=60.0, interval_s=600.0, decay_pct=30.0)
    policy = FleetPolicy(canaries=(Canary("p", "vllm-p", True, judge, 30.0),))
    profiles = {"p": _running("fp1")}
    fleet, out = step(FleetState(), Tick(), T0, profiles, policy)
    assert _of(out, RunCanary) == []  # warming up
    fleet, out = step(fleet, Tick(), T0 + 61, profiles, policy)
    assert _of(out, RunCanary) == [RunCanary("p", CID, True, "fp1")]
    answer = CanaryMeasured("p", CID, sample=Sample(T0 + 62, 80.0, 50.0, 64), loaded=True, history=(50.0,))
    fleet, out = step(fleet, answer, T0 + 62, profiles, policy)
    (row,) = _of(out, AppendPerf)
    assert (row.row["container_id"], row.row["decode_tps"]) == (CID, 50.0)
    assert [a.name for a in _of(out, Record)] == ["sentinel.sample"]
    late = CanaryMeasured("p", "an-earlier-container", sample=Sample(T0 + 63, 80.0, 1.0, 64))
    assert step(fleet, late, T0 + 63, profiles, policy) == (fleet, [])
    busy = CanaryMeasured("p", CID, busy=True)
    fleet, out = step(fleet, busy, T0 + 64, profiles, policy)
    assert out == []
    assert fleet.perf["p"].next_at == T0 + 64 + 30.0
    failed = CanaryMeasured("p", CID, error="HTTP 500")
    assert step(fleet, failed, T0 + 65, profiles, policy)[1] == [
        Record("p", "sentinel.failed", {"error": "HTTP 500"})
    ]
    assert _of(step(fleet, failed, T0 + 65, profiles, policy)[1], Raise) == []


def _slow_run(last_restart: float | None) -> tuple[FleetState, list[FleetAction], list[AppendPerf]]:
    """Four slow canaries (10 tok/s against 50) of a run whose first answer read ``last_restart``."""
    judge = SentinelPolicy(
        warmup_s=60.0, interval_s=600.0, decay_pct=30.0, on_decay="restart", min_restart_interval_s=21600.0
    )
    policy = FleetPolicy(canaries=(Canary("p", "vllm-p", True, judge, 30.0),))
    profiles = {"p": _running("fp1")}
    fleet, _ = step(FleetState(), Tick(), T0, profiles, policy)
    fleet, _ = step(fleet, Tick(), T0 + 61, profiles, policy)
    rows: list[AppendPerf] = []
    out: list[FleetAction] = []
    for k in range(4):
        ev = CanaryMeasured("p", CID, sample=Sample(T0 + 62 + k, 80.0, 10.0, 64))
        if k == 0:
            ev = replace(ev, loaded=True, history=(50.0,), last_restart=last_restart)
        fleet, got = step(fleet, ev, T0 + 62 + k, profiles, policy)
        rows += _of(got, AppendPerf)
        out += got
    return fleet, out, rows


def test_the_sentinel_restart_budget_survives_a_daemon_restart() -> None:
    """The run's first answer carries the perf ledger's last restart (issue 37): a SLOW profile restarted
    an hour before the daemon came back is not restarted again within min_restart_interval_s; without
    one it is, and the ledger row of the sample that decided it says so (``restart``)."""
    fleet, out, rows = _slow_run(T0 - 3600)
    assert fleet.perf["p"].slow
    assert fleet.perf["p"].last_restart_at == T0 - 3600
    assert _of(out, Dispatch) == []
    assert not any(r.row["restart"] for r in rows)
    fleet, out, rows = _slow_run(None)
    assert len(_of(out, Dispatch)) == 1
    assert [r.row["restart"] for r in rows].count(True) == 1
