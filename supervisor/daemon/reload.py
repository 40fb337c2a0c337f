"""``supervisorctl reload`` / SIGHUP: read the config file again and say what it changes.

Only the profiles are reloaded (added ones start, changed ones are drift-checked, removed ones are left
running and reported); a config with errors is refused whole and nothing changes. Daemon-wide settings
(socket, state dir, alerts, maintenance, ...) are read at start only: a reload names those that differ.
"""

from __future__ import annotations

import dataclasses

import structlog

from supervisor.config import DaemonConfig, load_config
from supervisor.core.errors import ConfigError
from supervisor.core.fleet.reload import ReloadPlan
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import ReplyBox

log = structlog.get_logger("supervisor.daemon")

#: Daemon settings the command line may override: never reported as "changed in the file".
_OVERRIDABLE = frozenset({"path", "profiles", "state_dir", "socket_path", "restore_dir", "log_level"})


def read_config(current: DaemonConfig) -> tuple[DaemonConfig | None, list[str]]:
    """The config file parsed again, or None and every problem in it (file, key path, value)."""
    try:
        return load_config(current.path), []
    except ConfigError as exc:
        return None, [str(p) for p in exc.problems] or [str(exc)]
    except Exception as exc:  # noqa: BLE001 - a reader bug must refuse the reload, never end the daemon
        return None, [f"{current.path}: cannot be read ({type(exc).__name__}: {exc})"]


def daemon_keys_changed(current: DaemonConfig, new: DaemonConfig) -> list[str]:
    """Daemon-wide keys whose value in the file differs from the running one (applied on restart)."""
    return [
        f.name
        for f in dataclasses.fields(DaemonConfig)
        if f.name not in _OVERRIDABLE and getattr(current, f.name) != getattr(new, f.name)
    ]


def refused(records: Records, problems: list[str], reply: ReplyBox | None) -> None:
    """A config with errors: ``config.reload_refused`` with every problem; nothing changes."""
    log.error("config.reload_refused", problems=problems)
    records.emit("", "config.reload_refused", {"problems": problems})
    if reply is not None:
        reply.set(False, "config refused, nothing changed:\n" + "\n".join(problems))


def announce(records: Records, plan: ReloadPlan, later: list[str], reply: ReplyBox | None) -> None:
    """An applied reload: ``config.reloaded``, the profiles it touched, the keys that wait for a restart."""
    fields = {"added": list(plan.added), "changed": list(plan.changed), "removed": list(plan.removed)}
    records.emit("", "config.reloaded", {**fields, "restart_needed_for": later})
    log.info("config.reloaded", **fields, restart_needed_for=later)
    note = f"; daemon settings apply on restart only: {', '.join(later)}" if later else ""
    if reply is not None:
        reply.set(True, f"reloaded: {plan.summary()}{note}")
