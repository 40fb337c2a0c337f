"""Last known good in the machine: which spec a start creates, saving a good one, forgetting a rollback.

The verdict on a failed start of a changed config is pure (:mod:`supervisor.core.spec.last_good`) and applied
in :meth:`Step.fail`; here are the other transitions. See docs/operations.md "Last known good".
"""

from __future__ import annotations

from supervisor.core.actions import SaveLastGood
from supervisor.core.events import LastGoodSaved
from supervisor.core.machine.builder import Step
from supervisor.core.spec.last_good import SPEC_LAST_GOOD, SPEC_PROFILE
from supervisor.core.states import CONTAINER_UP_STATES, State


def spec_for_start(c: Step) -> bool:
    """WAITING -> STARTING: True when this start creates the last known good (a rollback is on)."""
    use = c.s.last_good_next and c.s.last_good_fingerprint is not None
    c.set(running_spec=SPEC_LAST_GOOD if use else SPEC_PROFILE)
    if use:
        c.emit("last_good.start", fingerprint=c.s.last_good_fingerprint)
    return use


def on_ready(c: Step) -> None:
    """A start of ours reached RUNNING: a start from the profile becomes the last known good."""
    if c.s.adopted or c.s.container_id is None:
        return
    c.set(changed_failures=0)
    if c.s.running_spec == SPEC_PROFILE:
        c.do(SaveLastGood(c.s.container_id))


def on_saved(c: Step, ev: LastGoodSaved) -> None:
    """The store kept the spec: later failed starts are compared with this fingerprint."""
    c.set(last_good_fingerprint=ev.fingerprint)


def forget_rollback(c: Step, reason: str) -> None:
    """The config changed again, or an operator start/reset: the next start uses the profile again.

    A last-known-good container that is up keeps running (``running_spec`` stays until the next start).
    """
    if c.s.state in CONTAINER_UP_STATES and reason != "config changed":
        return
    if c.s.state == State.FATAL and reason == "operator start":
        return  # refused: the breaker is open
    if c.s.last_good_next or c.s.changed_failures:
        c.set(last_good_next=False, changed_failures=0)
        c.emit("last_good.cleared", reason=reason)
