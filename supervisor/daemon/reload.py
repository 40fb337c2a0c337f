"""``supervisorctl reload`` / SIGHUP: read the config file again and say what it changes.

Only the profiles are reloaded (added ones start, changed ones are drift-checked, removed ones are left
running and reported); a config with errors is refused whole and nothing changes. Daemon-wide settings
(socket, state dir, alerts, maintenance, ...) are read at start only: a reload names those that differ.
"""

from __future__ import annotations

import dataclasses

from supervisor.config import DaemonConfig, load_config
from supervisor.core.errors import ConfigError

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
