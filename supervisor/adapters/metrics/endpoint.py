"""The Prometheus endpoint: ``/metrics`` served by prometheus-client on its own thread, off the daemon loop.

Gauges are built at scrape time from the daemon's last published status document (``snapshot()``, the
``supervisorctl status --json`` shape; reading it never waits for the loop). Counters and the probe-latency
histogram are fed by the daemon through :meth:`MetricsServer.observe_event`, :meth:`observe_alert` and
:meth:`observe_probe`: cheap calls (a lock and a few dict updates) safe from any thread. Every series is
described in docs/metrics.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from supervisor import __version__
from supervisor.adapters.host import system as host
from supervisor.adapters.metrics.buckets import Buckets
from supervisor.adapters.metrics.host import contiguity_gauges
from supervisor.adapters.metrics.sentinel import sentinel_gauges
from supervisor.adapters.metrics.server import BoundedHTTPServer
from supervisor.adapters.threads import Supervised, supervised
from supervisor.config.metrics import split_listen
from supervisor.core.errors import HostError, SupervisorError
from supervisor.core.fleet.metrics_tally import (
    EMERGENCY_CAUSES,
    KERNEL_EVENT_KINDS,
    RESTART_CAUSES,
    ProfileTally,
    fold_event,
    kernel_kinds,
    seed,
    undelivered_key,
    with_zeros,
)
from supervisor.core.states import State

log = structlog.get_logger("supervisor.metrics")

PREFIX = "vllm_supervisor"
STATES = tuple(s.value for s in State)

Snapshot = Callable[[], Mapping[str, Any]]


class MetricsError(SupervisorError):
    """The endpoint could not be started (bad listen address, port in use)."""


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _timestamp(iso: object) -> float | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _channels(alerts: object) -> list[tuple[str, object]]:
    """(name, state) of each alert channel in the status document's ``daemon.alerts``."""
    channels = alerts.get("channels") if isinstance(alerts, Mapping) else None
    return [
        (str(ch["name"]), ch.get("state"))
        for ch in (channels if isinstance(channels, list) else ())
        if isinstance(ch, Mapping) and ch.get("name")
    ]


def _channel_names(alerts: object) -> list[str]:
    return [name for name, _ in _channels(alerts)]


