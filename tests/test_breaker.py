"""Circuit breaker value: rolling window, latch, persistence."""

from __future__ import annotations

import pytest

from supervisor.core.breaker import Breaker
from supervisor.core.errors import StateError

T0 = 1_790_000_000.0


def test_opens_at_limit_within_window() -> None:
    """Three failures within two hours open the breaker."""
    b = Breaker(limit=3, window_s=7200)
    b = b.record(T0).record(T0 + 1000)
    assert not b.is_open(T0 + 1000)
    b = b.record(T0 + 7000)
    assert b.is_open(T0 + 7000)
    assert b.count(T0 + 7000) == 3


def test_failures_spread_over_more_than_window_do_not_open() -> None:
    """Three failures spread over more than the window never count together."""
    b = Breaker(limit=3, window_s=7200).record(T0).record(T0 + 3600).record(T0 + 7201)
    assert not b.is_open(T0 + 7201)
    assert b.count(T0 + 7201) == 2


def test_rolling_window_across_fixed_boundaries() -> None:
    """Failures on both sides of a would-be fixed window boundary still count (the bash bug)."""
    b = Breaker(limit=3, window_s=7200).record(T0 + 7000).record(T0 + 7300).record(T0 + 7500)
    assert b.is_open(T0 + 7500)


def test_open_breaker_latches_until_reset() -> None:
    """Once tripped the breaker stays open after the window slides past; reset closes it."""
    b = Breaker(limit=2, window_s=100).record(T0).record(T0 + 10)
    assert b.is_open(T0 + 10_000)
    assert b.count(T0 + 10_000) == 0
    r = b.reset()
    assert not r.is_open(T0 + 10_000)
    assert r.failures == ()


def test_record_prunes_old_failures() -> None:
    """Failures older than the window are forgotten on the next record."""
    b = Breaker(limit=5, window_s=100).record(T0).record(T0 + 50).record(T0 + 500)
    assert b.failures == (T0 + 500,)


def test_future_failures_count_after_clock_steps_back() -> None:
    """A failure stamped after ``now`` (clock stepped back) still counts."""
    b = Breaker(limit=2, window_s=100).record(T0 + 1000)
    b = b.record(T0)
    assert b.is_open(T0)


def test_dict_round_trip_and_bad_types() -> None:
    """to_dict/from_dict round-trip; wrong types raise StateError."""
    b = Breaker(limit=3, window_s=7200).record(T0).record(T0 + 1).record(T0 + 2)
    assert Breaker.from_dict(b.to_dict()) == b
    assert Breaker.from_dict({}) == Breaker()
    with pytest.raises(StateError):
        Breaker.from_dict({"failures": ["x"]})
    with pytest.raises(StateError):
        Breaker.from_dict({"limit": True})
    with pytest.raises(StateError):
        Breaker.from_dict([])
