"""One fault-matrix case's world: temp dir, webhook receiver, daemons and containers, removed at the end.

The daemon runs with the test harness' fast timings (probe every 1 s, 3 failures, stall 3 s, backoff 1-4 s,
breaker 3) so each case ends in seconds; the matrix checks end states, not the shipped cadence.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound

from tests.daemon_harness import DaemonProc, ProfileSpec, write_daemon_config, write_profile
from tests.harness import TEST_LABEL, WebhookReceiver, webhook_receiver


class FaultEnv:
    """Profiles, daemons and a webhook receiver for one case; :meth:`close` removes everything."""

    def __init__(self, recv: WebhookReceiver, image: str) -> None:
        self.run_id = f"bench-flt-{uuid.uuid4().hex[:12]}"
        self.tmp = Path(tempfile.mkdtemp(prefix="vsup-flt-"))
        self.recv = recv
        self.image = image
        self.alert_url = f"{recv.url}/alert"
        self.client: Any = docker.from_env()
        self.daemons: list[DaemonProc] = []
        self.names: list[str] = []
        self.cleanups: list[Any] = []

    def spec(self, name: str = "p", **kw: Any) -> ProfileSpec:
        container = f"vsup-bench-flt-{name}-{uuid.uuid4().hex[:8]}"
        self.names.append(container)
        return ProfileSpec(name=name, container=container, image=self.image, **kw)

    def daemon(self, specs: list[ProfileSpec], start: bool = True, **cfg: Any) -> DaemonProc:
        """A daemon on ``specs`` whose alerts go to the case's receiver (``cfg`` as write_daemon_config)."""
        work = self.tmp / f"d{len(self.daemons)}"
        work.mkdir()
        paths = [write_profile(work, s, self.run_id) for s in specs]
        extra = dict(cfg.pop("extra", {}))
        extra.setdefault("alerts", {"channels": [{"kind": "generic", "url": self.alert_url}]})
        host = extra.pop("host", {})
        config = write_daemon_config(work, paths, extra=extra, **cfg)
        if host:  # merge into the harness' host section (private load lock, no drop_caches)
            import yaml

            doc = yaml.safe_load(config.read_text())
            doc["host"].update(host)
            config.write_text(yaml.safe_dump(doc, sort_keys=False))
        d = DaemonProc(config, work)
        self.daemons.append(d)
        if start:
            d.start()
        return d

    def container(self, spec: ProfileSpec) -> Any:
        c = self.client.containers.get(spec.container)
        c.reload()
        return c

    def fault(self, spec: ProfileSpec, body: dict[str, Any]) -> float:
        """POST the simulator's fault hook; the wall time just before."""
        t0 = time.time()
        r = requests.post(f"http://127.0.0.1:{spec.port}/_sim/fault", json=body, timeout=5)
        r.raise_for_status()
        return t0

    def alerts(self) -> list[str]:
        """The kinds of the alerts about the case's profiles, in arrival order; the daemon's own messages
        (profile "supervisor": started, stopped, crashed, Docker, alert channels) are not the fault's news
        and are not counted."""
        kinds: list[str] = []
        for r in self.recv.received():
            try:
                body = r.json()
            except ValueError:
                body = {}
            if body.get("profile") != "supervisor":
                kinds.append(str(body.get("kind") or "?"))
        return kinds

    def close(self) -> None:
        killed = any(d.proc is not None and d.proc.poll() is None for d in self.daemons)
        for d in self.daemons:
            with contextlib.suppress(Exception):
                d.close()
        if killed:
            # A daemon killed inside a container create leaves the request to dockerd, which finishes it:
            # a container "Created" after the sweep below was left behind once (2026-12-03, a suite run's
            # quick matrix). Give such a create a moment to land before sweeping.
            time.sleep(0.5)
        for fn in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                fn()
        with contextlib.suppress(DockerException):
            for c in self.client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={self.run_id}"}):
                with contextlib.suppress(NotFound, DockerException):
                    c.remove(force=True)
        for n in self.names:
            with contextlib.suppress(NotFound, DockerException):
                self.client.containers.get(n).remove(force=True)
        self.client.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def fault_env(image: str) -> Iterator[FaultEnv]:
    with webhook_receiver() as recv:
        env = FaultEnv(recv, image)
        try:
            yield env
        finally:
            env.close()


@contextlib.contextmanager
def slow_receiver(delay_s: float) -> Iterator[str]:
    """A webhook URL on 127.0.0.1 that answers 200 only after ``delay_s`` (a slow chat service)."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            stop.wait(delay_s)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="slow-webhook", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alert"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
