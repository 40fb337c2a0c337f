"""The follower's ring of recent kernel events, with plain values and a fake monotonic clock."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from supervisor.adapters.kernel_log.ring import KernelRing


@dataclass(frozen=True)
class Ev:
    ts: float
    name: str


class Mono:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_ring_is_bounded_and_keeps_the_newest() -> None:
    ring: KernelRing[Ev] = KernelRing(size=3)
    for i in range(5):
        ring.add(Ev(float(i), f"e{i}"))
    assert len(ring) == 3
    assert [e.name for e in ring.since(0.0, settle_s=0.0)] == ["e2", "e3", "e4"]


def test_since_filters_by_wall_time_oldest_first() -> None:
    mono = Mono()
    ring: KernelRing[Ev] = KernelRing(monotonic=mono)
    for ts, name in ((10.0, "old"), (20.0, "edge"), (30.0, "new")):
        ring.add(Ev(ts, name))
    ring.mark_drained(mono() + 1)
    assert [e.name for e in ring.since(20.0)] == ["edge", "new"]
    assert ring.since(31.0) == []


def test_since_waits_for_a_drain_stamped_after_the_call() -> None:
    """A drain stamped before the call does not count: the answer waits for the follower's next one."""
    mono = Mono()
    ring: KernelRing[Ev] = KernelRing(monotonic=mono)
    ring.mark_drained(99.0)  # before the call: the follower may not have read the newest line yet
    got: list[list[Ev]] = []
    asker = threading.Thread(target=lambda: got.append(ring.since(0.0, settle_s=30.0)))
    asker.start()
    asker.join(0.2)
    assert asker.is_alive()  # still waiting: no drain after the call yet
    ring.add(Ev(5.0, "read meanwhile"))
    ring.mark_drained(101.0)
    asker.join(10.0)
    assert not asker.is_alive()
    assert [e.name for e in got[0]] == ["read meanwhile"]


def test_since_gives_up_after_the_settle_time_with_what_it_has() -> None:
    ring: KernelRing[Ev] = KernelRing()
    ring.add(Ev(1.0, "kept"))
    assert [e.name for e in ring.since(0.0, settle_s=0.05)] == ["kept"]  # never drained: bounded wait
