"""The composition root: build a daemon from a parsed config (the only place that wires adapters).

Tests build a daemon here with a fake clock or their own Docker adapter, in-process, the same way
``vllm-supervisor`` does as a process. Nothing here talks to Docker or the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from supervisor.adapters.alerts.heartbeat import Heartbeat
from supervisor.adapters.alerts.sender import AlertSender, channel_label
from supervisor.adapters.control.server import ControlServer
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host.systemd import SystemdNotifier
from supervisor.adapters.kernel_log.prev_boot import previous_boot_kernel
from supervisor.adapters.metrics.endpoint import MetricsServer
from supervisor.adapters.secrets import SecretBook
from supervisor.adapters.store.log_archive import LogArchive
from supervisor.adapters.store.state import Store
from supervisor.adapters.threads import BOOK
from supervisor.config import DaemonConfig
from supervisor.config.policy import policy_for
from supervisor.core.alerts.channels import Delivery
from supervisor.core.clock import Clock
from supervisor.core.events import Event
from supervisor.daemon.api import ControlApi
from supervisor.daemon.duties.alert_health import AlertHealth
from supervisor.daemon.duties.companions import CompanionChecks
from supervisor.daemon.duties.digest import DigestDuty
from supervisor.daemon.duties.flight import FlightDuty
from supervisor.daemon.duties.heartbeat import HeartbeatDuty
from supervisor.daemon.duties.lifecycle import Lifecycle
from supervisor.daemon.duties.maintenance import MaintenanceClock
from supervisor.daemon.duties.sentinel import SentinelDuty
from supervisor.daemon.executor import jobs
from supervisor.daemon.executor.effects import Effects
from supervisor.daemon.executor.logread import LogReader
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import Inbox
from supervisor.daemon.loop import Daemon, Parts
from supervisor.daemon.sources.docker_ping import PING_TIMEOUT_S, DockerPinger
from supervisor.daemon.sources.host_memory import HostMemory
from supervisor.daemon.sources.kernel_log import KernelWatch
from supervisor.daemon.status import StatusBoard

__all__ = ["build_daemon", "policy_for"]


def build_daemon(
    config: DaemonConfig,
    clock: Clock,
    *,
    docker: DockerAdapter | None = None,
    systemd: SystemdNotifier | None = None,
    alert_backoff_s: tuple[float, ...] = (1.0, 4.0),
    secrets: SecretBook | None = None,
) -> Daemon:
    """A daemon ready to ``run()``: its adapters, executor, control API and loop, wired together.

    ``alert_backoff_s``: the pauses between an alert's tries (tests make them short); ``secrets``: the
    book the log lines are masked with too (made here when not given). Every exit masks with it: the
    store's appends, the alert sender, the control API's replies (docs/security.md "Secrets")."""
    docker = docker or DockerAdapter()
    book = secrets or SecretBook()
    book.learn_config(config)
    inbox = Inbox()
    BOOK.listen(inbox.post_daemon)  # a supervised thread's crash: daemon.thread.crashed in the history
    store = Store(config.state_dir, clock, redact=book.data)
    board = StatusBoard(BOOK.status)
    # the endpoint reads the published status document; it binds only in Daemon.run
    metrics = (
        MetricsServer(config.metrics.listen, board.read, reserve_gib=config.host.reserve_gib)
        if config.metrics is not None
        else None
    )

    def on_delivery(d: Delivery) -> None:  # the sender's reports (made below: it writes through records)
        alert_health.observe(d)

    alerts = AlertSender(
        config.alerts.channels,
        config.alerts.dedupe_s,
        clock,
        backoff_s=alert_backoff_s,
        on_result=metrics.observe_alert if metrics is not None else None,
        on_delivery=on_delivery,
        language=config.alerts.language,
        redact=book.data,
    )
    flight = FlightDuty(config.state_dir / "flight", clock)

    def observe_event(profile: str, name: str, fields: Mapping[str, Any]) -> None:
        flight.observe_event(profile, name, fields)  # kernel lines and emergencies: the flight recorder
        if metrics is not None:
            metrics.observe_event(profile, name, fields)

    def post(profile: str, event: Event) -> None:  # the pool's answers: request counts for the recorder
        flight.saw(profile, event)
        inbox.post(profile, event)

    records = Records(store, clock, alerts.alert, observe_event, secrets=book)
    alert_health = AlertHealth(((channel_label(c), c.kind) for c in config.alerts.channels), records, clock)
    archive = LogArchive(config.state_dir / "logs")
    kernel = KernelWatch(store, inbox.post_daemon)
    effects = Effects(
        config,
        docker,
        records,
        clock,
        post,
        archive,
        on_probe=metrics.observe_probe if metrics is not None else None,
        store=store,
        kernel_lines=kernel.recent_lines,
    )
    policies = {p.name: policy_for(p, config) for p in config.profiles}
    logs = LogReader(docker, archive, {p.name: p.container.name for p in config.profiles})

    def names() -> list[str]:  # the daemon is made below; a reload changes its profiles
        return daemon.names()

    def diff(name: str) -> list[str]:  # on a control thread: may wait for Docker
        return [item.line() for item in jobs.profile_drift(docker, daemon.config.profile(name), book=book)]

    api = ControlApi(names, board.read, store, inbox, logs, diff=diff, redact=book.data)
    parts = Parts(
        store=store,
        effects=effects,
        inbox=inbox,
        systemd=systemd or SystemdNotifier.from_env(),
        alerts=alerts,
        alert_health=alert_health,
        heartbeat=HeartbeatDuty(
            Heartbeat(config.heartbeat, clock, redact=book.text), config.heartbeat.fail_after_s
        ),
        pinger=DockerPinger(docker.with_timeout(PING_TIMEOUT_S), inbox.post_daemon),
        control=ControlServer(config.socket_path, api.handle, config.socket_mode, config.socket_group),
        maintenance=MaintenanceClock(config.maintenance, store),
        board=board,
        kernel=kernel,
        hostmem=HostMemory(config.host.memory_guard),
        policy_for=policy_for,
        perf=SentinelDuty(config.profiles, store, records, docker, effects.background, clock.now),
        metrics=metrics,
        flight=flight,
        companions=CompanionChecks(config.profiles, records, effects.submit, inbox.post_daemon),
        lifecycle=Lifecycle(
            store, records, clock, flight=flight.previous, previous_kernel=previous_boot_kernel
        ),
        digest=DigestDuty(
            config.alerts.digest_at, config.maintenance.timezone, store, records, effects.background
        ),
    )
    daemon = Daemon(config, clock, parts, policies)
    return daemon
