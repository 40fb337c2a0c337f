"""The sixth restarter of ``bench.compare``: a Kubernetes-style ``/health`` liveness probe with its defaults.

``k8s-liveness``: the container runs with ``--restart unless-stopped`` (the kubelet's ``restartPolicy:
Always`` restarts a container whose process ended) and an external loop in the bench does what the kubelet's
liveness probe does with Kubernetes' defaults: ``GET /health`` every 10 s (``periodSeconds``), 1 s timeout
(``timeoutSeconds``), and after 3 consecutive failures (``failureThreshold``) the container is restarted
(``docker restart -t 30``: ``terminationGracePeriodSeconds`` 30). Real HTTP, a real ``docker restart``.

One choice the defaults leave open: a liveness probe with ``initialDelaySeconds: 0`` and no startup probe
kills any server whose load takes longer than ~30 s (3 x 10 s), which a real vLLM load does on this box.
Nobody deploys vLLM that way, so the loop counts failures only once ``/health`` has answered 200 since the
last (re)start: what a ``startupProbe`` gating the liveness probe gives.
"""

from __future__ import annotations

import subprocess
import threading
import time

import requests

#: Kubernetes' liveness defaults (periodSeconds, timeoutSeconds, failureThreshold) and the pod's grace.
LIVENESS: dict[str, float] = {
    "period_s": 10.0,
    "timeout_s": 1.0,
    "failure_threshold": 3,
    "termination_grace_s": 30,
}
PROBES_KEPT = 40


def health_ok(url: str, timeout: float) -> bool:
    """One ``GET /health``: True on a 2xx/3xx answer within ``timeout`` (as the kubelet's httpGet probe)."""
    try:
        return 200 <= requests.get(f"{url}/health", timeout=timeout).status_code < 400
    except requests.RequestException:
        return False


class Liveness:
    """The kubelet-style liveness loop on one container (its own thread); ``restarts``: when it restarted."""

    def __init__(self, url: str, container: str, timing: dict[str, float] = LIVENESS) -> None:
        self.url = url
        self.container = container
        self.timing = timing
        self.restarts: list[float] = []
        #: /health answered since the last (re)start: failures count from then on (the bench's steady state
        #: before a fault waits for it, as it waits for the HEALTHCHECK's ``healthy``).
        self.started = False
        self.probes: list[tuple[float, bool]] = []  # (wall time, answered), the last PROBES_KEPT
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="k8s-liveness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        period, timeout = self.timing["period_s"], self.timing["timeout_s"]
        failures = 0
        while not self._stop.wait(period):
            ok = health_ok(self.url, timeout)
            self.probes = [*self.probes[-(PROBES_KEPT - 1) :], (round(time.time(), 2), ok)]
            if ok:
                failures, self.started = 0, True
                continue
            if not self.started:
                continue
            failures += 1
            if failures >= self.timing["failure_threshold"]:
                self.restarts.append(time.time())
                grace = str(int(self.timing["termination_grace_s"]))
                cmd = ["docker", "restart", "-t", grace, self.container]
                subprocess.run(cmd, capture_output=True, timeout=120, check=False)
                failures, self.started = 0, False

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=130)
