"""The operator's commands as machine events (``supervisorctl`` -> control socket -> the loop)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StartRequested:
    """``supervisorctl start``: intent RUN."""


@dataclass(frozen=True)
class StopRequested:
    """``supervisorctl stop``: intent STOP (persisted across daemon restarts and reboots)."""


@dataclass(frozen=True)
class RestartRequested:
    """``supervisorctl restart``: graceful drain, stop, start again (not a breaker failure)."""


@dataclass(frozen=True)
class ResetRequested:
    """``supervisorctl reset``: close the circuit breaker.

    ``uid``: who asked (the control socket's SO_PEERCRED); ``user``: that uid's name, resolved by the
    daemon (the machine does no I/O). None: not known (e.g. an in-process caller)."""

    uid: int | None = None
    user: str | None = None

    def who(self) -> str:
        """``root (uid 0)``, ``uid 1234`` (no name), or ``the operator`` (no uid)."""
        if self.uid is None:
            return self.user or "the operator"
        return f"{self.user} (uid {self.uid})" if self.user else f"uid {self.uid}"


@dataclass(frozen=True)
class MaintenanceRequested:
    """``supervisorctl maintenance --now`` or the schedule: drain, stop, start, smoke-test."""


#: Events that answer an operator command (the machine replies to each with a Reply action).
OPERATOR_EVENTS = (StartRequested, StopRequested, RestartRequested, ResetRequested, MaintenanceRequested)
