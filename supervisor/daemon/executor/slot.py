"""The load slot: one model load at a time on this host (docs/state-machine.md "Start sequence").

The holder is kept in process (one profile of this daemon at a time) and host-wide by a non-blocking
flock on ``/run/vllm-supervisor/load.lock`` (:class:`supervisor.adapters.host.system.LoadLock`), so a restore
script or a second daemon waits too. Runs inline on the loop: it never blocks.
"""

from __future__ import annotations

from supervisor.adapters.host import system as host


class SlotManager:
    """One model load at a time on this host: in-process holder plus a host-wide flock (never blocks)."""

    def __init__(self, lock: host.LoadLock) -> None:
        self._lock = lock
        self.holder: str | None = None

    def try_acquire(self, name: str) -> bool:
        if self.holder == name:
            return True
        if self.holder is not None:
            return False
        self._lock.owner = f"daemon profile {name}"  # the lock file's note: who a waiting restore waits for
        if not self._lock.try_acquire():
            return False
        self.holder = name
        return True

    def release(self, name: str) -> None:
        if self.holder == name:
            self.holder = None
            self._lock.release()
