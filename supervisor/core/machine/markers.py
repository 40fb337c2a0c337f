"""Operator log markers of an adopted container: its start-up log, read back, judged once.

A container this daemon started is judged live (core/machine/start.py: a forbidden marker or a missing
expected one fails the start). One it adopted (already running when the daemon started) printed its
start-up lines before anyone watched: the watcher reads them back from the container's StartedAt (the
last lines only, bounded) and posts :class:`AdoptedMarkers`. The daemon did not start that server and it
may be serving, so this only warns: a forbidden marker as ``log.forbidden_marker`` (as while serving), the
expected markers the log does not prove (only once the log has vLLM's ready line) as
``log.marker_missing``. See docs/configuration.md "markers".
"""

from __future__ import annotations

from supervisor.core.events import AdoptedMarkers
from supervisor.core.machine.builder import Step

#: Said after a forbidden marker found in an adopted container's start-up log.
ADOPTED_SUFFIX = " (start-up log of the adopted container)"


def on_adopted_markers(c: Step, ev: AdoptedMarkers) -> None:
    """Warn about what an adopted container's start-up log shows (each forbidden marker once per run)."""
    s = c.s
    if not s.adopted or ev.container_id != s.container_id:
        return  # late: another container by now
    st = s.state
    c.emit(
        "log.adopted_markers",
        lines=ev.lines,
        complete=ev.complete,
        missing=list(ev.missing),
        forbidden=list(ev.forbidden),
    )
    for name in ev.forbidden:
        if name in c.s.load.markers_seen:
            continue
        c.set_load(markers_seen=(*c.s.load.markers_seen, name))
        c.emit("log.forbidden_marker", marker=name, adopted=True)
        c.alert_kind("warning", "log.forbidden_marker", st, st, name + ADOPTED_SUFFIX)
    if ev.complete and ev.missing:
        missing = ", ".join(ev.missing)
        c.emit("log.marker_missing", markers=list(ev.missing), adopted=True)
        c.alert_kind("warning", "log.marker_missing", st, st, missing)
