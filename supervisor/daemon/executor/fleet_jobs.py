"""The fleet step's actions that are I/O: records and alerts written through
:class:`~supervisor.daemon.executor.records.Records`, log lines, and the pool jobs (a companion's GET) whose
answers come back to the inbox as fleet events. ``Dispatch`` is the loop's (it steps a profile's machine).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from supervisor.adapters.vllm import probes
from supervisor.core.fleet.actions import CheckCompanion, Dispatch, FleetAction, Log, Raise, Record
from supervisor.core.fleet.events import CompanionChecked, FleetEvent
from supervisor.core.fleet.policy import Companion
from supervisor.daemon.executor.records import Records

log = structlog.get_logger("supervisor.fleet")

#: Runs ``fn(*args)`` on the executor's pool, one job of ``kind`` at a time (``Effects.background``).
Background = Callable[..., None]
PostDaemon = Callable[[FleetEvent], None]


def check(companion: Companion, post: PostDaemon) -> None:
    """The pool job: one GET of a companion (no redirects followed), its answer posted to the loop."""
    c = companion
    r = probes.check_url(c.url, c.timeout_s, c.expect_status, redirects=False)
    post(CompanionChecked(c.profile, c.name, r.ok, r.status, r.error))


class FleetJobs:
    """Runs the fleet step's I/O actions (on the loop: inline bookkeeping, or a pool job)."""

    def __init__(self, records: Records, background: Background, post: PostDaemon) -> None:
        self.records = records
        self._background = background
        self._post = post

    def run(self, action: FleetAction) -> None:
        match action:
            case Record(profile=profile, name=name, fields=fields):
                self.records.emit(profile, name, fields)
            case Raise(profile=profile, alert=alert, container=container):
                self.records.alert(profile, container, alert, None)
            case Log(level=level, name=name, fields=fields):
                getattr(log, level)(name, **fields)
            case CheckCompanion(companion=c):
                self._background(f"companion-{c.key}", check, c, self._post)
            case Dispatch():
                raise TypeError("Dispatch is the loop's: it steps a profile's machine")
