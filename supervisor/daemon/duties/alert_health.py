"""Nothing lost silently: every alert the sender gives up on becomes a history event, a count, and (when it
is the channel's fault) the ``alerts.failing`` / ``alerts.delivering`` pair.

The :class:`~supervisor.adapters.alerts.sender.AlertSender` reports each message's fate on each channel
(:class:`~supervisor.core.alerts.channels.Delivery`) from each channel's own thread, several at once
(and, for a message dropped on overflow or at shutdown, from the thread that dropped it).
:meth:`AlertHealth.observe` runs there: it folds the report into the channel's pure
:class:`~supervisor.core.alerts.channels.ChannelHealth` under a lock, then writes through
:class:`~supervisor.daemon.executor.records.Records` like the pool jobs do (``emit`` and ``alert`` are safe
from
any thread). Not through the loop's inbox: the losses of the last seconds before a stop
(``close_timeout``) happen after the loop has ended and must still reach the history.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from supervisor.core.alerts.channels import ChannelHealth, Delivery
from supervisor.core.clock import Clock
from supervisor.core.vocab import DAEMON_PROFILE
from supervisor.daemon.executor.records import Records


class AlertHealth:
    """Per-channel delivery health: observe reports (any thread), publish counts (``status``)."""

    def __init__(self, channels: Iterable[tuple[str, str]], records: Records, clock: Clock) -> None:
        """``channels``: (label, kind) of every configured channel, in config order."""
        self._records = records
        self._clock = clock
        self._lock = threading.Lock()
        self._health = {name: ChannelHealth(name, kind) for name, kind in channels}

    def observe(self, d: Delivery) -> None:
        """One message's fate on one channel: the event of a loss, the failing/delivering alert of a flip."""
        with self._lock:
            health = self._health.get(d.channel) or ChannelHealth(d.channel, d.channel_kind)
            self._health[d.channel], alert = health.observe(d, self._clock.now())
        if not d.ok:
            self._records.emit(DAEMON_PROFILE, "alert.undelivered", d.fields())
        if alert is not None:
            self._records.alert(DAEMON_PROFILE, "", alert, None)

    def status(self) -> dict[str, Any]:
        """``daemon.alerts`` of the status document."""
        with self._lock:
            channels = [h.to_dict() for h in self._health.values()]
            total = sum(h.undelivered for h in self._health.values())
        return {"undelivered": total, "channels": channels}
