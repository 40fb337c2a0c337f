"""What the daemon writes down: history events (``events.jsonl``), alerts, and the start ledger.

``emit`` and ``alert`` are cheap (an append, a queue put) and may run on any thread. The diagnosis of a
failed start waits (up to a second) for the kernel-log follower's recent lines and so runs on the
executor's pool.

Every alert passes :meth:`Records.alert`: there the raised/resolved conditions are tracked
(:mod:`supervisor.core.alerts.conditions`, persisted in ``conditions.json`` so a condition raised before a
daemon restart is resolved after it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from supervisor.adapters.secrets import SecretBook
from supervisor.adapters.store.state import Store
from supervisor.core import actions as A
from supervisor.core.alerts.conditions import DAEMON_PROFILE, EVENT_RESOLVE_UNRAISED, Conditions, Verdict
from supervisor.core.clock import Clock
from supervisor.core.errors import StateError
from supervisor.core.events import Event, LoadHistory, StartDiagnosed
from supervisor.core.fleet.lifecycle import SUPERVISOR
from supervisor.core.sentinel.ledger import load_times
from supervisor.core.spec.patchset import OVERLAY_DIAGNOSIS
from supervisor.core.vllm import kv_pool
from supervisor.core.vllm.diagnosis import diagnose
from supervisor.core.vllm.gmu_advice import MemoryFacts
from supervisor.core.vocab import Outcome

log = structlog.get_logger("supervisor.records")

#: Where alerts go: (profile, alert, diagnosis, details) -> queued? (``AlertSender.alert`` has this shape).
AlertSink = Callable[[str, A.Alert, str | None, tuple[tuple[str, str], ...]], bool]
#: Told every history event as written: (profile, name, fields) (``MetricsServer.observe_event``).
EventObserver = Callable[[str, str, Mapping[str, Any]], None]
#: The kernel log is read from this long before the failed container was created.
KERNEL_LOOKBACK_S = 5.0
#: The kernel lines of interest logged since a wall time, or None when the kernel log is not followed
#: (``KernelWatch.recent_lines``).
KernelLines = Callable[[float, str | None], list[str] | None]
#: How many newest ledger rows of a profile the KV baseline looks through (for its newest 20 draws).
LEDGER_SCAN_ROWS = 1000


class Records:
    """Writes what the daemon decided and saw."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        alert_sink: AlertSink | None = None,
        observer: EventObserver | None = None,
        secrets: SecretBook | None = None,
    ) -> None:
        self._store = store
        #: the secret values the daemon knows (jobs teach it the specs they create and inspect)
        self.secrets = secrets or SecretBook()
        self._clock = clock
        self._alert_sink = alert_sink
        self._observer = observer
        self._lock = threading.Lock()  # alert() runs on the loop and on pool threads
        self._conditions = _load_conditions(store)

    def emit(self, profile: str, name: str, fields: dict[str, object]) -> None:
        """One history event (and the same as a log line)."""
        record = {"ts": self._clock.now(), "name": name, "profile": profile, "fields": fields}
        log.info(name, profile=profile, **fields)
        try:
            self._store.append_event(record)
        except StateError as exc:
            log.error("store.write_failed", what="event", error=str(exc))
        if self._observer is not None:
            try:
                self._observer(profile, name, self.secrets.data(fields))  # metrics labels: masked too
            except Exception as exc:  # noqa: BLE001 - counting must never break supervision
                log.error("metrics.observe_failed", event=name, error=str(exc))

    def alert(self, profile: str, container: str, alert: A.Alert, diagnosis: str | None) -> None:
        """Record and send an alert (the sender queues it; never blocks).

        A resolving alert whose condition was never raised is only recorded (``alert.resolve_unraised``);
        a resolved one carries how long its condition lasted. ``profile`` "" is daemon-wide (Docker, alert
        delivery): recorded under "" like every daemon-wide event; "supervisor" in the message, no container
        row."""
        now = self._clock.now()
        with self._lock:
            verdict, self._conditions = self._conditions.decide(profile, alert, now)
            if verdict.changed:
                self._save_conditions()
        fields: dict[str, object] = {
            "severity": alert.severity,
            "title": alert.title,
            "old_state": alert.old_state,
            "new_state": alert.new_state,
            "reason": alert.reason,
        }
        if alert.kind:
            fields["kind"] = alert.kind
        if diagnosis:
            fields["diagnosis"] = diagnosis
        fields |= _condition_fields(verdict)
        if verdict.event == EVENT_RESOLVE_UNRAISED:  # the good state seen again with nothing raised
            log.debug(verdict.event, profile=profile, **fields)  # not history: it follows every start
            return
        self.emit(profile, verdict.event, fields)
        if not verdict.send or self._alert_sink is None:
            return
        details = alert.details + tuple(c.detail() for c in verdict.cleared)
        if verdict.cleared:  # the catalogue's templates may say it too ({lasted})
            alert = replace(alert, params=(*alert.params, ("lasted", verdict.cleared[0].detail()[1])))
        rows = (("container", container), *details) if container else details
        self._alert_sink(profile or DAEMON_PROFILE, alert, diagnosis, rows)

    def is_raised(self, profile: str, condition: str) -> bool:
        """Whether ``condition`` of ``profile`` is raised now (any thread)."""
        with self._lock:
            return self._conditions.get(profile, condition) is not None

    def _save_conditions(self) -> None:
        """Persist the raised set (under the lock); a failed write is logged, the tracker goes on."""
        try:
            self._store.save_conditions(self._conditions.to_dict())
        except StateError as exc:
            log.error("store.write_failed", what="conditions", error=str(exc))

    def daemon_alert(self, alert: A.Alert) -> None:
        """Record and send a daemon-wide alert (start, stop, crash, digest): history under profile "",
        the message under profile ``supervisor`` (core/lifecycle.SUPERVISOR). Any thread; never blocks."""
        fields: dict[str, object] = {
            "severity": alert.severity,
            "title": alert.title,
            "kind": alert.kind,
            "reason": alert.reason,
        }
        self.emit("", "alert.raised", fields)
        if self._alert_sink is not None:
            self._alert_sink(SUPERVISOR, alert, None, alert.details)

    def record_start(self, profile: str, rec: A.RecordStart, report: dict[str, Any] | None) -> list[Event]:
        """Append one ledger row (with its diagnosis, if any); the events telling the machine about it."""
        row: dict[str, Any] = {
            "ts": self._clock.now(),
            "profile": profile,
            "outcome": rec.outcome,
            "kv_tokens": rec.kv_tokens,
            "max_concurrency": rec.max_concurrency,
            "load_s": rec.load_s,
            "mem_available_gib": rec.mem_available_gib,
            "container_id": rec.container_id,
            **kv_pool.ledger_fields(
                fingerprint=rec.fingerprint,
                gmu=rec.gmu,
                image_id=rec.image_id,
                kv_gib=rec.kv_gib,
                model_gib=rec.model_gib,
                usage=rec.usage,
            ),
        }
        answers: list[Event] = []
        if rec.kernel:  # kernel events the follower saw shortly before the failure
            row["kernel_cause"] = ", ".join(rec.kernel)
        if report is not None and rec.outcome in RUN_ENDS and not _explains(report) and not rec.kernel:
            # a serving run ended and neither its log nor the kernel says why (e.g. a `docker kill`):
            # "vLLM started and is ready" would read like an explanation, so record none
            report = None
        if (
            report is not None and rec.outcome == Outcome.FAILED_OVERLAY_MISSING
        ):  # nothing ran: no log to read
            report = {**report, "cause": rec.outcome, "diagnosis": OVERLAY_DIAGNOSIS}
        if report is not None:
            cause = report.get("cause") or report["vllm"].get("cause") or report["vllm"].get("outcome")
            if rec.kernel and cause in (None, "engine_init", rec.outcome):
                cause = "kernel: " + ", ".join(rec.kernel)  # vLLM only said its engine failed
            kinds = sorted({str(e["kind"]) for e in report["kernel"]["events"]})
            row.update(cause=cause, diagnosis=report["diagnosis"], kernel_events=kinds)
            self.emit(
                profile,
                "start.diagnosed",
                {"outcome": rec.outcome, "cause": cause, "kernel": kinds, "diagnosis": report["diagnosis"]},
            )
            line, where = report["vllm"].get("last_exception"), report["vllm"].get("last_exception_where")
            if line:
                row.update(root_cause=line, root_cause_where=where)
            answers.append(
                StartDiagnosed(rec.outcome, cause, str(report["diagnosis"]), line, where, rec.fingerprint)
            )
        try:
            self._store.append_start(row)
        except StateError as exc:
            log.error("store.write_failed", what="start", error=str(exc))
        return answers

    def kv_baseline(self, profile: str, fingerprint: str | None, exclude: str | None) -> list[Event]:
        """The baseline of a start from the ledger (a file read: run it off the loop), as KvBaseline, and
        the load times of its config's earlier ready starts (the load ETA), as LoadHistory."""
        try:
            rows = self._store.read_starts(profile, n=LEDGER_SCAN_ROWS)
        except StateError as exc:
            log.error("store.read_failed", what="starts", error=str(exc))
            rows = []
        return [
            kv_pool.baseline_of(rows, fingerprint, exclude),
            LoadHistory(fingerprint, load_times(rows, fingerprint)),
        ]


