"""Alerts sent without a daemon: ``supervisorctl test-alert`` (a test message to every configured channel,
now, one line per channel) and the alert sent when systemd gives up on the daemon (``OnFailure=`` of
vllm-supervisor.service).

``systemd/vllm-supervisor-failure@.service`` runs ``supervisorctl unit-failed %n-of-the-failed-unit``
when the daemon's unit enters the *failed* state (its start limit was hit, or it failed with restarts
exhausted). At that point no daemon is left to alert, so this one-shot process reads only the
``alerts:`` section of the daemon config (a syntax slip elsewhere in it must not silence this alert) and
sends one critical message to every channel synchronously, with the usual retries.

systemd (>= 249) passes the failed unit's outcome in ``MONITOR_SERVICE_RESULT``, ``MONITOR_EXIT_CODE``,
``MONITOR_EXIT_STATUS`` and ``MONITOR_INVOCATION_ID``; they go into the message when present.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path

from supervisor.adapters.alerts.sender import AlertSender
from supervisor.config.daemon import parse_alerts_only
from supervisor.config.model import AlertChannel, DaemonConfig
from supervisor.config.reader import Ctx
from supervisor.config.source import load_yaml
from supervisor.core.alerts.localize import title_en
from supervisor.core.alerts.message import AlertMessage
from supervisor.core.clock import Clock, SystemClock

#: The environment variables systemd sets for an OnFailure= unit, and how the message labels them.
MONITOR_VARS = (
    ("MONITOR_SERVICE_RESULT", "result"),
    ("MONITOR_EXIT_CODE", "exit code"),
    ("MONITOR_EXIT_STATUS", "exit status"),
    ("MONITOR_INVOCATION_ID", "invocation"),
)


def failure_message(unit: str, environ: Mapping[str, str], host: str, now: float) -> AlertMessage:
    """The critical alert for `unit` having failed for good (pure)."""
    details = tuple((label, environ[var]) for var, label in MONITOR_VARS if environ.get(var))
    result = environ.get("MONITOR_SERVICE_RESULT")
    params = (("unit", unit),)
    return AlertMessage(
        profile=unit,
        severity="critical",
        title=title_en("unit.failed", params),
        old_state="active",
        new_state="failed",
        reason=(
            f"{unit} failed{f' ({result})' if result else ''} and will not be restarted; no model "
            "server on this host is supervised until it is fixed (journalctl -u " + unit + ")"
        ),
        host=host,
        at=now,
        details=details,
        kind="unit.failed",
        params=params,
    )


def alert_channels(config_path: Path) -> tuple[tuple[AlertChannel, ...], str, list[str]]:
    """The alert channels and language of the daemon config at `config_path`, and the problems met
    reading them (a bad language is one: the message then goes out in English)."""
    ctx = Ctx(file=str(config_path), base_dir=config_path.parent)
    data = load_yaml(config_path, ctx)
    alerts = parse_alerts_only(ctx, data) if not ctx.problems else None
    channels = alerts.channels if alerts is not None else ()
    return channels, (alerts.language if alerts is not None else "en"), [str(p) for p in ctx.problems]


def run_unit_failed_alert(
    config_path: Path,
    unit: str,
    environ: Mapping[str, str],
    clock: Clock | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, str]:
    """Send the failure alert to every channel: (exit code, one line per channel or problem).

    Exit 0 when every channel accepted it, 1 when any failed, 2 when no channel could be read.
    """
    channels, language, problems = alert_channels(config_path)
    lines = [f"config: {p}" for p in problems]
    if not channels:
        return 2, "\n".join([*lines, f"no usable alert channel in {config_path}"])
    clk = clock or SystemClock()
    notifier = AlertSender(
        channels, 0.0, clk, timeout_s, backoff_s=(1.0, 4.0), max_backoff_s=10.0, language=language
    )
    msg = failure_message(unit, environ, notifier.host or socket.gethostname(), clk.now())
    results = notifier.test(clk.now(), msg)
    lines += [f"{'ok' if r.ok else 'FAIL':<4} {r.kind:<8} {r.name}: {r.detail}" for r in results]
    return (0 if all(r.ok for r in results) else 1), "\n".join(lines)


def run_test_alert(
    config: DaemonConfig, clock: Clock | None = None, timeout_s: float = 10.0
) -> tuple[int, str]:
    """Send a test message to every configured channel: (exit code, one line per channel).

    Exit 0 when every channel accepted it, 1 when any failed, 2 when no channel is configured. The
    message is in ``alerts.language``, like every alert.
    """
    channels = config.alerts.channels
    if not channels:
        return 2, f"no alert channels configured (alerts.channels in {config.path})"
    clk = clock or SystemClock()
    notifier = AlertSender(
        channels,
        0.0,
        clk,
        timeout_s,
        backoff_s=(1.0,),
        max_backoff_s=5.0,
        language=config.alerts.language,
    )
    results = notifier.test(clk.now())
    lines = [f"{'ok' if r.ok else 'FAIL':<4} {r.kind:<8} {r.name}: {r.detail}" for r in results]
    return (0 if all(r.ok for r in results) else 1), "\n".join(lines)