class _Collector(Collector):
    """Builds every gauge and the event counters from the snapshot and the tallies at scrape time."""

    def __init__(self, server: MetricsServer) -> None:
        self._server = server

    def collect(self) -> Iterable[Metric]:
        srv = self._server
        try:
            status = srv.snapshot()
        except Exception as exc:  # noqa: BLE001 - a scrape must still answer (up, build info)
            log.warning("metrics.snapshot_failed", error=str(exc))
            status = {}
        profiles = [p for p in status.get("profiles") or () if isinstance(p, Mapping) and p.get("name")]
        tallies, kernel = srv.tallies(profiles)
        yield GaugeMetricFamily(f"{PREFIX}_up", "1 while the supervisor daemon answers scrapes", value=1)
        info = GaugeMetricFamily(f"{PREFIX}_build_info", "The daemon's version (value 1)", labels=["version"])
        daemon = status.get("daemon") or {}
        info.add_metric([str(daemon.get("version") or srv.version)], 1)
        yield info
        yield from self._profile_gauges(profiles, tallies)
        yield from sentinel_gauges(profiles)  # the performance canary (docs/sentinel.md)
        restarts = CounterMetricFamily(
            f"{PREFIX}_restarts", "Restarts of a profile by cause", labels=["profile", "cause"]
        )
        emergencies = CounterMetricFamily(
            f"{PREFIX}_emergencies", "Emergency stops of a profile by cause", labels=["profile", "cause"]
        )
        for name, t in sorted(tallies.items()):  # every known cause from the start (at 0)
            for cause, n in sorted(with_zeros(t.restarts, RESTART_CAUSES).items()):
                restarts.add_metric([name, cause], n)
            for cause, n in sorted(with_zeros(t.emergencies, EMERGENCY_CAUSES).items()):
                emergencies.add_metric([name, cause], n)
        yield restarts
        yield emergencies
        kern = CounterMetricFamily(
            f"{PREFIX}_kernel_events", "Kernel log events that matter for a GPU server", labels=["kind"]
        )
        for kind, n in sorted(with_zeros(kernel, KERNEL_EVENT_KINDS).items()):
            kern.add_metric([kind], n)
        yield kern
        alerts, probes = srv.deliveries()
        sent = CounterMetricFamily(
            f"{PREFIX}_alerts", "Alert deliveries by channel and result", labels=["channel", "result"]
        )
        known = {(ch, r): 0 for ch in _channel_names(daemon.get("alerts")) for r in ("ok", "failed")}
        for (channel, result), n in sorted({**known, **alerts}.items()):
            sent.add_metric([channel, result], n)
        yield sent
        yield from self._undelivered(srv.undelivered(), daemon.get("alerts"))
        latency = HistogramMetricFamily(
            f"{PREFIX}_probe_latency_seconds", "Liveness probe latency", labels=["profile", "kind"]
        )
        for (profile, kind), b in sorted(probes.items()):
            latency.add_metric([profile, kind], b.buckets(), b.sum)
        yield latency
        host_mem = (("available", "MemAvailable (/proc/meminfo)", srv.mem_available()),)
        for name, text, value in (*host_mem, ("reserve", "host.reserve_gib (0: off)", srv.reserve_bytes)):
            if value is not None:
                yield GaugeMetricFamily(f"{PREFIX}_host_mem_{name}_bytes", text, value=value)
        yield from contiguity_gauges(daemon)  # /proc/buddyinfo (docs/wedge.md "The contiguity sentinel")

    def _undelivered(self, counts: Mapping[tuple[str, str], int], alerts: object) -> Iterable[Metric]:
        lost = CounterMetricFamily(
            f"{PREFIX}_alerts_undelivered",
            "Alerts given up on (not delivered), by channel and reason",
            labels=["channel", "reason"],
        )
        for (channel, reason), n in sorted(counts.items()):
            lost.add_metric([channel, reason], n)
        yield lost
        failing = GaugeMetricFamily(
            f"{PREFIX}_alert_channel_failing",
            "1 while the alert channel's last message was lost for a reason of its own",
            labels=["channel"],
        )
        for name, state in _channels(alerts):
            failing.add_metric([name], 1.0 if state == "failing" else 0.0)
        yield failing

    def _profile_gauges(
        self, profiles: list[Mapping[str, Any]], tallies: Mapping[str, ProfileTally]
    ) -> Iterable[Metric]:
        state = GaugeMetricFamily(
            f"{PREFIX}_profile_state", "1 for the profile's current state, 0 for the others",
            labels=["profile", "state"],
        )  # fmt: skip
        breaker = GaugeMetricFamily(
            f"{PREFIX}_breaker_open", "1 while the profile's circuit breaker is open", labels=["profile"]
        )
        kv = GaugeMetricFamily(
            f"{PREFIX}_kv_pool_tokens", "KV-cache pool of the current start (tokens)", labels=["profile"]
        )
        base = GaugeMetricFamily(
            f"{PREFIX}_kv_pool_baseline_tokens",
            "Median KV-cache pool of the earlier ready starts of the same config (tokens)",
            labels=["profile"],
        )
        load = GaugeMetricFamily(
            f"{PREFIX}_load_seconds", "Duration of the last successful start (seconds)", labels=["profile"]
        )
        maint = GaugeMetricFamily(
            f"{PREFIX}_maintenance_next_timestamp_seconds",
            "When the next maintenance restart is due (Unix time)",
            labels=["profile"],
        )
        for p in profiles:
            name = str(p["name"])
            current = p.get("state")
            for s in STATES:
                state.add_metric([name, s], 1.0 if s == current else 0.0)
            b = p.get("breaker")
            if isinstance(b, Mapping):
                breaker.add_metric([name], 1.0 if b.get("state") == "open" else 0.0)
            pool = p.get("kv_pool")
            if isinstance(pool, Mapping):
                if (tokens := _num(pool.get("tokens"))) is not None:
                    kv.add_metric([name], tokens)
                if (median := _num(pool.get("baseline_tokens"))) is not None:
                    base.add_metric([name], median)
            t = tallies.get(name)
            if t is not None and t.load_s is not None:
                load.add_metric([name], t.load_s)
            if (ts := _timestamp(p.get("next_maintenance"))) is not None:
                maint.add_metric([name], ts)
        yield from (state, breaker, kv, base, load, maint)


