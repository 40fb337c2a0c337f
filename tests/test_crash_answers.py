"""A crashed pool job is answered (daemon/executor/jobs.py CRASH_ANSWERS): the machine handles the failure
answer
and is never left waiting, holding the load slot, for an answer that cannot come."""

from __future__ import annotations

from supervisor.core.actions import CreateAndStart, ReleaseSlot
from supervisor.core.events import PreflightDone, Settled, SlotAcquired
from supervisor.core.states import State
from supervisor.daemon.executor.answers import CRASH_ANSWERS
from tests.test_machine_driver import Driver, fresh_boot


def _preflight() -> Driver:
    d = Driver()
    fresh_boot(d)
    assert d.st() == State.PREFLIGHT
    return d


def _settling() -> Driver:
    d = _preflight()
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=80.0))
    d.send(SlotAcquired())
    assert d.st() == State.WAITING
    assert d.s.slot_held
    return d


def test_a_crashed_settle_releases_the_slot_and_postpones_the_start() -> None:
    d = _settling()
    acts = d.send(CRASH_ANSWERS["settle"]("internal error in settle: KeyError: 'x'"))
    assert any(isinstance(a, ReleaseSlot) for a in acts)
    assert not d.s.slot_held
    assert d.st() == State.BACKOFF
    assert not any(isinstance(a, CreateAndStart) for a in acts)


def test_a_crashed_preflight_does_not_leave_the_profile_in_preflight() -> None:
    d = _preflight()
    d.send(CRASH_ANSWERS["preflight"]("internal error in preflight: OSError"))
    assert d.st() in (State.BACKOFF, State.FATAL)
    assert not d.s.slot_held


def test_a_crashed_create_is_a_failed_start_that_frees_the_slot() -> None:
    d = _settling()
    acts = d.send(Settled(ok=True, detail="", mem_available_gib=80.0))
    assert any(isinstance(a, CreateAndStart) for a in acts)
    assert d.st() == State.STARTING
    d.send(CRASH_ANSWERS["create"]("internal error in create: ValueError: bad"))
    assert d.st() in (State.BACKOFF, State.FATAL)
    assert not d.s.slot_held
