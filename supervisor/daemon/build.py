"""The composition root: build a daemon from a parsed config (the only place that wires adapters).

Tests build a daemon here with a fake clock or their own Docker adapter, in-process, the same way
``vllm-supervisor`` does as a process. Nothing here talks to Docker or the network.
"""

from __future__ import annotations

from supervisor.adapters.alert_sender import AlertSender, channel_label
from supervisor.adapters.control import ControlServer
from supervisor.adapters.docker_adapter import DockerAdapter
from supervisor.adapters.heartbeat import Heartbeat
from supervisor.adapters.log_archive import LogArchive
from supervisor.adapters.metrics import MetricsServer
from supervisor.adapters.store import Store
from supervisor.adapters.systemd import SystemdNotifier
from supervisor.config import DaemonConfig, Profile
from supervisor.core.alerts.channels import Delivery
from supervisor.core.clock import Clock
from supervisor.core.machine.policy import Policy
from supervisor.core.vllm.progress import shape_from_argv
from supervisor.daemon import jobs
from supervisor.daemon.alert_health import AlertHealth
from supervisor.daemon.api import ControlApi
from supervisor.daemon.companions import CompanionChecks
from supervisor.daemon.digest import DigestDuty
from supervisor.daemon.effects import Effects
from supervisor.daemon.heartbeat import HeartbeatDuty
from supervisor.daemon.hostmem import HostMemory
from supervisor.daemon.inbox import Inbox
from supervisor.daemon.kernel_log import KernelWatch
from supervisor.daemon.lifecycle import Lifecycle
from supervisor.daemon.logread import LogReader
from supervisor.daemon.loop import Daemon, Parts
from supervisor.daemon.maintenance import MaintenanceClock
from supervisor.daemon.pinger import PING_TIMEOUT_S, DockerPinger
from supervisor.daemon.records import Records
from supervisor.daemon.status import StatusBoard


def policy_for(profile: Profile, config: DaemonConfig) -> Policy:
    """The timings and limits the machine applies to ``profile``."""
    shape = shape_from_argv((*(profile.container.entrypoint or ()), *profile.container.command))
    return Policy(
        probe_interval_s=profile.probes.interval_s,
        failure_threshold=profile.probes.failure_threshold,
        stall_after_s=profile.probes.stall_after_s,
        freeze_after_s=profile.probes.freeze_after_s,
        canary_deadline_s=profile.probes.canary_deadline_s,
        cpu_busy_cores=profile.probes.cpu_busy_cores,
        step_factor=profile.probes.step_factor,
        default_prefill_rate=profile.probes.prefill_tokens_per_s,
        chunked_prefill=shape.chunked_prefill,
        max_num_batched_tokens=shape.max_num_batched_tokens,
        max_model_len=shape.max_model_len,
        startup_deadline_s=profile.startup.deadline_s,
        silence_timeout_s=profile.startup.silence_timeout_s,
        adopt_grace_s=profile.startup.adopt_grace_s,
        drain_timeout_s=profile.stop.drain_timeout_s,
        maintenance_drain_timeout_s=config.maintenance.drain_timeout_s,
        stop_grace_s=profile.stop.grace_s,
        emergency_grace_s=profile.stop.emergency_grace_s,
        breaker_limit=config.breaker.limit,
        breaker_window_s=config.breaker.window_s,
        backoff_initial_s=config.backoff.initial_s,
        backoff_factor=config.backoff.factor,
        backoff_max_s=config.backoff.max_s,
        backoff_reset_after_s=config.backoff.reset_after_s,
        reboot_rearms_breaker=config.reboot_rearms_breaker,
        fatal_realert_s=config.breaker.realert_s,
        auth_check=profile.probes.unauthorized_check,
        api_key_configured=profile.api_key is not None,
        watch_key_file=profile.api_key is not None
        and profile.api_key.file is not None
        and profile.api_key.inject_env is not None,
        ready_requires_health=profile.startup.ready_requires_health,
        warmup_s=profile.probes.warmup_s,
        expected_markers=profile.markers.expected,
        reserve_gib=config.host.reserve_gib,
        saturation_grace=profile.probes.saturation_grace,
        liveness_generation=profile.probes.generation,
        kv_warn_below_tokens=profile.kv_pool.warn_below_tokens or None,
        kv_warn_drop_pct=profile.kv_pool.warn_drop_pct,
        kv_min_tokens=profile.kv_pool.min_tokens,
        kv_max_redraws=profile.kv_pool.max_redraws,
        rollback_after=profile.rollback_after,
        on_failed_change=profile.on_failed_change,
        smoke_gates=tuple(g.spec() for g in profile.smoke.gates),
    )


def build_daemon(
    config: DaemonConfig,
    clock: Clock,
    *,
    docker: DockerAdapter | None = None,
    systemd: SystemdNotifier | None = None,
    alert_backoff_s: tuple[float, ...] = (1.0, 4.0),
) -> Daemon:
    """A daemon ready to ``run()``: its adapters, executor, control API and loop, wired together.

    ``alert_backoff_s``: the pauses between an alert's tries (tests make them short)."""
    docker = docker or DockerAdapter()
    inbox = Inbox()
    store = Store(config.state_dir, clock)
    board = StatusBoard()
    # the endpoint reads the published status document; it binds only in Daemon.run
    metrics = MetricsServer(config.metrics.listen, board.read) if config.metrics is not None else None

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
    )
    records = Records(store, clock, alerts.alert, metrics.observe_event if metrics is not None else None)
    alert_health = AlertHealth(((channel_label(c), c.kind) for c in config.alerts.channels), records, clock)
    archive = LogArchive(config.state_dir / "logs")
    effects = Effects(
        config,
        docker,
        records,
        clock,
        inbox.post,
        archive,
        on_probe=metrics.observe_probe if metrics is not None else None,
        store=store,
    )
    policies = {p.name: policy_for(p, config) for p in config.profiles}
    logs = LogReader(docker, archive, {p.name: p.container.name for p in config.profiles})

    def names() -> list[str]:  # the daemon is made below; a reload changes its profiles
        return daemon.names()

    def diff(name: str) -> list[str]:  # on a control thread: may wait for Docker
        return [item.line() for item in jobs.profile_drift(docker, daemon.config.profile(name))]

    api = ControlApi(names, board.read, store, inbox, logs, diff=diff)
    parts = Parts(
        store=store,
        effects=effects,
        inbox=inbox,
        systemd=systemd or SystemdNotifier.from_env(),
        alerts=alerts,
        alert_health=alert_health,
        heartbeat=HeartbeatDuty(Heartbeat(config.heartbeat, clock), config.heartbeat.fail_after_s),
        pinger=DockerPinger(docker.with_timeout(PING_TIMEOUT_S), inbox.post_daemon),
        control=ControlServer(config.socket_path, api.handle, config.socket_mode, config.socket_group),
        maintenance=MaintenanceClock(config.maintenance, store),
        board=board,
        kernel=KernelWatch(store, inbox.post_daemon),
        hostmem=HostMemory(config.host.memory_guard),
        policy_for=policy_for,
        metrics=metrics,
        companions=CompanionChecks(config.profiles, records, effects.submit, inbox.post_daemon),
        lifecycle=Lifecycle(store, records, clock),
        digest=DigestDuty(
            config.alerts.digest_at, config.maintenance.timezone, store, records, effects.background
        ),
    )
    daemon = Daemon(config, clock, parts, policies)
    return daemon
