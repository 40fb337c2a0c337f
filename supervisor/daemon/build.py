"""The composition root: build a daemon from a parsed config (the only place that wires adapters).

Tests build a daemon here with a fake clock or their own Docker adapter, in-process, the same way
``vllm-supervisor`` does as a process. Nothing here talks to Docker or the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from supervisor.adapters.alerts.heartbeat import Heartbeat
from supervisor.adapters.alerts.sender import AlertSender
from supervisor.adapters.control.server import ControlServer
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host import pystack
from supervisor.adapters.host.systemd import SystemdNotifier
from supervisor.adapters.kernel_log.prev_boot import previous_boot_kernel
from supervisor.adapters.metrics.endpoint import MetricsServer
from supervisor.adapters.secrets import SecretBook
from supervisor.adapters.store.log_archive import LogArchive
from supervisor.adapters.store.state import Store
from supervisor.adapters.threads import BOOK
from supervisor.config import DaemonConfig
from supervisor.config.fleet import fleet_policy_for
from supervisor.config.policy import policy_for
from supervisor.core.alerts.channels import Delivery
from supervisor.core.clock import Clock
from supervisor.core.errors import SupervisorError
from supervisor.core.events import Event
from supervisor.core.fleet.events import ChannelReported, Noted
from supervisor.core.fleet.guard import port_taken_alert
from supervisor.core.fleet.status_doc import only_profile
from supervisor.daemon.api import ControlApi
from supervisor.daemon.executor import jobs
from supervisor.daemon.executor.effects import Effects
from supervisor.daemon.executor.fleet_jobs import FleetJobs, Keepers
from supervisor.daemon.executor.flight import FlightDuty
from supervisor.daemon.executor.lifecycle import Lifecycle
from supervisor.daemon.executor.logread import LogReader
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import Inbox
from supervisor.daemon.loop import Daemon
from supervisor.daemon.parts import Parts, Policies
from supervisor.daemon.sources.docker_ping import PING_TIMEOUT_S, DockerPinger
from supervisor.daemon.sources.host_memory import HostSampler
from supervisor.daemon.sources.kernel_log import KernelWatch
from supervisor.daemon.sources.threads import Sources
from supervisor.daemon.status import StatusBoard

__all__ = ["build_daemon", "policy_for"]

#: ``supervisorctl diagnose --stack``: py-spy samples of a running engine within this many seconds.
DIAGNOSE_STACK_S = 5.0


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
    BOOK.listen(lambda crash: inbox.post_daemon(Noted(*crash.record())))  # daemon.thread.crashed
    store = Store(config.state_dir, clock, redact=book.data)
    board = StatusBoard(BOOK.status)

    # the endpoint reads the published status document; it binds only in Daemon.run
    def on_taken(why: str) -> None:  # the metrics port is held by another process (records: made below)
        records.alert("", "", port_taken_alert(listen, why), None)

    listen = config.metrics.listen if config.metrics is not None else ""
    metrics = (
        MetricsServer(listen, board.read, on_taken=on_taken, reserve_gib=config.host.reserve_gib)
        if config.metrics is not None
        else None
    )
    if metrics is not None:
        board.live["metrics"] = metrics.status

    def on_delivery(d: Delivery) -> None:  # the sender's reports: the fleet step counts and alerts
        inbox.post_daemon(ChannelReported(d))

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
    logs = LogReader(docker, archive, {p.name: p.container.name for p in config.profiles})

    def names() -> list[str]:  # the daemon is made below; a reload changes its profiles
        return daemon.names()

    def diff(name: str) -> list[str]:  # on a control thread: may wait for Docker
        return [item.line() for item in jobs.profile_drift(docker, daemon.config.profile(name), book=book)]

    def stack(name: str) -> dict[str, object]:  # on a control thread: py-spy, bounded (diagnose --stack)
        found = only_profile(board.read(), name).get("profiles") or [{}]
        cid = found[0].get("container_id")
        if not cid:
            raise SupervisorError(f"{name} has no container to read")
        read = pystack.read_stack(str(cid), DIAGNOSE_STACK_S, 3, "diagnose")
        return read.as_fields() | {"summary": read.summary()}

    api = ControlApi(names, board.read, store, inbox, logs, diff=diff, stack=stack, redact=book.data)
    keepers = Keepers(
        heartbeat=Heartbeat(config.heartbeat, clock, redact=book.text),
        flight=flight,
        lifecycle=Lifecycle(
            store, records, clock, flight=flight.previous, previous_kernel=previous_boot_kernel
        ),
        store=store,
        docker=docker,
        live=effects.live,
        now=clock.now,
        alerts=alerts,
        post_profile=inbox.post,
    )
    sources = Sources(
        control=ControlServer(
            config.socket_path, api.handle, config.socket_mode, config.socket_group, redact=book.text
        ),
        pinger=DockerPinger(docker.with_timeout(PING_TIMEOUT_S), inbox.post_daemon),
        kernel=kernel,
        sampler=HostSampler(config.host.memory_guard.sample_interval_s, inbox.post_daemon, config.state_dir),
        post=inbox.post_daemon,
        metrics=metrics,
    )
    parts = Parts(
        store=store,
        inbox=inbox,
        board=board,
        effects=effects,
        jobs=FleetJobs(records, effects.background, inbox.post_daemon, keepers),
        sources=sources,
        systemd=systemd or SystemdNotifier.from_env(),
        policies=Policies(policy_for, fleet_policy_for),
    )
    daemon = Daemon(config, clock, parts)
    return daemon
