"""``supervisorctl start|restart NAME --wait``: follow the start the command caused until RUNNING.

The CLI only polls ``status`` (a read of the daemon's last published document: cheap, never waits for
the loop). How it tells *this* start's RUNNING from the one before the command: every start attempt
begins in PREFLIGHT and bumps the profile's ``start_attempts`` counter (status document). The CLI
reads the counter before sending the command (``baseline``):

* ``restart``: done when the profile is RUNNING with ``start_attempts > baseline`` (a RUNNING with
  the old counter is the old container, e.g. a status document published before the command);
* ``start``: any RUNNING is done (``start`` never stops a running server; "already running" is fine);
* failed when the profile is in BACKOFF or FATAL, or STOPPED with intent stop, *after* this command's
  attempt began (``start_attempts > baseline``) or after the CLI saw it on its way (PREFLIGHT,
  WAITING, STARTING, DRAINING, STOPPING, MAINTENANCE; a stale document can only repeat the state
  before the command, which for a failure is BACKOFF/FATAL/STOPPED, never one of these); the reason
  is the state's reason plus the failed start's outcome and diagnosis from the ledger (``history``);
* timeout: the profile's startup deadline + drain timeout + stop grace + ``PREFLIGHT_MARGIN_S``
  (from the status document's ``timeouts``) unless ``--wait-timeout`` says otherwise.

Progress lines (state changes, load % and phase) go to stderr; the verdict line to stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from supervisor.cli.common import EXIT_START_FAILED, EXIT_WAIT_TIMEOUT
from supervisor.core.errors import ControlError
from supervisor.core.fleet.status_doc import profiles_of
from supervisor.core.settings.profile import StartupConfig, StopConfig
from supervisor.core.states import FAILED_STATES, TRANSIT_STATES, State
from supervisor.core.vocab import Intent, Outcome

#: Added to the profile's own timeouts for the preflight (page cache drop, memory settle) and the slot.
PREFLIGHT_MARGIN_S = 60.0
POLL_S = 0.5
#: How long a failure waits for its ledger row (the diagnosis reads the kernel log off the loop).
DIAGNOSIS_WAIT_S = 15.0
ON_THE_WAY = TRANSIT_STATES
FAILED = FAILED_STATES

Call = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Baseline:
    """The profile as it was before the command was sent."""

    start_attempts: int
    state: str


def baseline_of(status: Mapping[str, Any]) -> Baseline:
    """The baseline from one profile's status entry (older daemons without the counter: 0)."""
    attempts = status.get("start_attempts")
    return Baseline(attempts if isinstance(attempts, int) else 0, str(status.get("state") or "?"))


def default_timeout(status: Mapping[str, Any]) -> float:
    """Startup deadline + drain timeout + stop grace + margin, from the status document's ``timeouts``."""
    t = status.get("timeouts") if isinstance(status.get("timeouts"), Mapping) else {}
    assert isinstance(t, Mapping)
    total = PREFLIGHT_MARGIN_S
    for key, fallback in (  # an older daemon without ``timeouts``: the config defaults
        ("startup_deadline_s", StartupConfig().deadline_s),
        ("drain_timeout_s", StopConfig().drain_timeout_s),
        ("stop_grace_s", StopConfig().grace_s),
    ):
        value = t.get(key)
        total += float(value) if isinstance(value, int | float) and not isinstance(value, bool) else fallback
    return total


def verdict(command: str, base: Baseline, seen_on_the_way: bool, st: Mapping[str, Any]) -> str | None:
    """``"running"``, ``"failed"`` or None (keep waiting) for one status entry (pure)."""
    state = str(st.get("state") or "")
    attempts = st.get("start_attempts")
    new_attempt = isinstance(attempts, int) and attempts > base.start_attempts
    if state == State.RUNNING and (command == "start" or new_attempt):
        return "running"
    ours = new_attempt or seen_on_the_way
    if ours and (state in FAILED or (state == State.STOPPED and st.get("intent") == Intent.STOP)):
        return "failed"
    return None


def progress_key(st: Mapping[str, Any]) -> tuple[str, int | None, str]:
    """What a progress line is printed for when it changes: state, whole load percent, phase."""
    lp = st.get("load_progress") if isinstance(st.get("load_progress"), Mapping) else {}
    assert isinstance(lp, Mapping)
    pct = lp.get("pct")
    whole = int(pct) if isinstance(pct, int | float) and not isinstance(pct, bool) else None
    return str(st.get("state") or "?"), whole, str(lp.get("phase") or "")


