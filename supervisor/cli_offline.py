"""``supervisorctl``'s offline commands (no daemon needed): check-config, snapshot, restore, test-alert,
unit-failed. Their modules are imported lazily so the CLI starts fast and works even when
one of them is missing."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from supervisor.config import DaemonConfig

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
DEFAULT_RESTORE_DIR = Path("restore")
DEFAULT_CONFIG = Path("/etc/vllm-supervisor/daemon.yaml")

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_RESTORE_DIR",
    "cmd_check_config",
    "cmd_restore",
    "cmd_snapshot",
    "cmd_test_alert",
    "cmd_unit_failed",
    "restore_dir",
]


def _err(message: str) -> None:
    print(f"supervisorctl: {message}", file=sys.stderr)


def cmd_check_config(ns: argparse.Namespace) -> int:
    from supervisor.config import cli_check_config

    return int(cli_check_config(Path(ns.path)))


def _daemon_config(config: str | None) -> DaemonConfig | int | None:
    """The config named by ``--config``, else the default one when it exists (None: there is none).

    A config that does not load is an error (its problems are printed; exit code), never a silent
    fallback to other values.
    """
    path = Path(config) if config is not None else DEFAULT_CONFIG
    if config is None and not path.exists():
        return None
    from supervisor.config import load_config
    from supervisor.core.errors import ConfigError

    try:
        return load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            _err(str(problem))
        return EXIT_USAGE


def restore_dir(explicit: str | None, config: str | None) -> Path | int:
    """Where snapshots go: ``--out``/``--from``, else the daemon config's ``restore_dir``, else ./restore."""
    if explicit is not None:
        return Path(explicit)
    cfg = _daemon_config(config)
    if isinstance(cfg, int):
        return cfg
    return cfg.restore_dir if cfg is not None else DEFAULT_RESTORE_DIR


def cmd_snapshot(ns: argparse.Namespace) -> int:
    from supervisor.restore import cli_snapshot

    out = restore_dir(ns.out, ns.config)
    return out if isinstance(out, int) else cli_snapshot(ns.container, out)


def cmd_restore(ns: argparse.Namespace) -> int:
    """Restore under the daemon config's host settings (load slot, page cache, memory) and its profiles."""
    from supervisor.cli import socket_path
    from supervisor.restore import cli_restore, context_for

    cfg = _daemon_config(ns.config)
    if isinstance(cfg, int):
        return cfg
    src = Path(ns.from_dir) if ns.from_dir is not None else cfg.restore_dir if cfg else DEFAULT_RESTORE_DIR
    ctx = context_for(cfg, ns.name, [socket_path(getattr(ns, "socket", None))])
    return cli_restore(ns.name, src, ns.replace, ctx=ctx, wait_s=ns.wait)


def cmd_test_alert(ns: argparse.Namespace) -> int:
    """Send a test message to every channel of the daemon config (no daemon needed)."""
    from supervisor.adapters.alert_check import run_test_alert
    from supervisor.config import load_config
    from supervisor.core.errors import ConfigError

    try:
        config = load_config(ns.config)
    except ConfigError as exc:
        for problem in exc.problems:
            _err(str(problem))
        return EXIT_USAGE
    code, text = run_test_alert(config)
    print(text)
    return code


def cmd_unit_failed(ns: argparse.Namespace) -> int:
    """Alert every channel that the daemon's systemd unit failed for good (run by the OnFailure= unit)."""
    from supervisor.unit_alert import run_unit_failed_alert

    code, text = run_unit_failed_alert(Path(ns.config), ns.unit, dict(os.environ))
    print(text)
    return code


# ---- parser ----------------------------------------------------------------------------------------
