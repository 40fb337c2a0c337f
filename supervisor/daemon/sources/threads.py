"""The daemon's threads that only post to the inbox (Docker pings, the kernel log, host samples) and its two
servers (the control socket, the Prometheus endpoint), started and stopped together; and the loop's upkeep
of them each tick (the kernel follower's news and saved position, the heap trim)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from supervisor.adapters.control.server import ControlServer
from supervisor.adapters.host.memalloc import HeapTrim
from supervisor.adapters.metrics.endpoint import MetricsServer
from supervisor.core.fleet.events import FleetEvent, Noted
from supervisor.daemon.sources.docker_ping import DockerPinger
from supervisor.daemon.sources.host_memory import HostSampler
from supervisor.daemon.sources.kernel_log import KernelWatch


@dataclass
class Sources:
    """The threads and servers of one daemon."""

    control: ControlServer
    pinger: DockerPinger
    kernel: KernelWatch
    sampler: HostSampler
    post: Callable[[FleetEvent], None]  # the inbox's post_daemon
    metrics: MetricsServer | None = None  # the Prometheus endpoint (config ``metrics:``)
    heap: HeapTrim = field(default_factory=HeapTrim)  # free heap pages back to the kernel (memalloc.py)

    def open(self) -> None:
        """The socket first: a second daemon on the same config is refused before it touches any state."""
        self.control.start()

    def start(self) -> None:
        """After the first publish (the endpoint seeds its counts from it) and the boot."""
        if self.metrics is not None:
            self.metrics.start_retrying()
        self.pinger.start()
        self.kernel.start()
        self.sampler.start()

    def stop(self) -> None:
        self.pinger.stop()
        self.kernel.stop()
        self.sampler.stop()
        self.control.stop()
        if self.metrics is not None:
            self.metrics.stop()

    def upkeep(self, mono: float) -> None:
        """Each tick: the kernel follower's news (mode changes) posted to the inbox, its position saved when
        due; the heap trimmed when due."""
        self.heap.tick(mono)
        for name, fields in self.kernel.poll(mono):
            self.post(Noted(name, fields))

    def status(self) -> dict[str, Any]:
        """``daemon.kernel_log`` of the status document."""
        return self.kernel.status()
