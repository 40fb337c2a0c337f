"""The daemon's journal: history events, alerts and the per-start ledger (with a failure diagnosis).

Runs inline on the main loop (appends to files in the state directory); the only slow part, reading the
kernel log after a failed start, is bounded by ``dmesg``'s timeout and happens once per failed start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from supervisor.adapters import host
from supervisor.adapters.store import Store
from supervisor.core import actions as A
from supervisor.core import kernlog
from supervisor.core.clock import Clock
from supervisor.core.errors import HostError, StateError
from supervisor.diagnose import diagnose, read_kernel_log
from supervisor.runtime import ProfileRuntime

log = structlog.get_logger("supervisor.journal")

#: Where alerts go: (profile, alert, diagnosis, details) -> sent? (``Notifier.alert`` has this shape).
AlertSink = Callable[[str, A.Alert, str | None, tuple[tuple[str, str], ...]], bool]
#: States an alert about a failure leads to: the last failure diagnosis belongs in those alerts.
_FAILURE_STATES = ("BACKOFF", "FATAL", "STOPPING")


class Journal:
    """Writes what the daemon decided: events (``events.jsonl``), alerts, start ledger rows."""

    def __init__(self, store: Store, clock: Clock, alert_sink: AlertSink | None = None) -> None:
        self._store = store
        self._clock = clock
        self._alert_sink = alert_sink

    def emit(self, profile: str, name: str, fields: dict[str, object]) -> None:
        record = {"ts": self._clock.now(), "name": name, "profile": profile, "fields": fields}
        log.info(name, profile=profile, **fields)
        try:
            self._store.append_event(record)
        except StateError as exc:
            log.error("store.write_failed", what="event", error=str(exc))

    def alert(self, rt: ProfileRuntime, alert: A.Alert) -> None:
        fields: dict[str, object] = {
            "severity": alert.severity,
            "title": alert.title,
            "old_state": alert.old_state,
            "new_state": alert.new_state,
            "reason": alert.reason,
        }
        diagnosis = rt.last_diagnosis if alert.new_state in _FAILURE_STATES else None
        if diagnosis:
            fields["diagnosis"] = diagnosis
        self.emit(rt.name, "alert.raised", fields)
        if self._alert_sink is not None:
            s = rt.state
            details = (
                ("container", rt.profile.container.name),
                ("restarts", str(s.restarts)),
                ("breaker", f"{s.breaker.count(self._clock.now())}/{s.breaker.limit}"),
                ("kv pool", f"{s.kv_tokens:,} tokens" if s.kv_tokens else "-"),
            )
            self._alert_sink(rt.name, alert, diagnosis, details)

    def record_start(self, rt: ProfileRuntime, rec: A.RecordStart) -> None:
        row = {
            "ts": self._clock.now(),
            "profile": rt.name,
            "outcome": rec.outcome,
            "kv_tokens": rec.kv_tokens,
            "max_concurrency": rec.max_concurrency,
            "load_s": rec.load_s,
            "mem_available_gib": rec.mem_available_gib,
            "container_id": rt.state.container_id,
        }
        if rec.outcome == "ready":
            rt.last_diagnosis = None
        elif rec.outcome != "stopped":
            report = self._diagnose_failure(rt)
            if report is not None:
                row["cause"] = report["vllm"].get("cause") or report["vllm"].get("outcome")
                row["diagnosis"] = report["diagnosis"]
                rt.last_diagnosis = str(report["diagnosis"])
                kinds = sorted({str(e["kind"]) for e in report["kernel"]["events"]})
                row["kernel_events"] = kinds
                self.emit(
                    rt.name,
                    "start.diagnosed",
                    {
                        "outcome": rec.outcome,
                        "cause": row["cause"],
                        "kernel": kinds,
                        "diagnosis": row["diagnosis"],
                    },
                )
        try:
            self._store.append_start(row)
            rt.median_kv_tokens = self._store.median_kv_tokens(rt.name)
        except StateError as exc:
            log.error("store.write_failed", what="start", error=str(exc))

    def _diagnose_failure(self, rt: ProfileRuntime) -> dict[str, Any] | None:
        """The container's recent log plus the kernel log since it started -> a diagnose report.

        The root cause of many failed starts is only in the kernel log (NV_ERR_NO_MEMORY, Xid; DOMAIN
        item 1): vLLM itself just says "Engine core initialization failed".
        """
        if rt.watch is None:
            return None
        kernel: list[str] | None
        try:
            since = (rt.container_created_at or rt.container_started_at or self._clock.now()) - 5.0
            since_uptime = since - host.boot_time()
            kernel = [ln for ln in read_kernel_log() if (kernlog.uptime_of(ln) or 0.0) >= since_uptime]
        except (HostError, OSError) as exc:
            log.warning("kernel_log.unreadable", profile=rt.name, error=str(exc))
            kernel = None
        return diagnose(rt.watch.tail_lines(), kernel)
