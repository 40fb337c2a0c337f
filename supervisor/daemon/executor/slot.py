"""The load slot: one model load at a time on this host (docs/state-machine.md "Start sequence").

Host-wide it is a non-blocking flock on ``/run/vllm-supervisor/load.lock``
(:class:`supervisor.adapters.host.system.LoadLock`), so a restore script or a second daemon waits too; the
lock's note names the profile of this daemon that holds it. Which profile holds it is the machine's
``ProfileState.slot_held`` (what the status shows): no other record is kept. Never blocks.
"""

from __future__ import annotations

from supervisor.adapters.host import system as host


def _note(name: str) -> str:
    return f"daemon profile {name}"  # the lock file's note: who a waiting restore waits for


def take(lock: host.LoadLock, name: str) -> bool:
    """The slot for ``name``: True when it was free (now taken) or is already its own."""
    if lock.held:
        return lock.owner == _note(name)
    lock.owner = _note(name)
    return lock.try_acquire()


def give_back(lock: host.LoadLock, name: str) -> None:
    """Release the slot if ``name`` holds it."""
    if lock.held and lock.owner == _note(name):
        lock.release()
