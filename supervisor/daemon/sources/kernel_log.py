"""The kernel-log follower of the daemon: classified kernel events go to the inbox as daemon envelopes.

It runs for as long as the daemon runs, not only while a profile is up: an Xid or an
NV_ERR_NO_MEMORY logged between two starts (or a driver error at boot) belongs in the history and in
the kernel-event counter as much as one logged while serving, and a failed start looks back a little
before its container was created. Its position (boot id + last record) is kept in the state dir so a
restarted daemon reports what was logged while it was down, and nothing twice. A kernel log the
daemon may not read is reported once (``kernel_log.unavailable``) and supervision goes on without it.
The follower's ring of recent classified events is what a failed start's diagnosis reads
(:meth:`KernelWatch.recent_lines`): no ``dmesg`` run per failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from supervisor.adapters.kernel_log.follower import KMSG, KernelLogEvent, KernelLogFollower, KmsgPosition
from supervisor.adapters.kernel_log.ring import KernelRing
from supervisor.adapters.store.state import Store
from supervisor.core.errors import StateError
from supervisor.core.fleet.events import FleetEvent, KernelLine, Noted
from supervisor.core.host.attribution import OTHER, attribute
from supervisor.core.host.kernel_log import KernelEvent, KernelKind, is_vllm_process, kernel_summary

log = structlog.get_logger("supervisor.kernel")

#: The follower's position is written at most this often (and at shutdown).
SAVE_EVERY_S = 10.0


def history_fields(ev: KernelLogEvent) -> tuple[str, dict[str, object]]:
    """One classified kernel message's summary and its history event's fields (``kernel.<kind>``)."""
    summary = kernel_summary(ev.kind, ev.xid, ev.pid, ev.proc_name)
    fields: dict[str, object] = {"summary": summary, "xid": ev.xid, "pid": ev.pid, "proc_name": ev.proc_name}
    fields |= {"pci": ev.pci, "seq": ev.seq, "kernel_ts": ev.ts, "line": ev.line[:500]}
    return summary, fields


def kernel_line(ev: KernelLogEvent) -> KernelLine:
    """The fleet step's view of one classified kernel message (all it needs to tell whose it is)."""
    summary, fields = history_fields(ev)
    named = KernelEvent(KernelKind(ev.kind), ev.xid, ev.pci, ev.pid, ev.proc_name, ev.line)
    vllm = is_vllm_process(named) if ev.proc_name is not None else None
    return KernelLine(ev.kind, summary, ev.line, ev.ts, fields, ev.pid, vllm, ev.lookup, ev.backlog)


def whose_line(ev: KernelLogEvent, containers: Mapping[str, str | None]) -> dict[str, str]:
    """Each profile's share of one classified kernel line (ours | other | nobody: core/host/attribution.py),
    from the pid lookup the follower made when it read the line. ``containers``: profile -> container id."""
    named = KernelEvent(KernelKind(ev.kind), ev.xid, ev.pci, ev.pid, ev.proc_name, ev.line)
    vllm = is_vllm_process(named) if ev.proc_name is not None else None
    return attribute(ev.pid, vllm, ev.lookup, containers)


def start_lines(events: Iterable[KernelLogEvent], container_id: str | None) -> list[str]:
    """The kernel lines a start of ``container_id`` may be diagnosed from: every line but those that name
    another process (an OOM kill of a host job, a process of another container: ``other``), which the
    history keeps but which are not this start's cause. No container id: every line."""
    if container_id is None:
        return [ev.raw for ev in events]
    return [ev.raw for ev in events if whose_line(ev, {"start": container_id})["start"] != OTHER]


class KernelWatch:
    """Owns the :class:`KernelLogFollower`; ``poll`` (from the loop's tick) says what to record."""

    def __init__(self, store: Store, post: Callable[[FleetEvent], None], path: Path = KMSG) -> None:
        self._store = store
        self._post = post
        self._path = path
        self._follower: KernelLogFollower | None = None
        self._reported: str | None = None  # the mode last reported ("kmsg", "dmesg", "none")
        self._saved: KmsgPosition | None = None
        self._saved_at = 0.0
        self._ring: KernelRing[KernelLogEvent] = KernelRing()

    def start(self) -> None:
        """Start following from the saved position (none: only new records)."""
        saved = self._store.load_kmsg_position()
        position = KmsgPosition.from_dict(saved) if saved else None
        self._saved = position
        post = self._post
        self._follower = KernelLogFollower(
            lambda ev: post(kernel_line(ev)),
            position,
            on_lost=lambda n: post(Noted("kernel_log.lost", {"records": n})),
            # another's flood, beyond its quota (core/host/kernel_quota.py): one history event per window
            on_held=lambda held: post(Noted("kernel.held_back", {"kind": held[0], "lines": held[1]})),
            path=self._path,
            ring=self._ring,
        )
        self._follower.start()

    def poll(self, mono: float) -> list[tuple[str, dict[str, object]]]:
        """History events to record now (mode changes, once each); saves the position when due."""
        f = self._follower
        if f is None:
            return []
        out: list[tuple[str, dict[str, object]]] = []
        if f.mode not in (self._reported, "starting"):
            self._reported = f.mode
            if f.mode == "none":
                log.warning("kernel_log.unavailable", error=f.error)
                out.append(("kernel_log.unavailable", {"error": f.error}))
            else:
                out.append(("kernel_log.following", {"source": f.mode}))
        if mono - self._saved_at >= SAVE_EVERY_S:
            self._save(mono)
        return out

    def recent_lines(self, since_ts: float, container_id: str | None = None) -> list[str] | None:
        """The kernel lines of interest logged since wall time ``since_ts``, as read, less those naming a
        process other than ``container_id``'s (:func:`start_lines`), for a failed start's ``diagnose``;
        None when the kernel log is not followed (unreadable: the diagnosis says nothing of the kernel).

        Waits up to a second for the follower to read what was logged before the call (any thread)."""
        f = self._follower
        if f is None or f.mode not in ("kmsg", "dmesg"):
            return None
        return start_lines(self._ring.since(since_ts), container_id)

    def stop(self) -> None:
        """Stop the follower and keep its position for the next daemon."""
        if self._follower is not None:
            self._follower.stop()
            self._save(0.0)

    def status(self) -> dict[str, Any]:
        """For the status document: how the kernel log is followed and what was seen."""
        f = self._follower
        if f is None:
            return {"mode": "off"}
        return {
            "mode": f.mode,
            "error": f.error,
            "events": f.events_total,
            "lost": f.lost_total,
            "held_back": f.held_total,
        }

    def _save(self, mono: float) -> None:
        assert self._follower is not None
        position = self._follower.position
        self._saved_at = mono
        if position is None or position == self._saved:
            return
        try:
            self._store.save_kmsg_position(position.to_dict())
            self._saved = position
        except StateError as exc:
            log.error("state.write_failed", what="kmsg position", error=str(exc))
