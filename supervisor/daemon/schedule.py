"""When the weekly maintenance is due (the daemon asks once per tick)."""

from __future__ import annotations

from datetime import datetime

from apscheduler.triggers.cron import CronTrigger

from supervisor.config import MaintenanceConfig


class MaintenanceClock:
    """The maintenance schedule of the daemon config; ``due(now)`` is True once per fire time."""

    def __init__(self, config: MaintenanceConfig) -> None:
        self._cron = CronTrigger.from_crontab(config.cron) if config.enabled else None
        self.next_fire: float | None = None

    def due(self, now: float) -> bool:
        """True when the next fire time has come (then the one after is computed)."""
        if self._cron is None:
            return False
        if self.next_fire is None:
            self.next_fire = self._next(now)
            return False
        if now < self.next_fire:
            return False
        self.next_fire = self._next(now + 1)
        return True

    def _next(self, now: float) -> float | None:
        assert self._cron is not None
        fire = self._cron.get_next_fire_time(None, datetime.fromtimestamp(now).astimezone())
        return fire.timestamp() if fire is not None else None
