"""The heartbeat's verdict, pure: FAIL when a profile is FATAL or has wanted to run without serving for
``fail_after_s``; remembered across state flips; a DEGRADED server still serves; a stop is on purpose."""

from __future__ import annotations

import dataclasses

from supervisor.core.breaker import Breaker
from supervisor.core.fleet.heartbeat import DEFAULT_FAIL_AFTER_S, HeartbeatVerdict, ServingWatch
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State

T0 = 1_790_000_000.0


def _s(state: State, since: float = T0, **kw: object) -> ProfileState:
    base = ProfileState.initial("p", T0)
    return dataclasses.replace(base, state=state, since=since, **kw)  # type: ignore[arg-type]


def _run(watch: ServingWatch, timeline: list[tuple[float, ProfileState]]) -> tuple[ServingWatch, bool]:
    """Feed (time, state) ticks to the watch; the last verdict's ``failing``."""
    failing = False
    for t, s in timeline:
        watch = watch.observe({"p": s}, t)
        failing = watch.verdict({"p": s}, t).failing
    return watch, failing


def test_default_is_the_default_startup_deadline() -> None:
    assert ServingWatch().fail_after_s == DEFAULT_FAIL_AFTER_S == 1800.0


def test_serving_profiles_are_well_and_degraded_still_serves() -> None:
    watch = ServingWatch(600)
    for state in (State.RUNNING, State.DEGRADED):
        s = _s(state)
        watch = watch.observe({"p": s}, T0 + 5000)
        assert watch.verdict({"p": s}, T0 + 5000) == HeartbeatVerdict(False, ())
        assert watch.since("p") is None


def test_fatal_fails_at_once_and_says_why() -> None:
    tripped = Breaker(limit=3, window_s=7200, failures=(T0, T0 + 1, T0 + 2), tripped_at=T0 + 2)
    s = _s(State.FATAL, since=T0, breaker=tripped)
    watch = ServingWatch(600).observe({"p": s}, T0 + 120)
    v = watch.verdict({"p": s}, T0 + 120)
    assert v.failing
    assert v.reasons == ("p FATAL for 2 min (circuit breaker open, 3/3)",)
    assert v.body("vllm-supervisor 0.1.0 pid 1", "p: FATAL") == (
        "vllm-supervisor 0.1.0 pid 1: FAIL: p FATAL for 2 min (circuit breaker open, 3/3)\np: FATAL"
    )


def test_not_serving_fails_after_fail_after_s_even_across_state_flips() -> None:
    """A start that fails and retries never serves: BACKOFF/PREFLIGHT/STARTING flips do not reset the
    clock (the profile's own ``since`` does), so the heartbeat turns red after fail_after_s."""
    timeline = [
        (T0, _s(State.PREFLIGHT, T0)),
        (T0 + 100, _s(State.STARTING, T0 + 100)),
        (T0 + 400, _s(State.BACKOFF, T0 + 400)),
        (T0 + 500, _s(State.PREFLIGHT, T0 + 500)),
        (T0 + 599, _s(State.STARTING, T0 + 599)),
    ]
    watch, failing = _run(ServingWatch(600), timeline)
    assert not failing
    assert watch.since("p") == T0
    s = _s(State.STARTING, T0 + 599)
    watch = watch.observe({"p": s}, T0 + 600)
    v = watch.verdict({"p": s}, T0 + 600)
    assert v.failing
    assert v.reasons == ("p not serving for 10 min (STARTING, wants to run)",)


def test_serving_once_resets_the_clock() -> None:
    timeline = [
        (T0, _s(State.STARTING)),
        (T0 + 500, _s(State.RUNNING)),
        (T0 + 550, _s(State.BACKOFF)),
        (T0 + 1100, _s(State.STARTING)),
    ]
    watch, failing = _run(ServingWatch(600), timeline)
    assert not failing
    assert watch.since("p") == T0 + 550
    _, failing = _run(watch, [(T0 + 1150, _s(State.STARTING))])
    assert failing


def test_a_stop_on_purpose_is_well() -> None:
    _, failing = _run(
        ServingWatch(60),
        [(T0, _s(State.STOPPED, intent="stop")), (T0 + 9999, _s(State.STOPPED, intent="stop"))],
    )
    assert not failing


def test_a_profile_not_looked_at_yet_counts_as_not_serving() -> None:
    """Docker silent since the daemon started: the recorded RUNNING is not proof of serving."""
    s = _s(State.RUNNING, booting=True)
    watch, failing = _run(ServingWatch(60), [(T0, s), (T0 + 59, s)])
    assert not failing
    _, failing = _run(watch, [(T0 + 60, s)])
    assert failing
    assert watch.verdict({"p": s}, T0 + 61).reasons == (
        "p not serving for 1 min (not looked at yet, wants to run)",
    )


def test_a_backwards_clock_never_leaves_a_future_start() -> None:
    watch = ServingWatch(60).observe({"p": _s(State.STARTING)}, T0 + 100)
    watch = watch.observe({"p": _s(State.STARTING)}, T0)  # the wall clock stepped back
    assert watch.since("p") == T0


def test_removed_profiles_are_forgotten() -> None:
    watch = ServingWatch(60).observe({"p": _s(State.STARTING)}, T0)
    assert watch.observe({}, T0 + 1).down_since == ()
