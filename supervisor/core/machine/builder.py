"""The per-step builder shared by the machine modules: a local, mutable view over one pure step.

A :class:`Step` lives for one ``step`` call only; it replaces the frozen snapshot and collects actions.
Also holds the transitions shared by several states (failure accounting, stop completion).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from supervisor.core.actions import (
    Action,
    Alert,
    Emit,
    RecordStart,
    ReleaseSlot,
    Reply,
    ReportFailedChange,
    RunPreflight,
    StopContainer,
)
from supervisor.core.alerts.localize import title_en
from supervisor.core.machine.policy import Policy
from supervisor.core.profile_state import Load, ProfileState
from supervisor.core.spec.last_good import HOLD, ROLLBACK, after_failed_start
from supervisor.core.states import State
from supervisor.core.vocab import (
    CONFIG_OUTCOMES,
    RESTART_PENDINGS,
    Intent,
    Outcome,
    Pending,
    is_failed,
)

#: States an alert about a failure leads to: the last failed start's diagnosis belongs in those alerts.
FAILURE_ALERT_STATES = frozenset({State.BACKOFF, State.FATAL, State.STOPPING})


@dataclass
class Step:
    """One step in progress: the current snapshot, ``now``, the policy and the actions so far."""

    s: ProfileState
    now: float
    policy: Policy
    actions: list[Action] = field(default_factory=list)

    # --- building blocks -------------------------------------------------------------------------

    def set(self, **changes: Any) -> None:
        """Replace fields of the snapshot."""
        self.s = replace(self.s, **changes)

    def set_load(self, **changes: Any) -> None:
        """Replace fields of the load record."""
        self.s = replace(self.s, load=replace(self.s.load, **changes))

    def set_kv(self, **changes: Any) -> None:
        """Replace fields of the KV draw."""
        self.s = replace(self.s, kv=replace(self.s.kv, **changes))

    def do(self, *actions: Action) -> None:
        """Append actions."""
        self.actions.extend(actions)

    def emit(self, name: str, **fields: object) -> None:
        """Append a history/log event."""
        self.actions.append(Emit(name, dict(fields)))

    def alert(
        self,
        severity: str,
        title: str,
        old: State,
        new: State,
        reason: str,
        *,
        kind: str = "",
        params: tuple[tuple[str, str], ...] = (),
        condition: str | None = None,
        resolves: bool = False,
    ) -> None:
        """Append an alert for a human, with the profile's numbers and, for a failure, the diagnosis.

        ``kind``/``params`` name its catalogue message; ``condition``/``resolves`` say which condition it
        raises or resolves (see actions.Alert)."""
        s = self.s
        details = (
            ("restarts", str(s.restarts)),
            ("breaker", f"{s.breaker.count(self.now)}/{s.breaker.limit}"),
            ("kv pool", f"{s.kv.tokens:,} tokens" if s.kv.tokens else "-"),
        )
        failure = new in FAILURE_ALERT_STATES
        diagnosing = failure and any(
            isinstance(a, RecordStart) and is_failed(a.outcome) for a in self.actions
        )
        self.actions.append(
            Alert(
                severity,
                title,
                old.value,
                new.value,
                reason,
                details=details,
                diagnosis=s.last_diagnosis if failure and not diagnosing else None,
                await_diagnosis=diagnosing,
                kind=kind,
                params=params,
                condition=condition,
                resolves=resolves,
            )
        )

    def alert_kind(
        self,
        severity: str,
        kind: str,
        old: State,
        new: State,
        reason: str,
        *,
        condition: str | None = None,
        resolves: bool = False,
        **params: object,
    ) -> None:
        """:meth:`alert` with the catalogue's message ``kind``: the title is its English title filled
        from ``params`` (so the history and every language's card say the same thing)."""
        values = tuple((k, str(v)) for k, v in params.items())
        self.alert(
            severity,
            title_en(kind, values),
            old,
            new,
            reason,
            kind=kind,
            params=values,
            condition=condition,
            resolves=resolves,
        )

    def reply(self, ok: bool, message: str) -> None:
        """Answer the operator."""
        self.actions.append(Reply(ok, message))

    def to(self, new: State, reason: str) -> State:
        """Change state (always emits state.changed); returns the old state."""
        old = self.s.state
        self.set(state=new, since=self.now, last_reason=reason)
        if old == State.DEGRADED and new != State.RUNNING:
            self.set(recovering=True)  # left degraded: the next RUNNING resolves it ("recovered")
        self.emit("state.changed", old=old.value, new=new.value, reason=reason)
        return old

    def breaker_now(self) -> None:
        """Bring the breaker's limit/window in line with the policy."""
        self.set(breaker=self.s.breaker.configured(self.policy.breaker.limit, self.policy.breaker.window_s))

    def release_slot(self) -> None:
        """Give the load slot back if we hold it."""
        if self.s.slot_held:
            self.do(ReleaseSlot())
            self.set(slot_held=False)

    def stop(self, reason: str, pending: Pending, grace_s: float | None = None) -> None:
        """Ask for the container to stop and go to STOPPING; ``pending`` says what happens after."""
        grace = self.policy.stop.grace_s if grace_s is None else grace_s
        self.do(StopContainer(grace_s=grace, reason=reason, container_id=self.s.container_id))
        self.set(
            pending=pending,
            stop_deadline=self.now + grace + self.policy.stop_overdue_s,
            drain_deadline=None,
            next_drain_poll_at=None,
            next_probe_at=None,
        )
        if self.s.state != State.STOPPING:
            self.to(State.STOPPING, reason)

    def preflight(self, reason: str) -> None:
        """Begin a start attempt: PREFLIGHT (never relaunch blindly)."""
        self.do(RunPreflight())
        self.set(
            external_stop_unconfirmed=False,
            outside_signal_at=None,
            docker_lost_at=None,
            load=Load(),
            adopted=False,
            pending=None,
            stop_deadline=None,
            start_attempts=self.s.start_attempts + 1,
        )
        self.to(State.PREFLIGHT, reason)

    def kernel_seen(self) -> tuple[str, ...]:
        """Kernel events seen within the policy's window (the kernel cause of a failure now)."""
        at = self.s.kernel.recent_at
        if at is None or not 0 <= self.now - at <= self.policy.kernel_window_s:
            return ()
        return self.s.kernel.recent

    def kernel_suffix(self) -> str:
        """``"; kernel: Xid 31 (pid 42 VLLM::EngineCor)"`` for a failure's reason, or ``""``."""
        seen = self.kernel_seen()
        return "; kernel: " + ", ".join(seen) if seen else ""

    def load_s(self) -> float | None:
        """Seconds since the start attempt began (never negative)."""
        started = self.s.load.started_at
        return None if started is None else max(0.0, self.now - started)

    def record_start(self, outcome: str) -> None:
        """One ledger row for the current start attempt."""
        self.do(
            RecordStart(
                outcome=outcome,
                kv_tokens=self.s.kv.tokens,
                max_concurrency=self.s.kv.max_concurrency,
                load_s=self.load_s(),
                mem_available_gib=self.s.load.mem_available_gib,
                container_id=self.s.container_id,
                since=self.s.container_created_at or self.s.container_started_at,
                kernel=self.kernel_seen(),
                kv_gib=self.s.kv.gib,
                model_gib=self.s.kv.model_gib,
                gmu=self.s.kv.gmu,
                image_id=self.s.kv.image_id,
                fingerprint=self.s.kv.fingerprint,
                usage=self.s.kv.usage,
            )
        )

    # --- shared transitions --------------------------------------------------------------------

    def fail(self, reason: str, outcome: str | None) -> None:
        """A failed start or an emergency has completed (container gone): breaker, then FATAL or BACKOFF.

        ``outcome`` is the ledger outcome when a start attempt failed (None for a failure after ready).
        """
        old = self.s.state
        self.release_slot()
        if outcome is None:
            # a run that had served ends: its row in the ledger carries the kernel cause and the diagnosis
            self.record_start(Outcome.EMERGENCY if old == State.STOPPING else Outcome.DIED)
        else:
            reason += self.kernel_suffix()
            self.record_start(outcome)
            self.emit(
                "start.failed",
                outcome=outcome,
                reason=reason,
                detail=self.s.load.failure_detail,
                kernel=list(self.kernel_seen()),
            )
        self.breaker_now()
        was_open = self.s.breaker.is_open(self.now)
        self.set(
            breaker=self.s.breaker.trip(self.now)
            if outcome in CONFIG_OUTCOMES
            else self.s.breaker.record(self.now),
            recovering=True,
            # a failed start's ledger row comes back with its diagnosis, which may prove a configuration
            # error the exit outran (machine/diagnosed.py): the retry waits for it (retry.tick_backoff)
            diagnosis_due_since=self.now if outcome is not None and is_failed(outcome) else None,
            container_id=None,
            container_started_at=None,
            adopted=False,
            consecutive_failures=0,
            healthy_since=None,
            pending=None,
            stop_deadline=None,
        )
        maintenance = self.s.maintenance_run
        self.set(maintenance_run=False, maintenance_kv_before=None)
        try:
            self._route_failure(old, reason, outcome, was_open)
            if outcome is not None:
                self._judge_change(old)
        finally:
            if maintenance:
                self.alert_kind("critical", "maintenance.failed", old, self.s.state, reason)

    def _judge_change(self, old: State) -> None:
        """A failed start: was it a changed config failing (last known good)? Roll back or hold, alert."""
        p, s = self.policy, self.s
        v = after_failed_start(
            fingerprint=s.kv.fingerprint,
            last_good=s.last_good_fingerprint,
            running_spec=s.running_spec,
            changed_failures=s.changed_failures,
            rollback_after=p.rollback_after,
            on_failed_change=p.on_failed_change,
        )
        self.set(changed_failures=v.changed_failures, last_good_next=s.last_good_next or v.rollback)
        if v.alert:
            action = ROLLBACK if v.rollback else HOLD
            self.emit(
                "config.change_failed",
                failures=v.changed_failures,
                action=action,
                fingerprint=s.kv.fingerprint,
                last_good=s.last_good_fingerprint,
            )
            self.do(
                ReportFailedChange(action, v.changed_failures, old.value, self.s.state.value, s.kv.image_id)
            )

    def _route_failure(self, old: State, reason: str, outcome: str | None, was_open: bool) -> None:
        p = self.policy
        if self.s.intent == Intent.STOP:
            self.to(State.STOPPED, reason)
            return
        if self.s.breaker.is_open(self.now):
            if not was_open:
                self.emit(
                    "breaker.opened", failures=self.s.breaker.count(self.now), limit=self.s.breaker.limit
                )
            self.to(State.FATAL, reason)
            self.set(fatal_alerted_at=self.now)
            if outcome in CONFIG_OUTCOMES:  # opened by this one start: retrying cannot mend it
                self.alert_kind("critical", "breaker.config_error", old, State.FATAL, reason)
            else:
                self.alert_kind("critical", "breaker.open", old, State.FATAL, reason)
            return
        backoff = self.s.backoff.next(self.now, p.backoff.initial_s, p.backoff.factor, p.backoff.max_s)
        at_once = outcome is None and self.s.backoff.attempt == 0
        if at_once:  # a run that served ended, first of a streak: again at once, as Docker's policies do
            backoff = replace(backoff, retry_at=self.now)
        retry_at = backoff.retry_at if backoff.retry_at is not None else self.now
        self.set(backoff=backoff, restarts=self.s.restarts + 1)
        self.to(State.BACKOFF, reason)
        self.emit(
            "backoff.scheduled", attempt=backoff.attempt, delay_s=retry_at - self.now, retry_at=retry_at
        )
        if outcome is not None:
            self.alert_kind("warning", "start.failed", old, State.BACKOFF, f"{outcome}: {reason}")

    def stop_completed(self, reason: str) -> None:
        """The container is gone while STOPPING: route by ``pending`` and intent."""
        pending = self.s.pending
        self.set(stop_deadline=None)  # container_id is cleared below, once the ledger row has it
        if pending == Pending.FAILED_START:
            self.fail(reason, self.s.load.failure_outcome or Outcome.FAILED)
            return
        if pending == Pending.EMERGENCY:
            self.fail(reason, None)
            return
        if self.s.load.started_at is not None and not self.s.adopted and pending == Pending.STOP:
            # an operator stop interrupted a start attempt
            self.record_start(Outcome.STOPPED)
        if pending == Pending.REDRAW and not self.s.adopted:
            self.record_start(Outcome.REDRAWN)  # a healthy start with a too-small pool (its pool counts)
        self.release_slot()
        self.set(container_id=None, container_started_at=None)
        self.set(pending=None, adopted=False, load=Load(), consecutive_failures=0, healthy_since=None)
        if self.s.intent == Intent.STOP:
            self.to(State.STOPPED, reason)
        elif self.s.breaker.is_open(self.now):
            self.to(State.FATAL, reason)
            self.set(fatal_alerted_at=self.now)
        else:
            if pending in RESTART_PENDINGS:
                self.set(restarts=self.s.restarts + 1)
            self.preflight(pending or reason)