def _load_conditions(store: Store) -> Conditions:
    """The raised conditions saved by the previous daemon; empty (and a clear log error) if unreadable."""
    try:
        data = store.load_conditions()
        return Conditions() if data is None else Conditions.from_dict(data)
    except (StateError, ValueError) as exc:
        log.error("conditions.unreadable", error=str(exc), effect="no condition is raised; starting empty")
        return Conditions()


def _condition_fields(verdict: Verdict) -> dict[str, object]:
    """The history fields of a verdict: the condition(s), and for a resolved one what it cleared."""
    if not verdict.conditions:
        return {}
    out: dict[str, object] = {"condition": ",".join(verdict.conditions)}
    if verdict.resolves:
        out["resolves"] = True
    if verdict.cleared:
        first = verdict.cleared[0]
        out |= {"raised_kind": first.raised.kind, "raised_at": first.raised.at, "lasted_s": first.lasted_s}
    elif verdict.event == EVENT_RESOLVE_UNRAISED:
        out["sent"] = False
    return out


def diagnose_start(
    profile: str,
    tail: list[str],
    since: float | None,
    now: float,
    kernel_lines: KernelLines | None,
    outcome: str | None = None,
    container_id: str | None = None,
    memory: MemoryFacts | None = None,
) -> dict[str, Any]:
    """The container's recent log plus the kernel lines since it was created -> a diagnose report.

    The root cause of many failed starts is only in the kernel log (NV_ERR_NO_MEMORY, Xid): vLLM itself
    just says "Engine core initialization failed" (docs/field-notes.md item 1). The kernel lines come
    from the daemon's kernel-log follower (its ring of recent events), not from a ``dmesg`` run; it may
    wait up to a second for the follower to catch up: run it off the loop. Lines naming another process
    than ``container_id``'s are left out: an OOM kill of a host job is not this start's cause.
    """
    lookback = (since if since is not None else now) - KERNEL_LOOKBACK_S
    kernel = kernel_lines(lookback, container_id) if kernel_lines else None
    if kernel is None:
        log.warning("kernel_log.unreadable", profile=profile, error="the kernel log is not followed")
    return diagnose(tail, kernel, outcome, memory)


#: Ledger outcomes that end a run that had served (not a start attempt).
RUN_ENDS = frozenset({Outcome.DIED, Outcome.EMERGENCY})


def _explains(report: dict[str, Any]) -> bool:
    """The diagnosis names a failure: a failed or dead engine in the log, or kernel events."""
    outcome = report["vllm"].get("outcome")
    return bool(report["kernel"]["events"]) or outcome not in ("ready", "starting", "shutdown", "none", None)
