"""Backoff value: capped exponential delays, reset, persistence."""

from __future__ import annotations

import pytest

from supervisor.core.backoff import Backoff
from supervisor.core.errors import StateError

T0 = 1_790_000_000.0


def test_delays_double_and_cap() -> None:
    """30, 60, 120, ... capped at 900 seconds."""
    b = Backoff()
    delays = []
    for i in range(8):
        b = b.next(T0 + i, 30, 2, 900)
        assert b.retry_at is not None
        delays.append(b.retry_at - (T0 + i))
    assert delays == [30, 60, 120, 240, 480, 900, 900, 900]
    assert b.attempt == 8


def test_huge_attempt_does_not_overflow() -> None:
    """A very long failure streak still yields the cap."""
    assert Backoff.delay_for(10_000, 30, 2, 900) == 900


def test_reset() -> None:
    """reset forgets the streak."""
    b = Backoff().next(T0, 30, 2, 900).reset()
    assert b == Backoff(attempt=0, retry_at=None)


def test_dict_round_trip_and_bad_types() -> None:
    """to_dict/from_dict round-trip; wrong types raise StateError."""
    b = Backoff().next(T0, 30, 2, 900)
    assert Backoff.from_dict(b.to_dict()) == b
    assert Backoff.from_dict({}) == Backoff()
    with pytest.raises(StateError):
        Backoff.from_dict({"attempt": -1})
    with pytest.raises(StateError):
        Backoff.from_dict({"retry_at": "soon"})
    with pytest.raises(StateError):
        Backoff.from_dict(None)