def progress_line(name: str, elapsed: float, st: Mapping[str, Any]) -> str:
    state, pct, phase = progress_key(st)
    text = f"[{elapsed:6.1f}s] {name}: {state}"
    if pct is not None:
        text += f" {pct}%"
    if phase:
        text += f" {phase}"
    if st.get("holds_load_slot") is False and state == State.WAITING:
        text += " (another profile holds the load slot)"
    reason = st.get("last_reason")
    if isinstance(reason, str) and reason and pct is None:
        text += f" ({reason})"
    return text


class Follower:
    """Polls ``status`` for one profile until :func:`verdict` decides or the deadline passes."""

    def __init__(
        self,
        call: Call,
        name: str,
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._call = call
        self._name = name
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._clock = clock
        self._sleep = sleep

    def status(self) -> dict[str, Any] | None:
        """The profile's status entry, or None when the daemon does not answer (it may be restarting)."""
        try:
            reply = self._call("status", name=self._name)
        except ControlError:
            return None
        data = reply.get("data") if reply.get("ok") else None
        profiles = profiles_of(data, self._name) if isinstance(data, dict) else []
        return profiles[0] if profiles else None

    def follow(self, command: str, base: Baseline, timeout: float, sent_at: float) -> int:
        """Wait for the verdict; print progress to stderr and the outcome; the exit code."""
        start = self._clock()
        last_key: tuple[str, int | None, str] | None = None
        seen = False
        unreachable = False
        for _ in range(int(timeout / POLL_S) + 2):  # bounded; the deadline below usually ends it
            elapsed = self._clock() - start
            st = self.status()
            if st is None:
                if not unreachable:
                    print(
                        f"[{elapsed:6.1f}s] {self._name}: daemon not answering; still waiting", file=self._err
                    )
                unreachable = True
            else:
                unreachable = False
                key = progress_key(st)
                if key != last_key:
                    print(progress_line(self._name, elapsed, st), file=self._err, flush=True)
                    last_key = key
                seen = seen or key[0] in ON_THE_WAY
                found = verdict(command, base, seen, st)
                if found == "running":
                    print(
                        f"{self._name}: RUNNING after {elapsed:.1f} s (container {_short(st)})",
                        file=self._out,
                    )
                    return 0
                if found == "failed":
                    print(self._failure(st, sent_at), file=self._out)
                    return EXIT_START_FAILED
            if elapsed >= timeout:
                break
            self._sleep(min(POLL_S, max(0.0, timeout - elapsed)))
        print(f"{self._name}: not RUNNING within {timeout:.0f} s (timeout)", file=self._out)
        return EXIT_WAIT_TIMEOUT

    def _failure(self, st: Mapping[str, Any], sent_at: float) -> str:
        state = str(st.get("state"))
        reason = str(st.get("last_reason") or "no reason recorded")
        if state == State.STOPPED:
            return f"{self._name}: STOPPED on purpose while waiting ({reason})"
        text = f"{self._name}: {state} ({reason})"
        row = self._ledger_row(sent_at)
        if row is not None:
            text += f"; start outcome {row.get('outcome')}"
            if row.get("diagnosis"):
                text += f"; diagnosis: {row['diagnosis']}"
        elif st.get("last_diagnosis"):
            text += f"; diagnosis: {st['last_diagnosis']}"
        if state == State.FATAL:
            text += f"; the circuit breaker is open: fix the cause, then `supervisorctl reset {self._name}`"
        return text

    def _ledger_row(self, sent_at: float) -> dict[str, Any] | None:
        """The failed start's ledger row (written once its diagnosis is known), waited for briefly."""
        end = self._clock() + DIAGNOSIS_WAIT_S
        for _ in range(int(DIAGNOSIS_WAIT_S / POLL_S) + 1):
            try:
                reply = self._call("history", name=self._name, n=3)
            except ControlError:
                return None
            data = reply.get("data") if reply.get("ok") else None
            rows = data.get("starts") if isinstance(data, dict) else None
            fresh = [
                r
                for r in rows or []
                if isinstance(r, dict) and isinstance(r.get("ts"), int | float) and r["ts"] >= sent_at
            ]
            failed = [r for r in fresh if r.get("outcome") not in (Outcome.READY, Outcome.STOPPED)]
            if failed:
                return failed[-1]
            if self._clock() >= end:
                return None
            self._sleep(POLL_S)
        return None


def _short(st: Mapping[str, Any]) -> str:
    cid = st.get("container_id")
    return cid[:12] if isinstance(cid, str) else "?"
