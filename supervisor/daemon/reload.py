"""``supervisorctl reload`` / SIGHUP: read the config file again and say what it changes.

Only the profiles are reloaded (added ones start, changed ones are drift-checked, removed ones are left
running and reported); a config with errors is refused whole and nothing changes. Daemon-wide settings
(socket, state dir, alerts, maintenance, ...) are read at start only: a reload names those that differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import structlog

from supervisor.config import DaemonConfig, Profile, load_config
from supervisor.core.errors import ConfigError
from supervisor.core.events import ConfigReloaded
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.reload import ReloadPlan, reload_plan
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import Envelope, ReplyBox
from supervisor.daemon.parts import Parts
from supervisor.daemon.persist import Supervised

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


def apply(
    config: DaemonConfig,
    profiles: dict[str, Supervised],
    removed: dict[str, str],
    parts: Parts,
    reply: ReplyBox | None,
) -> tuple[DaemonConfig, FleetPolicy, list[Profile], list[Envelope], Callable[[], None]] | None:
    """Read the config file again and apply its profiles to the running daemon: the removed are forgotten
    (their containers left running, listed in ``removed``), the changed get their new config and policy.
    Returns the config now in force and its fleet policy, the profiles to add, the events for the changed
    (``ConfigReloaded``: a drift check) and the announcement to make once they are done; None when the
    file was refused."""
    records = parts.effects.records
    new, problems = read_config(config)
    if new is None:
        refused(records, problems, reply)
        return None
    later = daemon_keys_changed(config, new)
    old, fresh = {p.name: p for p in config.profiles}, {p.name: p for p in new.profiles}
    plan = reload_plan(old, fresh)
    config = dataclasses.replace(config, profiles=new.profiles)
    for name in plan.removed:
        del profiles[name]
        parts.effects.forget(name)
        removed[name] = old[name].container.name
        records.emit(name, "config.profile_removed", {"container": old[name].container.name})
    added, changed = [], []
    for name in (*plan.added, *plan.changed):
        parts.effects.set_profile(fresh[name])
        if name in plan.changed:
            prof = profiles[name]
            prof.profile, prof.policy = fresh[name], parts.policies.profile(fresh[name], config)
            changed.append(Envelope(name, ConfigReloaded()))
        else:
            removed.pop(name, None)
            added.append(fresh[name])
    return config, parts.policies.fleet(config), added, changed, lambda: announce(records, plan, later, reply)
