"""The failed start's log, copied to the archive before the next start removes the container (a pool job):
``<state_dir>/logs/<profile>/`` (adapters/store/log_archive.py), then ``log.archived`` in the history."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.store.log_archive import LogArchive
from supervisor.core import actions as A
from supervisor.core.clock import Clock
from supervisor.core.errors import StateError, SupervisorError
from supervisor.core.events import Event
from supervisor.daemon.executor.records import Records

log = structlog.get_logger("supervisor.effects")

#: Lines of a failed container's log copied to the archive (it keeps the last ``max_bytes`` of them).
ARCHIVE_TAIL_LINES = 20_000


@dataclass(frozen=True)
class LogCopy:
    """What the copy needs: Docker (the log), the archive, the history, the clock."""

    docker: DockerAdapter
    archive: LogArchive | None
    records: Records
    clock: Clock

    def save(self, name: str, rec: A.RecordStart, tail: list[str]) -> list[Event]:
        """Copy the failed container's log (or, when it is gone, the watcher's ``tail``); answers nothing."""
        if self.archive is None or (rec.container_id is None and not tail):
            return []
        lines: list[str] | None = None
        if rec.container_id is not None:
            try:
                # the end only (the archive keeps the end): a run of weeks is never read whole
                lines = list(self.docker.logs(rec.container_id, tail=ARCHIVE_TAIL_LINES))
            except SupervisorError as exc:  # gone already: the watcher's tail is what is left
                log.warning("log.archive_source_missing", profile=name, error=str(exc))
        try:
            saved = self.archive.save(name, rec.container_id, rec.outcome, self.clock.now(), lines or tail)
        except StateError as exc:
            log.error("log.archive_failed", profile=name, error=str(exc))
            return []
        self.records.emit(
            name,
            "log.archived",
            {"file": saved.path.name, "container_id": rec.container_id, "outcome": rec.outcome},
        )
        return []
