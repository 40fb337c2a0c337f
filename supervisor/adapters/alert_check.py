"""``supervisorctl test-alert``: a test message to every configured channel, now, one line per channel."""

from __future__ import annotations

from supervisor.adapters.alert_sender import AlertSender
from supervisor.config.model import DaemonConfig
from supervisor.core.clock import Clock, SystemClock


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