class MetricsServer:
    """``/metrics`` on ``listen`` ("HOST:PORT"; port 0: any free port).

    Gauges come from ``snapshot()``, counters and the histogram from the observe_* calls.
    ``start()`` binds and serves on a daemon thread; ``stop()`` shuts it down. Start it after the daemon's
    first status publish: the first snapshot fixes the ``earlier`` restart/emergency counts (persisted
    counts from before this process). ``snapshot`` runs on the HTTP thread and must not block.
    """

    def __init__(
        self,
        listen: str,
        snapshot: Snapshot,
        *,
        version: str = __version__,
        meminfo: Callable[[], Mapping[str, int]] | None = host.read_meminfo,
        on_taken: Callable[[str], None] | None = None,
        reserve_gib: float = 0.0,
    ) -> None:
        try:
            self.host, self.port = split_listen(listen, ephemeral=True)
        except ValueError as exc:
            raise MetricsError(f"metrics listen address {listen!r}: {exc}") from exc
        self.snapshot = snapshot
        self.version = version
        self._meminfo = meminfo
        self.reserve_bytes = reserve_gib * 1024**3  # host.reserve_gib (0: off): the alert rule's threshold
        self._lock = threading.Lock()
        self._tallies: dict[str, ProfileTally] = {}
        self._kernel: dict[str, int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self._alerts: dict[tuple[str, str], int] = {}
        self._undelivered: dict[tuple[str, str], int] = {}
        self._probes: dict[tuple[str, str], Buckets] = {}
        self._httpd: BoundedHTTPServer | None = None
        self._retry: Supervised | None = None
        self._stopping = threading.Event()
        #: Why the port could not be bound (None: serving or not tried); ``on_taken`` hears it once a streak.
        self.bind_error: str | None = None
        self.retry_every_s = 15.0  # a squatted port is tried again this often
        self._on_taken = on_taken

    # ---- feeding ------------------------------------------------------------------------------------

    def observe_event(self, profile: str, name: str, fields: Mapping[str, Any]) -> None:
        """One history event of ``profile`` (the journal's name and fields); unknown names are ignored."""
        with self._lock:
            old = self._tallies.get(profile, ProfileTally())
            new = fold_event(old, name, fields)
            if new is not old:
                self._tallies[profile] = new
            for kind in kernel_kinds(name, fields):
                self._kernel[kind] = self._kernel.get(kind, 0) + 1
            if (key := undelivered_key(name, fields)) is not None:
                self._undelivered[key] = self._undelivered.get(key, 0) + 1

    def observe_alert(self, channel: str, ok: bool) -> None:
        """One alert delivery attempt's outcome on ``channel``."""
        key = (channel, "ok" if ok else "failed")
        with self._lock:
            self._alerts[key] = self._alerts.get(key, 0) + 1

    def observe_probe(self, profile: str, kind: str, seconds: float) -> None:
        """One liveness probe's latency (``kind``: health, generation ...)."""
        with self._lock:
            b = self._probes.setdefault((profile, kind), Buckets())
            b.observe(max(0.0, seconds))

    # ---- reading (scrape thread) --------------------------------------------------------------------

    def tallies(
        self, profiles: Iterable[Mapping[str, Any]]
    ) -> tuple[dict[str, ProfileTally], dict[str, int]]:
        """Copies of the tallies (seeded from ``profiles`` on first sight) and the kernel counts."""
        with self._lock:
            for p in profiles:
                name = str(p["name"])
                t = self._tallies.get(name, ProfileTally())
                if not t.seeded:
                    self._tallies[name] = seed(t, p)
            return dict(self._tallies), dict(self._kernel)

    def deliveries(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], Buckets]]:
        """Copies of the alert delivery counts and the probe latency histograms."""
        with self._lock:
            return dict(self._alerts), {k: v.copy() for k, v in self._probes.items()}

    def undelivered(self) -> dict[tuple[str, str], int]:
        """A copy of the undelivered alert counts by (channel, reason)."""
        with self._lock:
            return dict(self._undelivered)

    def mem_available(self) -> float | None:
        """MemAvailable in bytes (None when not readable)."""
        if self._meminfo is None:
            return None
        try:
            value = self._meminfo().get("MemAvailable")
        except HostError as exc:
            log.warning("metrics.meminfo_failed", error=str(exc))
            return None
        return float(value) if value is not None else None

    # ---- serving ------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The endpoint's URL (the bound port once started)."""
        host_part = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host_part}:{self.port}/metrics"

    def render(self, path: str) -> tuple[int, str, bytes]:
        """The HTTP answer for ``path``: the exposition on /metrics, 404 elsewhere."""
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        return 404, "text/plain; charset=utf-8", b"not found: the metrics are on /metrics\n"

    def start(self) -> None:
        """Seed the counts from the current snapshot, bind and serve; MetricsError when it cannot bind."""
        try:
            self.tallies([p for p in self.snapshot().get("profiles") or () if isinstance(p, Mapping)])
        except Exception as exc:  # noqa: BLE001 - seeding is best effort; the first scrape retries
            log.warning("metrics.snapshot_failed", error=str(exc))
        self._bind()

    def _bind(self) -> None:
        httpd = BoundedHTTPServer(self.host, self.port, self.render)
        try:
            httpd.start()
        except OSError as exc:
            why = f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}"
            if self.bind_error is None and self._on_taken is not None:
                self._on_taken(why)  # another process holds the port: it may serve fake metrics
            self.bind_error = why
            raise MetricsError(why) from exc
        self._httpd, self.bind_error = httpd, None
        self.port = httpd.port
        log.info("metrics.serving", url=self.url)

    def start_retrying(self, every_s: float | None = None) -> None:
        """``start``, but a port that cannot be bound (squatted, busy) is a warning and a retry every
        ``every_s`` on a thread of its own, never an error: supervision must not depend on the endpoint."""
        every_s = self.retry_every_s if every_s is None else every_s
        try:
            self.start()
        except MetricsError as exc:
            log.warning("metrics.bind_failed", error=str(exc), retry_s=every_s)
            self._retry = supervised("metrics-bind", lambda: self._retry_loop(every_s), self._stopping)

    def _retry_loop(self, every_s: float) -> None:
        while not self._stopping.wait(every_s):
            try:
                self._bind()
            except MetricsError as exc:
                log.debug("metrics.bind_failed", error=str(exc))
                continue
            return

    @property
    def serving(self) -> bool:
        return self._httpd is not None

    def status(self) -> dict[str, object]:
        """``daemon.metrics`` in status: where, whether it serves, and why not (a squatted port)."""
        return {"listen": f"{self.host}:{self.port}", "serving": self.serving, "error": self.bind_error}

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving (idempotent)."""
        self._stopping.set()
        if self._retry is not None:
            self._retry.join(timeout_s)
            self._retry = None
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.stop(timeout_s)
