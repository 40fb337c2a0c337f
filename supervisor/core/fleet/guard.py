"""The daemon's own guards (pure): what one exception escaping a part of the loop leads to, and the alert
of a metrics port another process holds.

The loop, a tick, an inline effect or a reload may meet a bug; none may end supervision. Each exception
is logged with its traceback the first time its (where, type) is seen and then at every power of two of
its count (a part that fails every second does not flood the journal), and raises one warning alert
(``daemon.internal_error``) per (where, type) for the daemon's life: the operator hears of it once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from supervisor.core.actions import Alert
from supervisor.core.alerts.localize import title_en

#: The longest exception text carried in an alert (it is masked before it leaves, like every alert).
MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class GuardState:
    """How often each (where, exception type) was met."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """What to do about one exception: log it (with the traceback), and the alert to send (first time)."""

    log: bool
    count: int
    alert: Alert | None


def on_error(state: GuardState, where: str, error_type: str, error: str) -> tuple[GuardState, Verdict]:
    """The guard's decision for one exception of ``error_type`` (its text ``error``) escaping ``where``."""
    key = (where, error_type)
    count = state.counts.get(key, 0) + 1
    new = GuardState({**state.counts, key: count})
    alert = None
    if count == 1:
        text = f"{error_type}: {error}"[:MAX_ERROR_CHARS]
        params = (("where", where), ("error", text))
        alert = Alert(
            "warning",
            title_en("daemon.internal_error", params),
            "running",
            "running",
            f"an exception escaped the daemon's {where} ({text}); supervision goes on",
            kind="daemon.internal_error",
            params=params,
        )
    return new, Verdict(log=count & (count - 1) == 0, count=count, alert=alert)


def port_taken_alert(listen: str, why: str) -> Alert:
    """``metrics.port_taken``: the metrics port is held by another process, which may serve fake metrics to
    the scraper; the daemon retries the bind and says so in status (``daemon.metrics.error``)."""
    params = (("listen", listen), ("error", why[:MAX_ERROR_CHARS]))
    return Alert(
        "warning",
        title_en("metrics.port_taken", params),
        "running",
        "running",
        f"{why}; another process holds the port (it may serve fake metrics); retrying",
        kind="metrics.port_taken",
        params=params,
    )
